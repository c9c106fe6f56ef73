"""``python -m nas.export``: export a candidate as a verified, self-contained folder.

The command line is :func:`nas.cli.export_main`; the export is :func:`nas.review.export.run_export`.
An export's ``model.pt`` loads back with ``nas.export.load_exported(folder)``.
"""

from __future__ import annotations

from nas.cli import export_main
from nas.review.export import load_exported

__all__ = ["export_main", "load_exported"]

if __name__ == "__main__":
    export_main()
