"""What a search records, as plain values: one :class:`Candidate` type, the :class:`SearchRecord`,
one ranking and one Pareto front.

Every part of LatNAS that talks about a candidate uses :class:`Candidate`: the driver builds
one from a trial's reports (:func:`candidate_from_reports`) and writes it to MLflow; the MLflow
reader builds the same type back from a run; the final table, ``leaderboard.csv``, the
leaderboard command and the export read it. This is also the single place that decides what a
candidate's metrics, params and tags are called.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from latency_predictor.pareto import pareto_front as front_indices
from search_spaces import arch_id_of

COMPLETED, RUNNING, FAILED, PRUNED = "COMPLETED", "RUNNING", "FAILED", "PRUNED"
CRASHED = "CRASHED"
"""The status of a trial's last report when it raised an unexpected error (a bug)."""
KILLED = "KILLED"
"""A candidate record the driver was writing when it stopped (marked so on resume)."""

FINAL_METRICS = (
    "accuracy", "val_loss", "latency_ms", "latency_p50", "latency_p90", "latency_p95", "latency_p99", "params", "macs",
    "reward", "train_seconds", "measure_seconds", "trial_seconds", "meets_target",
)
"""Metrics every completed candidate trained on the proxy task has (``val_loss`` is absent for
the training-free estimator)."""

SERVER_METRICS = ("server_batch", "throughput_per_s")
"""Metrics of a candidate in the server scenario: the batch chosen within the bound, its images per second."""

EPOCH_METRICS = ("accuracy", "val_loss", "train_loss", "reward")
"""Metrics logged once per epoch (MLflow step = epoch)."""

FINAL_PASS_TAG = "latency_final_pass"
"""Tag (``true``) of a candidate whose latency figures come from the driver's final latency pass
(:mod:`nas.driver.final_pass`); the in-search figures are then ``latency_in_search_*``."""

STOP_REASON_TAG = "stop_reason"
"""Tag of a search's parent run that a failed write stopped (a full store, an unwritable output
folder): the error, in one line. Resuming the search removes it."""

PLACEMENT_TAGS = ("ray_node_id", "ray_node_ip", "ray_gpu_ids")
_REPORT_TAGS = ("latency_source", "latency_backend", "latency_device", "latency_precision", "latency_target_stat",
                "latency_scenario", "latency_anchor", "target_anchor", "accuracy_estimator", "accuracy_precision",
                "accuracy_runtime", "train_memory_format", *PLACEMENT_TAGS, "latency_confirm_reason")

SORT_KEYS: dict[str, bool] = {
    # key -> descending
    "reward": True, "accuracy": True, "latency_p50": False, "latency_p90": False, "latency_p95": False,
    "latency_p99": False, "x_anchor": False, "params": False, "macs": False,
}


RUNG_METRICS = ("rung", "rung_train_images", "rung_epochs", "resumed_rungs")
"""A multi-fidelity candidate's highest rung (0-based), that rung's size, and rungs loaded from a
checkpoint rather than trained in this trial (:mod:`nas.trial.rungs`)."""
_PER_RUNG = re.compile(r"(accuracy|reward)_rung\d+")

PRECISION_METRICS = ("accuracy_fp32", "latency_p50_fp32", "latency_p90_fp32", "latency_p95_fp32", "latency_p99_fp32")
"""Below fp32 (``latency.precision``): the float network's accuracy and fp32 latency, logged beside the
figures at the precision that decided (:attr:`Candidate.precision`), which the reward uses."""

PREPROCESSING_METRICS = ("latency_model_p50", "latency_preprocessing_p50")
"""End-to-end latency (``latency.preprocessing``): the network's own p50 and the input pipeline's."""

USER_METRICS = "user_metrics"
"""The report key of a custom evaluator's own metrics (``accuracy=custom``): a JSON object of name ->
number, each recorded on the candidate's run under its own name (per report, so a metric given
with every ``context.report`` has a history)."""
_METRIC_NAME = re.compile(r"[A-Za-z0-9_\-. /]{1,200}")
_RESERVED = re.compile(r"(latency|accuracy|reward|rung|server|throughput|params|macs|meets|epoch|retries|trial|"
                       r"measure|train_seconds)([_.].*)?")


