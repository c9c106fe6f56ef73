"""Every search algorithm ``search.sampler`` offers, held to one contract (as Optuna's
``optuna/testing/pytest_samplers.py`` holds its samplers), then what each implementation adds.

The contract suite is parametrised over :data:`nas.core.config.SAMPLERS` and builds each sampler as
a search does (:func:`nas.driver.run.make_sampler`), so a sampler added to the list is held to the
same guarantees: every suggestion is a canonical network of the space, no architecture is proposed
twice (not even one still running), seeded runs repeat, failed and pruned outcomes are taken,
a tiny space runs out and says so, and a replayed or unpickled history is never proposed again.
"""

from __future__ import annotations

import itertools
import math
import pickle
import re
from pathlib import Path
from typing import Any

import numpy as np
import optuna
import pytest
from mlflow import MlflowClient

from nas.adapters.optuna_sampler import ArchSampler, objectives
from nas.core.config import SAMPLERS, SearchAlgConfig, SearchConfig
from nas.core.errors import ConfigError
from nas.core.evolution import EvolutionSampler
from nas.core.sampling import Outcome, Sampler
from nas.driver import run_search
from nas.driver.run import make_sampler
from search_spaces import SearchSpace, load_space
from tests.nas.configs import stored_config

SMALL = {  # 2 (depth 1) + 2 * 2 (depth 2) = 6 networks with kernel 3/5 and depth 1/2
    "name": "small", "stem_chs": [8], "block": {"block_type": ["mbconv"], "exp_ratio": [1], "kernel_size": [3, 5],
                                                "se_ratio": [0.0]},
    "stages": [{"depth": [1, 2], "out_chs": [8], "stride": 2}],
}
PAIR = {**SMALL, "name": "pair", "stages": [{"depth": [1], "out_chs": [8], "stride": 2}]}  # 2 networks

each_sampler = pytest.mark.parametrize("name", SAMPLERS)


def _make(name: str, space: SearchSpace, seed: int = 0, max_duplicates: int = 200) -> Sampler:
    search = SearchAlgConfig(sampler=name, seed=seed, n_startup_trials=3, population_size=4, tournament_size=2,
                             max_duplicates=max_duplicates)
    return make_sampler(SearchConfig(search=search), space, "contract")


def _complete(reward: float) -> Outcome:
    return Outcome("complete", reward=reward, accuracy=reward, latency_ms=1.0 + reward, step=1)


def _pruned(reward: float) -> Outcome:
    return Outcome("pruned", reward=reward, accuracy=reward, latency_ms=2.0, step=1)


def _every_network(space: SearchSpace) -> set[str]:
    names = [d.name for d in space.choices()]
    combos = itertools.product(*(d.options for d in space.choices()))
    return {space.from_decisions(dict(zip(names, combo, strict=True))).encode() for combo in combos}


def _ask(sampler: Sampler) -> str:
    arch = sampler.ask()
    assert arch is not None, "the sampler gave up on a space with many networks left"
    return arch


MIXED = [_complete(0.5), Outcome("fail"), _complete(0.7), _pruned(0.3), _complete(0.6), Outcome("fail"),
         _complete(0.4)]
"""A history with every kind of outcome a trial can end with."""
MIXED_COUNTS = {"COMPLETE": 4, "FAIL": 2, "PRUNED": 1}


# ---------------------------------------------------------------------- the contract of every sampler


@each_sampler
def test_suggestions_are_distinct_canonical_networks_of_the_space(name: str) -> None:
    space = load_space("mobile")  # conditional decisions: depths, residual blocks without exp_ratio
    s = _make(name, space, seed=3)
    seen = []
    for i in range(12):
        arch = _ask(s)
        decoded = space.decode(arch)
        assert decoded.encode() == arch and space.contains(decoded)
        assert s.decisions(arch) == space.to_decisions(decoded)
        assert space.from_decisions(s.decisions(arch)).encode() == arch
        seen.append(arch)
        s.tell(arch, _complete(i / 12))
    assert len(set(seen)) == 12
    assert s.counts() == {"COMPLETE": 12} and not s.exhausted


