"""The final latency pass: which candidates it measures again and what a re-measurement changes.

The pass itself runs in every real search (tests/nas/test_search_e2e.py checks the record it
leaves in MLflow); here its choices and its arithmetic, on a real ONNX Runtime measurement, and its
rounds on a replayed host (an estimator whose figures are scripted)."""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from latency_predictor import LatencyResult, MeasurementError
from latency_predictor.measurement.backends import make_estimator
from latency_predictor.measurement.protocol import LatencyStats
from nas.core.config import LatencyConfig, SearchConfig
from nas.core.objective import Objective
from nas.core.record import COMPLETED, FAILED, Candidate, figure, pareto_front, rank
from nas.core.reward import squared_penalty
from nas.core.table import format_table
from nas.driver.final_pass import apply, measuring_estimator, run_final_pass, select
from search_spaces import Arch, load_space

QUICK = {"warmup_runs": 2, "warmup_s": 0.0, "min_runs": 10, "min_time_s": 0.0, "max_time_s": 0.5, "max_repeats": 1}


def _cand(i: int, accuracy: float, latency: float, status: str = COMPLETED, **tags: str) -> Candidate:
    reward = squared_penalty(accuracy, latency, 10.0) if status == COMPLETED else math.nan
    return Candidate(arch=f"a{i}", arch_id=f"id{i}", status=status, tags=dict(tags),
                     metrics={"accuracy": accuracy, "latency_ms": latency, "latency_p50": latency,
                              "latency_p90": latency * 1.1, "latency_p99": latency * 1.2, "reward": reward,
                              "meets_target": float(latency <= 10.0)})


def test_the_top_by_reward_and_the_pareto_front_are_chosen_once_each() -> None:
    cands = [
        _cand(0, 0.90, 9.0),   # best reward (and on the front)
        _cand(1, 0.85, 8.0),   # second (on the front)
        _cand(2, 0.50, 1.0),   # low reward, but the fastest: on the front
        _cand(3, 0.40, 5.0),   # slower and worse than #2: dominated
        _cand(4, 0.95, 30.0),  # the most accurate (on the front), its reward cut by the penalty
        _cand(5, 0.99, 2.0, status=FAILED),
        _cand(6, 0.30, 20.0),  # dominated
    ]
    ids = [c.arch_id for c in select(cands, top_k=2)]
    assert ids == ["id0", "id1", "id2", "id4"]  # the top 2 by reward, then the rest of the front, fastest first
    assert [c.arch_id for c in select(cands, top_k=5)] == ["id0", "id1", "id2", "id3", "id4"]  # #6: neither


def test_a_candidate_measured_by_an_earlier_pass_is_not_measured_again() -> None:
    cands = [_cand(0, 0.9, 9.0, latency_final_pass="true"), _cand(1, 0.8, 8.0)]
    assert [c.arch_id for c in select(cands, top_k=5)] == ["id1"]


def test_a_re_measurement_replaces_the_figures_and_keeps_the_search_ones() -> None:
    est = make_estimator("onnxruntime", input_shape=(1, 3, 32, 32), num_classes=10, slot=False, measure=QUICK)
    result = est.measure(load_space("tiny").sample(np.random.default_rng(0)))
    # the search saw it at 3x its real latency, over a target the real figure meets
    target = result.latency_ms * 2
    cand = _cand(0, 0.8, result.latency_ms * 3)
    cand.metrics["reward"] = squared_penalty(0.8, result.latency_ms * 3, target)
    before = dict(cand.metrics)
    changed = apply(cand, result, Objective(target))
    # the re-measured figures, recorded as a search records figures (5 significant digits)
    assert cand.latency_p50 == figure(result.latency_ms) == changed["latency_p50"] == cand.metrics["latency_ms"]
    assert cand.metrics["latency_p99"] == figure(result.stats.p99)
    assert cand.meets_target is True and cand.reward == pytest.approx(0.8)  # target met now: reward = accuracy
    assert changed["latency_in_search_p50"] == figure(before["latency_p50"])
    assert changed["reward_in_search"] == figure(before["reward"]) < cand.reward
    assert cand.tags["latency_final_pass"] == "true"
    table = format_table(rank([cand]))
    assert "in_search_p50" in table and "(final pass)" in table


def test_a_predicted_latency_confirmed_by_the_pass_says_so() -> None:
    cand = _cand(0, 0.8, 5.0, latency_source="predicted")
    est = make_estimator("onnxruntime", input_shape=(1, 3, 32, 32), num_classes=10, slot=False, measure=QUICK)
    result = est.measure(load_space("tiny").sample(np.random.default_rng(1)))
    changed = apply(cand, result, Objective(10.0))
    assert cand.latency_source == "measured" and cand.tags["latency_confirm_reason"] == "final_pass"
    assert changed["latency_predicted_ms"] == 5.0


