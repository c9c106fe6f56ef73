"""The latency screen (``search.latency_screen``): evolution's proposals measured before they train,
and those far over the target never trained."""

from __future__ import annotations

import contextlib
import io
import pickle
from pathlib import Path

import numpy as np
import pytest
from mlflow import MlflowClient

from nas.core.config import SearchAlgConfig, SearchConfig, validate
from nas.core.errors import ConfigError
from nas.core.evolution import EvolutionSampler
from nas.core.sampling import Outcome
from nas.driver import run_search
from nas.driver.screen import LatencyScreen, make_screen
from search_spaces import Arch, load_space
from tests.nas.configs import compose_config, stored_config

QUICK_LATENCY = ("latency.input_shape=[1,3,32,32]", "latency.measure.min_runs=10", "latency.measure.min_time_s=0.05",
                 "latency.measure.max_time_s=0.3", "latency.measure.max_repeats=1")


def _even(arch: Arch) -> bool:
    """A screen that passes about half the architectures, the same ones every time."""
    return int(arch.arch_id, 16) % 2 == 0


class _Judge:
    """Records what a screen was asked, and answers as ``rule`` does."""

    def __init__(self, rule: object) -> None:
        self.rule = rule
        self.passed: list[str] = []
        self.refused: list[str] = []

    def __call__(self, arch: Arch) -> bool:
        ok = bool(self.rule(arch))  # type: ignore[operator]
        (self.passed if ok else self.refused).append(arch.encode())
        return ok


def test_evolution_proposes_only_what_the_screen_passes_and_never_a_refused_one_again() -> None:
    space = load_space("mobile")
    judge = _Judge(_even)
    s = EvolutionSampler(space, population_size=4, tournament_size=2, seed=0, max_duplicates=200, screen=judge)
    proposed = []
    for i in range(20):  # past the first population: mutations are screened too
        arch = s.ask()
        assert arch is not None
        proposed.append(arch)
        s.tell(arch, Outcome("complete", reward=0.1 * (i % 7)))
    assert proposed == judge.passed and all(_even(space.decode(a)) for a in proposed)
    assert judge.refused and s.evolution.screened == len(judge.refused)
    assert not set(judge.refused) & set(proposed)  # refused: never proposed, then or later
    assert all(_even(m.arch) for m in s.evolution.population)  # nor a parent


def test_a_screen_that_refuses_everything_ends_the_proposals_with_the_reason() -> None:
    s = EvolutionSampler(load_space("mobile"), 4, 2, 0, 200, screen=lambda arch: False, max_screened=50)
    assert s.ask() is None and s.exhausted
    assert s.evolution.screened == 50 and s.evolution.screen_gave_up


def test_a_pickled_sampler_refuses_to_propose_without_its_screen() -> None:
    # The Ray Tune searcher pickles its sampler to checkpoint it; the screen's backend does not pickle, and
    # an unscreened proposal must not pass for a screened one.
    s = EvolutionSampler(load_space("mobile"), 4, 2, 0, 200, screen=_even)
    first = s.ask()
    assert first is not None
    s.tell(first, Outcome("complete", reward=0.5))
    restored = pickle.loads(pickle.dumps(s))
    with pytest.raises(RuntimeError, match="not carried by a pickled sampler"):
        restored.ask()
    unscreened = pickle.loads(pickle.dumps(EvolutionSampler(load_space("mobile"), 4, 2, 0, 200)))
    assert unscreened.ask() is not None


@pytest.mark.parametrize("target", [("target_ms=1000", "target_ms=0.00001"),
                                    ("target_anchor=mobilenetv2_100@0.35 target_x=100",
                                     "target_anchor=mobilenetv2_100@0.35 target_x=0.0001")])
