"""A predictor for a new device from a few measurements: adapt another device's predictor.

The method, and why each part of it is there, is described once, in the documentation's
"Predictor and transfer" page (``docs/predictor.md``); the runs that led to it are in the transfer
benchmark's notes. In short: the source predictor (:class:`~latency_predictor.models.AdditiveModel`,
``intercept + sum_j w_j x_j``) keeps its structure and the new device gets its own scales,

    latency = sum_g s_g * (sum over the features j of group g of w_j x_j)  +  fixed_ms + per_call_ms * calls

fitted on the n new measurements with every scale pulled towards a centre by a ridge whose
strength leave-one-out chooses, then each feature's cost refined. What is where:

* :func:`feature_group`, :data:`GROUPS`, :data:`OVERHEADS`: the five families and the device's
  overheads; :data:`COARSE`, :data:`PER_OPERATOR`, :data:`PER_OPERATOR_IN_FAMILIES`,
  :data:`GROUPINGS`: the groupings whose scales are fitted;
* :func:`fit_scales`: the scales and overheads of one grouping, least squares on relative error
  with the ridge (strengths :data:`LAMBDAS`);
* :func:`refine_costs`: each feature's cost moved by a penalised delta (strengths :data:`REFINE_MUS`);
* :func:`adapt_model`: the adapted predictor, the mean of the per-operator fits pulled towards the
  global scale and towards the family fit; :func:`adapt_model_from_many` and :func:`mix_weights`:
  several sources mixed by leave-one-out error;
* :func:`informative_order`: which architectures to measure, most informative first.
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
from scipy.optimize import lsq_linear

from latency_predictor.dataset import Dataset, LatencyTable
from latency_predictor.errors import ConfigError, DatasetError, PredictorMismatchError
from latency_predictor.features import FEATURE_NAMES, FeatureExtractor
from latency_predictor.metrics import accuracy_metrics
from latency_predictor.models import AdditiveModel, MacsBaseline
from latency_predictor.predictor import PredictorEstimator
from latency_predictor.statistic import MIN_RUNS, check_stat
from latency_predictor.target import PredictorTarget
from search_spaces import Arch, arch_id_of

_DENSE = ("stem", "pw_expand", "pw_project", "conv_k3", "conv_k5", "conv_k7", "conv_kx", "shortcut", "head",
          "classifier")
_DEPTHWISE = ("dw_k3", "dw_k5", "dw_k7", "dw_kx")


def feature_group(name: str) -> str:
    """The group of a feature (see the module docstring): ``dense_compute``, ``memory``,
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

LAMBDAS: tuple[float, ...] = (0.0, 1e-4, 3e-4, 0.001, 0.003, 0.01, 0.03, 0.1, 0.3, 1.0, 3.0, 10.0, 30.0, 100.0,
                              1e4)
"""Ridge strengths tried (per measurement): from 0, no pull at all (where the families of the new
device move far apart, even a weak pull towards the global scale biases every scale), to the
largest, in effect one global scale. No pull is tried only where the fit has fewer parameters than
measurements (:func:`_lambdas`)."""

REFINE_MUS: tuple[float, ...] = (0.01, 0.03, 0.1, 0.3, 1.0, 3.0, 10.0, math.inf)
"""Ridge strengths of the per-feature refinement tried (per measurement); ``inf``: no refinement."""


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


@dataclass(frozen=True)
class Scales:
    """The fitted adaptation.

    Attributes:
        params: a scale per group of the grouping (``groups``), then the overheads of
            :data:`OVERHEADS` (ms).
        global_scale: the one scale mapping the source predictions onto the measurements, which
            every group's scale is pulled towards (unless the grouping is nested).
        lam: the chosen ridge strength (per measurement).
        loo_abs_rel_error: leave-one-out absolute relative errors on the fitting measurements (of
            the refined model when there is a refinement).
        refine_mu: the ridge strength of the per-feature refinement (:func:`refine_costs`);
            ``inf``: not refined.
        refined_features: how many features' costs the refinement moved.
        groups: the names of the scales in ``params`` (the grouping's).
        grouping: the grouping's name (:class:`Grouping`).
        averaged_with: the fits of the other groupings the adapted model is the mean with
            (:func:`adapt_model`); ``loo_abs_rel_error`` is then the mean model's.
        within: for a nested grouping (:attr:`Grouping.within`), the coarse grouping's fit on the
            same measurements, which the scales are pulled towards.
    """

    params: np.ndarray
    global_scale: float
    lam: float
    loo_abs_rel_error: np.ndarray = field(repr=False)
    refine_mu: float = math.inf
    refined_features: int = 0
    groups: tuple[str, ...] = GROUPS
    grouping: str = "families"
    averaged_with: tuple[Scales, ...] = ()
    within: Scales | None = None

    def to_dict(self) -> dict[str, Any]:
        """Plain numbers, by name (``refine_mu`` None: not refined)."""
        k = len(self.groups)
        out = {"grouping": self.grouping, "scales": dict(zip(self.groups, self.params[:k].tolist(), strict=True)),
               **dict(zip(OVERHEADS, self.params[k:].tolist(), strict=True)),
               "global_scale": self.global_scale, "lambda": self.lam,
               "refine_mu": None if math.isinf(self.refine_mu) else self.refine_mu,
               "refined_features": self.refined_features,
               "loo_mape": float(np.mean(self.loo_abs_rel_error))}
        if self.averaged_with:
            out["averaged_with"] = [o.to_dict() for o in self.averaged_with]
        if self.within is not None:
            out["within"] = self.within.to_dict()
        return out