def metric_name_problem(name: str) -> str:
    """Why a custom evaluator may not record a metric called ``name`` (empty: it may).

    Names MLflow accepts only, and none that LatNAS records itself or may record later (latency
    figures, accuracy and reward per rung, the final pass's ``latency_in_search_*``, ...).
    """
    if not _METRIC_NAME.fullmatch(name):
        return "a metric name is 1 to 200 letters, digits, '_', '-', '.', ' ' or '/'"
    if name in ("val_loss", "train_loss"):
        return ""  # the recipe's own losses: a custom evaluator may give them, and they are kept as such
    if name in FINAL_METRICS or name in ANCHOR_METRICS or name.endswith("_score") or _RESERVED.fullmatch(name):
        return "LatNAS records a metric of that name (or family) itself; rename it"
    return ""


ANCHOR_METRICS = ("x_anchor", "anchor_latency_ms")
"""With an anchor network (``latency.anchor``, ``target_anchor``): the candidate's latency over the
anchor's at the target's statistic (the median over the rounds that paired them), and the anchor's
own figure in ms."""


@dataclass
class Candidate:
    """One evaluated architecture: identity, outcome, figures and where they came from.

    Numbers missing from the record (a failed trial has no reward) read as NaN through the
    properties.

    Attributes:
        arch: canonical architecture string.
        arch_id: short hash of ``arch``.
        status: ``COMPLETED``, ``PRUNED`` (stopped early by the scheduler), ``FAILED``, or
            ``KILLED`` (a record its driver left half-written).
        decisions: the active decisions that give ``arch``.
        metrics: final metric values (see :data:`FINAL_METRICS`).
        history: one dict of :data:`EPOCH_METRICS` per reported epoch, with ``epoch``.
        latency: the :class:`~latency_predictor.LatencyResult` as a dict (None if not kept).
        tags: string facts (latency source and backend, accuracy estimator, failure, and where
            the trial ran: ``ray_node_id``, ``ray_node_ip``, ``ray_gpu_ids``).
        trial_id: Ray Tune's trial id.
        run_id: the candidate's MLflow run (None until recorded).
        start_time: Unix time the trial started.
        end_time: Unix time the trial ended.
    """

    arch: str
    arch_id: str
    status: str
    decisions: dict[str, Any] = field(default_factory=dict)
    metrics: dict[str, float] = field(default_factory=dict)
    history: list[dict[str, float]] = field(default_factory=list)
    latency: dict[str, Any] | None = None
    tags: dict[str, str] = field(default_factory=dict)
    trial_id: str = ""
    run_id: str | None = None
    start_time: float = 0.0
    end_time: float = 0.0

    def metric(self, name: str) -> float:
        """The final value of metric ``name``, NaN when it was not recorded."""
        return float(self.metrics.get(name, math.nan))

    @property
    def reward(self) -> float:
        """The reward (NaN when the candidate failed)."""
        return self.metric("reward")

    @property
    def accuracy(self) -> float:
        """The accuracy estimate (or the training-free score, see ``accuracy_estimator``)."""
        return self.metric("accuracy")

    @property
    def latency_p50(self) -> float:
        """The latency the reward used, in ms."""
        return self.metric("latency_p50")

    @property
    def precision(self) -> str:
        """The precision that decided: the one its latency was timed at and its reward's accuracy is
        for (``int8``); where its accuracy was recorded at another one (fp16 on a CPU trial, a custom
        evaluator's score), both: ``fp16 (accuracy fp32)``; empty where not recorded."""
        lat = self.tags.get("latency_precision", "")
        acc = self.tags.get("accuracy_precision", lat)
        return lat if acc == lat or not lat else f"{lat} (accuracy {acc})"

    @property
    def target_stat(self) -> str:
        """The latency statistic the search's target bounds (``p50`` unless recorded otherwise)."""
        return self.tags.get("latency_target_stat", "p50")

    @property
    def latency_objective(self) -> float:
        """The cost the Pareto front weighs against accuracy, in ms: the latency at :attr:`target_stat`,
        or in the server scenario the time per image at its throughput within the bound."""
        if self.tags.get("latency_scenario") == "server":
            t = self.metric("throughput_per_s")
            return 1e3 / t if t > 0 else math.nan
        return self.metric(f"latency_{self.target_stat}")

    @property
    def latency_p99(self) -> float:
        """The 99th percentile latency, in ms."""
        return self.metric("latency_p99")

    @property
    def x_anchor(self) -> float:
        """Its latency over the anchor network's (NaN: no anchor, or not measured beside it)."""
        return self.metric("x_anchor")

    @property
    def relative_target(self) -> bool:
        """Whether its search's target is relative to an anchor network (``target_anchor``)."""
        return bool(self.tags.get("target_anchor"))

    @property
    def target_figure(self) -> float:
        """The figure its search's target bounds: ``x_anchor`` for a relative target, else the latency
        at :attr:`target_stat` in ms."""
        return self.x_anchor if self.relative_target else self.metric(f"latency_{self.target_stat}")

    @property
    def rung(self) -> int:
        """The highest rung of a multi-fidelity search the candidate reached (0: the first, or no rungs)."""
        r = self.metric("rung")
        return int(r) if math.isfinite(r) else 0

    @property
    def rung_label(self) -> str:
        """Where its accuracy was obtained: ``<rung> (<images>x<epochs>)``, ``0 (supernet)`` for the
        supernet's estimate; empty without rungs."""
        images, epochs = self.metric("rung_train_images"), self.metric("rung_epochs")
        if not (math.isfinite(images) and math.isfinite(epochs)):
            return ""
        if images == 0:  # the bottom rung of accuracy=supernet: no training
            return f"{self.rung} (supernet)"
        return f"{self.rung} ({int(images)}x{int(epochs)})"

    def rung_rewards(self) -> dict[int, float]:
        """Its reward at each rung it finished (empty without rungs)."""
        out = {}
        for key, v in self.metrics.items():
            if key.startswith("reward_rung") and math.isfinite(v):
                out[int(key.removeprefix("reward_rung"))] = v
        return out

    @property
    def completed(self) -> bool:
        """Whether the trial finished with figures (not failed, pruned or running)."""
        return self.status == COMPLETED and math.isfinite(self.reward)

    @property
    def meets_target(self) -> bool | None:
        """Whether the latency meets the target (None when not known)."""
        m = self.metrics.get("meets_target")
        return None if m is None else bool(m)

    @property
    def latency_source(self) -> str:
        """``measured`` or ``predicted`` (empty when not known)."""
        return self.tags.get("latency_source", "")

    @property
    def failure_reason(self) -> str | None:
        """Why the candidate failed (``<type>: <reason>``), or None."""
        reason = self.tags.get("failure_reason")
        if reason is None:
            return None
        kind = self.tags.get("failure_type")
        return f"{kind}: {reason}" if kind else reason


