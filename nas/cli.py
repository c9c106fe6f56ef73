"""The command line: the only module that imports Hydra and OmegaConf (the Hydra adapter).

Every ``@hydra.main`` and every ConfigStore registration is here. Each command composes its YAML
under the configuration folder (:func:`conf_dir`) with the command-line overrides, converts the
result to a plain dataclass of :mod:`nas.core.config` (``OmegaConf.to_object``) and calls a plain
function, which never sees a DictConfig:

* ``python -m nas.search``: :func:`search_main` -> :func:`nas.driver.run_search`;
* ``python -m nas.leaderboard``: :func:`leaderboard_main` -> :func:`nas.review.leaderboard.run_leaderboard`;
* ``python -m nas.export``: :func:`export_main` -> :func:`nas.deploy.export.run_export`;
* ``python -m nas.fidelity``: :func:`fidelity_main` -> :func:`nas.studies.fidelity.run_fidelity`;
* ``python -m nas.supernet``: :func:`supernet_main` -> :func:`nas.oneshot.train.run_supernet`.
* ``python -m nas.optimize``: :func:`optimize_main` -> :func:`nas.deploy.optimize.run_optimize`.

The built-in search spaces (``search_spaces/spaces/*.yaml``) are registered as the options of the
``space`` group, so ``+space=mobile`` picks one and ``space.stem_chs=[16]`` changes it. A user
error prints one line and exits with status 2: a command line Hydra refuses (a value of the wrong
type, an unknown option or key, an override it cannot parse), a bad value, an unreachable service.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import importlib.util
import os
import sys
import typing
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, TypeVar, cast

import hydra
import yaml
from hydra import compose, initialize_config_dir
from hydra.core.config_store import ConfigStore
from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig
from hydra.errors import HydraException, MissingConfigException, OverrideParseException
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import ConfigAttributeError, ConfigKeyError, OmegaConfBaseException

from nas.core.config import (
    ExportConfig,
    FidelityConfig,
    LeaderboardConfig,
    OptimizeConfig,
    SearchConfig,
    SupernetConfig,
    validate_export,
    validate_leaderboard,
)
from nas.core.errors import USER_ERRORS, ConfigError
from nas.core.usage import Group, render_help, summary
from search_spaces import available_spaces
from search_spaces.space import SPACES_DIR

T = TypeVar("T")
FULL_ERROR_ENV = "HYDRA_FULL_ERROR"
OVERRIDE_GRAMMAR = "https://hydra.cc/docs/advanced/override_grammar/basic/"


def conf_dir() -> Path:
    """The configuration folder: ``nas/conf`` in an installed wheel, the repository's ``conf/`` in a checkout."""
    spec = importlib.util.find_spec("nas.conf")
    if spec is not None and spec.submodule_search_locations:
        return Path(next(iter(spec.submodule_search_locations)))
    return Path(__file__).resolve().parent.parent / "conf"


def register_configs() -> None:
    """Register the commands' schemas in Hydra's ConfigStore, and the built-in spaces as the ``space`` group.

    The groups' YAML files (``conf/<group>/*.yaml``) need no schema entry of their own: they merge
    into the typed config of their command, which checks every key and type. So ``latency=schema``
    is not an option, and a misspelt key fails naming it.
    """
    cs = ConfigStore.instance()
    cs.store(name="base_config", node=SearchConfig)
    cs.store(name="leaderboard_schema", node=LeaderboardConfig)
    cs.store(name="export_schema", node=ExportConfig)
    cs.store(name="fidelity_schema", node=FidelityConfig)
    cs.store(name="supernet_schema", node=SupernetConfig)
    cs.store(name="optimize_schema", node=OptimizeConfig)
    for name in available_spaces():
        cs.store(group="space", name=name, node=yaml.safe_load((SPACES_DIR / f"{name}.yaml").read_text()))


SEARCH_ONLY_OPTIONS = {"data": ("custom",)}
"""Group options only a search takes: ``data=custom`` (the user's datasets, fetched in each trial)."""


