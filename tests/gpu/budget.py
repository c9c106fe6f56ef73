"""A pytest plugin of ``scripts/gpu_check.py`` (``-p tests.gpu.budget``): a test that would start
after the deadline ``$LATNAS_GPU_DEADLINE`` (seconds since the epoch) is skipped, saying so, so a
test set that runs out of time ends with a report of what ran and what did not."""

from __future__ import annotations

import os
import time

import pytest

DEADLINE_ENV = "LATNAS_GPU_DEADLINE"
BUDGET_SPENT = "the GPU check's time budget is spent"


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    deadline = os.environ.get(DEADLINE_ENV)
    if deadline and time.time() > float(deadline):
        pytest.skip(BUDGET_SPENT)