@dataclass(frozen=True)
class _Design:
    """A grouping's design on the measured networks (:func:`group_contributions`) and, for a nested
    grouping (:attr:`Grouping.within`), the coarse grouping's design, its ridge strength and which
    coarse group each group lies in."""

    z: np.ndarray
    coarse_z: np.ndarray | None = None
    coarse_lam: float = 0.0
    inside: np.ndarray | None = None
    coarse_fit: np.ndarray | None = None
    """The coarse fit's parameters on these rows, once made (:func:`_without_each`)."""

    def rows(self, keep: np.ndarray) -> _Design:
        """The design of the networks ``keep`` selects (a mask or indices)."""
        return replace(self, z=self.z[keep], coarse_z=None if self.coarse_z is None else self.coarse_z[keep],
                       coarse_fit=None)


def _prior(d: _Design, y: np.ndarray, source_intercept: float) -> tuple[np.ndarray, np.ndarray, float]:
    """``(theta0, weights, c)``: what each parameter is pulled towards, how hard, and the global scale.

    Scales are pulled towards ``c`` relative to ``c``; the fixed cost towards ``c`` times the
    source's intercept and the per-call cost towards 0, both relative to the mean latency. A nested
    grouping's parameters are pulled, as hard, towards the coarse grouping's fit on the same
    networks instead: each scale towards its coarse group's, the overheads towards the coarse ones.
    """
    z = d.z
    k = z.shape[1] - len(OVERHEADS)
    source = z[:, :k].sum(axis=1) + source_intercept
    r = source / y
    c = float(np.sum(r) / np.sum(r * r))
    mean_ms = float(np.mean(y))
    theta0 = np.r_[np.full(k, c), c * source_intercept, 0.0]
    if d.coarse_z is not None and d.inside is not None:
        coarse = (_solve(_Design(d.coarse_z), y, d.coarse_lam, source_intercept) if d.coarse_fit is None
                  else d.coarse_fit)
        theta0 = np.r_[coarse[d.inside], coarse[len(coarse) - len(OVERHEADS):]]
    weights = np.r_[np.full(k, 1.0 / c), 1.0 / mean_ms, float(np.mean(z[:, -1])) / mean_ms]
    return theta0, weights, c


def _solve(d: _Design, y: np.ndarray, lam: float, source_intercept: float) -> np.ndarray:
    theta0, weights, _ = _prior(d, y, source_intercept)
    z = d.z
    active = np.abs(z).sum(axis=0) > 0  # a group absent from every network keeps its prior value
    n = len(y)
    root = np.sqrt(lam * n) * weights[active]
    reg = np.eye(z.shape[1])[active] * root[:, None]
    sol = lsq_linear(np.vstack([z / y[:, None], reg]), np.r_[np.ones(n), root * theta0[active]],
                     bounds=(0.0, np.inf), method="bvls")
    theta: np.ndarray = np.where(active, np.maximum(sol.x, 0.0), theta0)  # bvls may leave a rounding below 0
    return theta


def _without_each(d: _Design, y: np.ndarray, source_intercept: float) -> list[_Design]:
    """``d`` without each network in turn; a nested grouping's coarse fit is refitted without the
    network too, once, so that every strength tried on the same rows reuses it."""
    out = []
    for i in range(len(y)):
        keep = np.arange(len(y)) != i
        sub = d.rows(keep)
        if sub.coarse_z is not None:
            sub = replace(sub, coarse_fit=_solve(_Design(sub.coarse_z), y[keep], sub.coarse_lam, source_intercept))
        out.append(sub)
    return out


def _loo(d: _Design, y: np.ndarray, lam: float, source_intercept: float,
         without: Sequence[_Design] | None = None) -> np.ndarray:
    """Leave-one-out relative errors, signed (prediction over measurement, minus 1); ``without``:
    :func:`_without_each` of ``d``, made here when not given."""
    subsets = _without_each(d, y, source_intercept) if without is None else without
    err = np.empty(len(y))
    for i, sub in enumerate(subsets):
        keep = np.arange(len(y)) != i
        theta = _solve(sub, y[keep], lam, source_intercept)
        err[i] = (d.z[i] @ theta - y[i]) / y[i]
    return err


def fit_scales(z: np.ndarray, latency_ms: np.ndarray, source_intercept: float = 0.0,
               lam: float | None = None, grouping: Grouping = COARSE,
               coarse_z: np.ndarray | None = None) -> Scales:
    """Fit the group scales and the overheads so that ``z @ params`` matches ``latency_ms``.

    Least squares on relative error, with every parameter at least 0 and the ridge penalty of the
    module docstring.

    Args:
        z: the design (:func:`group_contributions`).
        latency_ms: the new device's measurements of the same networks.
        source_intercept: the source predictor's intercept (the fixed cost is pulled towards it, scaled).
        lam: ridge strength per measurement; None: chosen from :data:`LAMBDAS` by leave-one-out.
        grouping: the grouping ``z`` was made with.
        coarse_z: for a nested grouping (:attr:`Grouping.within`), the design of its coarse
            grouping on the same networks (the coarse fit's own strength is always chosen by
            leave-one-out; ``lam`` is the nested scales').

    Raises:
        ConfigError: fewer than 3 measurements, mismatched lengths, invalid latencies, or a nested
            grouping without ``coarse_z``.
    """
    return _fit_scales(_design(z, latency_ms, source_intercept, grouping, coarse_z), latency_ms, source_intercept,
                       lam, grouping)[0]


def _checked(z: np.ndarray, latency_ms: np.ndarray, grouping: Grouping) -> np.ndarray:
    y = np.asarray(latency_ms, dtype=np.float64)
    if z.ndim != 2 or z.shape != (len(y), len(grouping.parameters)):
        raise ConfigError(f"got {len(z)} design rows for {len(y)} measurements")
    if len(y) < 3:
        raise ConfigError(f"adapting needs at least 3 measured architectures of the new device, got {len(y)}")
    if not (np.all(np.isfinite(y)) and np.all(y > 0)):
        raise ConfigError("latencies must be finite and positive")
    return y


