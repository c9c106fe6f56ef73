"""``python -m nas.search +space=mobile target_ms=50``: the command line (the Hydra adapter).

The only module that imports Hydra and OmegaConf. It registers the schemas of
:mod:`nas.config` in Hydra's ConfigStore, composes ``conf/config.yaml`` with the command-line
overrides, converts the result to a plain :class:`~nas.config.SearchConfig` and calls
:func:`nas.driver.run_search`. Without ``+space=...`` it lists the spaces and exits non-zero.
"""

from __future__ import annotations

import sys
from pathlib import Path

import hydra
from hydra.core.config_store import ConfigStore
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from nas.config import GROUP_SCHEMAS, SearchConfig
from nas.driver import USER_ERRORS, SearchResult, run_search
from search_spaces import available_spaces

CONF_DIR = Path(__file__).resolve().parent.parent / "conf"

__all__ = ["SearchResult", "main", "register_configs", "run_search"]


def register_configs() -> None:
    """Register the schemas in Hydra's ConfigStore: ``base_config`` and ``<group>/schema``."""
    cs = ConfigStore.instance()
    cs.store(name="base_config", node=SearchConfig)
    for group, schema in GROUP_SCHEMAS.items():
        cs.store(group=group, name="schema", node=schema)


def no_space_message() -> str:
    """What to print when no search space was chosen."""
    spaces = available_spaces()
    example = "mobile" if "mobile" in spaces else (spaces[0] if spaces else "<name>")
    return (
        "error: no search space chosen. Pick one with +space=<name>, for example:\n"
        f"  python -m nas.search +space={example} target_ms=50\n"
        f"available spaces (conf/space/): {', '.join(spaces)}"
    )


register_configs()


@hydra.main(version_base="1.3", config_path=str(CONF_DIR), config_name="config")
def main(dcfg: DictConfig) -> None:
    """Convert the composed config and run the search.

    Exit status: 0 when the search finished, 2 on a user error (bad config, unreachable
    service), 130 when it was interrupted (Ctrl-C; what finished is recorded).
    """
    if dcfg.get("space") is None:
        print(no_space_message(), file=sys.stderr)
        sys.exit(2)
    cfg = OmegaConf.to_object(dcfg)
    if not isinstance(cfg, SearchConfig):
        raise TypeError(f"the composed config is a {type(cfg).__name__}, not a SearchConfig")
    hydra_cfg = HydraConfig.get()
    runtime = hydra_cfg.runtime
    cfg.space_source = f"conf/space/{runtime.choices.get('space')}.yaml"
    if not cfg.resume:  # a resumed search keeps its recorded folder unless output_dir= is given
        cfg.output_dir = cfg.output_dir or runtime.output_dir
    command = ["python", "-m", "nas.search", *hydra_cfg.overrides.task]
    try:
        result = run_search(cfg, command)
    except USER_ERRORS as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:  # a second Ctrl-C, or one before the trials started: the driver said how to resume
        sys.exit(130)
    if result.status == "KILLED":
        sys.exit(130)


if __name__ == "__main__":
    main()
