"""The final latency pass: once every trial has ended, the driver measures again the candidates a
user will look at (the top ``latency.final_pass_top_k`` by reward and the whole Pareto front), one
after another, with no trial training or measuring beside them.

Inside a search a measurement shares the machine with other trials' training, exports, data
handling and Ray's own processes, which the device slot does not hold back; the same network
then measures differently from one search to the next. The final pass gives the figures the
final table, ``leaderboard.csv``, the leaderboard command and the export read. The in-search
figures stay in MLflow as ``latency_in_search_p50`` / ``_p90`` / ``_p99`` (and the reward the
search used as ``reward_in_search``), and each re-measured candidate is tagged
``latency_final_pass=true``. The reward and ``meets_target`` are scored again as the trial
scored them (:class:`nas.core.objective.Objective`: the statistic the target bounds, the scenario).

With an anchor network (``latency.anchor``, ``target_anchor``) each candidate is measured back to
back with the anchor in ``latency.anchor_rounds`` alternating rounds
(:func:`latency_predictor.measurement.paired.measure_paired`): its figures are those of its median
round, and its ``x_anchor`` the median over the rounds of its figure over the anchor's, at the
target's statistic (a target relative to the anchor is judged on it). The trial's single pairing is
kept as ``x_anchor_in_search``.

A re-measured figure can move a candidate off the front (or out of the top) and so let in one that
still carries its in-search figure; the pass then measures that one too, round after round, until
the top and the front hold only re-measured candidates (at most :data:`MAX_ROUNDS` rounds; each
round measures at least one candidate the rounds before did not).

A predicted latency (``latency=predictor``) is measured in this pass only in hybrid mode, with
its measuring backend on the predictor's device; a predictor alone keeps its predictions. A
search that joined a cluster measured on its trial nodes, which the driver's machine may not be:
there the pass is not run (a remote measurement agent, ``latency=remote``, is the same device
from anywhere, and is).
"""

from __future__ import annotations

import logging
import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from latency_predictor import LatencyError, LatencyEstimator, LatencyResult
from latency_predictor.estimators import predictor_measuring_backend
from latency_predictor.measurement.paired import anchor_figures, measure_paired
from latency_predictor.measurement.protocol import LatencyStats
from latency_predictor.measurement.statistic import check_runs
from nas.core.config import SearchConfig
from nas.core.objective import Objective
from nas.core.record import FINAL_PASS_TAG, Candidate, figure, pareto_front, rank
from nas.trial.evaluate import latency_estimator, with_preprocessing
from search_spaces import Arch, SearchSpace, anchor_network

log = logging.getLogger(__name__)

IN_SEARCH = {"latency_p50": "latency_in_search_p50", "latency_p90": "latency_in_search_p90",
             "latency_p95": "latency_in_search_p95", "latency_p99": "latency_in_search_p99",
             "throughput_per_s": "throughput_in_search_per_s", "reward": "reward_in_search",
             "x_anchor": "x_anchor_in_search", "anchor_latency_ms": "anchor_latency_in_search_ms"}
"""Metric -> the name its in-search value keeps after the final pass."""

MAX_ROUNDS = 5
"""How many rounds the pass makes at most (a round measures the unmeasured members of the top and the front)."""