def _lambdas(d: _Design, n: int) -> tuple[float, ...]:
    """The strengths :func:`_choose_lam` tries on ``n`` measurements: :data:`LAMBDAS`, without 0 where
    the fit has as many parameters as measurements or more. Unpulled, such a fit is not unique (it
    can pass through every measurement), so which of its solutions the solver returns, and its
    leave-one-out error, says little about other networks."""
    free = int(np.sum(np.abs(d.z).sum(axis=0) > 0))
    return LAMBDAS if free < n else tuple(v for v in LAMBDAS if v > 0)


def _choose_lam(d: _Design, y: np.ndarray, source_intercept: float,
                without: Sequence[_Design] | None = None) -> tuple[float, np.ndarray]:
    """The strength with the lowest mean leave-one-out error, on ties the stronger ridge (the simpler
    model when the data do not tell), and its signed leave-one-out errors."""
    subsets = _without_each(d, y, source_intercept) if without is None else without
    errors = {v: _loo(d, y, v, source_intercept, subsets) for v in _lambdas(d, len(y))}
    lam = min(errors, key=lambda v: (round(float(np.mean(np.abs(errors[v]))), 6), -v))
    return lam, errors[lam]


def _design(z: np.ndarray, latency_ms: np.ndarray, source_intercept: float, grouping: Grouping,
            coarse_z: np.ndarray | None) -> _Design:
    """``z`` as a :class:`_Design`; for a nested grouping, with its coarse fit's strength chosen by
    leave-one-out."""
    y = _checked(z, latency_ms, grouping)
    if grouping.within is None:
        return _Design(z)
    if coarse_z is None:
        raise ConfigError(f"grouping {grouping.name!r} is nested in {grouping.within.name!r}: "
                          "give the design of that grouping too")
    y = _checked(coarse_z, y, grouping.within)
    return _Design(z, coarse_z, _choose_lam(_Design(coarse_z), y, source_intercept)[0], grouping.inside)


def _fit_scales(d: _Design, latency_ms: np.ndarray, source_intercept: float, lam: float | None,
                grouping: Grouping) -> tuple[Scales, np.ndarray]:
    """:func:`fit_scales`, and its leave-one-out relative errors signed."""
    y = _checked(d.z, latency_ms, grouping)
    without = _without_each(d, y, source_intercept)
    if lam is None:
        lam, signed = _choose_lam(d, y, source_intercept, without)
    else:
        signed = _loo(d, y, lam, source_intercept, without)
    _, _, c = _prior(d, y, source_intercept)
    within = None
    if d.coarse_z is not None and grouping.within is not None:
        within = _fit_scales(_Design(d.coarse_z), y, source_intercept, d.coarse_lam, grouping.within)[0]
    return Scales(_solve(d, y, lam, source_intercept), c, float(lam), np.abs(signed), groups=grouping.groups,
                  grouping=grouping.name, within=within), signed


def _costs(source: AdditiveModel, params: np.ndarray, grouping: Grouping = COARSE) -> np.ndarray:
    """The scaled model's costs: its coefficients, then its intercept."""
    k = len(grouping.groups)
    coef = source.coef * params[grouping.of]
    coef[_OPS] += params[k + 1]
    return np.r_[coef, params[k]]


def _with_costs(source: AdditiveModel, extractor: FeatureExtractor, costs: np.ndarray) -> AdditiveModel:
    m = AdditiveModel(extractor, members=0, robust_passes=source.robust_passes, seed=source.seed)
    m.coef = np.array(costs[:-1], dtype=np.float64)
    m.intercept = float(costs[-1])
    return m


def scaled_model(source: AdditiveModel, extractor: FeatureExtractor, params: np.ndarray) -> AdditiveModel:
    """An ``AdditiveModel``: the source's coefficients times their group's scale, plus the overheads."""
    return _with_costs(source, extractor, _costs(source, params))


def design_matrix(extractor: FeatureExtractor, archs: Sequence[Arch]) -> np.ndarray:
    """The features of ``archs`` with a last column of ones (the intercept's)."""
    x = extractor.transform(archs)
    return np.c_[x, np.ones(len(x))]


def _refine(x: np.ndarray, y: np.ndarray, base: np.ndarray, mu: float) -> np.ndarray:
    """``base`` (costs, then intercept) moved by the ridge-penalised deltas of the module docstring."""
    if math.isinf(mu):
        return base
    unit = x.mean(axis=0) / float(np.mean(y))  # a delta times this is a share of the mean latency
    active = unit > 0  # a feature no measured network has cannot be told apart: it keeps its cost
    root = math.sqrt(mu * len(y)) * unit[active]
    sol = lsq_linear(np.vstack([x[:, active] / y[:, None], np.diag(root)]),
                     np.r_[1.0 - (x / y[:, None]) @ base, np.zeros(int(active.sum()))],
                     bounds=(-base[active], np.inf), method="bvls")
    out = base.copy()
    out[active] += sol.x
    return np.maximum(out, 0.0)  # bvls may leave a rounding's worth below the bound


def refine_costs(x: np.ndarray, y: np.ndarray, base: np.ndarray, loo_bases: np.ndarray,
                 mu: float | None = None) -> tuple[np.ndarray, float, np.ndarray]:
    """The per-feature refinement of a scaled model (module docstring).

    Args:
        x: the measured networks' features with a column of ones (:func:`design_matrix`).
        y: their latencies on the new device.
        base: the scaled model's costs, then its intercept, fitted on all of ``y``.
        loo_bases: row ``i``: the scaled model's costs fitted without network ``i``, so that the
            leave-one-out error is the whole fit's.
        mu: ridge strength per measurement; None: chosen from :data:`REFINE_MUS` by leave-one-out,
            the strongest whose mean error is within one standard error of the least (so no
            refinement when the data do not tell).

    Returns:
        The refined costs, the strength used, and the leave-one-out absolute relative errors.
    """
    costs, chosen, signed = _refine_signed(x, y, base, loo_bases, mu)
    return costs, chosen, np.abs(signed)


