"""The ``figures`` fixture of the tests on a real GPU: what a test measured, for the GPU check's record."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.gpu.figures import write_figures


@pytest.fixture
def figures(request: pytest.FixtureRequest) -> Callable[..., None]:
    """``figures(name=value, ...)`` writes this test's figures where ``scripts/gpu_check.py`` collects
    them (:func:`tests.gpu.figures.write_figures`); a test calls it before it asserts, so a failure keeps them."""

    def write(**values: Any) -> None:
        write_figures(request.node.nodeid, values)

    return write
