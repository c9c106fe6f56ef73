"""An anchor network measured beside the candidates, and a latency target relative to it.

The reward's arithmetic with a relative target; one trial without Ray (real ONNX Runtime); the final
latency pass on a replayed host whose speed halves for a few measurements; the table and the
leaderboard's rows; and a real search with ``target_anchor`` (the search the review tests share)."""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import math
from typing import Any

import numpy as np
import pytest
from mlflow import MlflowClient

from latency_predictor import LatencyResult, LatencyStats
from latency_predictor.measurement.paired import anchor_figures, pair
from nas.core.config import AccuracyConfig, DataConfig, LatencyConfig, SearchConfig, TrainConfig
from nas.core.errors import RewardError
from nas.core.objective import Objective
from nas.core.record import COMPLETED, Candidate, leaderboard_row, rank
from nas.core.reward import squared_penalty
from nas.core.table import budget_used, format_best, format_table
from nas.data import Dataset, load_dataset
from nas.driver.final_pass import run_final_pass
from nas.trial.evaluate import TrialContext, evaluate_candidate
from search_spaces import Arch, anchor_network, load_space
from tests.latency_predictor.hosts import DriftingHost
from tests.nas.review_search import SmallSearch, small_search_once

SPEC = "mobilenetv2_100@0.35"
ANCHOR = anchor_network(SPEC, 32)
FAST_MEASURE = {"warmup_runs": 2, "warmup_s": 0.0, "min_runs": 10, "min_time_s": 0.0, "max_time_s": 1.0,
                "max_repeats": 1}


def _result(arch: str, p50: float, runs: int = 50) -> LatencyResult:
    samples = [p50 * (1 + 0.001 * (i - (runs - 1) / 2)) for i in range(runs)]
    return LatencyResult(arch, "replay", "measured", "cpu", "fp32", (1, 3, 32, 32), LatencyStats.from_samples(samples))


# ---------------------------------------------------------------------- the reward with a relative target


def test_a_relative_target_scores_x_anchor_against_target_x_in_the_same_formula() -> None:
    objective = Objective.of(LatencyConfig(), math.nan, "squared", target_x=1.2, anchor=SPEC)
    slower = pair([_result("a", 3.0)], [_result(ANCHOR.encode(), 2.0)])  # x_anchor 1.5: misses x1.2
    assert objective.score(0.8, slower) == pytest.approx(squared_penalty(0.8, 1.5, 1.2))
    assert objective.figures(slower) == {"meets_target": 0.0}
    faster = pair([_result("a", 30.0)], [_result(ANCHOR.encode(), 50.0)])  # x0.6: meets, whatever the ms
    assert objective.score(0.8, faster) == pytest.approx(0.8) and objective.figures(faster) == {"meets_target": 1.0}
    assert objective.relative and objective.target == 1.2 and objective.describe() == f"x1.2 {SPEC}"
    with pytest.raises(RewardError, match=f"relative to {SPEC}.*not paired with it"):
        objective.score(0.8, _result("a", 3.0))
    absolute = Objective.of(LatencyConfig(), 2.0, "squared")
    assert absolute.score(0.8, slower) == pytest.approx(squared_penalty(0.8, 3.0, 2.0))  # ms, as before
    cfg = SearchConfig(target_anchor=SPEC, target_x=0.9)
    assert Objective.of_search(cfg).target == 0.9 and Objective.of_search(SearchConfig(target_ms=5.0)).target == 5.0


def test_the_review_commands_check_their_anchor_before_any_work() -> None:
    from nas.core.config import ExportConfig, ExportLatencyConfig, OptimizeConfig, validate_export, validate_optimize
    from nas.core.errors import ConfigError

    with pytest.raises(ConfigError, match=r"^latency.anchor: unknown reference network 'mobilenet'"):
        validate_export(ExportConfig(latency=ExportLatencyConfig(anchor="mobilenet@0.35")))
    validate_export(ExportConfig(latency=ExportLatencyConfig(anchor=SPEC)))
    with pytest.raises(ConfigError, match=r"^latency.anchor: nas.optimize times its variants against each other"):
        validate_optimize(OptimizeConfig(candidate="x", latency=ExportLatencyConfig(anchor=SPEC)))


# ---------------------------------------------------------------------- one trial


@pytest.fixture(scope="module")
def data() -> Dataset:
    return load_dataset(DataConfig(resolution=16, max_train_samples=128, max_val_samples=64))


