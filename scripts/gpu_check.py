"""The GPU smoke check (see :mod:`benchmarks.gpu_check`): ``python scripts/gpu_check.py --out gpu_check.json``.

Runs the tests marked ``gpu`` and ``tensorrt`` (the correctness checks of LatNAS's GPU and TensorRT
paths, in ``tests/gpu/``, and the other GPU tests) on this machine and writes one JSON record with
the versions, each test's outcome and its figures; on a machine without a GPU it records the
versions and says that the test sets were skipped. The logic lives in the repository's
``benchmarks/`` folder; this script runs the checkout it belongs to, from any folder.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.gpu_check import main

if __name__ == "__main__":
    sys.exit(main())
