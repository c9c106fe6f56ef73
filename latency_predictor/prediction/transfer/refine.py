"""The per-feature refinement of a scaled model (:func:`refine_costs`): each cost may move, ridge-pulled
towards none, its strength chosen by leave-one-out.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from scipy.optimize import lsq_linear

from latency_predictor.prediction.features import FeatureExtractor
from latency_predictor.prediction.transfer.loo import strongest_within
from search_spaces import Arch

REFINE_MUS: tuple[float, ...] = (0.01, 0.03, 0.1, 0.3, 1.0, 3.0, 10.0, math.inf)
"""Ridge strengths of the per-feature refinement tried (per measurement); ``inf``: no refinement."""



def design_matrix(extractor: FeatureExtractor, archs: Sequence[Arch]) -> np.ndarray:
    """The features of ``archs`` with a last column of ones (the intercept's)."""
    x = extractor.transform(archs)
    return np.c_[x, np.ones(len(x))]


def _refine(x: np.ndarray, y: np.ndarray, base: np.ndarray, mu: float) -> np.ndarray:
    """``base`` (costs, then intercept) moved by the ridge-penalised deltas of
    :mod:`latency_predictor.prediction.transfer`."""
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
    """The per-feature refinement of a scaled model (:mod:`latency_predictor.prediction.transfer`).

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
    # the one-standard-error rule (why the scales' strength is chosen otherwise: transfer.loo)
    chosen = strongest_within(errors, one_standard_error=True)
    return _refine(x, y, base, chosen), chosen, errors[chosen]