def test_a_predictor_alone_has_nothing_to_measure() -> None:
    cfg = SearchConfig(latency=LatencyConfig(backend="predictor", options={"path": "/nonexistent"}))
    assert measuring_estimator(cfg, 10, load_space("tiny")) is None


def test_a_p99_target_is_judged_on_the_re_measured_p99() -> None:
    est = make_estimator("onnxruntime", input_shape=(1, 3, 16, 16), num_classes=10, slot=False,
                         measure={**QUICK, "min_runs": 1000, "max_time_s": None})
    result = est.measure(load_space("tiny").sample(np.random.default_rng(2)))
    cand = _cand(0, 0.8, 5.0, latency_target_stat="p99")
    target = result.stats.p50 * 1.001  # met by the median, not by the tail
    apply(cand, result, Objective(target, stat="p99"))
    assert cand.latency_objective == figure(result.stats.p99)
    assert cand.metrics["latency_p95"] == figure(result.stats.p95)
    assert cand.reward == figure(squared_penalty(0.8, result.stats.p99, target))
    assert cand.meets_target == (result.stats.p99 <= target)  # judged on the p99
    few = make_estimator("onnxruntime", input_shape=(1, 3, 16, 16), num_classes=10, slot=False, measure=QUICK)
    with pytest.raises(MeasurementError, match="needs at least 1000"):
        apply(_cand(1, 0.8, 5.0, latency_target_stat="p99"), few.measure(load_space("tiny").sample(
            np.random.default_rng(2))), Objective(target, stat="p99"))


def test_the_best_line_shows_the_statistic_the_target_bounds() -> None:
    from nas.core.table import format_best

    p50 = format_best([_cand(0, 0.9, 5.0)], 10.0)
    assert "latency p50 5.00 ms (meets the 10 ms target)" in p50
    p99 = format_best([_cand(0, 0.9, 5.0, latency_target_stat="p99")], 10.0)
    assert "latency p99 6.00 ms (meets the 10 ms p99 target; p50 5.00 ms)" in p99


def test_a_revised_candidate_is_renamed_after_its_new_verdict(tmp_path: Path) -> None:
    from mlflow import MlflowClient

    from nas.adapters.mlflow_writer import StoreWriter

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    writer = StoreWriter(uri, "latnas")
    parent = writer.start_search("s", {}, {})
    cand = _cand(0, 0.9, 5.0)  # meets the 10 ms target in the search
    cand.run_id = writer.log_candidate(parent, cand, "s")
    assert MlflowClient(uri).get_run(cand.run_id).info.run_name.endswith("5.00 ms ✓")
    cand.metrics.update(latency_p50=12.0, meets_target=0.0)  # the final pass measured it slower
    writer.log_revised(cand, {"latency_p50": 12.0, "meets_target": 0.0}, {})
    assert MlflowClient(uri).get_run(cand.run_id).info.run_name.endswith("12.00 ms ✗")


def test_in_search_figures_are_marked_alike_in_the_table_csv_and_json() -> None:
    from nas.core.record import SearchRecord
    from nas.core.table import format_best
    from nas.review.leaderboard import to_csv, to_json

    est = make_estimator("onnxruntime", input_shape=(1, 3, 32, 32), num_classes=10, slot=False, measure=QUICK)
    final = _cand(0, 0.9, 3.0, latency_source="measured")
    apply(final, est.measure(load_space("tiny").sample(np.random.default_rng(0))), Objective(1.0, stat="p50"))
    busy = _cand(1, 0.8, 0.95, latency_source="measured")  # not measured again: a busy machine's tail
    busy.metrics["latency_p99"] = 8.59
    confirmed = _cand(2, 0.7, 0.9, latency_source="measured", latency_confirm_reason="near_target")
    predicted = _cand(3, 0.6, 0.8, latency_source="predicted")
    rows = rank([final, busy, confirmed, predicted])
    said = {"id0": "measured (final pass)", "id1": "measured (in search)",
            "id2": "measured (in search, near target)", "id3": "predicted"}

    table = format_table(rows).splitlines()
    for arch_id, words in said.items():
        assert words in next(line for line in table if arch_id in line)
    assert "8.59" in next(line for line in table if "id1" in line)
    as_csv = {r["arch_id"]: r["latency_source"] for r in csv.DictReader(io.StringIO(to_csv(rows)))}
    as_json = {e["arch_id"]: e["latency_source"]
               for e in json.loads(to_json(rows, SearchRecord("r", "s", "0")))["entries"]}
    assert as_csv == as_json == said
    # The best line says so too when its figure is the trial's own.
    assert "latency p50 0.95 ms in search (meets the 1 ms target)" in format_best([busy], 1.0)
    assert "in search" not in format_best([final], 1.0)


