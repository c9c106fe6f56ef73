"""A command's ``--help``, made from its config schema: every key with its default, allowed values and meaning.

Nothing here is written by hand: the keys and the nesting come from the config dataclasses of
:mod:`nas.core.config`, the text from their docstrings (the class's first paragraph and its
``Attributes:`` section), the allowed values from the fields (:func:`nas.core.config.one_of`),
and the defaults and group options from the composed configuration, which the command line
(:mod:`nas.cli`) passes in. So the help cannot fall behind the checks.
"""

from __future__ import annotations

import dataclasses
import inspect
import re
import shutil
import textwrap
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from nas.core.config import CHOICES, HIDDEN

_ROLE = re.compile(r":[a-z]+:`(~?)([^`]+)`")
_NONE = re.compile(r"\bNone\b")
_WIDTH = 100


@dataclass(frozen=True)
class Group:
    """A config group a command offers (``group=option``).

    Attributes:
        options: the options Hydra finds for it.
        default: the option the command's defaults pick; None: none, added with ``+group=<option>``.
    """

    options: tuple[str, ...]
    default: str | None


def plain(text: str) -> str:
    """Docstring markup as plain text: ````x```` -> ``x``, ``:func:`~a.b``` -> ``b``, ``:mod:`a.b``` -> ``a.b``,
    and Python's None as the command line writes it, null."""
    text = _ROLE.sub(lambda m: m.group(2).rsplit(".", 1)[-1] if m.group(1) else m.group(2), text)
    return " ".join(_NONE.sub("null", text.replace("``", "")).split())


def summary(doc: str | None) -> str:
    """The first paragraph of a docstring, as plain text."""
    return plain(inspect.cleandoc(doc or "").split("\n\n", 1)[0])


def attribute_docs(cls: type) -> dict[str, str]:
    """The ``Attributes:`` section of a class's Google-style docstring: attribute name -> plain text."""
    out: dict[str, list[str]] = {}
    current: list[str] | None = None
    inside = False
    for line in inspect.cleandoc(cls.__doc__ or "").splitlines():
        if line.strip() == "Attributes:":
            inside = True
            continue
        if not inside:
            continue
        indent = len(line) - len(line.lstrip())
        if line.strip() and indent < 4:
            break
        m = re.match(r" {4}(\w+)(?: \([^)]*\))?: ?(.*)", line)
        if m:
            current = out.setdefault(m.group(1), [])
            current.append(m.group(2))
        elif current is not None and line.strip():
            current.append(line.strip())
    return {name: plain(" ".join(parts)) for name, parts in out.items()}


def show(value: Any) -> str:
    """A default as it is written on the command line: null, true, 3, [1,3,32,32], {a: 1}."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, list):
        return "[" + ",".join(show(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {show(v)}" for k, v in value.items()) + "}"
    return str(value)


def _dataclass_of(hint: Any) -> type | None:
    """The dataclass a field's type names (``X`` or ``X | None``), else None."""
    for candidate in (hint, *typing.get_args(hint)):
        if isinstance(candidate, type) and dataclasses.is_dataclass(candidate):
            return candidate
    return None


def _options(group: Group) -> str:
    return ", ".join(f"{o} (the default)" if o == group.default else o for o in group.options)


def _is_mapping(hint: Any) -> bool:
    """Whether a field's type is a mapping (``dict[...]`` or ``dict[...] | None``)."""
    return any(typing.get_origin(h) is dict or h is dict for h in (hint, *typing.get_args(hint)))


def _row(left: str, text: str, column: int, width: int) -> list[str]:
    lead = f"  {left}"
    if not text:
        return [lead]
    indent = " " * (column + 4)
    if len(left) > column:  # a long key=default: its text starts on the next line
        return [lead, *textwrap.wrap(text, width, initial_indent=indent, subsequent_indent=indent)]
    return textwrap.wrap(text, width, initial_indent=lead.ljust(column + 4), subsequent_indent=indent)


def render_help(command: str, about: str, schema: type, defaults: Mapping[str, Any], groups: Mapping[str, Group],
                width: int | None = None) -> str:
    """The help of ``python -m <command>``: its options, grouped as its config nests them.

    Args:
        command: the module, e.g. ``nas.leaderboard``.
        about: what the command does (one paragraph).
        schema: the command's config dataclass.
        defaults: the composed configuration (nested mappings), whose values are the defaults shown.
        groups: the config groups the command offers, by key.
        width: the line width (None: the terminal's, at most 100 columns).
    """
    width = width or min(_WIDTH, shutil.get_terminal_size((_WIDTH, 24)).columns)
    sections: list[tuple[str, list[tuple[str, str]]]] = []

    def walk(cls: type, values: Mapping[str, Any], prefix: str, rows: list[tuple[str, str]]) -> None:
        hints = typing.get_type_hints(cls)
        docs = attribute_docs(cls)
        for f in dataclasses.fields(cls):
            if f.metadata.get(HIDDEN):
                continue
            key, text = prefix + f.name, docs.get(f.name, "")
            allowed = f.metadata.get(CHOICES)
            if allowed:
                text = f"{text} One of: {', '.join(allowed)}.".strip()
            value = values.get(f.name) if isinstance(values, Mapping) else None
            inner = _dataclass_of(hints[f.name])
            # A group fills a config node; a plain key of the same name (nas.export's space) is not one.
            group = groups.get(key) if inner is not None or _is_mapping(hints[f.name]) else None
            if group is not None and (inner is None or value is None):
                # A group picked whole (+space=<name>, +data=<name>): its keys come with the option.
                pick = f"+{key}=<name>" if group.default is None else f"{key}={group.default}"
                rows.append((pick, f"{text} Options: {_options(group)}.".strip()))
            elif inner is not None and isinstance(value, Mapping):
                head = f"{key}: {summary(inner.__doc__)}"
                if group is not None:
                    head += f" Pick one with {key}=<option>: {_options(group)}."
                sub: list[tuple[str, str]] = []
                sections.append((head, sub))
                walk(inner, value, key + ".", sub)
            else:
                rows.append((f"{key}={show(value)}", text))

    top: list[tuple[str, str]] = []
    walk(schema, defaults, "", top)
    keys = [left for _, rows in [("", top), *sections] for left, _ in rows]
    column = min(max((len(k) for k in keys), default=0), 30)
    lines = [f"usage: python -m {command} [key=value ...] [group=option ...]", ""]
    lines += textwrap.wrap(about, width)
    lines += ["", "options (key=default):"]
    for left, text in top:
        lines += _row(left, text, column, width)
    for head, rows in sections:
        lines += ["", *textwrap.wrap(head, width)]
        for left, text in rows:
            lines += _row(left, text, column, width)
    lines += ["", *textwrap.wrap(
        "Set a key with key=value, pick a group's option with group=option, add a key that has no default "
        "with +key=value. Hydra's own flags: --cfg job prints the composed config, --hydra-help lists the rest.",
        width)]
    return "\n".join(lines)