def register_groups(groups: Iterable[str]) -> None:
    """Offer the options of ``groups`` (``conf/<group>/*.yaml``) to a command whose config folder is
    ``conf/review``: the review commands see these groups and no others (``search=`` is then their
    option naming a search, not the search command's ``search`` group), and not the options only a
    search takes (:data:`SEARCH_ONLY_OPTIONS`)."""
    cs = ConfigStore.instance()
    for group in groups:
        for f in sorted((Path(CONF_DIR) / group).glob("*.yaml")):
            if f.stem not in SEARCH_ONLY_OPTIONS.get(group, ()):
                cs.store(group=group, name=f.stem, node=OmegaConf.load(f))


register_configs()
CONF_DIR = str(conf_dir())
REVIEW_DIR = str(conf_dir() / "review")


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


def unknown_keys(node: Any, schema: type, prefix: str = "") -> list[tuple[str, list[str]]]:
    """Keys of a composed ``node`` its dataclass ``schema`` does not have, each with the keys its
    place does have (``+key=value`` adds keys Hydra does not check); free-form mappings
    (``options``, ``measure``, the space) are left alone."""
    hints = typing.get_type_hints(schema)
    out = []
    for key in node:
        name = str(key)
        if name not in hints:
            out.append((f"{prefix}{name}", sorted(hints)))
            continue
        sub = hints[name]
        inner = next((a for a in typing.get_args(sub) if dataclasses.is_dataclass(a)), sub)
        if dataclasses.is_dataclass(inner) and OmegaConf.is_dict(node[key]):
            out += unknown_keys(node[key], cast(type, inner), f"{prefix}{name}.")
    return out


def known_keys(schema: type, key: str) -> list[str] | None:
    """The keys the place of the dotted ``key`` has in the dataclass ``schema`` (None: a free-form mapping)."""
    node: Any = schema
    for part in key.split(".")[:-1]:
        sub = typing.get_type_hints(node).get(part)
        node = next((a for a in typing.get_args(sub) if dataclasses.is_dataclass(a)), sub)
        if not dataclasses.is_dataclass(node):
            return None
    return sorted(typing.get_type_hints(node))


def unknown_setting(key: str, known: list[str], hint: str = "") -> ConfigError:
    """The error of a key its place does not have, with the keys it does have (and the closest one)."""
    where, _, name = key.rpartition(".")
    close = difflib.get_close_matches(name, known, n=1)
    guess = f"did you mean {where + '.' if where else ''}{close[0]}? " if close else ""
    return ConfigError(key, f"unknown setting{hint}; {guess}{where or 'the top level'} has {', '.join(known)}")


def refused(err: HydraException | OmegaConfBaseException, schema: type) -> str:
    """One line for a command line Hydra refused: the key, option or override, and what is wrong with it."""
    if isinstance(err, OverrideParseException):
        problem = err.message.strip().splitlines()[0] if err.message else "cannot be parsed"
        return f"{err.override}: not an override Hydra can read ({problem}); the grammar: {OVERRIDE_GRAMMAR}"
    if isinstance(err, MissingConfigException):
        group, _, option = (err.missing_cfg_file or "").rpartition("/")
        if group and err.options:
            return f"{group}={option}: no such option; {group} has {', '.join(err.options)}"
        return str(err).strip().splitlines()[0]
    # Hydra keeps OmegaConf's error as the cause, or as the context when it raised its own while handling it.
    cause = (err.__cause__ or err.__context__) if isinstance(err, HydraException) else err
    if isinstance(cause, ConfigKeyError | ConfigAttributeError) and cause.full_key:
        known = known_keys(schema, cause.full_key)
        if known is not None:
            return str(unknown_setting(cause.full_key, known))
    if isinstance(cause, OmegaConfBaseException) and cause.full_key:
        return f"{cause.full_key}: {str(cause.msg).strip().splitlines()[0]}"
    return " ".join(str(err).split())


_user_full_error: str | None = None


def _set_full_error(value: str | None) -> None:
    if value is None:
        os.environ.pop(FULL_ERROR_ENV, None)
    else:
        os.environ[FULL_ERROR_ENV] = value


