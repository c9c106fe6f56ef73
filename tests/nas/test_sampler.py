"""The Optuna side: conditional decisions, distinct architectures, seeded samplers, duplicates."""

from __future__ import annotations

import pickle
import re

import numpy as np
import pytest

from nas.adapters.optuna_sampler import ArchSampler, objectives
from nas.core.sampling import Outcome
from search_spaces import SearchSpace, load_space

SMALL = {  # 2 (depth 1) + 2 * 2 (depth 2) = 6 networks with kernel 3/5 and depth 1/2
    "name": "small", "stem_chs": [8], "block": {"block_type": ["mbconv"], "exp_ratio": [1], "kernel_size": [3, 5],
                                                "se_ratio": [0.0]},
    "stages": [{"depth": [1, 2], "out_chs": [8], "stride": 2}],
}


def _complete(reward: float) -> Outcome:
    return Outcome("complete", reward=reward, accuracy=reward, latency_ms=1.0 + reward, step=1)


@pytest.mark.parametrize("name", ["tpe", "random", "nsga2"])
def test_proposals_are_distinct_members_of_the_space(name: str) -> None:
    space = load_space("mobile")
    s = ArchSampler(space, name, seed=3, n_startup_trials=4, population_size=4)
    seen = []
    for i in range(12):
        arch = s.ask()
        assert arch is not None and space.contains(space.decode(arch))
        seen.append(arch)
        s.tell(arch, _complete(i / 12))
    assert len(set(seen)) == 12
    assert len(s.study.trials) == 12 + s.duplicates


def test_only_active_decisions_are_asked() -> None:
    space = load_space("mobile")
    s = ArchSampler(space, "random", seed=0)
    for _ in range(10):
        arch = s.ask()
        assert arch is not None
        asked = s.study.trials[-1].params
        active = space.to_decisions(space.decode(arch))
        assert asked == active  # no decision beyond a stage's depth, no exp_ratio of a residual block
        for name in asked:
            m = re.match(r"s(\d+)\.b(\d+)\.", name)
            if m:
                assert int(m.group(2)) < asked.get(f"s{m.group(1)}.depth", 1)
        s.tell(arch, _complete(0.5))


@pytest.mark.parametrize("name", ["tpe", "random", "nsga2"])
def test_seeded(name: str) -> None:
    runs = []
    for _ in range(2):
        s = ArchSampler(load_space("tiny"), name, seed=7, n_startup_trials=3, population_size=4)
        archs = []
        for i in range(8):
            a = s.ask()
            assert a is not None
            archs.append(a)
            s.tell(a, _complete((i * 37 % 11) / 11))
        runs.append(archs)
    assert runs[0] == runs[1]


def test_repeated_suggestions_reuse_the_result_and_the_space_can_run_out() -> None:
    space = SearchSpace.from_dict(SMALL)
    assert space.size() == 6
    s = ArchSampler(space, "random", seed=0, max_duplicates=500)
    archs = []
    while (a := s.ask()) is not None:
        archs.append(a)
        s.tell(a, _complete(len(archs) / 10))
    assert sorted(archs) == sorted({a.encode() for a in _all(space)})
    assert s.exhausted and s.duplicates == len(s.study.trials) - 6
    # Every repeated suggestion was told the first evaluation's reward.
    by_arch: dict[str, set[float]] = {}
    for t in s.study.trials:
        arch = space.from_decisions(t.params).encode()
        by_arch.setdefault(arch, set()).add(t.value)  # type: ignore[arg-type]
    assert all(len(v) == 1 for v in by_arch.values())


def test_a_suggestion_of_a_running_architecture_waits_for_its_result() -> None:
    space = SearchSpace.from_dict({**SMALL, "stages": [{"depth": [1], "out_chs": [8], "stride": 2}]})
    assert space.size() == 2
    s = ArchSampler(space, "random", seed=1, max_duplicates=50)
    a, b = s.ask(), s.ask()
    assert a is not None and b is not None and a != b
    assert s.ask() is None  # both networks are out: nothing new to propose
    s.tell(a, _complete(0.9))
    s.tell(b, Outcome("fail"))
    values = {space.from_decisions(t.params).encode(): set() for t in s.study.trials}
    for t in s.study.trials:
        values[space.from_decisions(t.params).encode()].add((t.state.name, t.value))
    assert values[a] == {("COMPLETE", 0.9)}
    assert values[b] == {("FAIL", None)}


def test_pruned_outcomes_and_objectives() -> None:
    assert objectives("tpe") == [("reward", "max")]
    assert objectives("nsga2") == [("accuracy", "max"), ("latency_ms", "min")]
    s = ArchSampler(load_space("tiny"), "tpe", seed=0)
    a = s.ask()
    assert a is not None
    s.tell(a, Outcome("pruned", reward=0.3, accuracy=0.3, latency_ms=2.0, step=1))
    t = s.study.trials[0]
    assert t.state.name == "PRUNED" and t.intermediate_values == {1: 0.3}
    m = ArchSampler(load_space("tiny"), "nsga2", seed=0)
    b = m.ask()
    assert b is not None
    m.tell(b, _complete(0.8))
    assert m.study.trials[0].values == [0.8, 1.8]


def test_state_survives_pickling() -> None:
    s = ArchSampler(load_space("tiny"), "tpe", seed=0)
    a = s.ask()
    assert a is not None
    s.tell(a, _complete(0.5))
    restored = pickle.loads(pickle.dumps(s))
    assert len(restored.study.trials) == 1 and restored.n_distinct == 1


def _all(space: SearchSpace) -> list:
    rng = np.random.default_rng(0)
    return list({space.sample(rng) for _ in range(500)})