@each_sampler
def test_seeded_runs_repeat(name: str) -> None:
    def run(seed: int) -> list[str]:
        s = _make(name, load_space("tiny"), seed=seed)
        archs = []
        for i in range(8):
            archs.append(_ask(s))
            s.tell(archs[-1], _complete((i * 37 % 11) / 11))
        return archs

    first = run(7)
    assert run(7) == first
    assert run(8) != first


@each_sampler
def test_failed_and_pruned_outcomes_are_taken_and_counted(name: str) -> None:
    s = _make(name, load_space("tiny"))
    told = []
    for outcome in MIXED:
        told.append(_ask(s))
        s.tell(told[-1], outcome)
    assert s.counts() == MIXED_COUNTS
    later = [_ask(s) for _ in range(5)]  # the search goes on
    assert len(set(later)) == 5 and not set(later) & set(told)


@each_sampler
def test_a_tiny_space_is_proposed_once_each_then_runs_out(name: str) -> None:
    space = SearchSpace.from_dict(SMALL)
    assert space.size() == 6 == len(_every_network(space))
    s = _make(name, space, max_duplicates=500)
    archs: list[str] = []
    while (arch := s.ask()) is not None:
        assert not s.exhausted and len(archs) < 6, f"{arch} proposed after all six networks: {archs}"
        archs.append(arch)
        s.tell(arch, _complete(len(archs) / 10))
    assert sorted(archs) == sorted(_every_network(space))
    assert s.exhausted and s.ask() is None
    assert s.duplicates > 0  # repeats were suggested, and answered without another evaluation
    assert s.counts() == {"COMPLETE": 6}


@each_sampler
def test_a_running_architecture_is_not_proposed_again(name: str) -> None:
    space = SearchSpace.from_dict(SMALL)
    s = _make(name, space, max_duplicates=500)
    running: list[str] = []
    while (arch := s.ask()) is not None:  # nothing told yet: every proposal is still being evaluated
        assert arch not in running, f"{arch} proposed again while it runs"
        assert len(running) < 6
        running.append(arch)
    assert sorted(running) == sorted(_every_network(space)) and s.exhausted
    for arch, outcome in zip(running, MIXED, strict=False):
        s.tell(arch, outcome)
    assert s.ask() is None
    assert s.counts() == {"COMPLETE": 3, "FAIL": 2, "PRUNED": 1}


@each_sampler
def test_a_replayed_history_is_counted_and_never_proposed_again(name: str) -> None:
    space = load_space("tiny")
    first = _make(name, space)
    told: dict[str, Outcome] = {}
    for outcome in MIXED:
        arch = _ask(first)
        first.tell(arch, outcome)
        told[arch] = outcome

    resumed = _make(name, space)  # a resumed search: the record replayed into a new sampler
    for _ in range(2):  # an architecture replayed twice is known the second time, not added again
        for arch, outcome in told.items():
            resumed.replay(arch, outcome)
    assert resumed.counts() == first.counts() == MIXED_COUNTS
    new = []
    for i in range(10):  # the search goes on from the history, never back to what was evaluated
        new.append(_ask(resumed))
        resumed.tell(new[-1], _complete(i / 10))
    assert len(set(new)) == 10 and not set(new) & set(told)


@each_sampler
def test_an_unpickled_sampler_keeps_its_history_and_its_running_architectures(name: str) -> None:
    # The Ray Tune searcher checkpoints its sampler by pickling it (ArchSearcher.save).
    s = _make(name, load_space("tiny"))
    done, running = _ask(s), _ask(s)
    s.tell(done, _complete(0.5))
    restored: Sampler = pickle.loads(pickle.dumps(s))
    restored.tell(running, _pruned(0.2))  # the trial in flight when it was saved ends later
    assert restored.counts() == {"COMPLETE": 1, "PRUNED": 1}
    later = [_ask(restored) for _ in range(5)]
    assert not {done, running} & set(later)


