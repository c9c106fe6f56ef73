"""How good a latency predictor is, in the numbers a user can act on.

All functions take measured and predicted latencies in milliseconds, one entry per held-out
architecture, and are pure (no I/O), so they are tested exhaustively.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np

from latency_predictor.errors import ConfigError

ArrayLike = Sequence[float] | np.ndarray

_SE_MEDIAN = math.sqrt(math.pi / 2)
"""Standard error of a sample median over that of the mean, for normal samples (1.2533)."""


@dataclass(frozen=True)
class AccuracyMetrics:
    """Accuracy of predictions against measurements.

    Attributes:
        n: number of architectures.
        rmse_ms: root mean squared error, in milliseconds.
        mape: mean absolute percentage error, as a fraction (0.05 = 5%).
        within_5: share of architectures predicted within +-5% of the measurement.
        within_10: share within +-10%.
        spearman: Spearman rank correlation between predicted and measured.
        kendall: Kendall's tau-b between predicted and measured.
        max_rel_error: the largest absolute relative error, as a fraction.
    """

    n: int
    rmse_ms: float
    mape: float
    within_5: float
    within_10: float
    spearman: float
    kendall: float
    max_rel_error: float

    def to_dict(self) -> dict[str, float | int]:
        """A JSON-serialisable record."""
        return asdict(self)


def _check(measured: ArrayLike, predicted: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    y = np.asarray(measured, dtype=np.float64)
    p = np.asarray(predicted, dtype=np.float64)
    if y.ndim != 1 or y.shape != p.shape:
        raise ConfigError(f"measured and predicted must be 1-D of equal length, got {y.shape} and {p.shape}")
    if y.size < 2:
        raise ConfigError(f"need at least 2 architectures to compute accuracy metrics, got {y.size}")
    if not (np.all(np.isfinite(y)) and np.all(y > 0)):
        raise ConfigError("measured latencies must be finite and positive")
    if not np.all(np.isfinite(p)):
        raise ConfigError("predicted latencies must be finite")
    return y, p


def relative_errors(measured: ArrayLike, predicted: ArrayLike) -> np.ndarray:
    """``(predicted - measured) / measured`` per architecture."""
    y, p = _check(measured, predicted)
    return (p - y) / y


def accuracy_metrics(measured: ArrayLike, predicted: ArrayLike) -> AccuracyMetrics:
    """RMSE, MAPE, share within +-5% / +-10%, Spearman and Kendall of ``predicted`` vs ``measured``.

    Raises:
        ConfigError: mismatched shapes, fewer than two entries, or non-finite / non-positive
            measurements.
    """
    from scipy import stats as sps  # here: scipy.stats costs a second at import, and most commands never rank

    y, p = _check(measured, predicted)
    rel = np.abs(p - y) / y
    # rank correlations are undefined when either side is constant; report 0 (no ranking power)
    spearman = float(sps.spearmanr(y, p).statistic) if np.ptp(p) > 0 and np.ptp(y) > 0 else 0.0
    kendall = float(sps.kendalltau(y, p).statistic) if np.ptp(p) > 0 and np.ptp(y) > 0 else 0.0
    return AccuracyMetrics(
        n=int(y.size),
        rmse_ms=float(np.sqrt(np.mean((p - y) ** 2))),
        mape=float(rel.mean()),
        within_5=float(np.mean(rel <= 0.05)),
        within_10=float(np.mean(rel <= 0.10)),
        spearman=spearman,
        kendall=kendall,
        max_rel_error=float(rel.max()),
    )


def median_rel_se(cv: float, n: int) -> float:
    """Relative standard error of the median of ``n`` runs whose coefficient of variation is ``cv``.

    For normal samples the median's standard error is ``sqrt(pi / 2) * sigma / sqrt(n)``.
    """
    if n < 1:
        raise ConfigError(f"run count must be >= 1, got {n}")
    return _SE_MEDIAN * max(cv, 0.0) / math.sqrt(n)


def repeat_rel_sigma(log_ratios: ArrayLike) -> float:
    """Relative noise of one measurement, estimated from repeated measurements of one network.

    Args:
        log_ratios: ``log(y_a / y_b)`` for pairs of independent measurements ``y_a``, ``y_b`` of
            the same architecture (separate sessions). Each has variance ``2 sigma^2``.

    Returns:
        ``sigma``, estimated robustly (``1.4826 * median(|d|) / sqrt(2)``) so one disturbed
        measurement does not inflate it; 0.0 when no pair is given.
    """
    d = np.asarray(log_ratios, dtype=np.float64)
    if d.size == 0:
        return 0.0
    return float(1.4826 * np.median(np.abs(d)) / math.sqrt(2))


def noise_ceiling(rel_sigma: ArrayLike, tolerance: float = 0.10) -> float:
    """The share within ``tolerance`` a perfect predictor would reach, given measurement noise.

    A perfect predictor outputs each network's true latency ``mu``; the measurement it is
    compared with is ``y = mu * (1 + e)`` with ``e ~ N(0, sigma_i)``. Its relative error
    ``mu / y - 1`` is about ``-e``, so it lands within ``tolerance`` with probability
    ``erf(tolerance / (sigma_i * sqrt(2)))``; the ceiling is the mean of that over the held-out
    architectures. ``sigma_i`` is the relative noise of the i-th measurement, see
    :func:`median_rel_se` and :func:`repeat_rel_sigma` (how
    :mod:`latency_predictor.prediction.training` combines them is documented there).

    Raises:
        ConfigError: empty input, negative sigma or a non-positive tolerance.
    """
    s = np.asarray(rel_sigma, dtype=np.float64)
    if s.size == 0:
        raise ConfigError("noise ceiling needs at least one architecture")
    if np.any(s < 0) or not np.all(np.isfinite(s)):
        raise ConfigError("relative noise must be finite and >= 0")
    if tolerance <= 0:
        raise ConfigError(f"tolerance must be > 0, got {tolerance}")
    with np.errstate(divide="ignore"):
        z = np.where(s > 0, tolerance / (s * math.sqrt(2)), np.inf)
    return float(np.mean([math.erf(v) if math.isfinite(v) else 1.0 for v in z]))