def _refine_signed(x: np.ndarray, y: np.ndarray, base: np.ndarray, loo_bases: np.ndarray,
                   mu: float | None) -> tuple[np.ndarray, float, np.ndarray]:
    """:func:`refine_costs`, its leave-one-out relative errors signed."""
    def loo(m: float) -> np.ndarray:
        err = np.empty(len(y))
        for i in range(len(y)):
            keep = np.arange(len(y)) != i
            err[i] = (x[i] @ _refine(x[keep], y[keep], loo_bases[i], m) - y[i]) / y[i]
        return err

    errors = {m: loo(m) for m in (REFINE_MUS if mu is None else (mu,))}
    mean = {m: round(float(np.mean(np.abs(e))), 6) for m, e in errors.items()}
    least = np.abs(errors[min(errors, key=lambda m: (mean[m], -m))])
    # the one-standard-error rule: the strongest penalty whose error is within one standard error of
    # the least, since the least of several noisy leave-one-out errors is an optimistic one
    bar = round(float(np.mean(least)) + float(np.std(least, ddof=1)) / math.sqrt(len(least)), 6)
    chosen = max(m for m in errors if mean[m] <= bar)
    return _refine(x, y, base, chosen), chosen, errors[chosen]


def unadapted(source: AdditiveModel, extractor: FeatureExtractor, scale: float = 1.0) -> AdditiveModel:
    """The source model at the new input shape, every cost times ``scale`` (1: as it is)."""
    return scaled_model(source, extractor, np.r_[np.full(len(GROUPS), scale), scale * source.intercept, 0.0])


def _fit_grouping(source: AdditiveModel, x: np.ndarray | None, d: _Design, y: np.ndarray, lam: float | None,
                  grouping: Grouping) -> tuple[np.ndarray, Scales, np.ndarray]:
    """One grouping's adapted costs, its fit, and its signed leave-one-out relative errors
    (``x`` None: not refined)."""
    fitted, signed = _fit_scales(d, y, source.intercept, lam, grouping)
    costs = _costs(source, fitted.params, grouping)
    if x is not None:
        others = [np.arange(len(y)) != i for i in range(len(y))]
        loo_bases = np.array([_costs(source, _solve(d.rows(k), y[k], fitted.lam, source.intercept), grouping)
                              for k in others])
        refined, mu, signed = _refine_signed(x, y, costs, loo_bases, None)
        moved = int(np.sum(~np.isclose(refined, costs, rtol=1e-9, atol=1e-12)))
        fitted = replace(fitted, refine_mu=mu, refined_features=moved, loo_abs_rel_error=np.abs(signed))
        costs = refined
    return costs, fitted, signed


def adapt_model(
    source: AdditiveModel, extractor: FeatureExtractor, archs: Sequence[Arch], latency_ms: np.ndarray,
    members: int = 16, seed: int = 0, lam: float | None = None, refine: bool = True,
    groupings: Sequence[Grouping] = GROUPINGS,
) -> tuple[AdditiveModel, Scales]:
    """The source model adapted to the device ``latency_ms`` was measured on.

    Each grouping of ``groupings`` is fitted on its own (its scales, then, with ``refine``, the
    per-feature refinement), and the adapted model is their mean: its costs are the mean of the
    groupings' costs, so it is an ordinary additive model whose prediction is the mean of theirs.
    By default (:data:`GROUPINGS`) both fits have a scale per operator kind's compute and memory,
    which follows a device whose operators do not move together; one pulls its scales towards the
    global scale, the other towards the family fit on the same measurements, which keeps what the
    families tell apart (figures: BENCHMARKS.md).

    Args:
        source: the other device's fitted model.
        extractor: features at the new device's input shape and classifier width.
        archs: the networks measured on the new device.
        latency_ms: their latencies there.
        members: bootstrap ensemble size for the uncertainty (refitted on resampled networks).
        seed: seed of the bootstrap.
        lam: ridge strength of the group scales (every grouping's; a nested grouping's coarse fit
            chooses its own by leave-one-out); None: chosen by leave-one-out, for each grouping.
        refine: then refine each feature's cost (:func:`refine_costs`, its strength chosen by
            leave-one-out, which may choose none); False: the scales alone.
        groupings: the groupings whose fits are averaged (default :data:`GROUPINGS`).

    Returns:
        The adapted model (its ``oof_abs_rel_error`` is the mean model's leave-one-out error) and
        the fit of the first grouping, with the others' in ``averaged_with``.

    Raises:
        ConfigError: fewer than 3 networks, invalid latencies, or no grouping.
    """
    fit = _adapt(source, extractor, archs, latency_ms, members, seed, lam, refine, groupings)
    return _with_members(source, extractor, fit.costs, fit.members, fit.scales), fit.scales


@dataclass(frozen=True)
class _Adapted:
    """One source's adaptation: its costs, fit, signed leave-one-out errors and bootstrap members' costs."""

    costs: np.ndarray
    scales: Scales
    signed: np.ndarray
    members: np.ndarray