def _start(name: str, space: SearchSpace, start: list[str]) -> Sampler:
    search = SearchAlgConfig(sampler=name, n_startup_trials=3, population_size=4, tournament_size=2, start=start)
    return make_sampler(SearchConfig(search=search), space, "contract")


@each_sampler
def test_the_start_is_proposed_first_in_order_then_learnt_and_never_proposed_again(name: str) -> None:
    space = load_space("tiny")
    known = [space.sample(np.random.default_rng(i)).encode() for i in (1, 2)]
    s = _start(name, space, known)
    assert [_ask(s), _ask(s)] == known
    s.tell(known[0], _complete(0.9))
    s.tell(known[1], Outcome("fail"))
    assert s.counts() == {"COMPLETE": 1, "FAIL": 1}  # the sampler's history holds them
    later = [_ask(s) for _ in range(8)]
    assert len(set(later)) == 8 and not set(later) & set(known)


@each_sampler
def test_a_resumed_search_skips_the_start_it_already_evaluated(name: str) -> None:
    space = load_space("tiny")
    known = [space.sample(np.random.default_rng(i)).encode() for i in (1, 2)]
    s = _start(name, space, known)
    s.replay(known[0], _complete(0.9))  # recorded by the run that stopped
    assert _ask(s) == known[1]
    assert _ask(s) not in known


def test_a_start_outside_the_space_is_refused_before_anything_is_created(tmp_path: Path) -> None:
    outside = load_space("mobile").sample(np.random.default_rng(0)).encode()
    cfg = stored_config(tmp_path, "+space=tiny", "target_ms=1.0", f"search.start=['{outside}']", "progress=false")
    with pytest.raises(ConfigError, match=r"search\.start\[0\].*cannot start a search of space 'tiny'"):
        run_search(cfg)
    assert not (tmp_path / "mlflow.db").exists() and not (tmp_path / "out").exists()


def test_a_start_from_references_takes_the_input_layout_and_one_the_space_lacks_is_one_line(tmp_path: Path) -> None:
    from nas.driver.run import start_archs
    from search_spaces.references import member

    cifar = load_space("cifar")
    assert start_archs(["resnet14@1.5", "mobilenetv2_100@0.35:d0.5"], cifar, 32) == [
        member("resnet14@1.5").encode(), member("mobilenetv2_100@0.35:d0.5", 32).encode()]
    cfg = stored_config(tmp_path, "+space=tiny", "target_ms=1.0", "search.start=[resnet8]", "progress=false")
    with pytest.raises(ConfigError) as info:
        run_search(cfg)
    assert str(info.value).count("\n") == 0
    assert "search.start[0]: 'resnet8' cannot start a search of space 'tiny'" in str(info.value)
    assert "token 'stem_c16_s1': stem_chs 16 not in [8]" in str(info.value)  # the first thing it lacks, and what it has
    cfg = stored_config(tmp_path, "+space=cifar", "target_ms=1.0", "search.start=[resnet8@5]", "progress=false")
    with pytest.raises(ConfigError, match=r"search\.start\[0\].*must be one of \['0.5', '1', '1.5'"):
        run_search(cfg)


# ---------------------------------------------------------------------- the Optuna samplers (tpe, random, nsga2)


def test_optuna_is_asked_only_the_active_decisions() -> None:
    space = load_space("mobile")
    s = ArchSampler(space, "random", seed=0)
    for _ in range(10):
        arch = _ask(s)
        asked = s.study.trials[-1].params
        active = space.to_decisions(space.decode(arch))
        assert asked == active  # no decision beyond a stage's depth, no exp_ratio of a residual block
        for decision in asked:
            m = re.match(r"s(\d+)\.b(\d+)\.", decision)
            if m:
                assert int(m.group(2)) < asked.get(f"s{m.group(1)}.depth", 1)
        s.tell(arch, _complete(0.5))


