"""Multi-fidelity search: rungs checked before any trial, trained rung after rung from the weights of
the rung below, continued from a saved rung, promoted by ASHA, ranked by the highest rung reached."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from mlflow import MlflowClient

from nas.core.config import AccuracyConfig, DataConfig, LatencyConfig, RungConfig, TrainConfig, validate
from nas.core.errors import ConfigError
from nas.core.record import COMPLETED, RUNNING, Candidate, best_of, pareto_front, rank
from nas.core.table import budget_used, format_best
from nas.data import Dataset, load_dataset
from nas.driver import run_search
from nas.trial.evaluate import TrialContext, evaluate_candidate
from nas.trial.rungs import RUNG_STEP, RungCheckpoints
from search_spaces import load_space
from tests.nas.configs import compose_config

FAST_MEASURE = {"warmup_runs": 2, "warmup_s": 0.0, "min_runs": 10, "min_time_s": 0.0, "max_time_s": 1.0,
                "max_repeats": 1}
RUNGS = "search.rungs=[{train_images:64,epochs:1},{train_images:128,epochs:1},{train_images:256,epochs:2}]"


# ---------------------------------------------------------------- bad input, before any trial


@pytest.mark.parametrize(
    ("overrides", "key", "says"),
    [
        (("search.rungs=[{train_images:64,epochs:1}]",), "search.rungs", "at least two"),
        (("search.scheduler=fifo",), "search.rungs", "search.scheduler=asha"),
        (("accuracy=naswot",), "search.scheduler", "accuracy=train"),
        (("search.rungs=[{train_images:64,epochs:2},{train_images:128,epochs:1}]",), "search.rungs[1]",
         "does not increase"),
        (("search.rungs=[{train_images:128,epochs:1},{train_images:64,epochs:4}]",), "search.rungs[1]",
         "does not increase"),
        (("search.rungs=[{train_images:0,epochs:1},{train_images:64,epochs:4}]",), "search.rungs[0]", ">= 1"),
        (("search.sampler=nsga2",), "search.scheduler", "multi-objective"),
    ],
)
def test_rungs_that_cannot_promote_are_refused(overrides: tuple[str, ...], key: str, says: str) -> None:
    cfg = compose_config("+space=tiny", "target_ms=5", "search.scheduler=asha", RUNGS, *overrides)
    with pytest.raises(ConfigError) as err:
        validate(cfg)
    assert err.value.key == key and says in str(err.value)


def test_a_top_rung_larger_than_the_data_is_refused_before_anything_is_created(tmp_path: Path) -> None:
    cfg = compose_config(
        "+space=tiny", "target_ms=5", "progress=false", "search.scheduler=asha",
        "search.rungs=[{train_images:64,epochs:1},{train_images:100000,epochs:1}]",
        f"tracking.uri=sqlite:///{tmp_path / 'mlflow.db'}", f"output_dir={tmp_path / 'out'}",
    )
    with pytest.raises(ConfigError, match=r"asks for 100000 training images but the data has \d+") as err:
        run_search(cfg)
    assert err.value.key == "search.rungs[1]"
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no store, no output folder


def test_the_command_line_refuses_rungs_that_do_not_increase_in_one_line(tmp_path: Path) -> None:
    env = {**os.environ, "LATNAS_HOME": str(tmp_path / "home")}
    proc = subprocess.run(
        [sys.executable, "-m", "nas.search", "+space=tiny", "target_ms=5", "search.scheduler=asha",
         "search.rungs=[{train_images:500,epochs:2},{train_images:500,epochs:1}]"],
        capture_output=True, text=True, env=env, timeout=300, cwd=tmp_path,
    )
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "search.rungs[1]" in lines[0] and "does not increase" in lines[0], proc.stderr
    assert not (tmp_path / "home").exists()


# ---------------------------------------------------------------- one trial, rung after rung


@pytest.fixture(scope="module")
def data() -> Dataset:
    return load_dataset(DataConfig(resolution=16, max_train_samples=256, max_val_samples=128))


def _ctx(data: Dataset, rungs: list[tuple[int, int]], checkpoints: Path | None = None) -> TrialContext:
    return TrialContext(
        space=load_space("tiny"), data=data, train=TrainConfig(epochs=1, batch_size=32, device="cpu"),
        accuracy=AccuracyConfig(), target_ms=50.0, reward="squared", threads=1,
        latency=LatencyConfig(input_shape=[1, 3, 16, 16], options={"intra_op_threads": 1}, measure=FAST_MEASURE),
        rungs=tuple(RungConfig(i, e) for i, e in rungs), reduction_factor=3,
        checkpoints=RungCheckpoints(checkpoints) if checkpoints is not None else None,
    )


def _arch(seed: int = 1) -> str:
    return load_space("tiny").sample(np.random.default_rng(seed)).encode()


def test_a_trial_trains_rung_after_rung_and_reports_each_rungs_end(data: Dataset) -> None:
    reports: list[dict[str, Any]] = []
    evaluate_candidate(_arch(), _ctx(data, [(64, 1), (128, 2)]), reports.append)
    # rung 0: one epoch (its end); rung 1: two epochs, the second its end
    assert [r["status"] for r in reports] == [COMPLETED, RUNNING, COMPLETED]
    assert [r["epoch"] for r in reports] == [1, 2, 3]
    assert [r["rung"] for r in reports] == [0, 1, 1]
    # ASHA's time attribute reaches eta**k exactly at the end of rung k, not before
    assert [r[RUNG_STEP] for r in reports] == [1, 1, 3]
    last = reports[-1]
    assert (last["rung_train_images"], last["rung_epochs"], last["epochs"]) == (128, 2, 3)
    assert last["accuracy_rung0"] == reports[0]["accuracy"] and last["reward_rung0"] == reports[0]["reward"]
    assert last["accuracy_rung1"] == last["accuracy"] and last["reward_rung1"] == last["reward"]


class _Died(Exception):
    """Stands for the trial's process dying after a report."""