def _adapt(source: AdditiveModel, extractor: FeatureExtractor, archs: Sequence[Arch], latency_ms: np.ndarray,
           members: int, seed: int, lam: float | None, refine: bool, groupings: Sequence[Grouping]) -> _Adapted:
    if not groupings:
        raise ConfigError("adapting needs at least one grouping of the features")
    y = np.asarray(latency_ms, dtype=np.float64)
    x = design_matrix(extractor, archs) if refine else None
    contributions = {g.name: group_contributions(source, extractor, archs, g)
                     for g in (*groupings, *(g.within for g in groupings if g.within is not None))}
    designs = [_design(contributions[g.name], y, source.intercept, g,
                       None if g.within is None else contributions[g.within.name]) for g in groupings]
    fits = [_fit_grouping(source, x, d, y, lam, g) for d, g in zip(designs, groupings, strict=True)]
    costs = np.mean([c for c, _, _ in fits], axis=0)
    signed = np.mean([e for _, _, e in fits], axis=0)  # the mean model's leave-one-out errors
    fitted = replace(fits[0][1], loo_abs_rel_error=np.abs(signed), averaged_with=tuple(f for _, f, _ in fits[1:]))
    rng = np.random.default_rng(seed)
    members_costs = []
    for _ in range(members):
        idx = rng.integers(0, len(y), len(y))
        each = []
        for d, g, (_, f, _) in zip(designs, groupings, fits, strict=True):
            member = _costs(source, _solve(d.rows(idx), y[idx], f.lam, source.intercept), g)
            each.append(_refine(x[idx], y[idx], member, f.refine_mu) if x is not None else member)
        members_costs.append(np.mean(each, axis=0))
    ens = np.array(members_costs).reshape(members, len(FEATURE_NAMES) + 1)
    return _Adapted(costs, fitted, signed, ens)


def _with_members(source: AdditiveModel, extractor: FeatureExtractor, costs: np.ndarray, members: np.ndarray,
                  scales: Scales) -> AdditiveModel:
    model = _with_costs(source, extractor, costs)
    model.members = len(members)
    model.ensemble_coef = members[:, :-1]
    model.ensemble_intercept = members[:, -1]
    model.oof_abs_rel_error = scales.loo_abs_rel_error
    return model


def mix_weights(signed: np.ndarray) -> np.ndarray:
    """The weights of a mix of adapted predictors: non-negative, summing to 1, and minimising the
    summed squared leave-one-out relative error of the mix.

    Args:
        signed: ``n x k``: each of the ``k`` adapted predictors' signed leave-one-out relative
            errors on the same ``n`` measurements (the mix's error is ``signed @ w``, the
            measurements being the same).
    """
    n, k = signed.shape
    if k == 1:
        return np.ones(1)
    big = 1e3 * max(1.0, float(np.abs(signed).max()))  # the sum-to-one row outweighs any error
    sol = lsq_linear(np.vstack([signed, np.full((1, k), big)]), np.r_[np.zeros(n), big], bounds=(0.0, np.inf),
                     method="bvls")
    w: np.ndarray = np.maximum(sol.x, 0.0)  # bvls may leave a rounding below 0
    w = w / w.sum()
    return w


@dataclass(frozen=True)
class Mix:
    """A mix of predictors adapted from several devices: each source's fit, the source adapted alone
    (without bootstrap members), and its weight."""

    scales: tuple[Scales, ...]
    alone: tuple[AdditiveModel, ...] = field(repr=False)
    weights: np.ndarray
    loo_abs_rel_error: np.ndarray = field(repr=False)


def adapt_model_from_many(
    sources: Sequence[AdditiveModel], extractor: FeatureExtractor, archs: Sequence[Arch], latency_ms: np.ndarray,
    members: int = 16, seed: int = 0, lam: float | None = None, refine: bool = True,
    groupings: Sequence[Grouping] = GROUPINGS,
) -> tuple[AdditiveModel, Mix]:
    """Several devices' models, each adapted (:func:`adapt_model`) with the same measurements of the
    new device, then mixed.

    The mix's costs are the weighted mean of the adapted costs (:func:`mix_weights`, from their
    leave-one-out errors), so it is still one additive model. A source whose structure is wrong for
    the new device (eager PyTorch's per-call overheads for ONNX Runtime) gets a small weight when
    another source explains the measurements better. The weights are chosen on the same
    leave-one-out errors that the mix's own error is then computed from, so that error is a little
    optimistic (``k`` weights from ``n`` measurements).

    Returns:
        The mixed model (its bootstrap members mix the sources' members with the same weights)
        and the :class:`Mix`.

    Raises:
        ConfigError: no source, fewer than 3 networks, invalid latencies, or no grouping.
    """
    if not sources:
        raise ConfigError("adapting needs at least one source predictor")
    fits = [_adapt(s, extractor, archs, latency_ms, members, seed, lam, refine, groupings) for s in sources]
    w = mix_weights(np.column_stack([f.signed for f in fits]))
    costs = np.tensordot(w, np.array([f.costs for f in fits]), axes=1)
    member_costs = np.tensordot(w, np.array([f.members for f in fits]), axes=1)
    err = np.abs(np.column_stack([f.signed for f in fits]) @ w)
    alone = tuple(_with_costs(s, extractor, f.costs) for s, f in zip(sources, fits, strict=True))
    mix = Mix(tuple(f.scales for f in fits), alone, w, err)
    model = _with_members(sources[0], extractor, costs, member_costs, replace(fits[0].scales, loo_abs_rel_error=err))
    return model, mix


