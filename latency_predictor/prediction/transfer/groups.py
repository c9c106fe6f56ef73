"""Which features share a scale when a predictor moves to another device (:class:`Grouping`), and the
design a grouping makes of a source model (:func:`group_contributions`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from latency_predictor.errors import ConfigError
from latency_predictor.prediction.features import FEATURE_NAMES, FeatureExtractor
from latency_predictor.prediction.models import AdditiveModel
from search_spaces import Arch

_DENSE = ("stem", "pw_expand", "pw_project", "conv_k3", "conv_k5", "conv_k7", "conv_kx", "shortcut", "head",
          "classifier")
_DEPTHWISE = ("dw_k3", "dw_k5", "dw_k7", "dw_kx")


def feature_group(name: str) -> str:
    """The group of a feature (see :mod:`latency_predictor.prediction.transfer`): ``dense_compute``, ``memory``,
    ``depthwise``, ``elementwise`` or ``calls``."""
    kind, _, quantity = name.partition(".")
    if kind in ("act", "se", "add"):
        return "elementwise"
    if kind in _DEPTHWISE:
        return "depthwise"
    if quantity == "ops" or kind in ("depth", "blocks"):
        return "calls"
    if quantity.startswith("macs"):
        return "dense_compute"
    if kind in (*_DENSE, "total"):
        return "memory"
    raise ConfigError(f"feature {name!r} has no transfer group")


GROUPS: tuple[str, ...] = ("dense_compute", "memory", "depthwise", "elementwise", "calls")
"""The feature groups whose scales are refitted for a new device."""

OVERHEADS: tuple[str, ...] = ("fixed_ms", "per_call_ms")
"""The device's own overheads, fitted besides the scales: a fixed cost per inference (the
intercept) and a cost per operator call (on ``total.ops``), which a slower framework adds."""

PARAMETERS: tuple[str, ...] = (*GROUPS, *OVERHEADS)

_GROUP_OF = np.array([GROUPS.index(feature_group(n)) for n in FEATURE_NAMES])
_OPS = FEATURE_NAMES.index("total.ops")


def operator_group(name: str) -> str:
    """A feature's group in the per-operator grouping: its operator kind's compute (MACs) or its
    memory (traffic, parameters), the activations one group, the per-call features as in
    :func:`feature_group`."""
    kind, _, quantity = name.partition(".")
    if feature_group(name) == "calls":
        return "calls"
    if kind == "act":
        return "act"
    return f"{kind}.{'compute' if quantity.startswith('macs') else 'memory'}"


@dataclass(frozen=True)
class Grouping:
    """Which features share a scale: ``groups`` by name, ``of[j]`` the group of feature ``j``.

    ``within``: a coarser grouping (each of this one's groups inside one of its groups), fitted
    first on the same measurements; this grouping's scales are then pulled towards their coarse
    group's fitted scale, and its overheads towards the coarse fit's, instead of towards the one
    global scale (:func:`Grouping.nested_in`). ``inside[k]``: the coarse group of group ``k``.
    """

    name: str
    groups: tuple[str, ...]
    of: np.ndarray = field(repr=False)
    within: Grouping | None = field(default=None, repr=False)
    inside: np.ndarray | None = field(default=None, repr=False)

    @classmethod
    def by(cls, name: str, group_of: Callable[[str], str]) -> Grouping:
        """The grouping that ``group_of`` (feature name -> group name) makes of :data:`FEATURE_NAMES`."""
        names = tuple(dict.fromkeys(group_of(n) for n in FEATURE_NAMES))
        return cls(name, names, np.array([names.index(group_of(n)) for n in FEATURE_NAMES]))

    def nested_in(self, coarse: Grouping, name: str) -> Grouping:
        """This grouping, its scales pulled towards ``coarse``'s fit (see ``within``).

        Raises:
            ConfigError: a group of this grouping spans two of ``coarse``'s, or ``coarse`` is itself nested.
        """
        if coarse.within is not None:
            raise ConfigError(f"grouping {coarse.name!r} is itself nested; nest in a plain grouping")
        inside = []
        for k, g in enumerate(self.groups):
            parents = sorted({int(p) for p in coarse.of[self.of == k]})
            if len(parents) != 1:
                raise ConfigError(f"group {g!r} of {self.name!r} spans the groups "
                                  f"{[coarse.groups[p] for p in parents]} of {coarse.name!r}")
            inside.append(parents[0])
        return replace(self, name=name, within=coarse, inside=np.array(inside))

    @property
    def parameters(self) -> tuple[str, ...]:
        """The fitted parameters: a scale per group, then :data:`OVERHEADS`."""
        return (*self.groups, *OVERHEADS)


COARSE = Grouping("families", GROUPS, _GROUP_OF)
"""The five families of :data:`GROUPS`."""

PER_OPERATOR = Grouping.by("per_operator", operator_group)
"""A scale for each operator kind's compute and memory: finer than :data:`COARSE`, so it can tell
apart, for example, a depthwise 7x7 from a depthwise 3x3, or the classifier from the head."""

PER_OPERATOR_IN_FAMILIES = PER_OPERATOR.nested_in(COARSE, "per_operator_in_families")
"""The per-operator scales, each pulled towards its family's fitted scale rather than the global one."""

GROUPINGS: tuple[Grouping, ...] = (PER_OPERATOR, PER_OPERATOR_IN_FAMILIES)
"""The groupings :func:`adapt_model` fits by default; the adapted model is their mean."""



def group_contributions(model: AdditiveModel, extractor: FeatureExtractor, archs: Sequence[Arch],
                        grouping: Grouping = COARSE) -> np.ndarray:
    """The design of the adaptation: each group's part of ``model``'s prediction for ``archs`` (ms),
    then a column of ones (the fixed cost) and the operator calls (per-call cost).

    Returns:
        shape ``(len(archs), len(grouping.parameters))``.
    """
    k = len(grouping.groups)
    weights = np.zeros((len(FEATURE_NAMES), k + 1))
    weights[np.arange(len(FEATURE_NAMES)), grouping.of] = model.coef
    weights[_OPS, -1] = 1.0
    out = np.zeros((len(archs), k + len(OVERHEADS)))
    if archs:
        projected = extractor.project(archs, weights)
        out[:, :k] = projected[:, :-1]
        out[:, k] = 1.0
        out[:, k + 1] = projected[:, -1]
    return out