def test_a_trial_measures_the_anchor_right_after_its_candidate_and_scores_the_ratio(data: Dataset) -> None:
    ctx = TrialContext(
        space=load_space("tiny"), data=data, train=TrainConfig(epochs=1), accuracy=AccuracyConfig(estimator="naswot",
                                                                                                  batch_size=16),
        latency=LatencyConfig(input_shape=[1, 3, 32, 32], options={"intra_op_threads": 1, "slot": False},
                              measure=FAST_MEASURE),
        target_ms=math.nan, reward="squared", threads=1, anchor=SPEC, target_x=0.3,
    )
    reports: list[dict[str, Any]] = []
    evaluate_candidate(load_space("tiny").sample(np.random.default_rng(0)).encode(), ctx, reports.append)
    last = reports[-1]
    assert last["status"] == COMPLETED
    fig = anchor_figures(LatencyResult.from_dict(json.loads(last["latency_json"])))
    assert fig is not None and fig.rounds == 1 and fig.anchor == SPEC
    assert last["x_anchor"] == fig.x_anchor == pytest.approx(last["latency_ms"] / last["anchor_latency_ms"])
    assert last["reward"] == pytest.approx(squared_penalty(last["accuracy"], last["x_anchor"], 0.3))
    assert last["meets_target"] == float(last["x_anchor"] <= 0.3)
    assert last["target_anchor"] == last["latency_anchor"] == SPEC
    # with latency.anchor alone the target stays in ms, and the ratio is recorded beside it
    reports.clear()
    evaluate_candidate(load_space("tiny").sample(np.random.default_rng(0)).encode(),
                       dataclasses.replace(ctx, target_ms=0.5, target_x=None), reports.append)
    last = reports[-1]
    assert last["x_anchor"] > 0 and "target_anchor" not in last
    assert last["reward"] == pytest.approx(squared_penalty(last["accuracy"], last["latency_ms"], 0.5))


# ---------------------------------------------------------------------- the final pass on a drifting host


def _archs(n: int) -> list[Arch]:
    space, rng, out = load_space("tiny"), np.random.default_rng(1), []
    while len(out) < n:
        a = space.sample(rng)
        if a not in out:
            out.append(a)
    return out


def test_the_final_pass_keeps_the_paired_verdict_while_the_host_halves_its_speed() -> None:
    fast, slow = _archs(2)
    cost = {ANCHOR: 1.0, fast: 0.9, slow: 1.1}  # on a quiet host: fast meets x1 of the anchor, slow misses it
    cands = [Candidate(arch=a.encode(), arch_id=a.arch_id, status=COMPLETED, tags={"target_anchor": SPEC},
                       metrics={"accuracy": acc, "latency_p50": 0.5, "x_anchor": 0.5, "reward": acc,
                                "meets_target": 1.0})
             for a, acc in ((fast, 0.9), (slow, 0.8))]
    # Half speed from the 2nd to the 5th measurement: fast, ANCHOR, fast, ANCHOR, fast, ANCHOR, slow, ...
    host = DriftingHost(cost.__getitem__, slow=range(1, 5))
    cfg = SearchConfig(target_anchor=SPEC, latency=LatencyConfig(input_shape=[1, 3, 32, 32], final_pass_top_k=2))
    done = run_final_pass(cands, cfg, 10, load_space("tiny"), lambda c, _: None, lambda _: None, estimator=host)
    assert host.calls == [fast, ANCHOR] * 3 + [slow, ANCHOR] * 3  # each candidate's rounds, the anchor after it
    by_id = {c.arch_id: c for c in cands}
    f, s = by_id[fast.arch_id], by_id[slow.arch_id]
    # fast's own figures flipped from 0.9 ms to 1.8 ms, past the anchor's quiet 1 ms ...
    assert host.figures[0:6:2] == pytest.approx([0.9, 1.8, 1.8])
    # ... but against the anchor measured beside it, it is 0.9x in the median round: it meets the target
    assert f.x_anchor == pytest.approx(0.9) and f.meets_target is True and f.reward == pytest.approx(0.9)
    assert f.latency_p50 == pytest.approx(1.8)  # the figures of its median round
    assert f.metric("anchor_latency_ms") == pytest.approx(2.0)  # the median of the anchor's 2, 2 and 1 ms
    assert s.x_anchor == pytest.approx(1.1) and s.meets_target is False
    assert s.reward == pytest.approx(squared_penalty(0.8, 1.1, 1.0), rel=1e-4)
    assert f.metric("x_anchor_in_search") == 0.5  # the trial's pairing, kept beside
    line = done.summary_line()
    assert line is not None and f"with the anchor {SPEC} in 3 alternating round(s)" in line