def informative_order(
    source: AdditiveModel, extractor: FeatureExtractor, candidates: Sequence[Arch], n: int,
    measured: Sequence[Arch] = (),
) -> list[int]:
    """The indices of the ``n`` candidates most worth measuring to adapt ``source``, best first.

    Greedy k-median on the networks' mixes (:func:`mix_rows`, over the candidates and
    ``measured``): each step takes the candidate that most reduces the summed distance from every
    candidate to its nearest chosen or measured network. Once as many networks are measured or
    chosen as the family fit has parameters (:data:`PARAMETERS`), every other step instead takes
    the candidate with the largest leverage on the family fit (:func:`_leverages`): the one whose
    mix the networks so far explain least (module docstring).

    Raises:
        ConfigError: ``n`` negative or larger than the number of candidates.
    """
    if not 0 <= n <= len(candidates):
        raise ConfigError(f"cannot choose {n} of {len(candidates)} candidate architectures")
    relative = _relative_design(source, extractor, [*candidates, *measured])
    rows = _standardised(relative)
    rms = np.sqrt(np.mean(relative * relative, axis=0))
    relative = relative / np.where(rms > 0, rms, 1.0)  # one scale per column, for _leverages
    a, design = rows[: len(candidates)], relative[: len(candidates)]
    dist = _distances(a, a)  # candidate i to candidate j
    nearest = _distances(rows[len(candidates):], a).min(axis=0, initial=np.inf)
    known = list(relative[len(candidates):])
    chosen: list[int] = []
    for _ in range(n):
        step = len(known)
        if step >= len(PARAMETERS) and (step - len(PARAMETERS)) % 2 == 0:
            score = -_leverages(design, np.array(known))
        else:
            score = np.minimum(nearest[None, :], dist).sum(axis=1)
        score[chosen] = np.inf
        i = int(np.argmin(score))
        chosen.append(i)
        known.append(design[i])
        nearest = np.minimum(nearest, dist[i])
    return chosen


def _relative_design(source: AdditiveModel, extractor: FeatureExtractor, archs: Sequence[Arch]) -> np.ndarray:
    """The family fit's design (:func:`group_contributions`), each row over the network's source
    prediction: the rows of the relative least squares the scales are fitted by."""
    z = group_contributions(source, extractor, archs)
    predicted = z[:, : len(GROUPS)].sum(axis=1) + source.intercept
    out: np.ndarray = z / np.where(predicted > 0, predicted, 1.0)[:, None]
    return out


def _leverages(design: np.ndarray, known: np.ndarray) -> np.ndarray:
    """Each row of ``design``'s leverage ``x (K'K)^-1 x'`` on a least-squares fit to the rows ``known``
    (``K``): how much measuring it would add to what they tell apart. Adding row ``x`` multiplies
    ``det(K'K)`` by ``1 + x (K'K)^-1 x'``, so the largest leverage is the D-optimal step. The columns
    should be of one scale (the small ridge that keeps ``K'K`` invertible is not scale-free)."""
    gram = known.T @ known + 1e-6 * np.eye(design.shape[1])  # solvable with fewer rows than columns
    out: np.ndarray = np.einsum("ij,ji->i", design, np.linalg.solve(gram, design.T))
    return out


