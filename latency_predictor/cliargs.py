"""Command-line helpers shared by the collect and train commands."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from latency_predictor.errors import ConfigError
from latency_predictor.measurement.timing import MeasureConfig


def key_value_args(argv: Sequence[str], flags: Sequence[str] = ()) -> list[str]:
    """Turn ``key=value`` / ``+key=value`` arguments into ``--key value`` (``_`` becomes ``-``).

    This accepts the Hydra-style form the search uses (``+space=mobile latency=onnxruntime``)
    without depending on Hydra. ``flags`` are boolean options: ``key=true`` becomes ``--key``,
    ``key=false`` is dropped.

    Raises:
        ConfigError: a flag given a value other than true/false.
    """
    out: list[str] = []
    for arg in argv:
        key, sep, value = arg.partition("=")
        if not sep or arg.startswith("-"):
            out.append(arg)
            continue
        name = key.lstrip("+")
        opt = "--" + name.replace("_", "-")
        if name in flags:
            if value.lower() in ("true", "1", "yes"):
                out.append(opt)
            elif value.lower() not in ("false", "0", "no"):
                raise ConfigError(f"{name} takes true or false, got {value!r}")
        else:
            out += [opt, value]
    return out


PROTOCOL_ARGS: tuple[str, ...] = ("warmup_runs", "warmup_s", "min_runs", "min_time_s", "max_time_s")
"""The measurement-protocol options every measuring command takes (``--warmup-runs`` ...)."""


def add_protocol_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``--warmup-runs``, ``--warmup-s``, ``--min-runs``, ``--min-time-s``, ``--max-time-s``,
    defaulting to :class:`~latency_predictor.measurement.timing.MeasureConfig`'s values."""
    d = MeasureConfig()
    for name in PROTOCOL_ARGS:
        default = getattr(d, name)
        parser.add_argument("--" + name.replace("_", "-"), type=type(default), default=default)


def protocol_from_args(args: argparse.Namespace, **more: Any) -> MeasureConfig:
    """The :class:`MeasureConfig` of parsed :func:`add_protocol_arguments` options, plus ``more``."""
    return MeasureConfig(**{name: getattr(args, name) for name in PROTOCOL_ARGS}, **more)
