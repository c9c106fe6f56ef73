"""Reliability: failing candidates, killed trial processes, a killed or interrupted driver, resume.

The trial boundary is tested in-process with real builds, ONNX Runtime measurements and
training. The searches run on the session's real Ray cluster with a real SQLite MLflow store;
failures are injected with :mod:`nas.faults` (``$LATNAS_FAULTS``), which makes the chosen
candidates fail in real ways (a real failed allocation, real NaN weights, a real SIGKILL of the
trial's process) or raise the typed error a backend raises. The driver-kill and Ctrl-C tests run
``python -m nas.search`` in a subprocess and signal it.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from nas.config import AccuracyConfig, DataConfig, LatencyConfig, TrainConfig
from nas.data import Dataset, load_dataset
from nas.faults import FaultPlan
from nas.trial import COMPLETED, FAILED, RUNNING, TrialContext, evaluate_candidate
from search_spaces import load_space

FAST_MEASURE = {"warmup_runs": 2, "warmup_s": 0.0, "min_runs": 10, "min_time_s": 0.0, "max_time_s": 1.0,
                "max_repeats": 1}


# ---------------------------------------------------------------------- the trial boundary


@pytest.fixture(scope="module")
def data() -> Dataset:
    return load_dataset(DataConfig(resolution=16, max_train_samples=256, max_val_samples=128))


def _ctx(data: Dataset, timeout: float | None = None, faults: str | None = None, **train: Any) -> TrialContext:
    return TrialContext(
        space=load_space("tiny"), data=data, train=TrainConfig(**{"epochs": 2, "batch_size": 64, **train}),
        accuracy=AccuracyConfig(), target_ms=0.5, reward="squared", threads=1,
        latency=LatencyConfig(input_shape=[1, 3, 32, 32], options={"intra_op_threads": 1}, measure=FAST_MEASURE),
        trial_timeout_s=timeout, faults=FaultPlan.parse(faults) if faults else None,
    )


def _arch(seed: int = 0) -> str:
    return load_space("tiny").sample(np.random.default_rng(seed)).encode()


def _run(arch: str, ctx: TrialContext) -> list[dict[str, Any]]:
    reports: list[dict[str, Any]] = []
    evaluate_candidate(arch, ctx, reports.append)
    return reports


def _failed(reports: list[dict[str, Any]], failure_type: str) -> dict[str, Any]:
    last = reports[-1]
    assert last["status"] == FAILED, last
    assert last["failure_type"] == failure_type, last["failure_reason"]
    assert math.isnan(last["reward"]) and last["failure_reason"]
    return last


def test_a_trial_past_its_time_limit_fails_between_training_steps(data: Dataset) -> None:
    _run(_arch(), _ctx(data, epochs=1))  # warm up (first build, export and session in this process)
    reports = _run(_arch(), _ctx(data, timeout=2.0, epochs=200))
    last = _failed(reports, "TrialTimeoutError")
    assert "search.trial_timeout_s=2" in last["failure_reason"] and "a training step" in last["failure_reason"]
    assert all(r["status"] == RUNNING for r in reports[:-1])  # the epochs before the limit were reported
    assert 2.0 < last["trial_seconds"] < 6.0  # stopped within a step of the limit, not at the end
    assert "latency_ms" in last  # measured before training: kept in the record


def test_a_stalled_trial_fails_at_its_time_limit(data: Dataset) -> None:
    last = _failed(_run(_arch(), _ctx(data, timeout=0.5, faults="hang:30@1")), "TrialTimeoutError")
    assert "stall" in last["failure_reason"] and last["trial_seconds"] < 5.0


def test_out_of_memory_is_a_typed_failure(data: Dataset) -> None:
    last = _failed(_run(_arch(), _ctx(data, faults="oom@1")), "TrialOutOfMemoryError")
    assert "out of host memory" in last["failure_reason"] and "can't allocate memory" in last["failure_reason"]
    assert "latency_ms" in last


def test_nan_weights_fail_the_training_check(data: Dataset) -> None:
    last = _failed(_run(_arch(), _ctx(data, faults="nan@1")), "TrainingError")
    assert "training loss became nan" in last["failure_reason"]


@pytest.mark.parametrize(("kind", "failure_type"),
                         [("export", "ExportError"), ("engine", "EngineBuildError"), ("measure", "MeasurementError")])
def test_latency_failures_are_typed(data: Dataset, kind: str, failure_type: str) -> None:
    reports = _run(_arch(), _ctx(data, faults=f"{kind}@1"))
    last = _failed(reports, failure_type)
    assert len(reports) == 1 and "latency_ms" not in last and last["params"] > 0


def test_faults_hit_only_their_architectures(data: Dataset) -> None:
    plan = FaultPlan.parse("measure@0.5,seed=3")
    space = load_space("tiny")
    archs = [_arch(s) for s in range(12)]
    hit = [a for a in archs if plan.hits("measure", space.decode(a).arch_id)]
    assert 0 < len(hit) < len(archs)
    for arch in archs:
        status = _run(arch, _ctx(data, faults="measure@0.5,seed=3", epochs=1))[-1]["status"]
        assert status == (FAILED if arch in hit else COMPLETED)