def test_a_restarted_trial_continues_from_its_saved_rung_to_the_same_figures(data: Dataset, tmp_path: Path) -> None:
    rungs = [(64, 1), (128, 1), (256, 2)]
    whole: list[dict[str, Any]] = []
    evaluate_candidate(_arch(), _ctx(data, rungs), whole.append)

    first: list[dict[str, Any]] = []

    def dies_after_rung_1(r: dict[str, Any]) -> None:
        first.append(r)
        if r["status"] == COMPLETED and r["rung"] == 1:
            raise _Died

    ctx = _ctx(data, rungs, tmp_path / "checkpoints")
    with pytest.raises(_Died):
        evaluate_candidate(_arch(), ctx, dies_after_rung_1)
    again: list[dict[str, Any]] = []
    evaluate_candidate(_arch(), ctx, again.append)
    # the last saved rung's end is reported again as it was (with the earlier rung's figures), so the
    # scheduler judges the candidate at the rung it reached, not below; then only the last rung is trained
    assert [(r["rung"], r["status"], r["accuracy"]) for r in again[:1]] == [
        (r["rung"], r["status"], r["accuracy"]) for r in first[-1:]]
    assert again[0]["accuracy_rung0"] == first[0]["accuracy"] and again[0][RUNG_STEP] == first[-1][RUNG_STEP]
    assert all(r["resumed_rungs"] == 2 for r in again)
    assert [(r["rung"], r["epoch"]) for r in again[1:]] == [(2, 3), (2, 4)]
    # weights carried over from the saved rung: the figures of an uninterrupted trial, exactly
    assert again[-1]["accuracy"] == whole[-1]["accuracy"] and again[-1]["val_loss"] == whole[-1]["val_loss"]
    # without its saved rung, a candidate trains from its first rung
    fresh: list[dict[str, Any]] = []
    evaluate_candidate(_arch(2), ctx, fresh.append)
    assert fresh[0]["rung"] == 0 and "resumed_rungs" not in fresh[0]


# ---------------------------------------------------------------- promotion and ranking


