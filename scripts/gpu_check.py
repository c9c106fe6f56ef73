"""The GPU smoke check (see :mod:`benchmarks.gpu_check`): ``python scripts/gpu_check.py --out gpu_check.json``.

Runs every check of LatNAS's GPU and TensorRT paths on this machine and writes one JSON record;
on a machine without a GPU it says which checks were skipped and why. The logic lives in the
repository's ``benchmarks/`` folder; this script runs the checkout it belongs to, from any folder.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.gpu_check import main

if __name__ == "__main__":
    sys.exit(main())