class ReplayedHost:
    """A latency estimator that replays a table of figures: per architecture, the p50s (ms) its
    successive measurements give, as a host whose figures are known in advance would."""

    name = "replay"
    input_shape = (1, 3, 32, 32)

    def __init__(self, figures: dict[str, list[float]]) -> None:
        self._figures = {arch: list(p50s) for arch, p50s in figures.items()}
        self.measured: list[str] = []

    def measure(self, arch: Arch) -> LatencyResult:
        p50 = self._figures[arch.encode()].pop(0)
        self.measured.append(arch.arch_id)
        stats = LatencyStats.from_samples([p50] * 50)
        return LatencyResult(arch.encode(), self.name, "measured", "cpu", "fp32", self.input_shape, stats)

    def environment(self) -> dict[str, str]:
        return {"device_name": "replayed host"}

    def final_latency(self, arch: Arch, result: LatencyResult, objective: float,
                      front: Sequence[Sequence[float]]) -> LatencyResult:
        return result


def _searched(archs: list[Arch], figures: list[tuple[float, float]]) -> list[Candidate]:
    """Completed candidates of ``archs`` with (accuracy, in-search p50) ``figures`` (every one meets 10 ms)."""
    return [Candidate(arch=a.encode(), arch_id=a.arch_id, status=COMPLETED,
                      metrics={"accuracy": acc, "latency_ms": p50, "latency_p50": p50, "latency_p90": p50,
                               "latency_p99": p50, "reward": acc, "meets_target": 1.0})
            for a, (acc, p50) in zip(archs, figures, strict=True)]


def _archs(n: int) -> list[Arch]:
    space, rng, out = load_space("tiny"), np.random.default_rng(0), []
    while len(out) < n:
        a = space.sample(rng)
        if a not in out:
            out.append(a)
    return out


def test_a_candidate_the_re_measurement_brings_onto_the_front_is_measured_in_a_second_round() -> None:
    fast, slow, far = _archs(3)
    # In the search: `fast` is the best and the fastest, `slow` is dominated by it, `far` by both.
    cands = _searched([fast, slow, far], [(0.90, 0.075), (0.85, 0.080), (0.50, 2.0)])
    # On the quiet host `fast` is slower than `slow`'s in-search figure: `slow` joins the front.
    host = ReplayedHost({fast.encode(): [0.097], slow.encode(): [0.090]})
    cfg = SearchConfig(target_ms=10.0, latency=LatencyConfig(final_pass_top_k=1))
    recorded: list[str] = []
    said: list[str] = []
    done = run_final_pass(cands, cfg, 10, load_space("tiny"), lambda c, _: recorded.append(c.arch_id), said.append,
                          estimator=host)

    assert host.measured == recorded == [fast.arch_id, slow.arch_id]  # one after the other, each once
    assert done.rounds == 2 and not done.unsettled
    assert "round 2: 1 candidate(s) now in the top 1 or on the Pareto front" in said[1] and slow.arch_id in said[1]
    front = pareto_front(cands)
    assert [c.arch_id for c in front] == [slow.arch_id, fast.arch_id]
    assert all(c.tags.get("latency_final_pass") == "true" for c in front)
    assert [c.latency_p50 for c in front] == [0.090, 0.097]
    assert far.arch_id not in recorded and "latency_final_pass" not in cands[2].tags  # never on the front
    line = done.summary_line()
    assert line is not None and "2 candidates" in line and "in 2 rounds" in line


def test_the_pass_stops_after_its_last_round_and_says_what_is_left() -> None:
    archs = _archs(3)
    # Each re-measurement makes the front's fastest slower than the next, which then joins the front.
    cands = _searched(archs, [(0.90, 0.10), (0.85, 0.11), (0.80, 0.12)])
    host = ReplayedHost({archs[0].encode(): [0.20], archs[1].encode(): [0.15], archs[2].encode(): [0.13]})
    cfg = SearchConfig(target_ms=10.0, latency=LatencyConfig(final_pass_top_k=1))
    done = run_final_pass(cands, cfg, 10, load_space("tiny"), lambda c, _: None, lambda _: None,
                          estimator=host, max_rounds=2)
    assert done.rounds == 2 and host.measured == [archs[0].arch_id, archs[1].arch_id]
    assert done.unsettled == [cands[2]]
    line = done.summary_line()
    assert line is not None and f"After 2 rounds (the most the pass makes) 1 candidate(s) of the top or the front " \
        f"still carry in-search figures: {archs[2].arch_id}." in line
    assert "in 1 round" in str(run_final_pass(cands, cfg, 10, load_space("tiny"), lambda c, _: None,
                                              lambda _: None, estimator=host).summary_line())
