"""Typed errors of the search-space layer."""

from __future__ import annotations


class SearchSpaceError(Exception):
    """Root of every error raised by :mod:`search_spaces`."""


class ArchDecodeError(SearchSpaceError, ValueError):
    """An architecture string (or one of its tokens) is malformed.

    Attributes:
        token: the offending token, or the whole string when no token is to blame.
    """

    def __init__(self, token: str, problem: str) -> None:
        self.token = token
        self.problem = problem
        super().__init__(f"bad architecture token {token!r}: {problem}")


class ArchError(SearchSpaceError, ValueError):
    """An :class:`~search_spaces.arch.Arch` or block was given impossible values."""


class OutOfSpaceError(SearchSpaceError, ValueError):
    """A well-formed architecture (or decision) that the search space does not contain."""

    def __init__(self, space: str, token: str, problem: str) -> None:
        self.space = space
        self.token = token
        self.problem = problem
        super().__init__(f"not in space {space!r}: token {token!r}: {problem}")


class SpaceConfigError(SearchSpaceError, ValueError):
    """A search-space definition (YAML) is invalid.

    The message names the file, the key and, where it helps, the allowed values.
    """

    def __init__(self, source: str, key: str, problem: str) -> None:
        self.source = source
        self.key = key
        self.problem = problem
        super().__init__(f"{source}: key {key!r}: {problem}")
