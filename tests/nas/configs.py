"""The search configurations the tests run: ``conf/`` composed with Hydra overrides, as
``python -m nas.search`` composes it (:func:`nas.cli.compose_search_config`)."""

from __future__ import annotations

from pathlib import Path

from nas.cli import compose_search_config
from nas.core.config import SearchConfig


def compose_config(*overrides: str, space_source: str | None = None) -> SearchConfig:
    """``conf/config.yaml`` with ``overrides`` as a typed config (``space_source``: where the
    space came from, when not the built-in space the overrides choose)."""
    cfg = compose_search_config(*overrides)
    if space_source is not None:
        cfg.space_source = space_source
    return cfg


def stored_config(folder: Path, *overrides: str) -> SearchConfig:
    """:func:`compose_config` writing its MLflow store (``mlflow.db``) and outputs (``out/``) under ``folder``."""
    return compose_config(*overrides, f"tracking.uri=sqlite:///{folder / 'mlflow.db'}", f"output_dir={folder / 'out'}")
