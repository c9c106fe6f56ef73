"""``python -m nas.export``: export a candidate as a verified, self-contained folder.

The command line is :func:`nas.cli.export_main`; the export is :func:`nas.deploy.export.run_export`.
An export's ``model.pt`` loads back with ``nas.export.load_exported(folder)``.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from nas.cli import export_main

if TYPE_CHECKING:
    from torch import nn

__all__ = ["export_main", "load_exported"]


def load_exported(folder: str | Path) -> nn.Module:
    """The exported network in ``folder``, with its trained weights, on the CPU and in eval mode
    (:func:`nas.deploy.export.load_exported`, imported when called: the command's help and config
    errors do not wait for torch and MLflow).

    Raises:
        ExportError: the folder lacks ``arch.json`` or ``model.pt``, or they do not match.
    """
    from nas.deploy.export import load_exported as load

    return load(folder)

if __name__ == "__main__":
    export_main()
