"""The Ray Tune adapter's own logic, without a cluster: the searcher's bookkeeping between Ray Tune's
trial ids and a sampler, what a trial's last report tells the sampler, and which of Ray's errors
mean that a trial's process died (retried) rather than that code raised (a bug, not retried)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from ray.exceptions import (
    ActorDiedError,
    NodeDiedError,
    OutOfMemoryError,
    RayActorError,
    RayTaskError,
    WorkerCrashedError,
)
from ray.tune.search import Searcher

from nas.adapters.optuna_sampler import ArchSampler
from nas.adapters.ray_tune import ArchSearcher, outcome_of, process_died
from nas.core.evolution import EvolutionSampler
from nas.core.record import COMPLETED, CRASHED, FAILED, RUNNING
from nas.core.sampling import Outcome
from search_spaces import SearchSpace, load_space

PAIR = {  # two networks: kernel 3 or 5
    "name": "pair", "stem_chs": [8], "block": {"block_type": ["mbconv"], "exp_ratio": [1], "kernel_size": [3, 5],
                                               "se_ratio": [0.0]},
    "stages": [{"depth": [1], "out_chs": [8], "stride": 2}],
}


def _report(status: str, epoch: int = 2, reward: float = 0.4, accuracy: float = 0.8,
            latency_ms: float = 3.0) -> dict[str, Any]:
    """The fields of a trial's report that the searcher reads (nas.trial.evaluate reports more)."""
    return {"status": status, "epoch": epoch, "reward": reward, "accuracy": accuracy, "latency_ms": latency_ms,
            "arch_id": "0123abcd", "training_iteration": epoch}


def _states(sampler: ArchSampler) -> dict[str, tuple[str, list[float] | None, dict[int, float]]]:
    return {t.user_attrs["arch"]: (t.state.name, t.values, t.intermediate_values) for t in sampler.study.trials
            if "arch" in t.user_attrs}


# ---------------------------------------------------------------------- ArchSearcher


def test_each_trial_gets_its_own_architecture_and_its_outcome_reaches_the_sampler_under_it() -> None:
    sampler = ArchSampler(load_space("tiny"), "random", seed=0)
    searcher = ArchSearcher(sampler)
    configs = {tid: searcher.suggest(tid) for tid in ("t1", "t2", "t3", "t4", "t5")}
    archs = {tid: c["arch"] for tid, c in configs.items() if c is not None}
    assert all(set(c or {}) == {"arch"} for c in configs.values())  # no front unless asked for
    assert len(set(archs.values())) == 5 and searcher.arch_of == archs

    # Trials end in any order; each outcome goes to the architecture of that trial.
    searcher.on_trial_complete("t3", _report(COMPLETED, reward=0.7))
    searcher.on_trial_complete("t1", _report(RUNNING, epoch=1, reward=0.2))  # stopped early by ASHA
    searcher.on_trial_complete("t2", _report(FAILED))
    searcher.on_trial_complete("t5", _report(COMPLETED), error=True)  # its process died after reporting
    searcher.on_trial_complete("t4", None, error=True)  # died before its first report
    searcher.on_trial_complete("not-mine", _report(COMPLETED))  # a trial it never suggested: nothing to tell

    assert _states(sampler) == {
        archs["t3"]: ("COMPLETE", [0.7], {}),
        archs["t1"]: ("PRUNED", [0.2], {1: 0.2}),  # its last report, which TPE reads
        archs["t2"]: ("FAIL", None, {}),
        archs["t5"]: ("FAIL", None, {}),
        archs["t4"]: ("FAIL", None, {}),
    }


def test_nsga2_is_told_each_trials_accuracy_and_latency() -> None:
    sampler = ArchSampler(load_space("tiny"), "nsga2", seed=0)
    searcher = ArchSearcher(sampler)
    config = searcher.suggest("t1")
    assert config is not None
    searcher.on_trial_complete("t1", _report(COMPLETED, accuracy=0.9, latency_ms=2.5))
    assert _states(sampler) == {config["arch"]: ("COMPLETE", [0.9, 2.5], {})}


def test_an_exhausted_space_finishes_the_experiment() -> None:
    sampler = EvolutionSampler(SearchSpace.from_dict(PAIR), population_size=2, tournament_size=1, seed=0,
                               max_duplicates=50)
    searcher = ArchSearcher(sampler)
    first, second = searcher.suggest("t1"), searcher.suggest("t2")
    assert first is not None and second is not None and first != second
    assert searcher.suggest("t3") == Searcher.FINISHED and sampler.exhausted
    assert set(searcher.arch_of) == {"t1", "t2"}