@dataclass
class FinalPass:
    """What the final pass did.

    Attributes:
        measured: candidates re-measured (their figures were updated in place).
        skipped: why nothing was measured, when nothing was (None otherwise).
        ratios: per re-measured candidate, in-search p50 / final p50.
        seconds: wall time of the pass.
        rounds: how many rounds it took (see :func:`run_final_pass`).
        failed: candidates whose re-measurement failed (they keep their in-search figures).
        unsettled: members of the top or the front still with their in-search figures when the
            last round allowed (:data:`MAX_ROUNDS`) had ended.
        anchor: the anchor network the candidates were measured beside (None: none).
        anchor_rounds: rounds of that pairing per candidate.
        anchor_ms: per re-measured candidate, the anchor's figure paired with it (ms).
    """

    measured: list[Candidate] = field(default_factory=list)
    skipped: str | None = None
    ratios: list[float] = field(default_factory=list)
    seconds: float = 0.0
    rounds: int = 0
    failed: list[Candidate] = field(default_factory=list)
    unsettled: list[Candidate] = field(default_factory=list)
    anchor: str | None = None
    anchor_rounds: int = 0
    anchor_ms: list[float] = field(default_factory=list)

    def summary_line(self) -> str | None:
        """One line for the search's final output (None when the pass is off)."""
        if self.skipped:
            return f"Final latency pass: {self.skipped}."
        if not self.measured and self.failed:
            return (f"Final latency pass: none of {len(self.failed)} candidates could be measured again (see the "
                    "warnings); the table uses their in-search figures.")
        if not self.measured:
            return None
        lo, hi = min(self.ratios), max(self.ratios)
        if self.rounds == 1:
            rounds = "in 1 round"
        else:
            rounds = (f"in {self.rounds} rounds (each round after the first measured the candidates that the "
                      "figures before it brought into the top or onto the front)")
        line = (f"Final latency pass: {len(self.measured)} candidates (the top by reward and the Pareto front) "
                f"measured again with no trial running, {rounds}, {self.seconds:.0f} s; in-search / final p50: "
                f"median {statistics.median(self.ratios):.3f}, range {lo:.3f}-{hi:.3f}. The table uses the final "
                "figures.")
        if self.anchor and self.anchor_ms:
            line += (f" Each candidate was measured back to back with the anchor {self.anchor} in {self.anchor_rounds} "
                     f"alternating round(s) (the anchor's p50: median {statistics.median(self.anchor_ms):.3f} ms); "
                     "x_anchor is the median of its ratios to it.")
        if self.unsettled:
            line += (f" After {self.rounds} rounds (the most the pass makes) {len(self.unsettled)} candidate(s) of "
                     "the top or the front still carry in-search figures: "
                     + ", ".join(c.arch_id for c in self.unsettled) + ".")
        if self.failed:
            line += (f" {len(self.failed)} could not be measured again and keep their in-search figures: "
                     + ", ".join(c.arch_id for c in self.failed) + ".")
        return line

    def metrics(self) -> dict[str, float]:
        """Summary metrics for the search's parent run."""
        if not self.measured:
            return {}
        out = {"final_pass_candidates": float(len(self.measured)),
               "final_pass_ratio_median": statistics.median(self.ratios),
               "final_pass_ratio_max": max(self.ratios), "final_pass_ratio_min": min(self.ratios),
               "final_pass_seconds": self.seconds, "final_pass_rounds": float(self.rounds)}
        if self.anchor_ms:
            out["final_pass_anchor_latency_ms"] = statistics.median(self.anchor_ms)
        return out


def select(candidates: Sequence[Candidate], top_k: int) -> list[Candidate]:
    """The completed candidates the pass measures: of the ``top_k`` best by reward, then of the rest
    of the Pareto front (accuracy against latency), each once, those a pass has not measured yet.

    The top and the front are those of all the candidates, figures as they stand: after a round
    they may hold a candidate that still has its in-search figure (the next round's choice)."""
    done = [c for c in candidates if c.completed]
    chosen = [r.candidate for r in rank(done, "reward", top_k)] if done else []
    for c in pareto_front(done):
        if not any(c is x for x in chosen):
            chosen.append(c)
    return [c for c in chosen if c.tags.get(FINAL_PASS_TAG) != "true"]


def measuring_estimator(cfg: SearchConfig, num_classes: int, space: SearchSpace) -> LatencyEstimator | None:
    """The backend the pass measures with (None: latencies are a predictor's alone, nothing to measure).

    Raises:
        LatencyError: the backend cannot run here, or (hybrid) this is not the predictor's device.
    """
    lat = cfg.latency
    if lat.backend == "predictor":
        if not lat.options.get("hybrid"):
            return None
        return predictor_measuring_backend(lat.input_shape, lat.options, num_classes, lat.measure, lat.precision,
                                           lat.target_stat)
    return latency_estimator(lat, num_classes, space, cfg.target_ms)


def apply(cand: Candidate, result: LatencyResult, objective: Objective) -> dict[str, float]:
    """Update ``cand`` with the re-measured ``result``; returns the metrics that changed or were added.

    The reward and "meets target" are scored as the trial scored them (:class:`Objective`: the
    statistic the target bounds, the serving scenario).

    Raises:
        MeasurementError: the statistic rests on fewer timed runs than it needs.
    """
    check_runs(result, objective.stat)
    new: dict[str, float] = {}
    for key, keep in IN_SEARCH.items():
        if key in cand.metrics:
            new[keep] = cand.metrics[key]
    p50 = result.latency_ms
    new.update(latency_ms=p50, latency_p50=p50, latency_p90=result.stats.p90, latency_p95=result.stats.p95,
               latency_p99=result.stats.p99, **objective.figures(result),
               reward=objective.score(cand.accuracy, result))
    fig = anchor_figures(result)
    if fig is not None:
        new.update(x_anchor=fig.x_anchor, anchor_latency_ms=fig.anchor_ms)
    if "preprocessing" in result.extra:
        new.update(latency_model_p50=result.extra["model_stats"]["p50"],
                   latency_preprocessing_p50=result.extra["preprocessing"]["p50"])
    new = {k: figure(float(v)) for k, v in new.items()}
    cand.metrics.update(new)
    cand.tags[FINAL_PASS_TAG] = "true"
    if cand.tags.get("latency_source") == "predicted":
        cand.tags["latency_source"] = "measured"
        cand.tags["latency_confirm_reason"] = "final_pass"
        new["latency_predicted_ms"] = new.get("latency_in_search_p50", math.nan)
    return new