def test_the_screen_measures_a_proposal_here_and_refuses_one_over_the_target(target: tuple[str, str]) -> None:
    space = load_space("tiny")
    arch = space.sample(np.random.default_rng(0))
    said: list[str] = []
    screen: LatencyScreen | None = None
    for text, expect in zip(target, (True, False), strict=True):
        cfg = compose_config("+space=tiny", *text.split(), "search.sampler=evolution", "search.latency_screen=1.2",
                             *QUICK_LATENCY)
        validate(cfg)
        screen = make_screen(cfg, 10, space, cfg.target_ms or 0.0, None, False, said.append)
        assert screen is not None
        assert screen(arch) is expect
        x = (screen.passed or screen.refused)[0][1]
        assert (x <= 1.0) if expect else (x > 1.2)  # far under, far over: the measured figure, whatever the load
    assert len(said) == 1 and f"{arch.arch_id} at " in said[0] and "not trained" in said[0]
    assert screen is not None and "1 of 1 proposal(s) over 1.2x the target" in screen.summary_line()


@pytest.mark.parametrize("target", [("target_ms=0.00001", "target_ms=1000"),
                                    ("target_anchor=mobilenetv2_100@0.35 target_x=0.0001",
                                     "target_anchor=mobilenetv2_100@0.35 target_x=100")])
def test_a_floor_refuses_a_proposal_that_would_leave_most_of_the_budget_unused(target: tuple[str, str]) -> None:
    space = load_space("tiny")
    arch = space.sample(np.random.default_rng(0))
    said: list[str] = []
    screen: LatencyScreen | None = None
    for text, expect in zip(target, (True, False), strict=True):  # a floor alone: far over the target passes
        cfg = compose_config("+space=tiny", *text.split(), "search.sampler=evolution", "search.latency_floor=0.5",
                             *QUICK_LATENCY)
        validate(cfg)
        screen = make_screen(cfg, 10, space, cfg.target_ms or 0.0, None, False, said.append)
        assert screen is not None
        assert screen(arch) is expect
        x = (screen.passed or screen.refused)[0][1]
        assert (x > 1.0) if expect else (x < 0.5)
    assert len(said) == 1 and "under 0.5x): not trained" in said[0]
    assert screen is not None and "1 of 1 proposal(s) under 0.5x the target" in screen.summary_line()


def test_a_screen_and_a_floor_together_pass_only_what_lies_between() -> None:
    space = load_space("tiny")
    arch = space.sample(np.random.default_rng(0))
    verdicts = []
    for target_x in ("0.0001", "100"):  # far over, then far under: both refused
        cfg = compose_config("+space=tiny", "target_anchor=mobilenetv2_100@0.35", f"target_x={target_x}",
                             "search.sampler=evolution", "search.latency_screen=1.2", "search.latency_floor=0.5",
                             *QUICK_LATENCY)
        validate(cfg)
        screen = make_screen(cfg, 10, space, 0.0, None, False, print)
        assert screen is not None
        verdicts.append(screen(arch))
        assert "1 of 1 proposal(s) outside 0.5x-1.2x the target" in screen.summary_line()
    assert verdicts == [False, False]


@pytest.mark.parametrize(("overrides", "words"), [
    (["search.sampler=evolution", "search.latency_screen=0.8"], "must be at least 1"),
    (["search.sampler=evolution", "search.latency_screen=nan"], "must be at least 1"),
    (["search.latency_screen=1.2"], "add search.sampler=evolution"),
    (["search.sampler=evolution", "search.latency_screen=1.2", "latency.scenario=server",
      "latency.throughput_goal=100"], "screens a single-stream target"),
    (["search.sampler=evolution", "search.latency_floor=1"], "must be between 0 and 1"),
    (["search.sampler=evolution", "search.latency_floor=0"], "must be between 0 and 1"),
    (["search.sampler=evolution", "search.latency_floor=nan"], "must be between 0 and 1"),
    (["search.latency_floor=0.6"], "add search.sampler=evolution"),
    (["search.sampler=evolution", "search.latency_floor=0.6", "latency.scenario=server",
      "latency.throughput_goal=100"], "screens a single-stream target"),
    (["search.sampler=evolution", "search.latency_screen=1.2", "search.max_refused=0"], "integer >= 1"),
])
def test_a_screen_or_floor_that_cannot_work_is_refused_before_any_trial(overrides: list[str], words: str) -> None:
    cfg = compose_config("+space=tiny", "target_ms=5", *overrides)
    with pytest.raises(ConfigError, match=words) as err:
        validate(cfg)
    keys = [o.split("=")[0] for o in overrides if o.startswith(("search.latency_", "search.max_refused"))]
    assert err.value.key == keys[-1]  # the setting at fault: the last screen setting each case adds


