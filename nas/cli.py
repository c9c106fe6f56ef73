"""The command line: the only module that imports Hydra and OmegaConf (the Hydra adapter).

Every ``@hydra.main`` and every ConfigStore registration is here. Each command composes its YAML
under the configuration folder (:func:`conf_dir`) with the command-line overrides, converts the
result to a plain dataclass of :mod:`nas.core.config` (``OmegaConf.to_object``) and calls a plain
function, which never sees a DictConfig:

* ``python -m nas.search``: :func:`search_main` -> :func:`nas.driver.run_search`;
* ``python -m nas.leaderboard``: :func:`leaderboard_main` -> :func:`nas.review.leaderboard.run_leaderboard`;
* ``python -m nas.export``: :func:`export_main` -> :func:`nas.review.export.run_export`;
* ``python -m nas.fidelity``: :func:`fidelity_main` -> :func:`nas.studies.fidelity.run_fidelity`;
* ``python -m nas.optimize``: :func:`optimize_main` -> :func:`nas.deploy.optimize.run_optimize`.

The built-in search spaces (``search_spaces/spaces/*.yaml``) are registered as the options of the
``space`` group, so ``+space=mobile`` picks one and ``space.stem_chs=[16]`` changes it. A user
error (a bad value, an unreachable service) prints one line and exits with status 2.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import hydra
import yaml
from hydra import compose, initialize_config_dir
from hydra.core.config_store import ConfigStore
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from nas.core.config import (
    GROUP_SCHEMAS,
    ExportConfig,
    FidelityConfig,
    LeaderboardConfig,
    OptimizeConfig,
    SearchConfig,
)
from nas.core.errors import USER_ERRORS
from search_spaces import available_spaces
from search_spaces.space import SPACES_DIR

T = TypeVar("T")


def conf_dir() -> Path:
    """The configuration folder: ``nas/conf`` in an installed wheel, the repository's ``conf/`` in a checkout."""
    spec = importlib.util.find_spec("nas.conf")
    if spec is not None and spec.submodule_search_locations:
        return Path(next(iter(spec.submodule_search_locations)))
    return Path(__file__).resolve().parent.parent / "conf"


def register_configs() -> None:
    """Register every schema in Hydra's ConfigStore, and the built-in spaces as the ``space`` group."""
    cs = ConfigStore.instance()
    cs.store(name="base_config", node=SearchConfig)
    cs.store(name="leaderboard_schema", node=LeaderboardConfig)
    cs.store(name="export_schema", node=ExportConfig)
    cs.store(name="fidelity_schema", node=FidelityConfig)
    cs.store(name="optimize_schema", node=OptimizeConfig)
    for group, schema in GROUP_SCHEMAS.items():
        cs.store(group=group, name="schema", node=schema)
    for name in available_spaces():
        cs.store(group="space", name=name, node=yaml.safe_load((SPACES_DIR / f"{name}.yaml").read_text()))


register_configs()
CONF_DIR = str(conf_dir())


def compose_search_config(*overrides: str) -> SearchConfig:
    """The search configuration ``python -m nas.search <overrides>`` would run, as a typed config.

    For programs that start searches themselves (tests, benchmarks): the same YAML, schemas and
    checks as the command line, without Hydra's output folder.

    Raises:
        hydra.errors.HydraException: an override Hydra cannot apply (naming the key).
    """
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        dcfg = compose(config_name="config", overrides=list(overrides))
    cfg = _typed(dcfg, SearchConfig)
    choices = [o.split("=", 1)[1] for o in overrides if o.lstrip("+").startswith("space=")]
    if choices:
        cfg.space_source = f"search_spaces/spaces/{choices[-1]}.yaml"
    return cfg


def _typed(dcfg: DictConfig, kind: type[T]) -> T:
    cfg = OmegaConf.to_object(dcfg)
    if not isinstance(cfg, kind):
        raise TypeError(f"the composed config is a {type(cfg).__name__}, not a {kind.__name__}")
    return cfg


def _run_or_exit(fn: Callable[[], Any]) -> Any:
    """Call ``fn``; a user error prints one line and exits with status 2."""
    try:
        return fn()
    except USER_ERRORS as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)


# ---------------------------------------------------------------------- python -m nas.search


def no_space_message() -> str:
    """What to print when no search space was chosen."""
    spaces = available_spaces()
    example = "mobile" if "mobile" in spaces else (spaces[0] if spaces else "<name>")
    return (
        "error: no search space chosen. Pick one with +space=<name>, for example:\n"
        f"  python -m nas.search +space={example} target_ms=50\n"
        f"available spaces: {', '.join(spaces)}"
    )


