"""The checks of the user's own code before any trial (``accuracy=custom``, ``data=custom``).

Run by :func:`nas.driver.run_search` once the data is loaded and before anything is created: the
space and the settings must suit each other (a backbone-only space needs a custom evaluator; the
candidates' input channels must be the data's; the built-in recipe needs class indices), and the
custom evaluator is called once on the space's smallest network with a little of the data
(:func:`nas.trial.custom.preflight`), so a function that cannot be imported, raises or returns
no usable score stops the search with one clear error instead of failing every candidate.

:func:`code_to_ship` says which of the user's files go to every Ray worker
(:func:`nas.runtime.plugins.ship_paths`).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import cast

import torch

from nas.core.config import SearchConfig
from nas.core.errors import ConfigError
from nas.data import TaskData, UserData
from nas.runtime import plugins
from nas.trial.custom import Evaluator, in_chans, preflight
from search_spaces import SearchSpace


def user_refs(cfg: SearchConfig) -> dict[str, str]:
    """The user's functions of this search: setting -> ``module:function``."""
    refs = {}
    if cfg.accuracy.estimator == "custom" and cfg.accuracy.fn:
        refs["accuracy.fn"] = cfg.accuracy.fn
    if cfg.data.name == "custom" and cfg.data.fn:
        refs["data.fn"] = cfg.data.fn
    return refs


def code_to_ship(cfg: SearchConfig) -> list[Path]:
    """The user's files and folders every trial needs (none with ``ray.ship_code=false``).

    Raises:
        UserCodeError: a ``ray.py_modules`` entry that cannot be found, or a package too big to send.
    """
    if not cfg.ray.ship_code:
        return []
    return plugins.ship_paths(user_refs(cfg), list(cfg.ray.py_modules))


def check_user_code(cfg: SearchConfig, space: SearchSpace, data: TaskData, status: Callable[[str], None]) -> None:
    """Check the space, the data and the user's evaluator against each other before any trial.

    Raises:
        ConfigError: a backbone-only space without a custom evaluator; the data's input channels
            differ from ``latency.input_shape``'s.
        UserCodeError: targets the built-in recipe cannot train on; an evaluator that cannot be
            imported, raises, or returns no usable score on the space's smallest network.
    """
    estimator = cfg.accuracy.estimator
    if space.features_only and estimator != "custom":
        raise ConfigError("accuracy", f"space {space.name!r} is features_only (its networks end at the feature map, "
                          f"with no classifier): accuracy={estimator} needs a classifier; score them with "
                          "accuracy=custom accuracy.fn=<module:function>")
    if isinstance(data, UserData):
        chans = in_chans(data)
        if cfg.latency.input_shape[1] != chans:
            shape = [cfg.latency.input_shape[0], chans, *cfg.latency.input_shape[2:]]
            raise ConfigError("latency.input_shape", f"{cfg.latency.input_shape} has {cfg.latency.input_shape[1]} "
                              f"channels but data.fn's inputs have {chans} (shape {list(data.input_shape)}); the "
                              f"timed network must take what the trained one takes: latency.input_shape="
                              f"[{','.join(map(str, shape))}]")
        if estimator == "train":
            data.check_class_targets()
    if estimator != "custom":
        return
    ref = cast(str, cfg.accuracy.fn)
    evaluator = Evaluator.load(ref, cfg.accuracy.options, from_cwd=True)
    device = torch.device("cuda" if cfg.train.device != "cpu" and torch.cuda.is_available() else "cpu")
    status(f"checking accuracy.fn={ref} on the space's smallest network ({device}, a little of the data)")
    arch, score, metrics, seconds = preflight(evaluator, space, data, cfg.train.seed, cfg.train.dropout, device)
    extra = f" and {len(metrics)} metric(s) ({', '.join(sorted(metrics))})" if metrics else ""
    status(f"accuracy.fn={ref}: score {score:.4g}{extra} in {seconds:.1f} s on {arch}")
