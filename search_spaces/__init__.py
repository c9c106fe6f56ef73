"""What a candidate network is: search spaces, the canonical :class:`Arch`, the torch builder.

Imports torch, numpy and PyYAML only; never :mod:`latency_predictor` or :mod:`nas`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from search_spaces.arch import ACTIVATIONS, BLOCK_TYPES, Arch, Block, arch_id_of
from search_spaces.errors import (
    ArchDecodeError,
    ArchError,
    OutOfSpaceError,
    SearchSpaceError,
    SpaceConfigError,
)
from search_spaces.profile import Profile, count_macs, count_params, profile
from search_spaces.references import REFERENCES, anchor_network, reference, resolve_arch
from search_spaces.space import Decision, SearchSpace, Stage, available_spaces, load_space

__all__ = [
    "ACTIVATIONS", "BLOCK_TYPES", "REFERENCES", "Arch", "ArchDecodeError", "ArchError", "Block",
    "Decision", "OutOfSpaceError", "Profile", "SearchSpace", "SearchSpaceError", "SpaceConfigError",
    "Stage", "anchor_network", "arch_id_of", "available_spaces", "build", "count_macs", "count_params", "load_space",
    "profile", "reference", "resolve_arch",
]

if TYPE_CHECKING:
    from search_spaces.builder import build


def __getattr__(name: str) -> Any:
    # The builder loads on first use (it imports torch), so that reading a space, an Arch or an
    # error (a command's --help, its config checks) does not wait for torch.
    if name == "build":
        from search_spaces.builder import build

        return build
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
