"""The search configurations the tests run: ``conf/`` composed with Hydra overrides, as
``python -m nas.search`` composes it."""

from __future__ import annotations

from pathlib import Path

from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from nas.config import SearchConfig
from nas.search import CONF_DIR

TINY_SOURCE = "conf/space/tiny.yaml"


def compose_config(*overrides: str, space_source: str | None = TINY_SOURCE) -> SearchConfig:
    """``conf/config.yaml`` with ``overrides`` as a typed config (``space_source``: where the
    space came from, as the command line records it; the overrides choose the space itself)."""
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        dcfg = compose(config_name="config", overrides=list(overrides))
    cfg = OmegaConf.to_object(dcfg)
    assert isinstance(cfg, SearchConfig)
    if space_source is not None:
        cfg.space_source = space_source
    return cfg


def stored_config(folder: Path, *overrides: str) -> SearchConfig:
    """:func:`compose_config` writing its MLflow store (``mlflow.db``) and outputs (``out/``) under ``folder``."""
    return compose_config(*overrides, f"tracking.uri=sqlite:///{folder / 'mlflow.db'}", f"output_dir={folder / 'out'}")
