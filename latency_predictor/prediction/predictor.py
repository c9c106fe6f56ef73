"""The learned predictor as a :class:`~latency_predictor.LatencyEstimator`, and its file format.

The search cannot tell a :class:`PredictorEstimator` from a measuring backend: ``measure(arch)``
returns a :class:`~latency_predictor.LatencyResult` with ``source="predicted"``, the prediction
in every location field of ``stats``, the statistic it predicts in ``extra["statistic"]`` and
the uncertainty in ``extra``. A predictor learns one statistic
(:attr:`PredictorEstimator.statistic`): the p50 by default, or a percentile of the tail such as
the p99 (``train --statistic p99``); a search takes only a predictor of the statistic its target
bounds. :meth:`PredictorEstimator.predict_many` predicts a batch as one matrix product for
screening thousands of candidates.

File format: one JSON document (``format: latnas.latency_predictor``, ``version: 1``) holding the
target it is valid for (space and a hash of its definition, device fingerprint, backend,
precision, input shape), the statistic it predicts (``statistic``; a file without it, written
before predictors of the tail existed, is a p50 predictor), the fitted coefficients as plain
numbers, and the training record (the architectures trained on, the held-out report). Loading
parses JSON and checks every field against the expected layout; nothing in the file is executed
(no pickle).

Loading for another setting is refused: :func:`load_predictor` compares the file's target with
the one the search is about to use (:func:`expected_target`), and its statistic with the one
asked for (:func:`check_statistic`), and raises :class:`~latency_predictor.PredictorMismatchError`
naming each difference.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from latency_predictor.errors import ConfigError, MeasurementError, PredictorFileError, PredictorMismatchError
from latency_predictor.measurement.backends import make_estimator
from latency_predictor.measurement.protocol import LatencyResult, LatencyStats
from latency_predictor.measurement.statistic import TARGET_STATS, check_stat
from latency_predictor.prediction.features import FEATURE_NAMES, FEATURE_VERSION, FeatureExtractor
from latency_predictor.prediction.models import AdditiveModel
from latency_predictor.prediction.target import PredictorTarget
from search_spaces import Arch, SearchSpace, SearchSpaceError

PREDICTOR_FORMAT = "latnas.latency_predictor"
PREDICTOR_VERSION = 1
BAND_QUANTILE = 0.9
"""The error band is this quantile of the out-of-fold absolute relative error."""

_TOP_KEYS = {"format", "version", "created", "feature_version", "target", "model", "training"}
_OPTIONAL_KEYS = {"statistic"}
_MODEL_KEYS = {"kind", "feature_names", "coef", "intercept", "ensemble_coef", "ensemble_intercept",
               "oof_abs_rel_error", "robust_passes", "seed"}


class PredictorEstimator:
    """A fitted latency predictor for one space, device, backend and input shape.

    Args:
        model: the fitted additive model.
        target: the setting it was trained for.
        training: what it was trained on (arch ids, dataset summary, held-out report).
        space: when given, :meth:`measure` refuses architectures outside it.
        statistic: the latency statistic it predicts (:data:`~latency_predictor.measurement.statistic.TARGET_STATS`).

    Raises:
        ConfigError: an unknown ``statistic``.
    """

    name: ClassVar[str] = "predictor"

    def __init__(self, model: AdditiveModel, target: PredictorTarget, training: Mapping[str, Any],
                 space: SearchSpace | None = None, statistic: str = "p50") -> None:
        self._statistic = check_stat(statistic)
        self.model = model
        self.target = target
        self.training = dict(training)
        self.space = space
        self.input_shape: tuple[int, ...] = tuple(target.input_shape)
        self.extractor = model.extractor
        self.error_band = model.error_band(BAND_QUANTILE)
        doc = self.to_dict(created="")
        if statistic == "p50":  # a p50 predictor keeps the digest it had before files named their statistic
            del doc["statistic"]
        self.digest = _digest(doc)

    @property
    def statistic(self) -> str:
        """The latency statistic it predicts: ``p50``, ``p90``, ``p95`` or ``p99``."""
        return self._statistic

    # ---------------------------------------------------------------- prediction
    def _archs(self, archs: Sequence[Arch | str]) -> list[Arch]:
        try:
            return [a if isinstance(a, Arch) else Arch.decode(a) for a in archs]
        except SearchSpaceError as err:
            raise ConfigError(f"cannot predict: {err}") from err

    def predict_many(self, archs: Sequence[Arch | str]) -> np.ndarray:
        """Predicted latencies (ms, the :attr:`statistic` the backend would measure) of a batch of architectures."""
        return self.model.predict(self._archs(archs))

    def predict_with_uncertainty(self, archs: Sequence[Arch | str]) -> tuple[np.ndarray, np.ndarray]:
        """``(predicted_ms, spread_ms)``: predictions and the bootstrap ensemble's standard deviation."""
        return self.model.predict_with_spread(self._archs(archs))

    def measure(self, arch: Arch) -> LatencyResult:
        """The predicted latency of ``arch`` as a :class:`LatencyResult` (``source="predicted"``).

        ``stats`` holds the prediction in every location field (``n=0``: no run was timed;
        ``std``, ``cv`` and ``iqr_rel`` are 0 because no run-to-run spread is predicted).
        ``extra`` holds ``statistic`` (the one predicted, :attr:`statistic`: a p99 predictor's
        figure is a p99 whichever field it is read from), ``uncertainty_ms`` (ensemble spread),
        ``error_band_rel`` (the 90% out-of-fold relative error), ``interval_ms`` (the prediction
        +- that band), ``predicted_backend`` and the predictor's ``predictor_digest``.

        Raises:
            ConfigError: ``arch`` is not in the predictor's space (when it was loaded with one).
            MeasurementError: the prediction is not a positive latency (a model fitted on too little);
                this fails the candidate, not the search.
        """
        if self.space is not None and not self.space.contains(arch):
            raise ConfigError(f"{arch.encode()} is not in space {self.space.name!r}: the predictor does not cover it")
        pred, spread = self.predict_with_uncertainty([arch])
        p, s = float(pred[0]), float(spread[0])
        if not p > 0:  # also NaN
            raise MeasurementError(
                f"the predictor predicts {p:g} ms for {arch.encode()}: no latency; it was fitted on too few or too "
                "scattered measurements, so collect more and train it again")
        stats = LatencyStats(n=0, min=p, mean=p, std=0.0, p50=p, p90=p, p95=p, p99=p, cv=0.0, iqr_rel=0.0)
        fp = self.target.fingerprint
        return LatencyResult(
            arch=arch.encode(), backend=self.name, source="predicted", device=fp.device, precision=fp.precision,
            input_shape=self.input_shape, stats=stats, stable=True, attempts=0,
            throughput={self.input_shape[0]: self.input_shape[0] * 1e3 / p},
            environment=dict(fp.environment),
            extra={
                "statistic": self.statistic, "uncertainty_ms": s, "error_band_rel": self.error_band,
                "interval_ms": [p * (1 - self.error_band), p * (1 + self.error_band)],
                "predicted_backend": fp.backend, "fingerprint": fp.digest, "predictor_digest": self.digest,
            },
        )

    def environment(self) -> dict[str, str]:
        """The environment of the device the predictor was trained on (its fingerprint's)."""
        return dict(self.target.fingerprint.environment)

    def final_latency(
        self, arch: Arch, result: LatencyResult, objective: float, front: Sequence[Sequence[float]]
    ) -> LatencyResult:
        """A prediction is final outside hybrid mode (see :class:`~latency_predictor.LatencyEstimator`)."""
        return result

    # ---------------------------------------------------------------- persistence
    def to_dict(self, created: str | None = None) -> dict[str, Any]:
        """The JSON document :meth:`save` writes."""
        return {
            "format": PREDICTOR_FORMAT, "version": PREDICTOR_VERSION,
            "created": dt.datetime.now(dt.UTC).isoformat(timespec="seconds") if created is None else created,
            "feature_version": FEATURE_VERSION, "target": self.target.to_dict(), "statistic": self.statistic,
            "model": self.model.to_dict(), "training": self.training,
        }

    def save(self, path: str | Path) -> Path:
        """Write the predictor as JSON to ``path`` (parent folders are created)."""
        p = Path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(json.dumps(self.to_dict(), indent=1) + "\n")
        return p

    def summary(self) -> dict[str, Any]:
        """Flat identity and quality figures (for an experiment tracker's params and tags)."""
        t = self.target
        models = self.training.get("report", {}).get("models", {})
        held_out = models.get("additive") or models.get("adapted") or {}  # trained, or adapted from another device
        return {
            "predictor_digest": self.digest, "space": t.space, "space_digest": t.space_digest,
            "backend": t.backend, "device": t.fingerprint.device, "precision": t.fingerprint.precision,
            "fingerprint": t.fingerprint.digest, "input_shape": "x".join(map(str, t.input_shape)),
            "statistic": self.statistic, "n_train": len(self.training.get("train_arch_ids", [])),
            "error_band_rel": self.error_band,
            **{f"heldout_{k}": v for k, v in held_out.items() if isinstance(v, int | float)},
        }


