"""One evaluated candidate as the driver records it, built from the trial's reports.

This is the single place that decides what a candidate's metrics, params and tags are called
(the MLflow record, the leaderboard CSV and the final table all read it).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from latency_predictor.hybrid import pareto_front
from nas.trial import COMPLETED, CRASHED, FAILED, PRUNED, RUNNING
from search_spaces import arch_id_of

FINAL_METRICS = (
    "accuracy", "val_loss", "latency_ms", "latency_p50", "latency_p90", "latency_p99", "params", "macs",
    "reward", "train_seconds", "measure_seconds", "trial_seconds", "meets_target",
)
"""Metrics every completed candidate trained on the proxy task has (``val_loss`` is absent for
the training-free estimator)."""

EPOCH_METRICS = ("accuracy", "val_loss", "train_loss", "reward")
"""Metrics logged once per epoch (MLflow step = epoch)."""


@dataclass
class CandidateRecord:
    """A candidate's final figures, per-epoch history and identity.

    Attributes:
        trial_id: Ray Tune's trial id.
        arch: canonical architecture string.
        arch_id: short hash of ``arch``.
        status: ``COMPLETED``, ``PRUNED`` (stopped early by the scheduler) or ``FAILED``.
        decisions: the active decisions that give ``arch``.
        metrics: final metric values (see :data:`FINAL_METRICS`).
        history: one dict of :data:`EPOCH_METRICS` per reported epoch, with ``epoch``.
        latency: the :class:`~latency_predictor.LatencyResult` as a dict (None if not measured).
        tags: string facts (latency source and backend, accuracy estimator, failure, and where the
            trial ran: ``ray_node_id``, ``ray_node_ip``, ``ray_gpu_ids``).
        start_time: Unix time the trial started.
        end_time: Unix time the trial ended.
    """

    trial_id: str
    arch: str
    arch_id: str
    status: str
    decisions: dict[str, Any] = field(default_factory=dict)
    metrics: dict[str, float] = field(default_factory=dict)
    history: list[dict[str, float]] = field(default_factory=list)
    latency: dict[str, Any] | None = None
    tags: dict[str, str] = field(default_factory=dict)
    start_time: float = 0.0
    end_time: float = 0.0

    @property
    def reward(self) -> float | None:
        """The reward, or None when the candidate failed."""
        return self.metrics.get("reward")

    @property
    def failure_reason(self) -> str | None:
        """Why the candidate failed, or None."""
        return self.tags.get("failure_reason")


def _num(v: Any) -> float | None:
    if isinstance(v, bool):
        return 1.0 if v else 0.0
    if isinstance(v, int | float) and math.isfinite(v):
        return float(v)
    return None


def record_from_results(
    trial_id: str,
    arch: str,
    results: list[dict[str, Any]],
    decisions: dict[str, Any],
    start_time: float,
    end_time: float,
    error: str | None = None,
    error_type: str = "TrialCrashed",
) -> CandidateRecord:
    """Build the record of a trial from its reports, in order.

    Args:
        trial_id: Ray Tune's trial id.
        arch: the architecture string the trial evaluated.
        results: the trial's reports (the last one holds the final figures).
        decisions: the active decisions of ``arch``.
        start_time: Unix time the trial started.
        end_time: Unix time it ended.
        error: the error text when the trial process raised or died.
        error_type: the failure type recorded with ``error`` (``TrialCrashed``: a bug;
            ``TrialProcessDied``: the process died more often than retries allowed).
    """
    last = results[-1] if results else {}
    tags: dict[str, str] = {}
    if error is not None:
        status = FAILED
        tags.update(failure_type=error_type, failure_reason=error)
    elif last.get("status") == CRASHED:
        status = FAILED
        crash = str(last.get("crash", "")).strip().splitlines()
        tags.update(failure_type="TrialCrashed", failure_reason=crash[-1] if crash else "an unexpected error")
    elif last.get("status") == FAILED:
        status = FAILED
        tags.update(failure_type=str(last.get("failure_type")), failure_reason=str(last.get("failure_reason")))
    elif last.get("status") == COMPLETED:
        status = COMPLETED
    elif last.get("status") == RUNNING:
        status = PRUNED
    else:
        status = FAILED
        tags.update(failure_type="NoResult", failure_reason="the trial ended without reporting a result")
    tags["status"] = status
    for key in ("latency_source", "latency_backend", "latency_device", "accuracy_estimator",
                "ray_node_id", "ray_node_ip", "ray_gpu_ids", "latency_confirm_reason"):
        if key in last:
            tags[key] = str(last[key])
    if "latency_stable" in last:
        tags["latency_stable"] = str(bool(last["latency_stable"])).lower()

    metrics: dict[str, float] = {}
    if status != FAILED:
        for key in (*FINAL_METRICS, "train_loss", "naswot_score", "latency_predicted_ms"):
            src = "latency_ms" if key == "latency_p50" else key
            v = _num(last.get(src))
            if v is not None:
                metrics[key] = v
        metrics["epochs_completed"] = float(last.get("epoch", 0))
    else:
        for key in ("latency_ms", "latency_p90", "latency_p99", "params", "macs", "measure_seconds", "trial_seconds"):
            v = _num(last.get(key))
            if v is not None:
                metrics["latency_p50" if key == "latency_ms" else key] = v

    history = []
    for r in results:
        if r.get("status") in (RUNNING, COMPLETED) and r.get("epoch"):
            row = {"epoch": float(r["epoch"])}
            for key in EPOCH_METRICS:
                v = _num(r.get(key))
                if v is not None:
                    row[key] = v
            history.append(row)

    latency = json.loads(last["latency_json"]) if isinstance(last.get("latency_json"), str) else None
    return CandidateRecord(
        trial_id=trial_id, arch=arch, arch_id=str(last.get("arch_id") or arch_id_of(arch)), status=status,
        decisions=decisions, metrics=metrics, history=history, latency=latency, tags=tags,
        start_time=start_time, end_time=end_time,
    )


LEADERBOARD_COLUMNS = (
    "rank", "arch_id", "status", "accuracy", "val_loss", "latency_p50", "latency_p90", "latency_p99",
    "latency_source", "params", "macs", "reward", "meets_target", "train_seconds", "measure_seconds",
    "accuracy_estimator", "run_id", "failure_reason", "arch",
)


def rank(records: list[CandidateRecord]) -> list[CandidateRecord]:
    """Completed candidates by reward (best first), then pruned ones by reward, then failed ones."""
    order = {COMPLETED: 0, PRUNED: 1, FAILED: 2}
    return sorted(records, key=lambda r: (order[r.status], -(r.reward if r.reward is not None else -math.inf)))


def best_of(records: list[CandidateRecord]) -> CandidateRecord | None:
    """The completed candidate with the highest reward (None when none completed)."""
    done = [r for r in records if r.status == COMPLETED and r.reward is not None]
    return max(done, key=lambda r: r.reward or 0.0) if done else None


def pareto_points(records: list[CandidateRecord]) -> list[list[float]]:
    """``[latency_p50, accuracy]`` of the completed candidates no other completed candidate beats
    on both lower latency and higher accuracy, fastest first."""
    points = np.array([
        (r.metrics["latency_p50"], r.metrics["accuracy"]) for r in records
        if r.status == COMPLETED and "latency_p50" in r.metrics and "accuracy" in r.metrics
    ], dtype=np.float64).reshape(-1, 2)
    return [[float(points[i, 0]), float(points[i, 1])] for i in pareto_front(points[:, 0], points[:, 1])]


def latency_sources(records: list[CandidateRecord]) -> dict[str, int]:
    """How the completed candidates' latencies were obtained: ``predicted``, ``measured``, and
    in hybrid predictor mode ``confirmed_<reason>`` for the measurements that confirmed a prediction."""
    counts: dict[str, int] = {}
    for r in records:
        if r.status != COMPLETED:
            continue
        for key in (r.tags.get("latency_source"),
                    f"confirmed_{r.tags['latency_confirm_reason']}" if "latency_confirm_reason" in r.tags else None):
            if key:
                counts[key] = counts.get(key, 0) + 1
    return counts


def leaderboard_rows(records: list[CandidateRecord], run_ids: dict[str, str]) -> list[dict[str, Any]]:
    """Rows of :data:`LEADERBOARD_COLUMNS`, ranked (``run_ids``: trial id -> MLflow run id)."""
    rows = []
    for i, r in enumerate(rank(records), 1):
        m = r.metrics
        rows.append({
            "rank": i, "arch_id": r.arch_id, "status": r.status, "accuracy": m.get("accuracy"),
            "val_loss": m.get("val_loss"), "latency_p50": m.get("latency_p50"), "latency_p90": m.get("latency_p90"),
            "latency_p99": m.get("latency_p99"), "latency_source": r.tags.get("latency_source"),
            "params": int(m["params"]) if "params" in m else None, "macs": int(m["macs"]) if "macs" in m else None,
            "reward": m.get("reward"),
            "meets_target": bool(m["meets_target"]) if "meets_target" in m else None,
            "train_seconds": m.get("train_seconds"), "measure_seconds": m.get("measure_seconds"),
            "accuracy_estimator": r.tags.get("accuracy_estimator"), "run_id": run_ids.get(r.trial_id),
            "failure_reason": r.failure_reason, "arch": r.arch,
        })
    return rows
