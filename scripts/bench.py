"""The LatNAS benchmark suite (see :mod:`benchmarks.suite`): ``python scripts/bench.py --help``.

The suite lives in the repository's ``benchmarks/`` folder (it is not part of the installed
package); this script runs the suite of the checkout it belongs to, from any folder.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.suite import main

if __name__ == "__main__":
    sys.exit(main())
