"""``python -m nas.optimize``: an exported candidate's deployment variants (INT8, FP16, pruned), each verified.

The command line is :func:`nas.cli.optimize_main`; the work is :func:`nas.deploy.optimize.run_optimize`.
"""

from __future__ import annotations

from nas.cli import optimize_main

if __name__ == "__main__":
    optimize_main()