def _hydra_main(main: Callable[[], None], schema: type) -> None:
    """Call a ``@hydra.main`` function; a command line Hydra refuses prints one line and exits with status 2.

    Hydra reports its own errors over several lines and exits 1, unless ``$HYDRA_FULL_ERROR`` is
    1: then it raises them, typed. So the variable is set while Hydra composes the config, and the
    command itself (:func:`_entry_point`'s body) starts with the user's own setting back, leaving its errors
    to Hydra as before. A user who set ``HYDRA_FULL_ERROR=1`` gets Hydra's traceback.
    """
    global _user_full_error
    _user_full_error = os.environ.get(FULL_ERROR_ENV)
    _set_full_error("1")
    try:
        main()
    except (HydraException, OmegaConfBaseException) as err:
        if _user_full_error == "1":
            raise
        print(f"error: {refused(err, schema)}", file=sys.stderr)
        sys.exit(2)
    finally:
        _set_full_error(_user_full_error)


def _entry_point(command: str, schema: type, config_dir: str, config_name: str, groups: Iterable[str] = ()
                 ) -> Callable[[Callable[[DictConfig], None]], Callable[[], None]]:
    """``python -m <command>`` made of its body, which is called with the config Hydra composed from
    ``config_name`` in ``config_dir``: the ``groups`` offered (:func:`register_groups`), the help when
    asked (:func:`exit_with_help_if_asked`), the user's YAML files checked (:func:`check_user_yaml`),
    then the ``@hydra.main`` function, a command line Hydra refuses told in one line (:func:`_hydra_main`).
    """

    def entry(body: Callable[[DictConfig], None]) -> Callable[[], None]:
        @hydra.main(version_base="1.3", config_path=config_dir, config_name=config_name)
        @functools.wraps(body)
        def composed(dcfg: DictConfig) -> None:
            _set_full_error(_user_full_error)  # the body's own errors: Hydra's setting as the user left it
            body(dcfg)

        def main() -> None:
            register_groups(groups)
            exit_with_help_if_asked(sys.argv[1:], command, schema, config_dir, config_name)
            check_user_yaml(sys.argv[1:])
            _hydra_main(composed, schema)

        main.__doc__ = body.__doc__
        return main

    return entry


def exit_with_help_if_asked(argv: list[str], command: str, schema: type, config_dir: str, config_name: str) -> None:
    """Print the command's help and exit (status 0) when ``argv`` asks for it (``--help`` or ``-h``).

    The help lists every key of ``schema`` with its default (the composed YAML), its allowed
    values and its docstring, and the options of each group (:func:`nas.core.usage.render_help`).
    It runs before the command's heavy imports (torch, Ray, MLflow), in about a second.
    """
    if "--help" not in argv and "-h" not in argv:
        return
    with initialize_config_dir(config_dir=config_dir, version_base="1.3"):
        dcfg = compose(config_name=config_name, return_hydra_config=True)
        loader = GlobalHydra.instance().config_loader()
        choices = dcfg.hydra.runtime.choices
        groups = {f.name: Group(tuple(options), choices.get(f.name)) for f in dataclasses.fields(schema)
                  if (options := loader.get_group_options(f.name))}
    defaults = cast(dict[str, Any], OmegaConf.to_container(dcfg, resolve=False))
    defaults.pop("hydra", None)
    # Run as ``python -m nas.<command>``, the command's module is __main__: its docstring says what it does.
    about = summary(getattr(sys.modules.get("__main__"), "__doc__", None)) or summary(schema.__doc__)
    print(render_help(command, about, schema, defaults, groups))
    sys.exit(0)


def check_user_yaml(argv: list[str]) -> None:
    """Parse every YAML file of the folders added with ``hydra.searchpath=[file://...]`` before Hydra does:
    a syntax error in a user's space or group file is one line naming the file, line and column
    (exit status 2), not Hydra's traceback."""
    folders: list[Path] = []
    for arg in argv:
        key, _, value = arg.lstrip("+").partition("=")
        if key == "hydra.searchpath":
            for item in value.strip("[]").split(","):
                item = item.strip().strip("'\"")
                if item.startswith("file://"):
                    folders.append(Path(item[len("file://"):]))
    for folder in folders:
        for f in sorted(folder.rglob("*.yaml")) if folder.is_dir() else []:
            try:
                yaml.safe_load(f.read_text())
            except yaml.MarkedYAMLError as err:
                mark = err.problem_mark
                where = f"line {mark.line + 1}, column {mark.column + 1}" if mark is not None else "somewhere"
                print(f"error: {f}: {where}: {err.problem or err}", file=sys.stderr)
                sys.exit(2)
            except (yaml.YAMLError, OSError, UnicodeDecodeError) as err:
                print(f"error: {f}: not valid YAML: {err}", file=sys.stderr)
                sys.exit(2)