def test_the_rung_scheduler_promotes_the_best_of_each_rung_and_starts_from_earlier_records() -> None:
    from ray.tune.schedulers import TrialScheduler

    from nas.adapters.ray_tune import RungScheduler

    for eta in (2, 3, 4):
        for n in range(2, 8):  # ASHA's own float arithmetic once lost the last of 6 rungs at eta=3
            assert sorted(RungScheduler(n, eta).cutoffs()) == list(range(n))
    sched = RungScheduler(3, 2)
    bracket = sched._brackets[0]
    a, b, c = (SimpleNamespace(trial_id=t) for t in "abc")
    assert bracket.on_result(a, 1, 0.5) == TrialScheduler.CONTINUE  # nothing to compare with yet
    assert bracket.on_result(b, 1, 0.3) == TrialScheduler.STOP  # below the best half of rung 0
    assert bracket.on_result(c, 1, 0.7) == TrialScheduler.CONTINUE
    assert bracket.on_result(a, 1, 0.5) == TrialScheduler.CONTINUE  # an epoch inside rung 1: no decision
    assert sched.cutoffs()[0] == pytest.approx(0.5)
    # a resumed search: the rewards recorded before set the cut-offs from the start
    resumed = RungScheduler(3, 2, earlier=[{0: 0.9, 1: 0.95}, {0: 0.8}])
    assert resumed._brackets[0].on_result(a, 1, 0.5) == TrialScheduler.STOP
    assert resumed.cutoffs()[1] == pytest.approx(0.95)


def test_asha_never_stops_a_start_architecture_and_counts_its_reward_at_each_rung() -> None:
    from ray.tune.schedulers import TrialScheduler

    from nas.adapters.ray_tune import RungScheduler

    sched = RungScheduler(3, 2, start=["known"])
    sched.set_search_properties("reward", "max")
    trials = {t: SimpleNamespace(trial_id=t, config={"arch": arch}, status="RUNNING")
              for t, arch in (("a", "a1"), ("b", "known"), ("c", "c1"))}
    for t in trials.values():
        sched.on_trial_add(None, t)

    def end_of_rung0(t: str, reward: float) -> str:
        return str(sched.on_trial_result(None, trials[t], {RUNG_STEP: 1, "reward": reward}))

    assert end_of_rung0("a", 0.9) == TrialScheduler.CONTINUE
    assert end_of_rung0("b", 0.1) == TrialScheduler.CONTINUE  # far below the cut-off: a start goes on all the same
    assert end_of_rung0("c", 0.2) == TrialScheduler.STOP  # the same reward from a proposal is stopped
    # the median of 0.9, 0.1 and 0.2: the start's 0.1 was recorded (without it the cut-off would be 0.55)
    assert sched.cutoffs()[0] == pytest.approx(0.2)


def _cand(arch_id: str, rung: int | None, reward: float, latency: float = 1.0) -> Candidate:
    metrics = {"reward": reward, "accuracy": reward, "latency_p50": latency, "latency_p99": latency}
    if rung is not None:
        metrics.update(rung=float(rung), rung_train_images=100.0 * (rung + 1), rung_epochs=2.0)
    return Candidate(arch=arch_id, arch_id=arch_id, status=COMPLETED, metrics=metrics)


def test_the_highest_rung_ranks_first_and_alone_makes_the_front() -> None:
    # rung-0 figures can beat rung-2 ones by luck of a short budget; they never outrank them
    cands = [_cand("low", 0, 0.9, latency=0.1), _cand("mid", 1, 0.6), _cand("top-a", 2, 0.5, latency=2.0),
             _cand("top-b", 2, 0.7, latency=3.0)]
    assert [r.candidate.arch_id for r in rank(cands)] == ["top-b", "top-a", "mid", "low"]
    assert [r.candidate.arch_id for r in rank(cands, sort="latency_p50")] == ["top-a", "top-b", "mid", "low"]
    best = best_of(cands)
    assert best is not None and best.arch_id == "top-b" and best.rung_label == "2 (300x2)"
    assert [c.arch_id for c in pareto_front(cands)] == ["top-a", "top-b"]
    assert "at rung 2 (300x2)" in format_best(cands, 4.0)
    assert budget_used(cands, 4.0) == "Latency budget used by the top 3: 75%, 50%, 25% of the 4 ms p50 target."
    # without rungs nothing changes: the reward alone ranks
    plain = [_cand("x", None, 0.5), _cand("y", None, 0.6)]
    assert [r.candidate.arch_id for r in rank(plain)] == ["y", "x"] and plain[0].rung_label == ""


