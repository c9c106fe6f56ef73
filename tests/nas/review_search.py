"""One small real search shared by the leaderboard, export and anchor tests (run once per test session).

Its target is relative to an anchor network (``target_anchor``), so that the review commands are
tested on a record with ``x_anchor``; a target in milliseconds is what the end-to-end searches use."""

from __future__ import annotations

import contextlib
import io
from dataclasses import dataclass
from pathlib import Path

import pytest

from nas.driver import run_search
from tests.nas.configs import compose_config

NAME = "review"


@dataclass(frozen=True)
class SmallSearch:
    """Where the shared search was recorded and what it found."""

    uri: str
    name: str
    parent_run_id: str
    arch_ids: tuple[str, ...]
    best_arch_ids: frozenset[str]
    best_run_ids: frozenset[str]
    completed: int
    folder: Path
    printed: str


_CACHE: dict[str, SmallSearch] = {}


def small_search_once(tmp_path_factory: pytest.TempPathFactory) -> SmallSearch:
    """Run a 3-trial search of the tiny space on digits (1 epoch, 32x32 latency), once per session, with
    its target relative to MobileNetV2 x0.35 (in its 32x32 layout): at most a tenth of its latency,
    about the size of the tiny space's networks."""
    if NAME not in _CACHE:
        folder = tmp_path_factory.mktemp("review-search")
        uri = f"sqlite:///{folder / 'mlflow.db'}"
        cfg = compose_config(
            "+space=tiny", "target_anchor=mobilenetv2_100@0.35", "target_x=0.1", "latency.anchor_rounds=2",
            "search.n_trials=3", "search.max_concurrent=2",
            "data.max_train_samples=256", "data.max_val_samples=128", "train.epochs=1",
            "latency.input_shape=[1,3,32,32]", "latency.measure.min_runs=20", "latency.measure.min_time_s=0.1",
            "latency.measure.max_time_s=1.0", "latency.measure.max_repeats=1", f"tracking.uri={uri}",
            f"output_dir={folder / 'out'}", "progress=false", f"name={NAME}",
        )
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            result = run_search(cfg)
        assert result.best is not None, "the shared search completed no candidate"
        # Rewards can tie on a small validation set: every candidate with the best reward is "the best".
        tops = [r for r in result.candidates if r.status == "COMPLETED" and r.reward == result.best.reward]
        _CACHE[NAME] = SmallSearch(
            uri=uri, name=NAME, parent_run_id=result.parent_run_id,
            arch_ids=tuple(r.arch_id for r in result.candidates), best_arch_ids=frozenset(r.arch_id for r in tops),
            best_run_ids=frozenset(str(r.run_id) for r in tops),
            completed=sum(r.status == "COMPLETED" for r in result.candidates), folder=folder,
            printed=printed.getvalue(),
        )
    return _CACHE[NAME]