def _typed(dcfg: DictConfig, kind: type[T]) -> T:
    extra = unknown_keys(dcfg, kind)
    if extra:
        key, known = extra[0]
        raise unknown_setting(key, known, " (added with '+'?)")
    try:
        cfg = OmegaConf.to_object(dcfg)
    except OmegaConfBaseException as err:  # e.g. an interpolation ${...} that names no key
        raise ConfigError(str(err.full_key), str(err.msg).strip().splitlines()[0]) from None
    if not isinstance(cfg, kind):
        raise TypeError(f"the composed config is a {type(cfg).__name__}, not a {kind.__name__}")
    return cfg


def _run_or_exit(fn: Callable[[], Any]) -> Any:
    """Call ``fn``; a user error prints one line (with the notes added to it on its way up) and exits with status 2."""
    try:
        return fn()
    except USER_ERRORS as err:
        print("error: " + "; ".join([str(err), *getattr(err, "__notes__", [])]), file=sys.stderr)
        sys.exit(2)


# ---------------------------------------------------------------------- python -m nas.search


def no_space_message(command: str = "nas.search", rest: str = " target_ms=50") -> str:
    """What ``python -m <command>`` prints when no search space was chosen (``rest``: the example's other settings)."""
    spaces = available_spaces()
    example = "mobile" if "mobile" in spaces else (spaces[0] if spaces else "<name>")
    return (
        "error: no search space chosen. Pick one with +space=<name>, for example:\n"
        f"  python -m {command} +space={example}{rest}\n"
        f"available spaces: {', '.join(spaces)}"
    )


def _with_space(dcfg: DictConfig, kind: type[T], command: str, rest: str = "") -> T:
    """The typed config of a command that searches a space: without ``+space=`` it prints
    :func:`no_space_message` and exits with status 2; the space's source file is noted for errors."""
    if dcfg.get("space") is None:
        print(no_space_message(command, rest), file=sys.stderr)
        sys.exit(2)
    cfg = _run_or_exit(lambda: _typed(dcfg, kind))
    cfg.space_source = f"search_spaces/spaces/{HydraConfig.get().runtime.choices.get('space')}.yaml"
    return cast(T, cfg)


@_entry_point("nas.search", SearchConfig, CONF_DIR, "config")
def search_main(dcfg: DictConfig) -> None:
    """``python -m nas.search +space=mobile target_ms=50``: convert the config and run the search.

    Exit status: 0 when the search finished, 2 on a user error (bad config, unreachable
    service) or a write the record refused (a full disk; what was recorded is kept and
    ``resume=true`` continues), 130 when it was interrupted (Ctrl-C, or SIGTERM once Ray has
    started; what finished is recorded).
    """
    cfg = _with_space(dcfg, SearchConfig, "nas.search", " target_ms=50")
    from nas.driver import run_search  # the search's dependencies (torch, Ray, MLflow) load once the config is typed
    command = ["python", "-m", "nas.search", *HydraConfig.get().overrides.task]
    try:
        result = _run_or_exit(lambda: run_search(cfg, command))
    except KeyboardInterrupt:  # a second Ctrl-C, or one before the trials started: the driver said how to resume
        sys.exit(130)
    if result.status == "KILLED":
        sys.exit(130)


# ---------------------------------------------------------------------- python -m nas.leaderboard


