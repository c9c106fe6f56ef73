"""What the search's MLflow record looks like in MLflow's UI: figures recorded at a precision that
reads in its table and charts, candidate runs named short enough for its run-name column."""

from __future__ import annotations

import pytest
from mlflow import MlflowClient

from nas.adapters.mlflow_writer import StoreWriter, candidate_run_name
from nas.core.record import COMPLETED, Candidate, figure


@pytest.fixture(scope="module")
def uri(tmp_path_factory: pytest.TempPathFactory) -> str:
    """One SQLite store for the module (creating one takes seconds); each test has its own experiment."""
    return f"sqlite:///{tmp_path_factory.mktemp('store') / 'mlflow.db'}"


def _cand(i: int, accuracy: float, latency: float) -> Candidate:
    return Candidate(arch=f"a{i}", arch_id=f"{i:012x}", status=COMPLETED, tags={"status": COMPLETED},
                     metrics={"accuracy": accuracy, "latency_p50": latency, "reward": accuracy - latency / 100,
                              "meets_target": float(latency <= 10.0), "params": 36686.0})


def test_figures_are_recorded_with_five_significant_digits(uri: str) -> None:
    assert figure(490.908183) == 490.91 and figure(0.679177999) == 0.67918 and figure(0.000123456) == 0.00012346
    assert figure(36686.0) == 36686.0 and figure(27785920.0) == 27785920.0  # counts stay whole
    assert figure(0.9123) == 0.9123  # an accuracy on 10,000 images is exact
    assert abs(figure(1733000000.25) - 1733000000.25) < 1  # the whole part of a larger number is kept

    writer = StoreWriter(uri, "figures")
    parent = writer.start_search("s", {}, {})
    run = MlflowClient(uri).get_run(writer.log_candidate(parent, _cand(0, 0.912345678, 0.679177999), "s"))
    assert run.data.metrics["accuracy"] == 0.91235 and run.data.metrics["latency_p50"] == 0.67918
    assert run.data.metrics["params"] == 36686.0


def test_a_candidates_name_is_short_and_says_what_it_is() -> None:
    assert candidate_run_name(_cand(0, 0.912, 9.87)) == "000000000000 acc 0.912 9.87 ms ✓"  # meets the target
    assert candidate_run_name(_cand(1, 0.5, 11.0)) == "000000000001 acc 0.500 11.00 ms ✗"  # misses it
