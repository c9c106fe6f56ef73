"""Another device's model adapted to this one: one grouping's fit (scales, overheads, refinement), the
mean of the groupings' fits (:func:`adapt_model`), and the mix of several sources
(:func:`adapt_model_from_many`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np
from scipy.optimize import lsq_linear

from latency_predictor.errors import ConfigError
from latency_predictor.prediction.features import FEATURE_NAMES, FeatureExtractor
from latency_predictor.prediction.models import AdditiveModel
from latency_predictor.prediction.threads import one_blas_thread
from latency_predictor.prediction.transfer.groups import _OPS, COARSE, GROUPINGS, GROUPS, Grouping, group_contributions
from latency_predictor.prediction.transfer.refine import _refine, _refine_signed, design_matrix
from latency_predictor.prediction.transfer.scales import Scales, _Design, _design, _fit_scales, _solve
from search_spaces import Arch


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



PADDING_SHARES: tuple[float, ...] = (-1.0, 0.0, 1.0)
"""The shares of the source's compute cost moved between a convolution's kernel taps inside the input and all its
taps (:func:`padding_variant`) when ``adapt_model(..., padding=True)`` fits how the new device pays for the taps that
fall on the zero padding: all of its cost per valid tap moved onto every tap (1), none (0), and the reverse (-1). The
mix of the three (weighted by leave-one-out error) can sit anywhere between."""

_PADDED = np.array([(FEATURE_NAMES.index(n), FEATURE_NAMES.index(n.replace(".macs_valid", ".macs")))
                    for n in FEATURE_NAMES if n.endswith(".macs_valid")])


def padding_variant(source: AdditiveModel, extractor: FeatureExtractor, share: float) -> AdditiveModel:
    """``source`` with ``share`` of each operator kind's cost per MAC inside the input (``<kind>.macs_valid``)
    moved onto all its MACs (``<kind>.macs``), padded taps included; a negative share moves the cost per MAC the
    other way. A runtime that skips the taps on the padding (ONNX Runtime's CPU kernels, by the fit) and one that
    computes them (LiteRT's XNNPACK) price the same network differently wherever kernels are large against the
    map, and the group scales cannot move a cost from one quantity to the other.

    Raises:
        ConfigError: ``share`` outside [-1, 1].
    """
    if not -1.0 <= share <= 1.0:
        raise ConfigError(f"a padding share must lie in [-1, 1], got {share!r}")
    coef = source.coef.copy()
    valid, every = _PADDED[:, 0], _PADDED[:, 1]
    if share >= 0:
        moved = share * coef[valid]
        coef[valid] -= moved
        coef[every] += moved
    else:
        moved = -share * coef[every]
        coef[every] -= moved
        coef[valid] += moved
    return _with_costs(source, extractor, np.r_[coef, source.intercept])


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
    groupings: Sequence[Grouping] = GROUPINGS, padding: bool = False,
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
        padding: also fit how the new device pays for the kernel taps on the zero padding: the source is adapted
            as each of its :data:`PADDING_SHARES` variants (:func:`padding_variant`), and the adapted model is
            their mix (:func:`adapt_model_from_many`); the fit returned is the unmoved variant's, with the
            mix's leave-one-out error and its share (the weighted mean of the shares) in ``padding_share``.

    Returns:
        The adapted model (its ``oof_abs_rel_error`` is the mean model's leave-one-out error) and
        the fit of the first grouping, with the others' in ``averaged_with``.

    Raises:
        ConfigError: fewer than 3 networks, invalid latencies, or no grouping.
    """
    if padding:
        model, mix = adapt_model_from_many([padding_variant(source, source.extractor, v) for v in PADDING_SHARES],
                                           extractor, archs, latency_ms, members, seed, lam, refine, groupings)
        unmoved = PADDING_SHARES.index(0.0)
        return model, replace(mix.scales[unmoved], loo_abs_rel_error=mix.loo_abs_rel_error,
                              padding_share=float(mix.weights @ np.array(PADDING_SHARES)))
    fit = _adapt(source, extractor, archs, latency_ms, members, seed, lam, refine, groupings)
    return _with_members(source, extractor, fit.costs, fit.members, fit.scales), fit.scales


@dataclass(frozen=True)
class _Adapted:
    """One source's adaptation: its costs, fit, signed leave-one-out errors and bootstrap members' costs."""

    costs: np.ndarray
    scales: Scales
    signed: np.ndarray
    members: np.ndarray


@one_blas_thread
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