@dataclass(frozen=True)
class SearchRecord:
    """A search as recorded: its parent run and the settings a review needs.

    Attributes:
        run_id: the search's parent MLflow run.
        name: the search's name.
        experiment_id: its MLflow experiment.
        status: the parent run's status (``RUNNING``, ``FINISHED``, ``FAILED``, ``KILLED``).
        target_ms: the latency target in ms (None: the target is relative to an anchor network).
        target_anchor: the network a relative target is stated against (``target_anchor``), or None.
        target_x: the factor of that relative target, or None.
        space: the search space's name.
        latency: the latency settings the search used (``backend``, ``input_shape``, ``options``,
            ``measure``), as logged.
        data: the data settings the search used, as logged.
        num_classes: classifier width of the candidates.
        accuracy_estimator: ``train`` or a training-free score.
        device_name: what the candidates' latency was measured on.
        best_arch_id: the arch_id the search named best.
        references: reference network name -> latency p50 (ms) logged on the parent run.
        params: every param of the parent run, as logged (strings).
        tags: every tag of the parent run.
    """

    run_id: str
    name: str
    experiment_id: str
    status: str = ""
    target_ms: float | None = None
    target_anchor: str | None = None
    target_x: float | None = None
    space: str | None = None
    latency: dict[str, Any] = field(default_factory=dict)
    data: dict[str, Any] = field(default_factory=dict)
    num_classes: int | None = None
    accuracy_estimator: str | None = None
    device_name: str | None = None
    best_arch_id: str | None = None
    references: dict[str, float] = field(default_factory=dict)
    params: dict[str, str] = field(default_factory=dict)
    tags: dict[str, str] = field(default_factory=dict)

    @property
    def anchor(self) -> str | None:
        """The anchor network the search measured its candidates beside (``target_anchor``, else
        ``latency.anchor``), or None."""
        return self.target_anchor or self.latency.get("anchor") or None


