"""A search at latency.precision=int8: the trial times the int8 network and rewards its accuracy after
quantisation by the deploying runtime (ONNX Runtime's static quantisation, or NNCF for OpenVINO), with
the fp32 figures logged beside; the leaderboard and the export say which precision decided."""

from __future__ import annotations

import csv
import dataclasses
import io
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from mlflow import MlflowClient

from latency_predictor import ConfigError as LatencyConfigError
from latency_predictor import LatencyError, LatencyResult
from nas.core.config import (
    AccuracyConfig,
    DataConfig,
    ExportConfig,
    LatencyConfig,
    LeaderboardConfig,
    TrackingConfig,
    TrainConfig,
)
from nas.core.record import COMPLETED, PRECISION_METRICS, candidate_from_reports, figure
from nas.core.reward import squared_penalty
from nas.data import Dataset, load_dataset
from nas.deploy.export import run_export
from nas.driver import SearchResult, run_search
from nas.review.leaderboard import run_leaderboard
from nas.trial.evaluate import TrialContext, evaluate_candidate
from search_spaces import load_space
from tests.nas.configs import stored_config

FAST_MEASURE = {"warmup_runs": 2, "warmup_s": 0.0, "min_runs": 10, "min_time_s": 0.0, "max_time_s": 1.0,
                "max_repeats": 1}


@pytest.fixture(scope="module")
def data() -> Dataset:
    return load_dataset(DataConfig(resolution=16, max_train_samples=256, max_val_samples=128))


def _ctx(data: Dataset, precision: str) -> TrialContext:
    return TrialContext(
        space=load_space("tiny"), data=data, train=TrainConfig(epochs=1, batch_size=64),
        accuracy=AccuracyConfig(calibration_samples=64), target_ms=0.5, reward="squared", threads=1,
        latency=LatencyConfig(input_shape=[1, 3, 32, 32], precision=precision,
                              options={"intra_op_threads": 1, "slot": False, "calibration_samples": 4},
                              measure=FAST_MEASURE),
    )


def test_an_int8_trial_times_int8_and_rewards_the_accuracy_after_quantisation(data: Dataset) -> None:
    reports: list[dict[str, Any]] = []
    arch = load_space("tiny").sample(np.random.default_rng(0)).encode()
    evaluate_candidate(arch, _ctx(data, "int8"), reports.append)
    last = reports[-1]
    assert last["status"] == COMPLETED, last.get("failure_reason")
    assert LatencyResult.from_dict(json.loads(last["latency_json"])).precision == "int8"
    assert last["latency_precision"] == "int8" and last["accuracy_precision"] == "int8"
    assert 0.0 <= last["accuracy_fp32"] <= 1.0
    assert last["reward"] == squared_penalty(last["accuracy"], last["latency_ms"], 0.5)
    cand = candidate_from_reports("t0", arch, reports, {}, 0.0, 1.0)  # what the search records
    assert cand.tags["latency_precision"] == "int8" and cand.tags["accuracy_precision"] == "int8"
    assert cand.metrics["accuracy_fp32"] == figure(last["accuracy_fp32"])  # recorded with 5 significant digits


def test_an_fp32_trial_says_its_accuracy_is_fp32(data: Dataset) -> None:
    reports: list[dict[str, Any]] = []
    evaluate_candidate(load_space("tiny").sample(np.random.default_rng(1)).encode(), _ctx(data, "fp32"),
                       reports.append)
    assert reports[-1]["latency_precision"] == "fp32" and reports[-1]["accuracy_precision"] == "fp32"
    assert "accuracy_fp32" not in reports[-1]


def test_a_precision_the_backend_cannot_run_stops_the_search_before_any_trial(tmp_path: Path) -> None:
    cfg = stored_config(tmp_path, "+space=tiny", "target_ms=20", "latency.precision=fp16", "progress=false")
    with pytest.raises(LatencyConfigError, match="precision 'fp16' cannot run on ONNX Runtime's cpu provider"):
        run_search(cfg)
    assert not (tmp_path / "out" / "ray").exists()  # no trial started


# ---------------------------------------------------------------------- whole searches at int8

TARGET_MS = 0.001
"""Far below any latency, so that the reward's latency term is never 1 and a figure the reward did not use shows."""

INT8_RUNTIME = {"onnxruntime": "onnxruntime", "openvino": "openvino"}
"""The runtime whose int8 network each backend's search must score."""


@pytest.fixture(scope="module", params=sorted(INT8_RUNTIME))
def int8_search(request: pytest.FixtureRequest, ray_cluster: None,
                tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path, SearchResult]:
    """A real 2-trial search of the tiny space on digits at latency.precision=int8 with ``latency=<backend>``."""
    backend = str(request.param)
    folder = tmp_path_factory.mktemp(f"int8-{backend}")
    cfg = stored_config(
        folder, "+space=tiny", f"latency={backend}", "latency.precision=int8", f"target_ms={TARGET_MS}",
        "search.n_trials=2", "search.max_concurrent=1", "data.max_train_samples=256", "data.max_val_samples=128",
        "train.epochs=1", "accuracy.calibration_samples=64", "latency.input_shape=[1,3,32,32]",
        "latency.final_pass_top_k=0", "+latency.options.calibration_samples=4", "latency.measure.min_runs=10",
        "latency.measure.min_time_s=0.0", "latency.measure.max_time_s=1.0", "latency.measure.max_repeats=1",
        "progress=false", f"name=int8-{backend}",
    )
    return backend, folder, run_search(cfg)


