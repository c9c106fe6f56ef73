"""A search at latency.precision=int8: the trial times the int8 network and rewards its accuracy after quantisation."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from latency_predictor import ConfigError as LatencyConfigError
from latency_predictor import LatencyResult
from nas.core.config import AccuracyConfig, DataConfig, LatencyConfig, TrainConfig
from nas.core.record import COMPLETED, candidate_from_reports, figure
from nas.core.reward import squared_penalty
from nas.data import Dataset, load_dataset
from nas.driver import run_search
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