def run_final_pass(
    candidates: Sequence[Candidate], cfg: SearchConfig, num_classes: int, space: SearchSpace,
    record: Callable[[Candidate, dict[str, float]], None], status: Callable[[str], None] = print,
    on_cluster: bool = False, preprocessing: LatencyStats | None = None,
    estimator: LatencyEstimator | None = None, max_rounds: int = MAX_ROUNDS,
) -> FinalPass:
    """Measure again :func:`select`'s candidates, update them in place and ``record`` each; repeat
    while the new figures bring unmeasured candidates into the top or onto the front.

    ``on_cluster``: the search joined a cluster (its trials measured on other nodes).
    ``preprocessing``: the input pipeline's cost the trials added (``latency.preprocessing``), added here too.
    ``estimator``: what measures (None: the backend the config names, :func:`measuring_estimator`).
    ``max_rounds``: the most rounds the pass makes.

    Raises:
        LatencyError: the backend cannot be built here (a candidate that then fails to measure
            keeps its in-search figures, with a warning, and the pass goes on).
    """
    out = FinalPass()
    top_k = cfg.latency.final_pass_top_k
    if top_k == 0:
        return out
    chosen = select(candidates, top_k)
    if not chosen:
        return out
    if on_cluster and cfg.latency.backend != "remote":
        out.skipped = ("not run: the trials measured on the cluster's nodes, and this driver's machine may be "
                       "another device (latency=remote measures on one device from anywhere)")
        return out
    est = estimator if estimator is not None else measuring_estimator(cfg, num_classes, space)
    if est is None:
        out.skipped = "not run: the latencies are a predictor's (latency.options.hybrid=true measures them)"
        return out
    objective = Objective.of_search(cfg)
    if cfg.anchor is not None:
        out.anchor, out.anchor_rounds = cfg.anchor, cfg.latency.anchor_rounds
    t0 = time.perf_counter()
    while chosen and out.rounds < max_rounds:
        out.rounds += 1
        if out.rounds == 1:
            status(f"final latency pass: measuring {len(chosen)} candidates again (top {top_k} by reward and the "
                   "Pareto front), no trial running")
        else:
            status(f"final latency pass, round {out.rounds}: {len(chosen)} candidate(s) now in the top {top_k} or "
                   f"on the Pareto front with in-search figures ({', '.join(c.arch_id for c in chosen)}); "
                   "measuring them too")
        for cand in chosen:
            _measure_one(cand, est, cfg, objective, preprocessing, record, out)
        chosen = [c for c in select(candidates, top_k) if not any(c is f for f in out.failed)]
    out.unsettled = chosen
    if chosen:
        log.warning("final latency pass: after %d rounds %s still carry in-search figures", out.rounds,
                    ", ".join(c.arch_id for c in chosen))
    out.seconds = time.perf_counter() - t0
    return out


def _measure_one(cand: Candidate, est: LatencyEstimator, cfg: SearchConfig, objective: Objective,
                 preprocessing: LatencyStats | None, record: Callable[[Candidate, dict[str, float]], None],
                 out: FinalPass) -> None:
    before = cand.latency_p50
    arch = Arch.decode(cand.arch)

    def measure(a: Arch) -> LatencyResult:
        return with_preprocessing(est.measure(a), cfg.latency, preprocessing)

    try:
        if cfg.anchor is None:
            result = measure(arch)
        else:
            anchor = anchor_network(cfg.anchor, max(cfg.latency.input_shape[2:]))
            result = measure_paired(measure, anchor, [arch], cfg.latency.anchor_rounds, objective.stat,
                                    cfg.anchor)[arch]
        changed = apply(cand, result, objective)
    except LatencyError as err:  # one candidate's failure must not cost the others their figures
        log.warning("final latency pass: %s could not be measured again (%s: %s); it keeps its in-search "
                    "figures", cand.arch_id, type(err).__name__, err)
        out.failed.append(cand)
        return
    record(cand, changed)
    out.measured.append(cand)
    out.ratios.append(before / result.latency_ms)
    fig = anchor_figures(result)
    if fig is not None:
        out.anchor_ms.append(fig.anchor_ms)
    log.info("final latency pass: round %d, %s p50 %.3f ms in the search, %.3f ms now", out.rounds, cand.arch_id,
             before, result.latency_ms)


__all__ = ["FINAL_PASS_TAG", "IN_SEARCH", "MAX_ROUNDS", "FinalPass", "apply", "run_final_pass", "select"]
