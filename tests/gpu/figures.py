"""Where a test on a real GPU writes its figures (the p50s it measured, how far an engine's outputs
were from PyTorch's): one JSON line per call, to the file ``$LATNAS_GPU_FIGURES`` names.
``scripts/gpu_check.py`` sets it and puts the figures in its record beside each test's outcome;
without it they are not written. Light on purpose (no torch): the GPU check imports it too.
"""

from __future__ import annotations

import json
import os
from typing import Any

import numpy as np

FIGURES_ENV = "LATNAS_GPU_FIGURES"
"""The environment variable naming the JSON-lines file the tests write their figures to."""


def write_figures(test: str, figures: dict[str, Any]) -> None:
    """Append ``{"test": test, "figures": figures}`` to the file ``$LATNAS_GPU_FIGURES`` names, if it is set."""
    path = os.environ.get(FIGURES_ENV)
    if not path:
        return
    with open(path, "a") as f:
        f.write(json.dumps({"test": test, "figures": figures}, default=_jsonable) + "\n")


def _jsonable(x: object) -> object:
    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, (np.ndarray, tuple, set)):
        return list(x.tolist() if isinstance(x, np.ndarray) else x)
    return str(x)
