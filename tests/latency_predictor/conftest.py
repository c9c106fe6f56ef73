"""Shared fixtures of the latency tests: a tiny network, fast protocol settings, a private slot directory."""

from __future__ import annotations

from pathlib import Path

import pytest

from latency_predictor.timing import MeasureConfig
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
