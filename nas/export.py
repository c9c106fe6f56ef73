"""``python -m nas.export``: export a candidate as a verified, self-contained folder.

The command line is :func:`nas.cli.export_main`; the export is :func:`nas.review.export.run_export`.
"""

from __future__ import annotations

from nas.cli import export_main

if __name__ == "__main__":
    export_main()
