"""Latency models fitted on measured architectures: the predictor and the two baselines.

* :class:`AdditiveModel`, the predictor: latency is a sum of per-operator costs,
  ``intercept + sum_j w_j x_j`` over the features of :mod:`latency_predictor.prediction.features`
  (MACs, memory traffic, parameters and calls per operator kind, the share of each in
  channel counts that SIMD blocks do not divide, activation elements), with every ``w_j >= 0``
  (non-negative least squares: no operator makes a network faster). It is fitted on relative
  error, since accuracy is judged within +-5% / +-10%, and made robust to measurements disturbed
  by other load (a few reweighting passes, Huber then Tukey's bisquare). A bootstrap ensemble gives each
  prediction an uncertainty; out-of-fold errors on the training set give a calibrated band.
* :class:`MacsBaseline`: latency proportional to MACs, one constant fitted.
* :class:`LookupTableBaseline`: the FBNet / Once-for-All lookup table, one cost per (block
  configuration, input channels, input size) and for the stem and head, summed over the network
  plus a constant, the costs estimated by least squares over the measured networks.

All three take architectures and latencies in milliseconds; only :class:`AdditiveModel` is saved
(as plain numbers, see :mod:`latency_predictor.prediction.predictor`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np

from latency_predictor.errors import ConfigError
from latency_predictor.prediction.features import FEATURE_NAMES, FeatureExtractor
from latency_predictor.prediction.threads import one_blas_thread
from search_spaces import Arch

_HUBER_K = 1.345
_BISQUARE_C = 4.685
"""Huber's and Tukey's tuning constants (95% efficiency on clean normal errors)."""


class LatencyModel(Protocol):
    """What the training report compares: fit on measured architectures, predict others."""

    name: str

    def fit(self, archs: Sequence[Arch], latency_ms: np.ndarray) -> None:
        """Fit on ``archs`` and their measured latencies."""
        ...

    def predict(self, archs: Sequence[Arch]) -> np.ndarray:
        """Predicted latencies in milliseconds."""
        ...


def _check_targets(archs: Sequence[Arch], latency_ms: np.ndarray, minimum: int) -> np.ndarray:
    y = np.asarray(latency_ms, dtype=np.float64)
    if y.ndim != 1 or len(archs) != y.size:
        raise ConfigError(f"got {len(archs)} architectures but {y.size} latencies")
    if y.size < minimum:
        raise ConfigError(f"need at least {minimum} measured architectures to fit, got {y.size}")
    if not (np.all(np.isfinite(y)) and np.all(y > 0)):
        raise ConfigError("latencies must be finite and positive")
    return y


def _kfold(n: int, k: int, rng: np.random.Generator) -> list[np.ndarray]:
    return np.array_split(rng.permutation(n), min(k, n))


class MacsBaseline:
    """Baseline (a): ``latency = c * MACs``, ``c`` minimising the squared relative error."""

    name = "macs"

    def __init__(self, extractor: FeatureExtractor) -> None:
        self.extractor = extractor
        self.ms_per_mmac = float("nan")
        self._col = FEATURE_NAMES.index("total.macs")

    def fit(self, archs: Sequence[Arch], latency_ms: np.ndarray) -> None:
        """Fit the constant (closed form of ``min sum ((c m_i - y_i) / y_i)^2``)."""
        y = _check_targets(archs, latency_ms, 1)
        m = self.extractor.transform(archs)[:, self._col]
        self.ms_per_mmac = float(np.sum(m / y) / np.sum((m / y) ** 2))

    def predict(self, archs: Sequence[Arch]) -> np.ndarray:
        """``c * MACs`` (MACs in millions)."""
        return self.ms_per_mmac * self.extractor.transform(archs)[:, self._col]


def _lut_keys(arch: Arch, extractor: FeatureExtractor) -> list[tuple[object, ...]]:
    """Table entries of ``arch``: fine (block, input channels, input size) and a coarse back-off.

    The coarse key (block type, kernel, expansion, SE, stride at that input size, without the
    channel counts) lets the least-squares fit share strength between entries, so an entry never
    seen in training still gets its configuration's average cost instead of zero.
    """
    _, _, h, w = extractor.input_shape
    s = arch.stem_stride
    h, w = (h - 1) // s + 1, (w - 1) // s + 1
    keys: list[tuple[object, ...]] = [("stem", arch.act, arch.stem_chs, s)]
    chs = arch.stem_chs
    for b in arch.blocks:
        keys.append(("block", arch.act, b.encode(), chs, h, w))
        keys.append(("coarse", arch.act, b.block_type, b.kernel_size, b.exp_ratio, b.se_ratio, b.stride, h, w))
        if b.stride == 2:
            h, w = (h - 1) // 2 + 1, (w - 1) // 2 + 1
        chs = b.out_chs
    keys.append(("head", arch.act, chs, arch.head_chs, h, w))
    return keys


class LookupTableBaseline:
    """Baseline (b): a per-block lookup table summed over the network, plus a constant.

    The entries are fitted by ridge-regularised least squares on relative error; the ridge
    strength is chosen by 5-fold cross-validation on the training networks.

    Attributes:
        coverage: after :meth:`predict`, the share of the predicted networks' blocks whose exact
            table entry was seen in training (the rest use the back-off entry only).
    """

    name = "lookup_table"
    ALPHAS: tuple[float, ...] = (1e-4, 1e-3, 1e-2, 1e-1, 1.0)

    def __init__(self, extractor: FeatureExtractor, seed: int = 0) -> None:
        self.extractor = extractor
        self.seed = seed
        self.index: dict[tuple[object, ...], int] = {}
        self.costs = np.zeros(0)
        self.constant = 0.0
        self.alpha = float("nan")
        self.coverage = float("nan")

    def _design(self, archs: Sequence[Arch]) -> tuple[np.ndarray, int, int]:
        m = np.zeros((len(archs), len(self.index)))
        seen = total = 0
        for i, a in enumerate(archs):
            for key in _lut_keys(a, self.extractor):
                j = self.index.get(key)
                if key[0] == "block":
                    total += 1
                    seen += j is not None
                if j is not None:
                    m[i, j] += 1
        return m, seen, total

    @staticmethod
    def _solve(m: np.ndarray, y: np.ndarray, alpha: float) -> np.ndarray:
        # rows scaled by 1/y: least squares on relative error; the constant is the last column
        a = np.hstack([m, np.ones((len(y), 1))]) / y[:, None]
        reg = np.sqrt(alpha) * np.eye(a.shape[1])[:-1]
        sol: np.ndarray = np.linalg.lstsq(np.vstack([a, reg]), np.r_[np.ones(len(y)), np.zeros(len(reg))],
                                          rcond=None)[0]
        return sol

    @one_blas_thread
    def fit(self, archs: Sequence[Arch], latency_ms: np.ndarray) -> None:
        """Fit the table entries and the constant."""
        y = _check_targets(archs, latency_ms, 2)
        self.index = {}
        for a in archs:
            for key in _lut_keys(a, self.extractor):
                self.index.setdefault(key, len(self.index))
        m, _, _ = self._design(archs)
        folds = _kfold(len(y), 5, np.random.default_rng(self.seed))
        best = (np.inf, self.ALPHAS[0])
        for alpha in self.ALPHAS:
            err = 0.0
            for f in folds:
                tr = np.setdiff1d(np.arange(len(y)), f)
                sol = self._solve(m[tr], y[tr], alpha)
                pred = m[f] @ sol[:-1] + sol[-1]
                err += float(np.sum(((pred - y[f]) / y[f]) ** 2))
            best = min(best, (err, alpha))
        self.alpha = best[1]
        sol = self._solve(m, y, self.alpha)
        self.costs, self.constant = sol[:-1], float(sol[-1])

    def predict(self, archs: Sequence[Arch]) -> np.ndarray:
        """Sum of the table entries of each network, plus the constant."""
        m, seen, total = self._design(archs)
        self.coverage = seen / total if total else float("nan")
        out: np.ndarray = m @ self.costs + self.constant
        return out


class AdditiveModel:
    """The predictor: non-negative additive operator costs, robust relative least squares.

    Args:
        extractor: features at the deployment input shape.
        members: bootstrap ensemble size for the per-prediction uncertainty (0: none).
        robust_passes: Huber reweighting passes after the first fit (0: plain least squares).
        seed: seed of the bootstrap and cross-validation draws.
    """

    name = "additive"

    def __init__(self, extractor: FeatureExtractor, members: int = 16, robust_passes: int = 3, seed: int = 0) -> None:
        if members < 0 or robust_passes < 0:
            raise ConfigError("members and robust_passes must be >= 0")
        self.extractor = extractor
        self.members = members
        self.robust_passes = robust_passes
        self.seed = seed
        self.scale = np.ones(len(FEATURE_NAMES))
        self.coef = np.zeros(len(FEATURE_NAMES))
        self.intercept = 0.0
        self.ensemble_coef = np.zeros((0, len(FEATURE_NAMES)))
        self.ensemble_intercept = np.zeros(0)
        self.oof_abs_rel_error = np.zeros(0)

    # ---------------------------------------------------------------- fitting
    def _fit_once(self, x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, float]:
        """``(coef, intercept)`` on scaled features ``x``; rows weighted by relative error and robustness.

        Iteratively reweighted non-negative least squares: the first reweighting uses Huber's
        weights (a safe start when the plain fit is pulled by outliers), the later ones Tukey's
        bisquare, which gives a grossly disturbed measurement no weight at all. When a fit pulled
        far off by one row leaves every residual beyond the bisquare's reach, the next pass would
        weight no row and predict 0 ms everywhere: a pass that weights no row, or predicts no
        latency for a row the previous fit predicted one for, ends the passes with the previous fit.
        """
        from scipy.optimize import nnls  # here: scipy.optimize is half a second of every command's start

        a = np.hstack([x, np.ones((len(y), 1))]) / y[:, None]
        wts = np.ones(len(y))
        sol = np.zeros(a.shape[1])
        for k in range(1 + self.robust_passes):
            if not np.any(wts > 0):
                break
            sw = np.sqrt(wts)
            fit = nnls(a * sw[:, None], sw, maxiter=50 * a.shape[1])[0]
            if k and np.any(a @ fit <= 0) and np.all(a @ sol > 0):
                break
            sol = fit
            r = a @ sol - 1.0  # relative residuals
            s = 1.4826 * float(np.median(np.abs(r - np.median(r))))
            if s <= 0:
                break
            if k == 0:
                u = np.abs(r) / (_HUBER_K * s)
                wts = np.where(u <= 1, 1.0, 1.0 / np.maximum(u, 1e-12))
            else:
                u = r / (_BISQUARE_C * s)
                wts = np.where(np.abs(u) < 1, (1 - u**2) ** 2, 0.0)
        return sol[:-1], float(sol[-1])

    @one_blas_thread
    def fit(self, archs: Sequence[Arch], latency_ms: np.ndarray) -> None:
        """Fit the costs, the bootstrap ensemble and the out-of-fold error band.

        Raises:
            ConfigError: fewer than 5 architectures, or invalid latencies.
        """
        y = _check_targets(archs, latency_ms, 5)
        x = self.extractor.transform(archs)
        scale = np.abs(x).max(axis=0)
        self.scale = np.where(scale > 0, scale, 1.0)
        xs = x / self.scale
        coef, self.intercept = self._fit_once(xs, y)
        self.coef = coef / self.scale
        rng = np.random.default_rng(self.seed)
        ens_c, ens_b = [], []
        for _ in range(self.members):
            idx = rng.integers(0, len(y), len(y))
            c, b = self._fit_once(xs[idx], y[idx])
            ens_c.append(c / self.scale)
            ens_b.append(b)
        self.ensemble_coef = np.array(ens_c).reshape(self.members, len(FEATURE_NAMES))
        self.ensemble_intercept = np.array(ens_b)
        oof = np.empty(len(y))
        for f in _kfold(len(y), 5, rng):
            tr = np.setdiff1d(np.arange(len(y)), f)
            c, b = self._fit_once(xs[tr], y[tr])
            oof[f] = xs[f] @ c + b
        self.oof_abs_rel_error = np.abs(oof - y) / y

    # ---------------------------------------------------------------- prediction
    def predict(self, archs: Sequence[Arch]) -> np.ndarray:
        """Predicted latencies in milliseconds."""
        out: np.ndarray = self.extractor.project(archs, self.coef) + self.intercept
        return out

    def predict_with_spread(self, archs: Sequence[Arch]) -> tuple[np.ndarray, np.ndarray]:
        """Predictions and the bootstrap ensemble's standard deviation, both in milliseconds."""
        w = np.column_stack([self.coef, self.ensemble_coef.T])
        out = self.extractor.project(archs, w)
        pred = out[:, 0] + self.intercept
        if self.ensemble_coef.shape[0] < 2:
            return pred, np.zeros(len(pred))
        members = out[:, 1:] + self.ensemble_intercept
        return pred, members.std(axis=1, ddof=1)

    def error_band(self, quantile: float = 0.9) -> float:
        """The ``quantile`` of the out-of-fold absolute relative error on the training set."""
        if not len(self.oof_abs_rel_error):
            raise ConfigError("the model is not fitted")
        return float(np.quantile(self.oof_abs_rel_error, quantile))

    # ---------------------------------------------------------------- persistence
    def to_dict(self) -> dict[str, Any]:
        """Plain numbers and names: what :mod:`latency_predictor.prediction.predictor` writes as JSON."""
        return {
            "kind": self.name,
            "feature_names": list(FEATURE_NAMES),
            "coef": self.coef.tolist(),
            "intercept": self.intercept,
            "ensemble_coef": self.ensemble_coef.tolist(),
            "ensemble_intercept": self.ensemble_intercept.tolist(),
            "oof_abs_rel_error": self.oof_abs_rel_error.tolist(),
            "robust_passes": self.robust_passes,
            "seed": self.seed,
        }

    @classmethod
    def from_arrays(
        cls, extractor: FeatureExtractor, coef: np.ndarray, intercept: float, ensemble_coef: np.ndarray,
        ensemble_intercept: np.ndarray, oof_abs_rel_error: np.ndarray, robust_passes: int, seed: int,
    ) -> AdditiveModel:
        """Rebuild a fitted model from validated arrays (see
        :func:`latency_predictor.prediction.predictor.read_predictor`)."""
        m = cls(extractor, members=len(ensemble_intercept), robust_passes=robust_passes, seed=seed)
        m.coef, m.intercept = coef, float(intercept)
        m.ensemble_coef, m.ensemble_intercept = ensemble_coef, ensemble_intercept
        m.oof_abs_rel_error = oof_abs_rel_error
        return m