def test_a_screen_in_a_driver_whose_trials_measure_elsewhere_is_refused() -> None:
    cfg = compose_config("+space=tiny", "target_ms=5", "search.sampler=evolution", "search.latency_screen=1.2",
                         *QUICK_LATENCY)
    validate(cfg)
    with pytest.raises(ConfigError, match="joined cluster") as err:
        make_screen(cfg, 10, load_space("tiny"), 5.0, None, True, print)
    assert err.value.key == "search.latency_screen"
    assert make_screen(cfg, 10, load_space("tiny"), 5.0, None, False, print) is not None  # the same, on one machine


def test_the_default_is_no_screen() -> None:
    assert SearchAlgConfig().latency_screen is None and SearchConfig().search.latency_screen is None
    assert SearchAlgConfig().latency_floor is None and SearchConfig().search.latency_floor is None
    cfg = compose_config("+space=tiny", "target_ms=5")  # conf/search/default.yaml
    assert cfg.search.latency_screen is None and cfg.search.latency_floor is None
    assert make_screen(cfg, 10, load_space("tiny"), 5.0, None, False, print) is None


def _search(tmp_path: Path, target_x: str, screen: str = "search.latency_screen=1.2") -> tuple[object, str]:
    cfg = stored_config(tmp_path, "+space=tiny", "target_anchor=mobilenetv2_100@0.35", f"target_x={target_x}",
                        "search.sampler=evolution", *screen.split(), "search.n_trials=2",
                        "search.population_size=2", "search.tournament_size=1", "accuracy=naswot",
                        "data.max_train_samples=64", "data.max_val_samples=32", "data.resolution=16",
                        "progress=false", "latency.final_pass_top_k=0", *QUICK_LATENCY, "name=screened")
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        result = run_search(cfg)
    return result, printed.getvalue()


REFUSED = 6  # search.max_refused in the searches below (50 by default: each refusal is a measurement)


@pytest.mark.usefixtures("ray_cluster")
def test_a_search_whose_target_the_space_cannot_reach_trains_nothing_and_says_why(tmp_path: Path) -> None:
    # a ten-thousandth of MobileNetV2 x0.35: no network is that fast
    result, printed = _search(tmp_path, "0.0001", f"search.latency_screen=1.2 search.max_refused={REFUSED}")
    assert result.candidates == []  # type: ignore[attr-defined]
    assert f"The latency screen refused {REFUSED} proposals in a row" in printed
    assert f"{REFUSED} of {REFUSED} proposal(s) over 1.2x the target" in printed
    run = MlflowClient(result.tracking_uri).get_run(result.parent_run_id)  # type: ignore[attr-defined]
    assert run.data.metrics["screen_refused"] == REFUSED and run.data.metrics["screen_passed"] == 0


@pytest.mark.usefixtures("ray_cluster")
def test_a_search_within_its_screen_trains_every_proposal(tmp_path: Path) -> None:
    result, printed = _search(tmp_path, "100")  # a hundred times MobileNetV2 x0.35: every tiny network is within
    assert len(result.candidates) == 2  # type: ignore[attr-defined]
    assert "Latency screen: 0 of 2 proposal(s) over 1.2x the target" in printed
    run = MlflowClient(result.tracking_uri).get_run(result.parent_run_id)  # type: ignore[attr-defined]
    assert run.data.metrics["screen_passed"] == 2 and run.data.metrics["screen_refused"] == 0


@pytest.mark.usefixtures("ray_cluster")
def test_a_search_whose_every_proposal_is_under_its_floor_trains_nothing_and_says_why(tmp_path: Path) -> None:
    # every tiny network is far under the floor
    result, printed = _search(tmp_path, "100", f"search.latency_floor=0.5 search.max_refused={REFUSED}")
    assert result.candidates == []  # type: ignore[attr-defined]
    assert f"The latency screen refused {REFUSED} proposals in a row (under 0.5x the target)" in printed
    assert "widen search.latency_screen or search.latency_floor" in printed
    run = MlflowClient(result.tracking_uri).get_run(result.parent_run_id)  # type: ignore[attr-defined]
    assert run.data.metrics["screen_refused"] == REFUSED and run.data.metrics["screen_passed"] == 0