# ---------------------------------------------------------------------- the table and the leaderboard


def test_the_table_and_the_leaderboard_show_x_anchor_with_the_anchors_ms() -> None:
    from nas.review.leaderboard import to_csv

    anchored = Candidate(arch="a", arch_id="id0", status=COMPLETED, tags={"target_anchor": SPEC},
                         metrics={"accuracy": 0.9, "latency_p50": 0.42, "x_anchor": 0.84, "anchor_latency_ms": 0.5,
                                  "reward": 0.9, "meets_target": 1.0})
    table = format_table(rank([anchored])).splitlines()
    assert table[0].split()[4:7] == ["p99_ms", "latency", "x_anchor"] and "anchor_ms" in table[0]
    assert "0.840" in table[2] and "0.50" in table[2]
    row = leaderboard_row(rank([anchored])[0])
    assert row["x_anchor"] == 0.84 and row["anchor_latency_ms"] == 0.5
    assert next(csv.DictReader(io.StringIO(to_csv(rank([anchored])))))["x_anchor"] == "0.84"
    assert format_best([anchored], 1.0).startswith(
        f"Best: id0  reward 0.9000  accuracy 0.9000  x_anchor 0.840 (latency p50 0.42 ms, the anchor 0.50 ms) "
        f"(meets the x1 {SPEC} target)")
    assert budget_used([anchored], 1.0) == f"Latency budget used by the top 1: 84% of the x1 {SPEC} target."
    plain = dataclasses.replace(anchored, tags={}, metrics={k: v for k, v in anchored.metrics.items()
                                                            if k not in ("x_anchor", "anchor_latency_ms")})
    assert "x_anchor" not in format_table(rank([plain]))  # no anchor: no column


# ---------------------------------------------------------------------- a real search


@pytest.fixture(scope="module")
def small_search(ray_cluster: None, tmp_path_factory: pytest.TempPathFactory) -> SmallSearch:
    return small_search_once(tmp_path_factory)


def test_a_search_with_target_anchor_records_x_anchor_and_scores_it(small_search: SmallSearch) -> None:
    client = MlflowClient(small_search.uri)
    parent = client.get_run(small_search.parent_run_id)
    assert parent.data.params["target_anchor"] == SPEC and parent.data.params["target_x"] == "0.1"
    assert parent.data.params["target_ms"] == "None" and parent.data.tags["target"] == f"x0.1 {SPEC}"
    assert parent.data.metrics["anchor_latency_start_ms"] > 0
    # the candidates (an export of the shared search, when one ran first, is a child run too)
    children = client.search_runs([parent.info.experiment_id], f"tags.`mlflow.parentRunId` = '{parent.info.run_id}' "
                                  "and tags.`latnas.role` = 'candidate'")
    assert len(children) == 3
    for child in children:
        m = child.data.metrics
        assert child.data.tags["target_anchor"] == SPEC and child.data.tags["latency_final_pass"] == "true"
        assert m["anchor_latency_ms"] > 0 and m["x_anchor_in_search"] > 0  # the trial's pairing, then the pass's
        assert m["reward"] == pytest.approx(squared_penalty(m["accuracy"], m["x_anchor"], 0.1), rel=1e-3)
        assert m["meets_target"] == float(m["x_anchor"] <= 0.1)
        assert f" ms x{m['x_anchor']:.2f} " in child.info.run_name
    out = small_search.printed
    assert "x_anchor" in out and "anchor_ms" in out  # the final table
    assert f"the x0.1 {SPEC} target" in out  # the best line
    assert f"Target: x0.1 the anchor {SPEC} (p50)" in out
    assert f"back to back with the anchor {SPEC} in 2 alternating round(s)" in out
    with (small_search.folder / "out" / "leaderboard.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert all(float(r["x_anchor"]) > 0 and float(r["anchor_latency_ms"]) > 0 for r in rows)


def test_the_leaderboard_shows_x_anchor_with_the_anchors_ms(small_search: SmallSearch) -> None:
    from nas.core.config import LeaderboardConfig, TrackingConfig
    from nas.review.leaderboard import run_leaderboard

    result = run_leaderboard(LeaderboardConfig(tracking=TrackingConfig(uri=small_search.uri), plot=False))
    header = result.text.splitlines()[0].split()
    assert "x_anchor" in header and "anchor_ms" in header
    assert result.search.anchor == SPEC and result.search.target_x == 0.1 and result.search.target_ms is None
    assert all(math.isfinite(r.candidate.x_anchor) for r in result.rows)
