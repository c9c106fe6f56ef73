"""The LatNAS benchmark suite (see :mod:`nas.bench.suite`): ``python scripts/bench.py --help``."""

from __future__ import annotations

import sys

from nas.bench.suite import main

if __name__ == "__main__":
    sys.exit(main())
