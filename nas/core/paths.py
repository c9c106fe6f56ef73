"""Where a project's files go by default: one home folder, ``.latnas/`` in the launch folder.

Everything LatNAS writes for a project, unless a setting says otherwise, lands under the home:

* ``mlflow.db``: the MLflow store (``tracking.uri``), and ``mlartifacts/`` beside it;
* ``searches/<name>/``: one folder per search (``output_dir``): its config, leaderboard, best
  architecture, log and Ray Tune's state;
* ``exports/<arch_id>/``: exported networks (``nas.export output_dir=``);
* ``plots/``: Pareto plots (``nas.leaderboard plot_path=``);
* ``fidelity/<name>/``: proxy-fidelity studies;
* ``datasets/``, ``predictors/``: latency datasets and predictors (``latency_predictor.collect``).

``$LATNAS_HOME`` moves the home elsewhere (an absolute path, or one relative to the launch folder).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

HOME_ENV = "LATNAS_HOME"
HOME_NAME = ".latnas"


def project_home() -> Path:
    """The home folder: ``$LATNAS_HOME``, else ``.latnas`` in the current folder (absolute, not created)."""
    configured = os.environ.get(HOME_ENV, "").strip()
    return (Path(configured).expanduser() if configured else Path.cwd() / HOME_NAME).resolve()


def default_tracking_uri() -> str:
    """``sqlite:///<home>/mlflow.db`` (absolute)."""
    return f"sqlite:///{project_home() / 'mlflow.db'}"


def unwritable(folder: Path) -> str | None:
    """Why files cannot be written in ``folder`` (created if missing), or None when they can.

    Nothing is created: the nearest existing folder is checked for permission and by a probe file
    (a read-only file system refuses even the root user, whom permissions do not stop).
    """
    existing = folder
    while not existing.exists():
        if existing.parent == existing:
            return "no part of the path exists"
        existing = existing.parent
    if not existing.is_dir():
        return f"{str(existing)!r} is a file, not a folder"
    if not os.access(existing, os.W_OK | os.X_OK):
        return f"{str(existing)!r} is not writable"
    try:
        fd, probe = tempfile.mkstemp(dir=existing, prefix=".latnas-write-probe-")
    except OSError as err:
        return f"{str(existing)!r} cannot be written ({err.strerror or err})"
    os.close(fd)
    os.unlink(probe)
    return None