def _distances(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Euclidean distances between the rows of ``a`` and of ``b`` (a ``len(a) x len(b)`` matrix)."""
    sq = (a * a).sum(axis=1)[:, None] + (b * b).sum(axis=1)[None, :] - 2.0 * a @ b.T
    out: np.ndarray = np.sqrt(np.maximum(sq, 0.0))
    return out


def mix_rows(source: AdditiveModel, extractor: FeatureExtractor, archs: Sequence[Arch]) -> np.ndarray:
    """Each network's mix: its design row (:func:`group_contributions`) over its source prediction,
    each column standardised over ``archs`` (a column that does not vary stays at zero)."""
    return _standardised(_relative_design(source, extractor, archs))


def _standardised(rows: np.ndarray) -> np.ndarray:
    """Each column of ``rows`` standardised (a column that does not vary stays at zero)."""
    spread = rows.std(axis=0)
    out: np.ndarray = (rows - rows.mean(axis=0)) / np.where(spread > 0, spread, 1.0)
    return out


# ---------------------------------------------------------------------- a predictor for the new device

def _fit_lines(lead: str, fit: dict[str, Any], after_scales: str = "") -> list[str]:
    """One fit of :meth:`Scales.to_dict` for the report: its scales, overheads and strengths,
    wrapped to 100 columns."""
    refined = ("not\0refined" if fit.get("refine_mu") is None else
               f"refined\0{fit['refined_features']}\0costs\0(mu\0{fit['refine_mu']:g})")
    # a name and its value stay on one line: joined by a placeholder until wrapped
    text = (f"{lead} ({len(fit['scales'])} scales): " + ", ".join(f"{g}\0{v:.3g}" for g, v in fit["scales"].items())
            + f"{after_scales}; fixed\0{fit['fixed_ms']:.3g}\0ms, per\0call\0{fit['per_call_ms']:.3g}\0ms; "
            f"lambda\0{fit['lambda']:g}; {refined}")
    indent = " " * (len(lead) - len(lead.lstrip()) + 4)
    return [line.replace("\0", " ") for line in textwrap.wrap(text, 100, subsequent_indent=indent,
                                                                break_on_hyphens=False)]


@dataclass
class TransferReport:
    """How the adapted predictor does on held-out architectures of the new device.

    Attributes:
        source: the predictor adapted from (its device, what it was trained on).
        others: the further predictors it was mixed with (:func:`adapt_model_from_many`), each
            with its weight and its leave-one-out MAPE adapted alone; ``source``'s are
            ``source_weight`` and ``source_loo_mape``.
        dataset: the new device's dataset summary.
        shots: the architectures the adaptation used (the first n of the dataset).
        test_archs: the held-out architectures every figure is computed on.
        scales: the fitted scales (:meth:`Scales.to_dict`).
        models: accuracy of ``adapted``; with ``others``, ``adapted_first`` (adapted from
            ``source`` alone); ``scratch`` (the predictor fitted from scratch on the same
            n), ``global_scale`` (the source times one scale), ``source`` (as it is), ``macs``
            (latency proportional to MACs, fitted on the n) and ``full`` (a predictor trained on
            many measurements of the new device, when given).
        predictions: held-out predictions per model (ms), aligned with ``test_archs``.
        measured_ms: held-out measured latencies.
    """

    source: dict[str, Any]
    dataset: dict[str, Any]
    shots: list[str]
    test_archs: list[str]
    scales: dict[str, Any]
    others: list[dict[str, Any]] = field(default_factory=list)
    source_weight: float = 1.0
    source_loo_mape: float | None = None
    models: dict[str, Any] = field(default_factory=dict)
    predictions: dict[str, list[float]] = field(repr=False, default_factory=dict)
    measured_ms: list[float] = field(repr=False, default_factory=list)

    def to_dict(self, with_archs: bool = True) -> dict[str, Any]:
        """A JSON-serialisable record (``with_archs=False`` leaves out the per-architecture lists)."""
        d: dict[str, Any] = {
            "source": self.source, "dataset": self.dataset, "n_shots": len(self.shots), "n_test": len(self.test_archs),
            "scales": self.scales, "models": {k: m.to_dict() for k, m in self.models.items()},
        }
        if self.others:
            d.update(source_weight=self.source_weight, source_loo_mape=self.source_loo_mape, others=self.others)
        if with_archs:
            d.update(shots=self.shots, test_archs=self.test_archs, measured_ms=self.measured_ms,
                     predictions=self.predictions)
        return d

    def table(self) -> str:
        """The report as a fixed-width table."""
        s, d = self.scales, self.dataset
        lines = [
            f"adapted from {self.source['device']} (trained on {self.source['n_train']}) with {len(self.shots)} "
            f"measurements of {d['backend']} on {d['device']}, input {d['input_shape']}",
        ]
        lines += _fit_lines(f"scales of the {s['grouping']} fit", s, f" (global {s['global_scale']:.3g})")
        for other in s.get("averaged_with", []):
            lines += _fit_lines(f"averaged with the {other['grouping']} fit", other)
            if "within" in other:
                lines += _fit_lines(f"  its scales pulled towards the {other['within']['grouping']} fit",
                                    other["within"])
        if self.others:
            mixed = [(self.source_weight, self.source["device"], self.source_loo_mape),
                     *((o["weight"], o["device"], o["loo_mape"]) for o in self.others)]
            lines.append("mixed: " + "; ".join(
                f"weight {w:.2f} for {device}"
                + ("" if mape is None else f" (adapted alone: leave-one-out MAPE {mape:.1%})")
                for w, device, mape in mixed))
        lines.append(f"leave-one-out MAPE {s['loo_mape']:.1%}"
                     + (" (of the mix)" if self.others else " (of the mean)" if s.get("averaged_with") else ""))
        if not self.models:
            lines.append("no held-out architectures: nothing to compare (measure more on this device, after the "
                         "first n, or give --test-data)")
            return "\n".join(lines)
        lines += [
            f"held-out architectures: {len(self.test_archs)}",
            f"{'model':<14}{'n':>6}{'MAPE':>8}{'+-5%':>8}{'+-10%':>8}{'Spearman':>10}{'Kendall':>9}",
        ]
        for name, m in self.models.items():
            n = self.source["n_train"] if name == "source" else len(self.shots)
            if name == "full":
                n = self.source.get("full_n_train", "-")
            lines.append(f"{name:<14}{n!s:>6}{m.mape:>8.2%}{m.within_5:>8.1%}{m.within_10:>8.1%}{m.spearman:>10.3f}"
                         f"{m.kendall:>9.3f}")
        return "\n".join(lines)


def _check_sources(source: PredictorEstimator, others: Sequence[PredictorEstimator]) -> None:
    seen = {source.digest}
    for other in others:
        if other.digest in seen:
            raise ConfigError(f"predictor {other.digest[:12]} is given twice as a source: give each device's once")
        seen.add(other.digest)
        if other.statistic != source.statistic:
            raise PredictorMismatchError(
                f"the source predictors predict different statistics: {source.statistic!r} and {other.statistic!r} "
                "(mix predictors of one statistic)")


def _source_summary(source: PredictorEstimator) -> dict[str, Any]:
    fp = source.target.fingerprint
    model = fp.environment.get("device_name") or fp.environment.get("cpu_model") or fp.device
    threads = fp.environment.get("intra_op_threads") or fp.environment.get("torch_threads")
    device = f"{fp.backend} on {model}" + (f", {threads} thread(s)" if threads else "")
    device += f", input {'x'.join(map(str, source.target.input_shape))}"
    return {"device": device, "fingerprint": fp.digest, "predictor_digest": source.digest, "space": source.target.space,
            "input_shape": list(source.target.input_shape), "n_train": len(source.training.get("train_arch_ids", []))}


def adapt_predictor(
    source: PredictorEstimator,
    dataset: Dataset,
    shots: int | None = None,
    test: Dataset | None = None,
    full: PredictorEstimator | None = None,
    members: int = 16,
    seed: int = 0,
    include_disturbed: bool = False,
    statistic: str | None = None,
    others: Sequence[PredictorEstimator] = (),
) -> tuple[PredictorEstimator, TransferReport]:
    """Adapt ``source`` (another device's predictor) with measurements of the device of ``dataset``.

    Args:
        source: the predictor to start from.
        dataset: the new device's measurements, in the order they were made (a collection with
            ``--adapt-from`` measures the most informative first).
        shots: adapt with the first ``shots`` usable architectures (None: all of them).
        test: held-out measurements of the same device (None: the dataset's architectures after
            the first ``shots``, if any).
        full: a predictor trained on many measurements of the new device, to compare against.
        members: bootstrap ensemble size of the adapted predictor.
        seed: seed of the bootstrap.
        include_disturbed: also use architectures whose every measurement was disturbed.
        statistic: the statistic the adapted predictor learns (None: ``source``'s); records with
            too few timed runs for it are not used.
        others: predictors of further devices: each is adapted with the same measurements, and the
            adapted predictor is their mix with ``source``'s (:func:`adapt_model_from_many`).

    Returns:
        The adapted predictor, valid for the dataset's setting, and the comparison on held-out
        architectures (empty ``models`` when there are none).

    Raises:
        DatasetError: fewer usable architectures than ``shots`` (or than 3).
        PredictorMismatchError: ``test`` or ``full`` is for another setting than ``dataset``, or
            one of ``others`` predicts another statistic than ``source``.
        ConfigError: ``full`` was trained on held-out architectures, or a source is given twice.
    """
    _check_sources(source, others)
    stat = check_stat(source.statistic if statistic is None else statistic)
    table = dataset.table(include_disturbed=include_disturbed, statistic=stat)
    n = len(table) if shots is None else shots
    if n < 3 or n > len(table):
        raise DatasetError(
            f"{dataset.path}: {len(table)} usable architectures; adapting with the first {n} needs at least "
            f"{max(n, 3)}: collect more on this device"
            + (f" ({table.too_few_runs} left out with fewer than {MIN_RUNS[stat]} timed runs, too few for a {stat}: "
               f"collect with --statistic {stat})" if table.too_few_runs else "")
        )
    fit_rows = table.subset(np.arange(n))
    if test is not None:
        test.target.check(dataset.target, what="test dataset")
        held = test.table(include_disturbed=include_disturbed, statistic=stat)
        held = held.subset([i for i, a in enumerate(held.archs) if a not in set(fit_rows.archs)])
    else:
        held = table.subset(np.arange(n, len(table)))
    extractor = FeatureExtractor(dataset.target.input_shape, dataset.target.num_classes)
    fit_archs = [Arch.decode(a) for a in fit_rows.archs]
    report = TransferReport(source=_source_summary(source), dataset=dataset.summary(), shots=list(fit_rows.archs),
                            test_archs=list(held.archs), scales={})
    first: AdditiveModel | None = None
    if others:
        model, mix = adapt_model_from_many([source.model, *(o.model for o in others)], extractor, fit_archs,
                                           fit_rows.latency_ms, members, seed)
        scales = replace(mix.scales[0], loo_abs_rel_error=mix.loo_abs_rel_error)
        report.source_weight = float(mix.weights[0])
        report.source_loo_mape = float(np.mean(mix.scales[0].loo_abs_rel_error))
        report.others = [{**_source_summary(o), "weight": float(w), "loo_mape": float(np.mean(f.loo_abs_rel_error))}
                         for o, w, f in zip(others, mix.weights[1:], mix.scales[1:], strict=True)]
        first = mix.alone[0]
    else:
        model, scales = adapt_model(source.model, extractor, fit_archs, fit_rows.latency_ms, members, seed)
    report.scales = scales.to_dict()
    if len(held) >= 2:
        _compare(report, source, model, scales, extractor, fit_archs, fit_rows.latency_ms, held, dataset.target,
                 full, seed, first)
    training = {
        "dataset": dataset.summary(), "statistic": stat, "seed": seed, "adapted_from": report.source,
        **({"also_adapted_from": report.others, "source_weight": report.source_weight} if others else {}),
        "train_arch_ids": [arch_id_of(a) for a in fit_rows.archs],
        "test_arch_ids": [arch_id_of(a) for a in held.archs],
        "report": report.to_dict(with_archs=False),
    }
    return PredictorEstimator(model, dataset.target, training, statistic=stat), report


def _compare(
    report: TransferReport, source: PredictorEstimator, adapted: AdditiveModel, scales: Scales,
    extractor: FeatureExtractor, fit_archs: list[Arch], fit_ms: np.ndarray, held: LatencyTable,
    target: PredictorTarget, full: PredictorEstimator | None, seed: int, first: AdditiveModel | None = None,
) -> None:
    test_archs = [Arch.decode(a) for a in held.archs]
    preds: dict[str, np.ndarray] = {"adapted": adapted.predict(test_archs)}
    if first is not None:
        preds["adapted_first"] = first.predict(test_archs)
    if len(fit_archs) >= 5:
        scratch = AdditiveModel(extractor, members=0, seed=seed)
        scratch.fit(fit_archs, fit_ms)
        preds["scratch"] = scratch.predict(test_archs)
    preds["global_scale"] = unadapted(source.model, extractor, scales.global_scale).predict(test_archs)
    preds["source"] = unadapted(source.model, extractor).predict(test_archs)
    macs = MacsBaseline(extractor)
    macs.fit(fit_archs, fit_ms)
    preds["macs"] = macs.predict(test_archs)
    if full is not None:
        full.target.check(target, what="full predictor")
        if full.statistic != held.statistic:
            raise PredictorMismatchError(
                f"the full predictor was made for another setting: statistic {held.statistic!r} here, "
                f"{full.statistic!r} in the full predictor"
            )
        seen = set(full.training.get("train_arch_ids", [])) & {arch_id_of(a) for a in held.archs}
        if seen:
            raise ConfigError(f"the full predictor was trained on {len(seen)} of the held-out architectures: "
                              "compare on architectures it has not seen (another --test-data)")
        preds["full"] = full.predict_many(test_archs)
        report.source["full_n_train"] = len(full.training.get("train_arch_ids", []))
    report.models = {k: accuracy_metrics(held.latency_ms, p) for k, p in preds.items()}
    report.predictions = {k: p.tolist() for k, p in preds.items()}
    report.measured_ms = held.latency_ms.tolist()