def _distance(space: object, a: Arch, b: Arch) -> int:
    """Decisions in which two members differ (those active in only one count too)."""
    da, db = space.to_decisions(a), space.to_decisions(b)  # type: ignore[attr-defined]
    return len(set(da.items()) ^ set(db.items()))


@pytest.mark.parametrize("fill", [None, 5])
def test_a_population_that_uniform_draws_cannot_fill_fills_by_mutation_of_its_start(fill: int | None) -> None:
    # A target only the start's neighbourhood meets (as a full-resolution space at a small target): uniform
    # draws are all refused; with search.fill_mutate_after the search goes on near the start instead of ending.
    from nas.core.sampling import StartFirst

    space = load_space("mobile")
    start = space.sample(np.random.default_rng(7))
    judge = _Judge(lambda a: _distance(space, a, start) <= 3)
    s = StartFirst(EvolutionSampler(space, 8, 3, 0, 200, screen=judge, max_screened=50,
                                    fill_mutate_after=fill), [start.encode()])
    assert s.ask() == start.encode()  # the start: not screened
    s.tell(start.encode(), Outcome("complete", reward=0.5))
    proposed = []
    for i in range(5):
        arch = s.ask()
        if arch is None:
            break
        proposed.append(arch)
        s.tell(arch, Outcome("complete", reward=0.4 + 0.01 * i))
    if fill is None:  # uniform draws only: the screen refuses 50 in a row and the proposals end
        assert proposed == [] and s.exhausted and s.inner.fill_mutations == 0  # type: ignore[attr-defined]
        return
    assert len(proposed) == 5 and len(set(proposed)) == 5
    assert all(_distance(space, space.decode(a), start) <= 3 for a in proposed)
    assert s.inner.fill_mutations == 5  # type: ignore[attr-defined]
    assert len(judge.refused) >= 5 * fill  # each request tried its uniform draws first


def test_fill_by_mutation_passes_uniform_draws_the_screen_accepts() -> None:
    judge = _Judge(_even)
    s = EvolutionSampler(load_space("mobile"), 4, 2, 0, 200, screen=judge, fill_mutate_after=10)
    for i in range(4):  # about half the draws pass: never ten refused in a row, so the population is drawn
        arch = s.ask()
        assert arch is not None
        s.tell(arch, Outcome("complete", reward=0.1 * i))
    assert s.fill_mutations == 0


@pytest.mark.parametrize(("overrides", "words"), [
    (["search.sampler=evolution", "search.latency_screen=1.2", "search.fill_mutate_after=0"], "integer >= 1"),
    (["search.sampler=evolution", "search.fill_mutate_after=10"], "add search.sampler=evolution and "
                                                                  "search.latency_screen"),
    (["search.fill_mutate_after=10", "search.latency_screen=1.2"], "search.latency_screen"),
])
def test_fill_by_mutation_without_a_screen_is_refused_before_any_trial(overrides: list[str], words: str) -> None:
    cfg = compose_config("+space=tiny", "target_ms=5", *overrides)
    with pytest.raises(ConfigError, match=words):
        validate(cfg)


@pytest.mark.usefixtures("ray_cluster")
def test_a_search_that_may_fill_by_mutation_counts_what_it_did(tmp_path: Path) -> None:
    result, printed = _search(tmp_path, "100", "search.latency_screen=1.2 search.fill_mutate_after=3")
    assert len(result.candidates) == 2  # type: ignore[attr-defined]  # nothing refused: both drawn
    assert "Evolution's first population: 0 proposal(s) in this run were mutations" in printed
    run = MlflowClient(result.tracking_uri).get_run(result.parent_run_id)  # type: ignore[attr-defined]
    assert run.data.metrics["fill_mutations"] == 0
