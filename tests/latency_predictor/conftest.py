"""Shared fixtures of the latency tests: a tiny network, fast protocol settings, a private slot directory."""

from __future__ import annotations

import multiprocessing as mp
from pathlib import Path
from typing import Any

import pytest

from latency_predictor.measurement.timing import MeasureConfig
from search_spaces import Arch

TINY = "act_relu-stem_c8-mb_k3_e2_c16_s2_se0.25-rb_k3_c16_s1-mb_k5_e1_c24_s2-head_c32"
TINY_SHAPE = (1, 3, 32, 32)
FAST = MeasureConfig(warmup_runs=3, warmup_s=0.01, min_runs=20, min_time_s=0.02, max_repeats=2)


@pytest.fixture
def tiny_arch() -> Arch:
    return Arch.decode(TINY)


@pytest.fixture
def slot_dir(tmp_path: Path) -> Path:
    """A slot directory of this test alone, so tests never queue behind other measurements."""
    return tmp_path / "slots"


def run_forked(jobs: list[tuple[Any, tuple[Any, ...]]], rendezvous: bool = False) -> list[Any]:
    """Run ``target(*args, out)`` for each job in its own forked process; the values each put on ``out``.

    With ``rendezvous``, each target also gets two events before ``out``: its own and the other
    job's (two jobs), to show that both reached the same point at once.
    The children only lock, sleep and wait: no torch work happens after the fork.
    """
    ctx = mp.get_context("fork")
    out: mp.Queue = ctx.Queue()  # type: ignore[type-arg]
    events = (ctx.Event(), ctx.Event())
    procs = []
    for i, (target, args) in enumerate(jobs):
        extra = (events[i], events[1 - i]) if rendezvous else ()
        procs.append(ctx.Process(target=target, args=(*args, *extra, out)))
    for p in procs:
        p.start()
    results = [out.get(timeout=60) for _ in procs]
    for p in procs:
        p.join(timeout=30)
        assert p.exitcode == 0
    return results
