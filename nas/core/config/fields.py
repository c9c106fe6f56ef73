"""The building blocks of the schemas and their checks: a field with allowed values, and the checks of one value.

:func:`one_of` declares a field's allowed values on the field itself; :func:`check_choices` refuses
any other value (and :mod:`nas.core.usage` lists them in a command's ``--help``). The other
functions check one value under its key and raise :class:`~nas.core.errors.ConfigError` naming it;
the group checks (:mod:`nas.core.config.checks`) and the commands' validators are made of them.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Callable, Iterable
from dataclasses import field
from typing import Any

from nas.core.errors import ConfigError
from search_spaces import SearchSpaceError
from search_spaces.references import Member, parse_member

CHOICES = "choices"
"""The metadata key of a field's allowed values (:func:`one_of`)."""
HIDDEN = "hidden"
"""The metadata key of a field the command line sets itself, left out of a command's help."""


def one_of(allowed: Iterable[str], default: Any = None, *, default_factory: Callable[[], Any] | None = None) -> Any:
    """A field whose value (or each item of a list value) must be one of ``allowed``.

    The allowed values live on the field: :func:`check_choices` refuses any other value and a
    command's ``--help`` lists them, so the two cannot differ. None means "not set" and passes.
    """
    metadata = {CHOICES: tuple(allowed)}
    if default_factory is not None:
        return field(default_factory=default_factory, metadata=metadata)
    return field(default=default, metadata=metadata)


def check_choices(cfg: Any, prefix: str = "") -> None:
    """Check every :func:`one_of` field of the config dataclass ``cfg`` and of the configs nested in it.

    Raises:
        ConfigError: naming the first key whose value is not allowed, and the allowed values.
    """
    for f in dataclasses.fields(cfg):
        value = getattr(cfg, f.name)
        allowed = f.metadata.get(CHOICES)
        if allowed is not None and value is not None:
            for item in value if isinstance(value, list) else [value]:
                choice(prefix + f.name, item, allowed)
        elif dataclasses.is_dataclass(value) and not isinstance(value, type):
            check_choices(value, f"{prefix}{f.name}.")


def choice(key: str, value: str, allowed: tuple[str, ...] | list[str]) -> None:
    """``value`` is one of ``allowed``."""
    if value not in allowed:
        raise ConfigError(key, f"{value!r} is not one of {list(allowed)}")


def run_name(name: str | None) -> None:
    """A run's ``name`` (its folder and MLflow run): letters, digits, '_', '.' and '-'."""
    if name is not None and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", name):
        raise ConfigError("name", f"use letters, digits, '_', '.' and '-' only, got {name!r}")


def int_at_least(key: str, value: int | None, minimum: int) -> None:
    """``value`` is an integer no smaller than ``minimum``."""
    if value is None or value < minimum:
        raise ConfigError(key, f"must be an integer >= {minimum}, got {value!r}")


def positive(key: str, value: float | None) -> None:
    """``value`` is a finite number above zero."""
    if value is None or not math.isfinite(value) or value <= 0:
        raise ConfigError(key, f"must be a finite number > 0, got {value!r}")


def in_range(key: str, value: float, low: float, high: float, text: str) -> None:
    """``low <= value < high``; ``text`` is the interval as the message shows it (e.g. ``[0, 1)``)."""
    if not math.isfinite(value) or not low <= value < high:
        raise ConfigError(key, f"must be in {text}, got {value!r}")


def anchor_network(key: str, spec: str) -> Member:
    """The reference member ``spec`` names, ``<reference>[@<width>][:d<depth>]``
    (:func:`search_spaces.references.parse_member`), refused under ``key``."""
    try:
        return parse_member(spec)
    except SearchSpaceError as err:
        raise ConfigError(key, str(err)) from None
