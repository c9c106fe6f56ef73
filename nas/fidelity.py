"""``python -m nas.fidelity +space=... data=...``: how well do cheap accuracy estimates rank networks?

The command line is :func:`nas.cli.fidelity_main`; the study is :func:`nas.studies.fidelity.run_fidelity`.
"""

from __future__ import annotations

from nas.cli import fidelity_main

if __name__ == "__main__":
    fidelity_main()