def test_each_optuna_trial_is_a_proposal_or_a_repeat_told_the_first_result() -> None:
    space = SearchSpace.from_dict(SMALL)
    s = ArchSampler(space, "random", seed=0, max_duplicates=500)
    archs = []
    while (a := s.ask()) is not None:
        archs.append(a)
        s.tell(a, _complete(len(archs) / 10))
    assert s.duplicates > 0 and len(s.study.trials) == len(archs) + s.duplicates and s.n_distinct == 6
    by_arch: dict[str, set[float]] = {}
    for t in s.study.trials:
        assert ("arch" in t.user_attrs) != ("duplicate_of" in t.user_attrs)
        by_arch.setdefault(space.from_decisions(t.params).encode(), set()).add(t.value)  # type: ignore[arg-type]
    assert all(len(v) == 1 for v in by_arch.values())


def test_an_optuna_repeat_of_a_running_architecture_waits_for_its_result() -> None:
    space = SearchSpace.from_dict(PAIR)
    s = ArchSampler(space, "random", seed=1, max_duplicates=50)
    a, b = _ask(s), _ask(s)
    assert s.ask() is None and s.duplicates > 0
    s.tell(a, _complete(0.9))
    s.tell(b, Outcome("fail"))
    values: dict[str, set[tuple[str, float | None]]] = {}
    for t in s.study.trials:
        values.setdefault(space.from_decisions(t.params).encode(), set()).add((t.state.name, t.value))
    assert values == {a: {("COMPLETE", 0.9)}, b: {("FAIL", None)}}


def test_optuna_objectives_and_what_a_pruned_trial_tells_them() -> None:
    assert objectives("tpe") == objectives("random") == [("reward", "max")]
    assert objectives("nsga2") == [("accuracy", "max"), ("latency_ms", "min")]
    s = ArchSampler(load_space("tiny"), "tpe", seed=0)
    s.tell(_ask(s), Outcome("pruned", reward=0.3, accuracy=0.3, latency_ms=2.0, step=1))
    t = s.study.trials[0]
    assert t.state.name == "PRUNED" and t.intermediate_values == {1: 0.3}  # TPE reads its last report
    m = ArchSampler(load_space("tiny"), "nsga2", seed=0)
    m.tell(_ask(m), _complete(0.8))
    assert m.study.trials[0].values == [0.8, 1.8]


@pytest.mark.parametrize("sampler", ["tpe", "nsga2"])
def test_a_replayed_optuna_study_equals_the_original(sampler: str) -> None:
    space = load_space("tiny")
    first = ArchSampler(space, sampler, seed=0, n_startup_trials=4, population_size=4)
    told = {}
    for outcome in MIXED:
        arch = _ask(first)
        first.tell(arch, outcome)
        told[arch] = outcome
    resumed = ArchSampler(space, sampler, seed=0, n_startup_trials=4, population_size=4)
    for arch, outcome in told.items():
        resumed.replay(arch, outcome)

    def history(s: ArchSampler) -> list[tuple[str, dict[str, Any], str, list[float] | None]]:
        trials = [t for t in s.study.trials if "arch" in t.user_attrs]
        return [(t.user_attrs["arch"], t.params, t.state.name, t.values) for t in trials]

    assert history(resumed) == history(first)  # what TPE and NSGA-II model is the same as before the stop