@hydra.main(version_base="1.3", config_path=CONF_DIR, config_name="config")
def search_main(dcfg: DictConfig) -> None:
    """``python -m nas.search +space=mobile target_ms=50``: convert the config and run the search.

    Exit status: 0 when the search finished, 2 on a user error (bad config, unreachable
    service), 130 when it was interrupted (Ctrl-C; what finished is recorded).
    """
    from nas.driver import run_search  # the search's dependencies load after the config is checked

    if dcfg.get("space") is None:
        print(no_space_message(), file=sys.stderr)
        sys.exit(2)
    cfg = _typed(dcfg, SearchConfig)
    hydra_cfg = HydraConfig.get()
    runtime = hydra_cfg.runtime
    cfg.space_source = f"search_spaces/spaces/{runtime.choices.get('space')}.yaml"
    if not cfg.resume:  # a resumed search keeps its recorded folder unless output_dir= is given
        cfg.output_dir = cfg.output_dir or runtime.output_dir
    command = ["python", "-m", "nas.search", *hydra_cfg.overrides.task]
    try:
        result = _run_or_exit(lambda: run_search(cfg, command))
    except KeyboardInterrupt:  # a second Ctrl-C, or one before the trials started: the driver said how to resume
        sys.exit(130)
    if result.status == "KILLED":
        sys.exit(130)


# ---------------------------------------------------------------------- python -m nas.leaderboard


@hydra.main(version_base="1.3", config_path=CONF_DIR, config_name="leaderboard")
def leaderboard_main(dcfg: DictConfig) -> None:
    """``python -m nas.leaderboard [search=...] [top_k=...] [sort=...] [pareto=true] [format=csv] ...``."""
    from nas.review.leaderboard import run_leaderboard

    cfg = _typed(dcfg, LeaderboardConfig)
    result = _run_or_exit(lambda: run_leaderboard(cfg))
    if not cfg.output:
        print(result.text.rstrip("\n"))
    for note in result.notes:
        print(note, file=sys.stderr if cfg.format != "table" else sys.stdout)


# ---------------------------------------------------------------------- python -m nas.export


@hydra.main(version_base="1.3", config_path=CONF_DIR, config_name="export")
def export_main(dcfg: DictConfig) -> None:
    """``python -m nas.export [candidate=...] [search=...] [train.epochs=N] [register=NAME] ...``."""
    from nas.review.export import run_export, summary

    cfg = _typed(dcfg, ExportConfig)
    result = _run_or_exit(lambda: run_export(cfg))
    print(summary(result), flush=True)


# ---------------------------------------------------------------------- python -m nas.fidelity


@hydra.main(version_base="1.3", config_path=CONF_DIR, config_name="fidelity")
def fidelity_main(dcfg: DictConfig) -> None:
    """``python -m nas.fidelity +space=mobile_cifar data=cifar10_jpeg data.path=... [k=20] ...``."""
    from nas.studies.fidelity import run_fidelity, table

    if dcfg.get("space") is None:
        print(no_space_message().replace("nas.search +space", "nas.fidelity +space").replace(" target_ms=50", ""),
              file=sys.stderr)
        sys.exit(2)
    cfg = _typed(dcfg, FidelityConfig)
    cfg.space_source = f"search_spaces/spaces/{HydraConfig.get().runtime.choices.get('space')}.yaml"
    result = _run_or_exit(lambda: run_fidelity(cfg))
    print(f"\nProxy fidelity {result.name}: {len(result.archs)} architectures, {result.computed} estimates computed "
          "now (the rest read back)\n")
    print(table(result, cfg))
    print(f"\nFiles: {result.folder} (fidelity.json, fidelity.md, fidelity.png, records.jsonl)")
    print(f"MLflow run {result.run_id}")


# ---------------------------------------------------------------------- python -m nas.optimize


@hydra.main(version_base="1.3", config_path=CONF_DIR, config_name="optimize")
def optimize_main(dcfg: DictConfig) -> None:
    """``python -m nas.optimize candidate=<arch_id> [prune.ratios=[0.3,0.5]] [precisions=[int8]] ...``."""
    from nas.deploy.optimize import run_optimize, summary

    cfg = _typed(dcfg, OptimizeConfig)
    result = _run_or_exit(lambda: run_optimize(cfg))
    print(summary(result), flush=True)
