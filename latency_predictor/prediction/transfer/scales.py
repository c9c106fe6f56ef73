"""The group scales and the device's overheads, fitted by ridge-pulled least squares on relative error
(:func:`fit_scales`), their ridge strength chosen by leave-one-out.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
from scipy.optimize import lsq_linear

from latency_predictor.errors import ConfigError
from latency_predictor.prediction.transfer.groups import COARSE, GROUPS, OVERHEADS, Grouping
from latency_predictor.prediction.transfer.loo import strongest_within

LAMBDAS: tuple[float, ...] = (0.0, 1e-4, 3e-4, 0.001, 0.003, 0.01, 0.03, 0.1, 0.3, 1.0, 3.0, 10.0, 30.0, 100.0,
                              1e4)
"""Ridge strengths tried (per measurement): from 0, no pull at all (where the families of the new
device move far apart, even a weak pull towards the global scale biases every scale), to the
largest, in effect one global scale. No pull is tried only where the fit has fewer parameters than
measurements (:func:`_lambdas`)."""


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
        padding_share: with ``adapt_model(..., padding=True)``, the share of the source's cost per valid kernel
            tap the mix moved onto every tap (negative: the other way); None: not fitted.
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
    padding_share: float | None = None

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
        if self.padding_share is not None:
            out["padding_share"] = self.padding_share
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

    Least squares on relative error, with every parameter at least 0 and the ridge penalty of
    :mod:`latency_predictor.prediction.transfer`.

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
    model when the data do not tell: :func:`strongest_within`),
    and its signed leave-one-out errors."""
    subsets = _without_each(d, y, source_intercept) if without is None else without
    errors = {v: _loo(d, y, v, source_intercept, subsets) for v in _lambdas(d, len(y))}
    lam = strongest_within(errors)
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