def test_a_stored_study_is_continued_without_adding_its_trials_twice(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'optuna.db'}"
    space = load_space("tiny")
    first = ArchSampler(space, "tpe", seed=0, storage=url, study_name="s1")
    archs = [_ask(first) for _ in range(4)]
    for i, arch in enumerate(archs[:3]):
        first.tell(arch, _complete(0.1 * i))
    # The driver stops with archs[3] still running.

    study = optuna.load_study(study_name="s1", storage=url)
    assert [t.state.name for t in study.trials] == ["COMPLETE", "COMPLETE", "COMPLETE", "RUNNING"]
    assert [t.user_attrs["arch"] for t in study.trials] == archs

    again = ArchSampler(space, "tpe", seed=0, storage=url, study_name="s1")
    for i, arch in enumerate(archs[:3]):  # the resume replays what MLflow recorded
        again.replay(arch, _complete(0.1 * i))
    study = optuna.load_study(study_name="s1", storage=url)
    assert [t.state.name for t in study.trials] == ["COMPLETE", "COMPLETE", "COMPLETE", "FAIL"]
    nxt = _ask(again)
    assert nxt not in archs[:3]
    # One trial per proposed architecture (suggestions of known ones are kept apart as duplicate_of).
    proposed = [t.user_attrs["arch"] for t in optuna.load_study(study_name="s1", storage=url).trials
                if "arch" in t.user_attrs]
    assert proposed == [*archs, nxt]


def test_a_storage_optuna_cannot_open_is_named() -> None:
    with pytest.raises(ConfigError, match=r"search\.storage.*nosuchdb"):
        ArchSampler(load_space("tiny"), "tpe", storage="nosuchdb://x", study_name="s")


def test_a_search_with_a_storage_optuna_cannot_open_creates_nothing(tmp_path: Path) -> None:
    cfg = stored_config(tmp_path, "+space=tiny", "target_ms=1.0", "search.storage=nosuchdb://x", "progress=false")
    with pytest.raises(ConfigError, match=r"search\.storage"):
        run_search(cfg)
    assert not (tmp_path / "mlflow.db").exists() and not (tmp_path / "out").exists()


# ---------------------------------------------------------------------- regularised evolution


def test_a_replayed_evolution_has_the_population_it_had() -> None:
    space = load_space("tiny")
    first = EvolutionSampler(space, population_size=4, tournament_size=2, seed=0, max_duplicates=200)
    told = {}
    for outcome in MIXED:
        arch = _ask(first)
        first.tell(arch, outcome)
        told[arch] = outcome
    resumed = EvolutionSampler(space, population_size=4, tournament_size=2, seed=0, max_duplicates=200)
    for arch, outcome in told.items():
        resumed.replay(arch, outcome)
    # The same members in the same order (the oldest leave first, as they would have); a failed
    # one at minus infinity, so it is never a parent.
    assert list(resumed.evolution.population) == list(first.evolution.population)
    assert [m.arch.encode() for m in first.evolution.population] == list(told)[-4:]
    assert [m.fitness for m in first.evolution.population] == [0.3, 0.6, -math.inf, 0.4]  # pruned: its last reward


@pytest.mark.slow
@pytest.mark.usefixtures("ray_cluster")
def test_an_evolution_search_resumes_without_repeating(tmp_path: Path) -> None:
    def cfg(n: int, *extra: str) -> SearchConfig:
        return stored_config(
            tmp_path, "+space=tiny", "target_ms=1.0", f"search.n_trials={n}", "search.max_concurrent=2",
            "search.sampler=evolution", "search.population_size=3", "data.max_train_samples=128",
            "data.max_val_samples=64", "train.epochs=1", "latency.measure.min_runs=10",
            "latency.measure.min_time_s=0.05", "latency.measure.max_time_s=0.3", "latency.measure.max_repeats=1",
            "progress=false", "name=evo", *extra,
        )

    run_search(cfg(4))
    run_search(cfg(7, "resume=true"))
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    exp = client.get_experiment_by_name("latnas")
    assert exp is not None
    runs = client.search_runs([exp.experiment_id])
    children = [r for r in runs if r.data.tags.get("latnas.role") == "candidate"]
    archs = [c.data.params["arch"] for c in children]
    assert len(archs) == 7 and len(set(archs)) == 7
    parent = next(r for r in runs if r.data.tags.get("latnas.role") == "search")
    assert parent.data.params["search.sampler"] == "evolution" and parent.info.status == "FINISHED"
