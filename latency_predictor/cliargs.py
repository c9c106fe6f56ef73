"""Command-line helpers shared by the collect and train commands."""

from __future__ import annotations

from collections.abc import Sequence

from latency_predictor.errors import ConfigError


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