def _digest(doc: Mapping[str, Any]) -> str:
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:16]


# ---------------------------------------------------------------------- loading

def _fail(path: Path, what: str) -> PredictorFileError:
    return PredictorFileError(f"{path}: {what}")


def _vector(path: Path, name: str, raw: object, length: int | None) -> np.ndarray:
    if not isinstance(raw, list) or not all(isinstance(v, int | float) and not isinstance(v, bool) for v in raw):
        raise _fail(path, f"model.{name} must be a list of numbers")
    arr = np.array(raw, dtype=np.float64)
    if length is not None and arr.size != length:
        raise _fail(path, f"model.{name} has {arr.size} entries, expected {length}")
    if not np.all(np.isfinite(arr)):
        raise _fail(path, f"model.{name} holds non-finite numbers")
    return arr


def _model_from(path: Path, raw: object, extractor: FeatureExtractor) -> AdditiveModel:
    if not isinstance(raw, dict) or set(raw) != _MODEL_KEYS:
        got = sorted(raw) if isinstance(raw, dict) else type(raw).__name__
        raise _fail(path, f"model must have exactly the keys {sorted(_MODEL_KEYS)}, got {got}")
    if raw["kind"] != AdditiveModel.name:
        raise _fail(path, f"unknown model kind {raw['kind']!r}; this version reads {AdditiveModel.name!r}")
    if raw["feature_names"] != list(FEATURE_NAMES):
        raise _fail(path, "the model was fitted on other features than this version computes: retrain it")
    nf = len(FEATURE_NAMES)
    coef = _vector(path, "coef", raw["coef"], nf)
    intercept = raw["intercept"]
    if not isinstance(intercept, int | float) or isinstance(intercept, bool) or not math.isfinite(intercept):
        raise _fail(path, "model.intercept must be a finite number")
    ens = raw["ensemble_coef"]
    if not isinstance(ens, list):
        raise _fail(path, "model.ensemble_coef must be a list of coefficient lists")
    ens_coef = np.array([_vector(path, "ensemble_coef[]", row, nf) for row in ens]).reshape(len(ens), nf)
    ens_b = _vector(path, "ensemble_intercept", raw["ensemble_intercept"], len(ens))
    oof = _vector(path, "oof_abs_rel_error", raw["oof_abs_rel_error"], None)
    if oof.size == 0 or np.any(oof < 0):
        raise _fail(path, "model.oof_abs_rel_error must be a non-empty list of non-negative numbers")
    if np.any(coef < 0) or np.any(ens_coef < 0):
        raise _fail(path, "model coefficients must be non-negative (operator costs)")
    for key in ("robust_passes", "seed"):
        if not isinstance(raw[key], int) or isinstance(raw[key], bool) or raw[key] < 0:
            raise _fail(path, f"model.{key} must be a non-negative integer")
    return AdditiveModel.from_arrays(extractor, coef, float(intercept), ens_coef, ens_b, oof,
                                     raw["robust_passes"], raw["seed"])


