"""The Python API: the search of ``python -m nas.search``, called from Python.

    from nas.api import search

    result = search(space="mobile_cifar", target_ms=1.0, evaluator=my_module.evaluate,
                    data=my_module.datasets, overrides=["train.epochs=3", "search.n_trials=20"])
    print(result.best.arch, result.leaderboard[0])

The space, the target, the evaluator and the data are Python objects or paths; every other setting
is a command-line override (``key=value``, the keys of ``python -m nas.search --help``), composed
with the same YAML files and checked by the same rules (:func:`nas.cli.compose_search_config`).
The result is the command's :class:`~nas.driver.SearchResult`, with the candidates, the best one
and the leaderboard; the search is recorded in MLflow as the command records it.

The evaluator and the data function run in the trials, in other processes and perhaps on other
machines, so they are passed on by name: a function is named by its module and qualified name
(``my_module:evaluate``), and its module is sent to every Ray worker (``ray.ship_code``). It must
therefore be a module-level function of an importable module. One defined in the script that
calls :func:`search` is named after the script's file, which the trials import: keep the call
under ``if __name__ == "__main__":``, as for :mod:`multiprocessing`.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypedDict, Unpack

import yaml

from nas.cli import compose_search_config
from nas.core.config import FUNCTION_REF, SearchConfig
from nas.core.errors import ConfigError, UserCodeError
from nas.driver import SearchResult, run_search
from nas.trial.custom import EvalContext

__all__ = ["EvalContext", "SearchOptions", "SearchResult", "UserCodeError", "compose", "function_ref", "search"]

_running = False


def function_ref(fn: Callable[..., Any] | str, key: str) -> str:
    """``fn`` as ``module:function``, the name the trials import it by (a string is taken as one).

    Raises:
        ConfigError: a lambda, a nested function, or a function of a module that cannot be imported
            elsewhere (a notebook's, an interactive session's).
    """
    if isinstance(fn, str):
        return fn
    module = getattr(fn, "__module__", None)
    qualname = getattr(fn, "__qualname__", None)
    if not module or not qualname or "<" in qualname:
        raise ConfigError(key, f"{fn!r} is not a module-level function; the trials import it by name: define it at "
                          "the top level of a module")
    if module == "__main__":
        script = getattr(sys.modules["__main__"], "__file__", None)
        if not script:
            raise ConfigError(key, f"{qualname} is defined in an interactive session or notebook, which the trials "
                              "cannot import: define it in a .py file and import it from there")
        module = Path(script).stem
    ref = f"{module}:{qualname}"
    if not FUNCTION_REF.fullmatch(ref):
        raise ConfigError(key, f"{ref!r} cannot be imported by name (the module's file name must be a Python name)")
    return ref


def _space_overrides(space: str | Path | Mapping[str, Any]) -> tuple[list[str], dict[str, Any] | None, str | None]:
    """Overrides choosing a built-in space, or the mapping (and its source) of a YAML file or a mapping."""
    if isinstance(space, Mapping):
        return [], dict(space), "<mapping>"
    path = Path(space).expanduser()
    if isinstance(space, Path) or path.suffix in (".yaml", ".yml") or path.is_file():
        if not path.is_file():
            raise ConfigError("space", f"{str(path)!r} is not a file; give a built-in space's name, a YAML file or a "
                              "mapping")
        loaded = yaml.safe_load(path.read_text())
        if not isinstance(loaded, dict):
            raise ConfigError("space", f"{str(path)!r} does not hold a mapping (a search space)")
        return [], loaded, str(path)
    return [f"+space={space}"], None, None


@contextmanager
def _one_at_a_time() -> Iterator[None]:
    # A script that calls search() outside `if __name__ == "__main__":` calls it again when the driver
    # imports the script for its functions: refuse that second call rather than start a search inside a search.
    global _running
    if _running:
        raise ConfigError("evaluator", "nas.api.search was called while a search was starting: the script that "
                          "defines the evaluator or the data function calls search() when it is imported; put the "
                          "call under `if __name__ == \"__main__\":`")
    _running = True
    try:
        yield
    finally:
        _running = False


class SearchOptions(TypedDict, total=False):
    """The keyword arguments of :func:`search` and :func:`compose` (each may be left out).

    Attributes:
        evaluator_options: settings handed to the evaluator as ``context.options``.
        data_options: keyword arguments of the data function.
        overrides: any other setting, as on the command line (``"train.epochs=3"``, ``"search.n_trials=20"``,
            ``"latency=torch"``, ``"ray.address=auto"``, ...).
        name: the search's name (None: made from the space, the target and the time).
        output_dir: the search's folder (None: ``<home>/searches/<name>``).
        tracking_uri: the MLflow store (None: ``sqlite:///<home>/mlflow.db``).
    """

    evaluator_options: Mapping[str, Any] | None
    data_options: Mapping[str, Any] | None
    overrides: Sequence[str]
    name: str | None
    output_dir: str | Path | None
    tracking_uri: str | None


def compose(
    space: str | Path | Mapping[str, Any],
    target_ms: float,
    evaluator: Callable[..., Any] | str | None = None,
    data: Callable[..., Any] | str | None = None,
    **options: Unpack[SearchOptions],
) -> SearchConfig:
    """The configuration :func:`search` runs (the arguments are :func:`search`'s), for a look before running it.

    Raises:
        ConfigError: an argument of the wrong kind (see :func:`function_ref`).
        TypeError: a keyword argument that is none of :class:`SearchOptions`.
        hydra.errors.HydraException: an override the command line would refuse too (naming the key).
    """
    unknown = sorted(set(options) - SearchOptions.__optional_keys__)
    if unknown:  # as Python says of a named parameter: a typo must not pass as a setting left out
        raise TypeError(f"unexpected keyword argument(s) {', '.join(unknown)}; the options are "
                        f"{', '.join(SearchOptions.__annotations__)}")
    groups, mapping, source = _space_overrides(space)
    accuracy_ref = function_ref(evaluator, "evaluator") if evaluator is not None else None
    data_ref: str | None = None
    if data is not None:
        if callable(data) or (isinstance(data, str) and ":" in data):
            data_ref = function_ref(data, "data")
            groups.append("data=custom")
        else:
            groups.append(f"data={data}")  # a data option of the command line: digits, cifar10_jpeg, image_folder, ...
    if accuracy_ref is not None:
        groups.append("accuracy=custom")
    cfg = compose_search_config(*groups, *options.get("overrides", ()))
    cfg.target_ms = float(target_ms)
    if mapping is not None:
        cfg.space, cfg.space_source = mapping, str(source)
    if accuracy_ref is not None:
        cfg.accuracy.fn = accuracy_ref
    if (evaluator_options := options.get("evaluator_options")) is not None:
        cfg.accuracy.options = dict(evaluator_options)
    if data_ref is not None:
        cfg.data.fn = data_ref
    if (data_options := options.get("data_options")) is not None:
        cfg.data.options = dict(data_options)
    if (name := options.get("name")) is not None:
        cfg.name = name
    if (output_dir := options.get("output_dir")) is not None:
        cfg.output_dir = str(Path(output_dir).expanduser().resolve())
    if (tracking_uri := options.get("tracking_uri")) is not None:
        cfg.tracking.uri = tracking_uri
    return cfg


def search(
    space: str | Path | Mapping[str, Any],
    target_ms: float,
    evaluator: Callable[..., Any] | str | None = None,
    data: Callable[..., Any] | str | None = None,
    **options: Unpack[SearchOptions],
) -> SearchResult:
    """Run a search, as ``python -m nas.search`` does, and return what it found.

    Args:
        space: a built-in space's name (``"mobile_cifar"``), a space YAML file, or the space's mapping.
        target_ms: the latency target in milliseconds.
        evaluator: your evaluator (``accuracy=custom``): a module-level function
            ``evaluate(model, context) -> score | {"score": ..., <metric>: ...}``, or its name
            ``"module:function"``; None: the built-in estimator (``accuracy=...`` in ``overrides``,
            brief training by default). See :mod:`nas.trial.custom`.
        data: your data function (``data=custom``): ``datasets(**data_options) -> (train, val)``, or
            its name ``"module:function"``; or a built-in data option's name (``"digits"``,
            ``"cifar10_jpeg"`` with ``data.path=...`` in ``overrides``); None: the default (digits).
            See :mod:`nas.data.custom`.
        **options: ``evaluator_options``, ``data_options``, ``overrides`` (any other setting, as on
            the command line: ``"train.epochs=3"``, ``"search.n_trials=20"``), ``name``,
            ``output_dir``, ``tracking_uri`` (see :class:`SearchOptions`).

    Returns:
        The search's :class:`~nas.driver.SearchResult`: ``best``, ``candidates`` and ``leaderboard``
        (ranked rows), the MLflow parent run and the files written.

    Raises:
        ConfigError: a bad setting, named (before anything runs).
        UserCodeError: the evaluator or the data function cannot be imported, raises or returns
            something unusable in the driver's check before any trial (in a trial, the candidate
            FAILS with it and the search goes on).
        NASError: anything else the command would report (an unreachable cluster or store, ...).
    """
    cfg = compose(space, target_ms, evaluator, data, **options)
    with _one_at_a_time():
        return run_search(cfg)