FIGURE_DIGITS = 5
"""Significant digits a candidate's figures are recorded with: finer than any measurement or
validation set resolves (an accuracy on up to 100,000 images stays exact, a latency keeps its
microseconds), short enough to read in MLflow's table and charts."""


def figure(v: float) -> float:
    """``v`` as a search records it: :data:`FIGURE_DIGITS` significant digits, the whole part of a
    larger number kept whole (a count, a time stamp); zero and non-finite values unchanged."""
    if v == 0 or not math.isfinite(v) or float(v).is_integer():
        return v
    return round(v, max(0, FIGURE_DIGITS - 1 - math.floor(math.log10(abs(v)))))


def _num(v: Any) -> float | None:
    if isinstance(v, bool):
        return 1.0 if v else 0.0
    if isinstance(v, int | float) and math.isfinite(v):
        return figure(float(v))
    return None


def _user_metrics(report: dict[str, Any]) -> dict[str, float]:
    raw = report.get(USER_METRICS)
    if not isinstance(raw, str):
        return {}
    out = {}
    for k, v in json.loads(raw).items():
        x = _num(v)
        if x is not None:
            out[str(k)] = x
    return out


def candidate_from_reports(
    trial_id: str,
    arch: str,
    results: list[dict[str, Any]],
    decisions: dict[str, Any],
    start_time: float,
    end_time: float,
    error: str | None = None,
    error_type: str = "TrialCrashed",
) -> Candidate:
    """The candidate of a trial, from its reports in order.

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
    for key in _REPORT_TAGS:
        if key in last:
            tags[key] = str(last[key])
    if "latency_stable" in last:
        tags["latency_stable"] = str(bool(last["latency_stable"])).lower()

    metrics: dict[str, float] = {}
    if status != FAILED:
        scores = tuple(k for k in last if k.endswith("_score"))  # a training-free estimator's own figure
        per_rung = tuple(k for k in last if _PER_RUNG.fullmatch(k))
        for key in (*FINAL_METRICS, "train_loss", *scores, "latency_predicted_ms", *PRECISION_METRICS, *SERVER_METRICS,
                    *PREPROCESSING_METRICS, *ANCHOR_METRICS, *RUNG_METRICS, *per_rung):
            src = "latency_ms" if key == "latency_p50" else key
            v = _num(last.get(src))
            if v is not None:
                metrics[key] = v
        metrics["epochs_completed"] = float(last.get("epoch", 0))
        metrics.update(_user_metrics(last))
    else:
        for key in ("latency_ms", "latency_p90", "latency_p95", "latency_p99", *ANCHOR_METRICS, "params", "macs",
                    "measure_seconds", "trial_seconds"):
            v = _num(last.get(key))
            if v is not None:
                metrics["latency_p50" if key == "latency_ms" else key] = v

    steps: dict[float, dict[str, float]] = {}  # a later report of the same epoch adds to (and overrides) an earlier
    for r in results:
        if r.get("status") in (RUNNING, COMPLETED) and r.get("epoch"):
            row = steps.setdefault(float(r["epoch"]), {"epoch": float(r["epoch"])})
            for key in EPOCH_METRICS:
                v = _num(r.get(key))
                if v is not None:
                    row[key] = v
            row.update(_user_metrics(r))
    history = list(steps.values())

    latency = json.loads(last["latency_json"]) if isinstance(last.get("latency_json"), str) else None
    return Candidate(
        arch=arch, arch_id=str(last.get("arch_id") or arch_id_of(arch)), status=status, decisions=decisions,
        metrics=metrics, history=history, latency=latency, tags=tags, trial_id=trial_id,
        start_time=start_time, end_time=end_time,
    )


# ---------------------------------------------------------------------- ranking


def best_of(candidates: Iterable[Candidate]) -> Candidate | None:
    """The completed candidate with the highest reward at the highest rung reached (None when none
    completed); the first one of equal rewards."""
    done = [c for c in candidates if c.completed]
    return max(done, key=lambda c: (c.rung, c.reward)) if done else None


def top_rung(candidates: Iterable[Candidate]) -> list[Candidate]:
    """The completed candidates at the highest rung any of them reached (all of them without rungs):
    accuracies from different rungs are different budgets and are not weighed against each other."""
    done = [c for c in candidates if c.completed]
    top = max((c.rung for c in done), default=0)
    return [c for c in done if c.rung == top]


def pareto_front(candidates: Iterable[Candidate]) -> list[Candidate]:
    """The completed candidates (of the highest rung reached, :func:`top_rung`) no other beats on
    both lower latency (the statistic the target bounds: :attr:`Candidate.latency_objective`) and
    higher accuracy, fastest first."""
    done = [c for c in top_rung(candidates)
            if math.isfinite(c.latency_objective) and math.isfinite(c.accuracy)]
    lat = np.array([c.latency_objective for c in done], dtype=np.float64)
    acc = np.array([c.accuracy for c in done], dtype=np.float64)
    return [done[int(i)] for i in front_indices(lat, acc)]


def pareto_points(candidates: Iterable[Candidate]) -> list[list[float]]:
    """``[latency, accuracy]`` of :func:`pareto_front` (the target's statistic), fastest first (handed to trials)."""
    return [[c.latency_objective, c.accuracy] for c in pareto_front(candidates)]


@dataclass(frozen=True)
class Ranked:
    """A candidate and its place on a leaderboard (``rank`` None: not ranked, i.e. not completed)."""

    rank: int | None
    candidate: Candidate


def rank(
    candidates: Sequence[Candidate],
    sort: str = "reward",
    top_k: int | None = None,
    feasible_only: bool = False,
    pareto_only: bool = False,
    include_unfinished: bool = False,
) -> list[Ranked]:
    """The leaderboard: completed candidates ordered by ``sort``, numbered, cut to ``top_k``.

    In a multi-fidelity search the candidates of the highest rung come first, then those of the
    rung below, and so on; ``sort`` orders them within a rung.

    The sort is stable, so ties keep the order ``candidates`` came in.

    Args:
        candidates: a search's candidates.
        sort: one of :data:`SORT_KEYS` (latency, params and MACs ascending, the rest descending).
        top_k: how many ranked candidates to keep (None: all).
        feasible_only: keep only candidates that meet the latency target.
        pareto_only: keep only the Pareto front (accuracy against latency p50).
        include_unfinished: append the pruned (best reward first) and then the failed or
            killed candidates, unranked.

    Raises:
        ValueError: an unknown sort key or a ``top_k`` below 1.
    """
    if sort not in SORT_KEYS:
        raise ValueError(f"sort={sort!r} is not one of {list(SORT_KEYS)}")
    if top_k is not None and top_k < 1:
        raise ValueError(f"top_k must be >= 1, got {top_k}")
    pool = [c for c in candidates if c.completed]
    if feasible_only:
        pool = [c for c in pool if c.meets_target]
    if pareto_only:
        keep = {id(c) for c in pareto_front(pool)}
        pool = [c for c in pool if id(c) in keep]
    desc = SORT_KEYS[sort]

    def key(c: Candidate) -> tuple[int, float]:
        # the highest rung first: a figure at a larger budget outranks any at a smaller one
        v = c.metric(sort)
        if not math.isfinite(v):
            return -c.rung, math.inf
        return -c.rung, -v if desc else v

    out = [Ranked(i + 1, c) for i, c in enumerate(sorted(pool, key=key)[:top_k])]
    if include_unfinished:
        rest = [c for c in candidates if not c.completed]
        order = {PRUNED: 0}
        rest.sort(key=lambda c: (order.get(c.status, 1), -c.reward if math.isfinite(c.reward) else math.inf))
        out += [Ranked(None, c) for c in rest]
    return out


def target_shares(candidates: Sequence[Candidate], target: float, top: int = 3) -> list[float]:
    """The share of the latency target each of the ``top`` ranked candidates uses, best first (empty
    when none completed or a figure is missing): their :attr:`Candidate.target_figure` over
    ``target`` (``target_ms``, or ``target_x`` for a target relative to an anchor network)."""
    ranked = [r.candidate for r in rank(candidates, top_k=top)]
    shares = [c.target_figure / target for c in ranked]
    return shares if all(math.isfinite(x) for x in shares) else []


def trials_seconds(candidates: Iterable[Candidate]) -> float:
    """The time the recorded candidates' trials took (``trial_seconds``), summed over them, whichever
    run of a resumed search ran them. A trial that a resume restarted from its rung checkpoint counts
    from the restart."""
    return sum(t for c in candidates if math.isfinite(t := c.metric("trial_seconds")))


def latency_sources(candidates: Iterable[Candidate]) -> dict[str, int]:
    """How the completed candidates' latencies were obtained: ``predicted``, ``measured``, and
    in hybrid predictor mode ``confirmed_<reason>`` for the measurements that confirmed a prediction."""
    counts: dict[str, int] = {}
    for c in candidates:
        if c.status != COMPLETED:
            continue
        for key in (c.tags.get("latency_source"),
                    f"confirmed_{c.tags['latency_confirm_reason']}" if "latency_confirm_reason" in c.tags else None):
            if key:
                counts[key] = counts.get(key, 0) + 1
    return counts


IN_SEARCH = "in search"
"""What marks a latency figure measured during the search, while other trials shared the machine."""


def measured_in_search(c: Candidate) -> bool:
    """Whether the candidate's latency figures are its trial's own measurement (not the final pass's)."""
    return c.latency_source == "measured" and c.tags.get(FINAL_PASS_TAG) != "true"


def latency_provenance(c: Candidate) -> str:
    """Where the candidate's latency figures come from, as every output writes it (the table's
    ``latency`` column, ``leaderboard.csv``, the leaderboard's CSV and JSON, the export report).

    ``measured (final pass)``: measured again once the trials had ended, with none running;
    ``measured (in search)``: the trial's own measurement, taken while other trials ran (in
    hybrid predictor mode with the reason it was measured, e.g. ``measured (in search, near
    target)``); ``predicted``: a learned predictor's figure; empty: not known.
    """
    source = c.latency_source
    if measured_in_search(c):
        reason = c.tags.get("latency_confirm_reason")
        return f"measured ({IN_SEARCH}{', ' + reason.replace('_', ' ') if reason else ''})"
    if c.tags.get(FINAL_PASS_TAG) == "true":  # the pass measures, whatever gave the in-search figure
        return "measured (final pass)"
    return source


LEADERBOARD_COLUMNS = (
    "rank", "arch_id", "status", "rung", "accuracy", "val_loss", "latency_p50", "latency_p90", "latency_p99",
    "latency_source", "precision", "latency_in_search_p50", "x_anchor", "anchor_latency_ms", "params", "macs", "reward",
    "meets_target", "train_seconds", "measure_seconds", "accuracy_estimator", "run_id", "failure_reason", "arch",
)
"""Columns of a leaderboard row (``leaderboard.csv``, the leaderboard's CSV and JSON)."""


def leaderboard_row(ranked: Ranked) -> dict[str, Any]:
    """One row of :data:`LEADERBOARD_COLUMNS` (None where a figure is missing)."""
    c = ranked.candidate

    def num(key: str) -> float | None:
        v = c.metric(key)
        return v if math.isfinite(v) else None

    params, macs = num("params"), num("macs")
    return {
        "rank": ranked.rank, "arch_id": c.arch_id, "status": c.status, "rung": c.rung_label or None,
        "accuracy": num("accuracy"),
        "val_loss": num("val_loss"), "latency_p50": num("latency_p50"), "latency_p90": num("latency_p90"),
        "latency_p99": num("latency_p99"), "latency_source": latency_provenance(c) or None,
        "precision": c.precision or None,
        "latency_in_search_p50": num("latency_in_search_p50"), "x_anchor": num("x_anchor"),
        "anchor_latency_ms": num("anchor_latency_ms"),
        "params": None if params is None else int(params), "macs": None if macs is None else int(macs),
        "reward": num("reward"), "meets_target": c.meets_target, "train_seconds": num("train_seconds"),
        "measure_seconds": num("measure_seconds"), "accuracy_estimator": c.tags.get("accuracy_estimator"),
        "run_id": c.run_id, "failure_reason": c.failure_reason, "arch": c.arch,
    }