def _check_training(path: Path, training: object) -> None:
    if not isinstance(training, dict):
        raise _fail(path, "training must be a mapping")
    for key in ("train_arch_ids", "test_arch_ids"):
        ids = training.get(key)
        if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
            raise _fail(path, f"training.{key} must be a list of architecture ids")
    for key in ("dataset", "report"):
        if key in training and not isinstance(training[key], dict):
            raise _fail(path, f"training.{key} must be a mapping")
    models = training.get("report", {}).get("models", {})
    if not isinstance(models, dict) or not all(isinstance(m, dict) for m in models.values()):
        raise _fail(path, "training.report.models must map model names to metrics")


def read_predictor(path: str | Path) -> PredictorEstimator:
    """Read a predictor file without checking what it is for (use :func:`load_predictor` to search).

    Raises:
        PredictorFileError: unreadable, not JSON, another format or version, or unexpected content.
    """
    p = Path(path)
    try:
        doc = json.loads(p.read_text())
    except OSError as err:
        raise PredictorFileError(f"{p}: cannot read: {err.strerror}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise _fail(p, f"not a JSON document: {err}") from None
    if not isinstance(doc, dict) or doc.get("format") != PREDICTOR_FORMAT:
        raise _fail(p, f"not a latency predictor (format must be {PREDICTOR_FORMAT!r})")
    if doc.get("version") != PREDICTOR_VERSION:
        raise _fail(p, f"predictor format version {doc.get('version')!r}; this version reads {PREDICTOR_VERSION}")
    if not _TOP_KEYS <= set(doc) <= _TOP_KEYS | _OPTIONAL_KEYS:
        raise _fail(p, f"expected exactly the keys {sorted(_TOP_KEYS)} (and optionally {sorted(_OPTIONAL_KEYS)}), "
                       f"got {sorted(doc)}")
    statistic = doc.get("statistic", "p50")  # files written before predictors of the tail predict the p50
    if statistic not in TARGET_STATS:
        raise _fail(p, f"statistic {statistic!r} is not one of {list(TARGET_STATS)}")
    if doc["feature_version"] != FEATURE_VERSION:
        raise _fail(p, f"made with feature version {doc['feature_version']!r}, this version computes "
                       f"{FEATURE_VERSION}: retrain it")
    _check_training(p, doc["training"])
    try:
        target = PredictorTarget.from_dict(doc["target"])
    except (ConfigError, TypeError) as err:
        raise _fail(p, f"invalid target: {err}") from None
    extractor = FeatureExtractor(target.input_shape, target.num_classes)
    model = _model_from(p, doc["model"], extractor)
    return PredictorEstimator(model, target, doc["training"], statistic=statistic)


def load_predictor(path: str | Path, expected: PredictorTarget, space: SearchSpace | None = None,
                   statistic: str | None = None) -> PredictorEstimator:
    """Load a predictor for a search, refusing one made for another setting.

    Args:
        path: the predictor file.
        expected: what the search is about to use (:func:`expected_target`).
        space: the search space; when given, ``measure`` refuses architectures outside it.
        statistic: when given, the statistic the predictor must predict (:func:`check_statistic`).

    Raises:
        PredictorFileError: the file cannot be read or has unexpected content.
        PredictorMismatchError: it was trained for another space, device, backend, precision,
            input shape or statistic; the message names every difference.
    """
    pred = read_predictor(path)
    pred.target.check(expected, what="predictor")
    if statistic is not None:
        check_statistic(pred, statistic, path)
    pred.space = space
    return pred


def check_statistic(pred: PredictorEstimator, statistic: str, path: str | Path | None = None) -> None:
    """Refuse ``pred`` unless it predicts ``statistic``.

    Raises:
        ConfigError: an unknown ``statistic``.
        PredictorMismatchError: it predicts another statistic; the message says how to make one
            that predicts ``statistic``.
    """
    if pred.statistic == check_stat(statistic):
        return
    where = f" ({path})" if path is not None else ""
    raise PredictorMismatchError(
        f"this predictor was made for another setting: statistic {statistic!r} here, {pred.statistic!r} in the "
        f"predictor{where}; train one for the {statistic} (python -m latency_predictor.train ... --statistic "
        f"{statistic}, on measurements with enough timed runs: python -m latency_predictor.collect ... --statistic "
        f"{statistic}), or set latency.target_stat={pred.statistic}"
    )


def expected_target(space: SearchSpace, backend: str = "onnxruntime", **backend_options: Any) -> PredictorTarget:
    """The target of measurements with ``backend`` (built from ``backend_options``, nothing measured).

    Raises:
        ConfigError: unknown backend or options.
        BackendUnavailableError: the backend cannot run here.
    """
    return PredictorTarget.create(space, make_estimator(backend, **backend_options))


def predictor_tracking_record(path: str | Path) -> tuple[list[Path], dict[str, Any]]:
    """The file and flat metadata of a saved predictor, for an experiment tracker's model registry.

    Raises:
        PredictorFileError: the file cannot be read.
    """
    pred = read_predictor(path)
    return [Path(path)], pred.summary()