# ---------------------------------------------------------------- a whole search, with Ray


@pytest.mark.slow
@pytest.mark.ci
@pytest.mark.usefixtures("ray_cluster")
def test_a_multi_fidelity_search_promotes_records_rungs_and_resumes(tmp_path: Path) -> None:
    overrides = ("+space=tiny", "target_ms=50", "progress=false", "data.resolution=16", "data.max_val_samples=128",
                 "latency.input_shape=[1,3,16,16]", "latency.measure.min_runs=10", "latency.measure.min_time_s=0.05",
                 "latency.measure.max_time_s=0.3", "latency.measure.max_repeats=1", "train.batch_size=32",
                 "search.scheduler=asha", "search.reduction_factor=2", "search.max_concurrent=1",
                 "search.sampler=random", RUNGS, "name=rungs", f"tracking.uri=sqlite:///{tmp_path / 'mlflow.db'}",
                 f"output_dir={tmp_path / 'out'}")
    result = run_search(compose_config(*overrides, "search.n_trials=5"))
    assert result.status == "FINISHED" and len(result.candidates) == 5
    rungs = sorted(c.rung for c in result.candidates)
    assert all(c.status == COMPLETED for c in result.candidates)
    assert rungs[-1] == 2 and rungs[0] < 2  # some went all the way, some were stopped
    assert result.best is not None and result.best.rung == 2
    assert [r["rung"].split()[0] for r in result.leaderboard] == [str(r) for r in sorted(rungs, reverse=True)]
    # every rung a candidate passed has its figures; MLflow holds them under the same names
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    for c in result.candidates:
        assert sorted(c.rung_rewards()) == list(range(c.rung + 1))
        logged = client.get_run(str(c.run_id)).data.metrics
        assert logged["rung"] == c.rung and logged["rung_train_images"] == [64, 128, 256][c.rung]
        assert math.isclose(logged[f"reward_rung{c.rung}"], c.reward)
    # how much of the target the winner uses is on the parent run
    parent = client.get_run(result.parent_run_id).data.metrics
    assert parent["target_share_top1"] == pytest.approx(result.best.latency_p50 / 50, rel=2e-4)  # both kept to 5 digits
    # resumed with more trials: the earlier candidates stay, the new ones are promoted against them
    more = run_search(compose_config(*overrides, "search.n_trials=7", "resume=true"))
    assert more.resumed == 5 and len(more.candidates) == 7 and more.status == "FINISHED"
    assert all(c.rung_label for c in more.candidates)


@pytest.mark.slow
@pytest.mark.ci
@pytest.mark.usefixtures("ray_cluster")
def test_a_search_started_from_known_networks_never_returns_one_below_the_best_of_them(tmp_path: Path) -> None:
    space = load_space("tiny")
    start = [a.encode() for a in (space.extremes()[-1], space.extremes()[0])]  # the largest, then the smallest
    overrides = ("+space=tiny", "target_ms=50", "progress=false", "data.resolution=16", "data.max_val_samples=128",
                 "latency.input_shape=[1,3,16,16]", "latency.measure.min_runs=10", "latency.measure.min_time_s=0.05",
                 "latency.measure.max_time_s=0.3", "latency.measure.max_repeats=1", "train.batch_size=32",
                 "search.scheduler=asha", "search.reduction_factor=4", "search.max_concurrent=1",
                 "search.sampler=evolution", "search.population_size=2", "search.tournament_size=1",
                 "search.start=[" + ",".join(start) + "]", RUNGS, "name=seeded", "search.n_trials=5",
                 f"tracking.uri=sqlite:///{tmp_path / 'mlflow.db'}", f"output_dir={tmp_path / 'out'}")
    result = run_search(compose_config(*overrides))
    assert result.status == "FINISHED" and result.best is not None
    seeded = [c for c in result.candidates if c.arch in start]
    assert len(seeded) == 2 and all(c.rung == 2 and c.status == COMPLETED for c in seeded)  # both at the top rung
    assert result.best.rung == 2 and result.best.reward >= max(c.reward for c in seeded)