def test_an_int8_search_rewards_the_runtimes_int8_figures_and_logs_fp32_beside(
    int8_search: tuple[str, Path, SearchResult],
) -> None:
    backend, folder, result = int8_search
    done = [c for c in result.candidates if c.status == COMPLETED]
    assert done, [c.failure_reason for c in result.candidates]
    client = MlflowClient(f"sqlite:///{folder / 'mlflow.db'}")
    for c in done:
        run = client.get_run(str(c.run_id))
        metrics, tags = run.data.metrics, run.data.tags
        assert {"accuracy", "latency_p50", *PRECISION_METRICS} <= set(metrics)  # both precisions in MLflow
        assert tags["latency_precision"] == "int8" and tags["accuracy_precision"] == "int8"
        assert tags["accuracy_runtime"] == INT8_RUNTIME[backend]  # quantised and run by the deploying runtime
        assert LatencyResult.from_dict(c.latency or {}).precision == "int8"
        # The reward is the int8 figures' (5 significant digits as recorded), not the fp32 ones'.
        int8_reward = squared_penalty(metrics["accuracy"], metrics["latency_p50"], TARGET_MS)
        fp32_reward = squared_penalty(metrics["accuracy_fp32"], metrics["latency_p50_fp32"], TARGET_MS)
        assert metrics["reward"] == pytest.approx(int8_reward, rel=1e-3)
        assert metrics["reward"] != pytest.approx(fp32_reward, rel=1e-3)
        assert metrics["latency_p50_fp32"] != metrics["latency_p50"]


def test_the_leaderboard_says_int8_decided(int8_search: tuple[str, Path, SearchResult], tmp_path: Path) -> None:
    _, folder, _ = int8_search
    cfg = LeaderboardConfig(tracking=TrackingConfig(uri=f"sqlite:///{folder / 'mlflow.db'}"), plot=False)
    table = run_leaderboard(cfg)
    assert "precision" in table.text.splitlines()[0].split()
    assert all(" int8 " in line for line in table.text.splitlines()[2:2 + len(table.rows)])
    rows = list(csv.DictReader(io.StringIO(run_leaderboard(dataclasses.replace(cfg, format="csv")).text)))
    assert rows and {r["precision"] for r in rows} == {"int8"}
    as_json = json.loads(run_leaderboard(dataclasses.replace(cfg, format="json")).text)
    assert {e["precision"] for e in as_json["entries"]} == {"int8"}


def test_the_export_of_an_int8_candidate_says_int8_decided(int8_search: tuple[str, Path, SearchResult],
                                                            tmp_path: Path) -> None:
    backend, folder, _ = int8_search
    if backend != "onnxruntime":
        pytest.skip("the export's report is the same whichever backend searched: checked once")
    cfg = ExportConfig(output_dir=str(tmp_path), tracking=TrackingConfig(uri=f"sqlite:///{folder / 'mlflow.db'}"),
                       train_samples=256, val_samples=128)
    cfg.train.epochs = 1
    cfg.latency.measure = {"warmup_runs": 2, "warmup_s": 0.0, "min_runs": 10, "min_time_s": 0.0, "max_repeats": 1}
    cfg.latency.options = {"slot": False}
    cfg.latency.rounds = 1
    report = run_export(cfg).report
    assert report["search"]["precision"] == "int8"
    assert {"accuracy_fp32", "latency_p50_fp32"} <= set(report["search"]["metrics"])
    markdown = (tmp_path / report["arch_id"] / "report.md").read_text()
    assert "| search precision (latency and the reward's accuracy) | int8 |" in markdown


# ---------------------------------------------------------------------- bad input, before any trial


def _cannot_run() -> list[tuple[str, str]]:
    """(backend, precision) pairs the backends here refuse: LiteRT's fp16, and an OpenVINO precision this CPU lacks."""
    import openvino

    runs = set(openvino.Core().get_property("CPU", "OPTIMIZATION_CAPABILITIES"))
    lacking = [p for p, cap in (("fp16", "FP16"), ("bf16", "BF16")) if cap not in runs]
    return [("litert", "fp16"), *[("openvino", p) for p in lacking]]


@pytest.mark.parametrize(("backend", "precision"), _cannot_run())
def test_a_precision_the_runtime_cannot_run_is_one_line_before_any_trial(tmp_path: Path, backend: str,
                                                                          precision: str) -> None:
    cfg = stored_config(tmp_path, "+space=tiny", f"latency={backend}", f"latency.precision={precision}",
                        "target_ms=20", "progress=false")
    with pytest.raises(LatencyError, match=f"precision '{precision}'") as err:
        run_search(cfg)
    assert "\n" not in str(err.value)
    assert not (tmp_path / "out" / "ray").exists()  # no trial started


def test_the_precision_among_the_backends_options_names_latency_precision(tmp_path: Path) -> None:
    cfg = stored_config(tmp_path, "+space=tiny", "+latency.options.precision=int8", "target_ms=20", "progress=false")
    with pytest.raises(LatencyConfigError, match=r"latency\.options\.precision: the precision is set in one place, "
                                                 r"latency\.precision \(e\.g\. latency\.precision=int8\)") as err:
        run_search(cfg)
    assert "\n" not in str(err.value)
    assert not (tmp_path / "out" / "ray").exists()