def test_each_suggestion_carries_the_front_as_it_is_then() -> None:
    fronts = iter([[[2.0, 0.5]], [[2.0, 0.5], [1.0, 0.4]]])
    searcher = ArchSearcher(ArchSampler(load_space("tiny"), "random", seed=0), front=lambda: next(fronts))
    one, two = searcher.suggest("t1"), searcher.suggest("t2")
    assert one is not None and two is not None
    assert one["front"] == [[2.0, 0.5]] and two["front"] == [[2.0, 0.5], [1.0, 0.4]]


def test_a_restored_searcher_finishes_the_trials_in_flight_when_it_was_saved(tmp_path: Path) -> None:
    space = load_space("tiny")
    searcher = ArchSearcher(ArchSampler(space, "tpe", seed=0))
    done, running = searcher.suggest("t1"), searcher.suggest("t2")
    assert done is not None and running is not None
    searcher.on_trial_complete("t1", _report(COMPLETED))
    searcher.save(str(tmp_path / "searcher.pkl"))

    restored = ArchSearcher(ArchSampler(space, "tpe", seed=0))
    restored.restore(str(tmp_path / "searcher.pkl"))
    assert restored.arch_of == {"t1": done["arch"], "t2": running["arch"]}
    restored.on_trial_complete("t2", _report(COMPLETED, reward=0.6))
    assert restored.sampler.counts() == {"COMPLETE": 2}
    later = restored.suggest("t3")
    assert later is not None and later["arch"] not in (done["arch"], running["arch"])


# ---------------------------------------------------------------------- outcome_of


def test_a_completed_trial_is_told_its_figures() -> None:
    assert outcome_of(_report(COMPLETED, epoch=3, reward=0.5, accuracy=0.75, latency_ms=4.0), error=False) == Outcome(
        "complete", reward=0.5, accuracy=0.75, latency_ms=4.0, step=3)


def test_a_trial_stopped_while_running_is_pruned_at_its_last_epoch() -> None:
    assert outcome_of(_report(RUNNING, epoch=1, reward=0.25, accuracy=0.5, latency_ms=4.0), error=False) == Outcome(
        "pruned", reward=0.25, accuracy=0.5, latency_ms=4.0, step=1)


@pytest.mark.parametrize(
    ("result", "error"),
    [
        pytest.param(_report(FAILED), False, id="failed"),  # a typed error at the trial boundary
        pytest.param(_report(CRASHED), False, id="crashed"),  # a bug, reported by the trainable
        pytest.param(_report(COMPLETED), True, id="died-after-its-last-report"),
        pytest.param(_report(RUNNING), True, id="died-while-running"),
        pytest.param(None, True, id="died-before-any-report"),
        pytest.param({}, False, id="no-report"),
    ],
)
def test_any_other_end_is_a_failure(result: dict[str, Any] | None, error: bool) -> None:
    assert outcome_of(result, error) == Outcome("fail")


# ---------------------------------------------------------------------- process_died

DEATHS = [
    pytest.param(RayActorError(), id="RayActorError"),
    pytest.param(ActorDiedError(), id="ActorDiedError"),  # what Ray raises for a dead actor's task
    pytest.param(WorkerCrashedError(), id="WorkerCrashedError"),
    pytest.param(NodeDiedError("the node running the trial died"), id="NodeDiedError"),
    pytest.param(OutOfMemoryError("the task was killed: the node ran low on memory"), id="OutOfMemoryError"),
]


def _raised_in_a_task(cause: BaseException) -> RayTaskError:
    return RayTaskError("ImplicitFunc.train", "Traceback (most recent call last):\n  ...", cause)


@pytest.mark.parametrize("error", DEATHS)
def test_each_of_rays_process_deaths_is_a_death(error: BaseException) -> None:
    assert process_died(error)


@pytest.mark.parametrize("error", DEATHS)
def test_a_death_wrapped_in_a_task_error_is_a_death(error: BaseException) -> None:
    assert process_died(_raised_in_a_task(error))


@pytest.mark.parametrize(
    "error",
    [
        pytest.param(_raised_in_a_task(KeyError("status")), id="RayTaskError(KeyError)"),
        pytest.param(ValueError("a bug"), id="ValueError"),
        pytest.param(None, id="no-exception-in-hand"),  # Ray Tune gave up placing the trial
    ],
)
def test_a_bug_is_not_a_death(error: BaseException | None) -> None:
    assert not process_died(error)