@_entry_point("nas.leaderboard", LeaderboardConfig, REVIEW_DIR, "leaderboard", ["tracking"])
def leaderboard_main(dcfg: DictConfig) -> None:
    """``python -m nas.leaderboard [search=...] [top_k=...] [sort=...] [pareto=true] [format=csv] ...``."""
    cfg = _run_or_exit(lambda: _typed(dcfg, LeaderboardConfig))
    _run_or_exit(lambda: validate_leaderboard(cfg))  # before the review's imports (MLflow, torch): a typo is quick
    from nas.review.leaderboard import run_leaderboard
    result = _run_or_exit(lambda: run_leaderboard(cfg))
    if not cfg.output:
        print(result.text.rstrip("\n"))
    for note in result.notes:
        print(note, file=sys.stderr if cfg.format != "table" else sys.stdout)


# ---------------------------------------------------------------------- python -m nas.export


@_entry_point("nas.export", ExportConfig, REVIEW_DIR, "export", ["tracking", "train", "data"])
def export_main(dcfg: DictConfig) -> None:
    """``python -m nas.export [candidate=...] [search=...] [train.epochs=N] [register=NAME] ...``."""
    cfg = _run_or_exit(lambda: _typed(dcfg, ExportConfig))
    _run_or_exit(lambda: validate_export(cfg))  # before the export's imports (MLflow, torch): a typo is quick
    from nas.deploy.export import run_export, summary
    result = _run_or_exit(lambda: run_export(cfg, log=lambda line: print(line, flush=True)))
    print(summary(result), flush=True)


# ---------------------------------------------------------------------- python -m nas.fidelity


@_entry_point("nas.fidelity", FidelityConfig, CONF_DIR, "fidelity")
def fidelity_main(dcfg: DictConfig) -> None:
    """``python -m nas.fidelity +space=mobile_cifar data=cifar10_jpeg data.path=... [k=20] ...``."""
    cfg = _with_space(dcfg, FidelityConfig, "nas.fidelity")
    from nas.studies.fidelity import run_fidelity, table
    try:
        result = _run_or_exit(lambda: run_fidelity(cfg))
    except KeyboardInterrupt:  # run_fidelity said how many estimates are recorded and how to go on
        sys.exit(130)
    print(f"\nProxy fidelity {result.name}: {len(result.archs)} architectures, {result.computed} estimates computed "
          "now (the rest read back)\n")
    print(table(result, cfg))
    print(f"\nFiles: {result.folder} (fidelity.json, fidelity.md, fidelity.png, records.jsonl)")
    print(f"MLflow run {result.run_id}")


# ---------------------------------------------------------------------- python -m nas.supernet


@_entry_point("nas.supernet", SupernetConfig, CONF_DIR, "supernet")
def supernet_main(dcfg: DictConfig) -> None:
    """``python -m nas.supernet +space=mobile_cifar data=cifar10_jpeg data.path=... [train.epochs=N] ...``
    (under ``torchrun``: one process per GPU or CPU share, data-parallel).

    Exit status: 0 when trained, 2 on a user error, 130 when interrupted (the last epoch's
    checkpoint is kept: the same command continues from it).
    """
    cfg = _with_space(dcfg, SupernetConfig, "nas.supernet")
    from nas.oneshot.train import run_supernet
    try:
        result = _run_or_exit(lambda: run_supernet(cfg))
    except KeyboardInterrupt:
        print("\nInterrupted; the checkpoint of the last finished epoch is kept: run the same command to continue.",
              file=sys.stderr)
        sys.exit(130)
    if result.run_id is not None:
        print(f"Supernet {result.name}: {result.epochs} epochs, {result.train_seconds:.0f} s of training "
              f"({result.world_size} process(es)); checkpoint {result.checkpoint}")
        print(f"MLflow run {result.run_id}; search with it: accuracy=supernet accuracy.checkpoint={result.checkpoint}")


# ---------------------------------------------------------------------- python -m nas.optimize


@_entry_point("nas.optimize", OptimizeConfig, CONF_DIR, "optimize")
def optimize_main(dcfg: DictConfig) -> None:
    """``python -m nas.optimize candidate=<arch_id> [prune.ratios=[0.3,0.5]] [precisions=[int8]] ...``."""
    cfg = _run_or_exit(lambda: _typed(dcfg, OptimizeConfig))
    from nas.deploy.optimize import run_optimize, summary
    result = _run_or_exit(lambda: run_optimize(cfg))
    print(summary(result), flush=True)
