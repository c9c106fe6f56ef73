"""How well one ranking agrees with another: Kendall's tau and Spearman's rho with bootstrap
confidence intervals, and the overlap of the two top sets. Pure functions of arrays."""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import numpy as np
from scipy import stats as sps


@dataclass(frozen=True)
class Agreement:
    """An estimator's ranking against the reference's.

    Attributes:
        n: architectures compared.
        kendall_tau: Kendall's tau-b.
        kendall_ci: its 95% bootstrap interval (percentile method).
        spearman: Spearman's rho.
        spearman_ci: its 95% bootstrap interval.
        top_overlap: share of the reference's top ``top_n`` that are also in the estimator's top ``top_n``.
        top_n: the size of the top set (10% of ``n``, at least 1).
    """

    n: int
    kendall_tau: float
    kendall_ci: tuple[float, float]
    spearman: float
    spearman_ci: tuple[float, float]
    top_overlap: float
    top_n: int


def _tau(a: np.ndarray, b: np.ndarray) -> float:
    with warnings.catch_warnings():  # a constant resample has no ranking: it counts as no agreement
        warnings.simplefilter("ignore", sps.ConstantInputWarning)
        t = sps.kendalltau(a, b).statistic
    return float(t) if math.isfinite(t) else 0.0


def _rho(a: np.ndarray, b: np.ndarray) -> float:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", sps.ConstantInputWarning)
        r = sps.spearmanr(a, b).statistic
    return float(r) if math.isfinite(r) else 0.0


def top_overlap(reference: np.ndarray, estimate: np.ndarray, share: float = 0.1) -> tuple[float, int]:
    """Share of the reference's top ``share`` (at least one) that the estimate also puts in its top."""
    n = max(1, round(share * len(reference)))
    ref_top = set(np.argsort(-reference, kind="stable")[:n].tolist())
    est_top = set(np.argsort(-estimate, kind="stable")[:n].tolist())
    return len(ref_top & est_top) / n, n


def agreement(reference: np.ndarray, estimate: np.ndarray, resamples: int = 1000, seed: int = 0) -> Agreement:
    """Rank agreement of ``estimate`` with ``reference`` (higher is better for both).

    Raises:
        ValueError: fewer than 3 pairs, or arrays of different lengths.
    """
    ref = np.asarray(reference, dtype=np.float64)
    est = np.asarray(estimate, dtype=np.float64)
    if ref.shape != est.shape or ref.ndim != 1 or len(ref) < 3:
        raise ValueError(f"need two equally long sequences of at least 3 values, got {ref.shape} and {est.shape}")
    rng = np.random.default_rng(seed)
    taus, rhos = [], []
    for _ in range(resamples):
        idx = rng.integers(0, len(ref), len(ref))
        if len(np.unique(idx)) < 3:
            continue
        taus.append(_tau(ref[idx], est[idx]))
        rhos.append(_rho(ref[idx], est[idx]))
    overlap, top_n = top_overlap(ref, est)
    return Agreement(
        n=len(ref), kendall_tau=_tau(ref, est), kendall_ci=_ci(taus), spearman=_rho(ref, est), spearman_ci=_ci(rhos),
        top_overlap=overlap, top_n=top_n,
    )


def _ci(values: list[float]) -> tuple[float, float]:
    lo, hi = np.percentile(values, [2.5, 97.5])
    return float(lo), float(hi)


def noise_ceiling(tau_between: float) -> float:
    """The Kendall tau an error-free estimator is expected to reach against *one* reference, when two
    runs of that reference agree at ``tau_between``.

    Each run is taken as the true score plus independent noise, all Gaussian. For Gaussian pairs,
    Kendall's tau and Pearson's r are related by ``tau = (2 / pi) asin(r)``. Two runs then
    correlate at ``r_between = sin(pi tau_between / 2)``, and the truth correlates with either run
    at ``sqrt(r_between)``. The truth agrees with one run better than two runs agree with each
    other, because only one side is noisy. A model, not a measurement: the empirical counterpart is
    one run's tau against the mean of the others.

    Raises:
        ValueError: ``tau_between`` outside (0, 1].
    """
    if not 0.0 < tau_between <= 1.0:
        raise ValueError(f"the references must agree positively (tau in (0, 1]), got {tau_between}")
    return 2.0 / math.pi * math.asin(math.sqrt(math.sin(math.pi * tau_between / 2.0)))
