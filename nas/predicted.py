"""``latency=predictor``: a learned latency predictor as the search's latency estimator.

Two modes, chosen by ``latency.options.hybrid``:

* **predictor only** (default): every candidate's latency is predicted. The predictor must have
  been trained for this space (same definition), input shape and classifier width; with
  ``latency.options.device`` set, also for that device (a CPU or GPU model name, or the
  predictor's fingerprint digest). Anything else is refused before the first trial with the
  differences named. This is the mode for searching anywhere (a cluster of GPUs) for a device
  elsewhere (one CPU, a Jetson): collect and train on the target, search with the file.
* **hybrid**: the predictor screens and a real measurement on *this* machine confirms the
  candidates that matter: those whose prediction lies within the predictor's error band of the
  target (a wrong prediction would flip the reward) and those the predictor is least sure of
  (ensemble spread above ``confirm_uncertain_rel`` of the prediction), before the candidate
  trains; and, once its accuracy is known, those that could join the Pareto front of accuracy
  against latency of the candidates finished so far (the driver hands each trial that front;
  :meth:`HybridEstimator.may_join_front`). So every candidate on the final front has a
  measured latency. A confirmed latency
  replaces the prediction (``latency_source=measured``, with the prediction kept in
  ``extra["predicted_ms"]``). Confirmations are appended to the predictor's dataset
  (``latency.options.dataset``), and every ``refit_every`` confirmations the predictor is refitted
  on the whole dataset and the search switches to the new file (``<dataset>/predictor-refit-N.json``,
  named in ``<dataset>/current_predictor``; a later hybrid search on the same dataset starts from
that latest refit). The measuring backend's device fingerprint must equal
  the predictor's: confirmations from another device would corrupt the dataset.

Dataset writes and refits are serialised across trial processes by a lock file in the dataset
folder (the folder must be on a file system every trial node sees).
"""

from __future__ import annotations

import dataclasses
import fcntl
import math
import os
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from latency_predictor import ConfigError, LatencyEstimator, LatencyResult, PredictorMismatchError
from latency_predictor.backends import make_estimator
from latency_predictor.dataset import Dataset
from latency_predictor.hybrid import add_measurements, refit
from latency_predictor.predictor import PredictorEstimator, read_predictor
from latency_predictor.target import PredictorTarget, space_digest
from search_spaces import Arch, SearchSpace

POINTER_FILE = "current_predictor"
LOCK_FILE = ".hybrid.lock"


@dataclass(frozen=True)
class PredictorOptions:
    """``latency.options`` of ``latency=predictor``.

    Attributes:
        path: the predictor file (``python -m latency_predictor.train ... --out FILE``).
        device: the device the search must target (a substring of the predictor's CPU/GPU
            model, or its fingerprint digest); None: the predictor's own device, printed.
        hybrid: confirm the candidates that matter by real measurement on this machine.
        dataset: the predictor's dataset folder (hybrid: confirmations go there; refits read it).
        measure_backend: the backend confirming measurements use (hybrid).
        measure_options: that backend's options (hybrid), e.g. ``{intra_op_threads: 1}``.
        confirm_uncertain_rel: confirm when the ensemble spread exceeds this share of the prediction.
        refit_every: refit after this many confirmations (0: never).
        pareto_band: a finished candidate is confirmed when, with its predicted latency lowered by
            this share, it would join the Pareto front; None: the predictor's own error band
            (a predictor trained on few networks has a wide band and confirms more); 0: only
            when the prediction itself puts it on the front.
    """

    path: str
    device: str | None = None
    hybrid: bool = False
    dataset: str | None = None
    measure_backend: str = "onnxruntime"
    measure_options: dict[str, Any] = field(default_factory=dict)
    confirm_uncertain_rel: float = 0.1
    refit_every: int = 10
    pareto_band: float | None = None

    @classmethod
    def parse(cls, options: Mapping[str, Any]) -> PredictorOptions:
        """Check and build from ``latency.options``.

        Raises:
            ConfigError: naming the unknown, missing or invalid key.
        """
        known = [f.name for f in dataclasses.fields(cls)]
        unknown = sorted(set(options) - set(known))
        if unknown:
            raise ConfigError(f"latency.options.{unknown[0]}: unknown for latency=predictor; known: {known}")
        if not options.get("path"):
            raise ConfigError(
                "latency.options.path: required for latency=predictor: the file written by "
                "`python -m latency_predictor.train --out FILE`"
            )
        opts = cls(**{k: v for k, v in options.items() if v is not None})
        if not Path(opts.path).is_file():
            raise ConfigError(f"latency.options.path: no predictor file at {opts.path!r}")
        if opts.hybrid and not opts.dataset:
            raise ConfigError("latency.options.dataset: hybrid mode needs the predictor's dataset folder")
        if opts.dataset and not Path(opts.dataset).is_dir():
            raise ConfigError(f"latency.options.dataset: no dataset folder at {opts.dataset!r}")
        if not opts.confirm_uncertain_rel > 0:
            raise ConfigError("latency.options.confirm_uncertain_rel: must be > 0")
        if opts.refit_every < 0:
            raise ConfigError("latency.options.refit_every: must be >= 0")
        if opts.pareto_band is not None and not 0 <= opts.pareto_band < 1:
            raise ConfigError(f"latency.options.pareto_band: must be in [0, 1) or null, not {opts.pareto_band}")
        return opts


def make_predictor_estimator(
    input_shape: tuple[int, ...], options: Mapping[str, Any], num_classes: int, space: SearchSpace,
    target_ms: float | None = None,
) -> LatencyEstimator:
    """The estimator ``latency=predictor`` describes, checked against what the search needs.

    Raises:
        ConfigError: bad options.
        PredictorFileError: the file cannot be read or has unexpected content.
        PredictorMismatchError: the predictor was trained for another space, input shape,
            classifier width or device; the message names every difference.
        BackendUnavailableError: hybrid mode's measuring backend cannot run here.
    """
    opts = PredictorOptions.parse(options)
    pred = read_predictor(_current_path(opts))
    if opts.hybrid:
        backend = make_estimator(opts.measure_backend, input_shape=list(input_shape), num_classes=num_classes,
                                 **opts.measure_options)
        pred.target.check(PredictorTarget.create(space, backend), what="predictor")
        pred.space = space
        return HybridEstimator(pred, backend, opts, target_ms)
    expected = PredictorTarget(space.name, space_digest(space), pred.target.fingerprint, tuple(input_shape),
                               num_classes)
    pred.target.check(expected, what="predictor")
    if opts.device is not None:
        fp = pred.target.fingerprint
        described = [fp.digest, *fp.environment.values()]
        if not any(opts.device.lower() in d.lower() for d in described):
            raise PredictorMismatchError(
                f"latency.options.device={opts.device!r} but the predictor was trained on {describe_device(pred)}"
            )
    pred.space = space
    return cast(LatencyEstimator, pred)


def describe_device(pred: PredictorEstimator) -> str:
    """The predictor's device in words (backend, device, precision, CPU/GPU model, digest)."""
    fp = pred.target.fingerprint
    model = fp.environment.get("gpu") or fp.environment.get("cpu_model") or fp.environment.get("device_name") or "?"
    return f"{fp.backend} {fp.precision} on {fp.device} ({model}; fingerprint {fp.digest})"


class HybridEstimator:
    """Predict, and confirm by real measurement where the prediction could mislead the search.

    Implements the :class:`~latency_predictor.LatencyEstimator` protocol.
    """

    name = "predictor"

    def __init__(self, predictor: PredictorEstimator, backend: Any, opts: PredictorOptions,
                 target_ms: float | None) -> None:
        self.predictor = predictor
        self.backend = backend
        self.opts = opts
        self.target_ms = target_ms
        self.input_shape: tuple[int, ...] = tuple(backend.input_shape)
        self._loaded = _current_path(opts)

    def confirm_reason(self, predicted: LatencyResult) -> str | None:
        """Why ``predicted`` should be measured (``near_target`` or ``uncertain``), or None."""
        p = predicted.latency_ms
        band = float(predicted.extra.get("error_band_rel", 0.0))
        if self.target_ms is not None and abs(p - self.target_ms) <= band * p:
            return "near_target"
        if float(predicted.extra.get("uncertainty_ms", 0.0)) > self.opts.confirm_uncertain_rel * p:
            return "uncertain"
        return None

    def measure(self, arch: Arch) -> LatencyResult:
        """The predicted latency, or a real measurement when the candidate matters."""
        self._reload_if_refitted()
        predicted = self.predictor.measure(arch)
        reason = self.confirm_reason(predicted)
        if reason is None:
            return predicted
        return self.confirm(arch, predicted, reason)

    def confirm(self, arch: Arch, predicted: LatencyResult, reason: str) -> LatencyResult:
        """Measure ``arch`` for real, add the measurement to the dataset (refitting when due), and
        return it with the prediction it replaces and ``reason`` in ``extra``."""
        measured: LatencyResult = self.backend.measure(arch)
        self._record(measured)
        extra = {**measured.extra, "predicted_ms": predicted.latency_ms, "confirm_reason": reason,
                 "predictor_digest": self.predictor.digest}
        return dataclasses.replace(measured, extra=extra)

    def may_join_front(self, predicted: LatencyResult, objective: float,
                       front: Sequence[Sequence[float]]) -> bool:
        """Whether a candidate with this prediction and ``objective`` (higher is better, e.g.
        accuracy) could be on the Pareto front of ``front`` (``[latency_ms, objective]`` pairs of
        the candidates finished so far): no point of ``front`` is at least as fast as its
        optimistic latency (the prediction less ``pareto_band``, by default the predictor's error
        band) and at least as good, and better in one. Only a predicted latency can join: a
        measured one needs no confirming.
        """
        if predicted.source != "predicted" or not math.isfinite(objective):
            return False
        band = self.opts.pareto_band
        if band is None:
            band = float(predicted.extra.get("error_band_rel", 0.0))
        optimistic = predicted.latency_ms * (1.0 - band)
        return not any(
            lat <= optimistic and obj >= objective and (lat < optimistic or obj > objective) for lat, obj in front
        )

    def _reload_if_refitted(self) -> None:
        current = _current_path(self.opts)
        if current != self._loaded:
            pred = read_predictor(current)
            pred.space = self.predictor.space
            self.predictor, self._loaded = pred, current

    def _record(self, measured: LatencyResult) -> None:
        if self.opts.dataset is None:
            return
        folder = Path(self.opts.dataset)
        with _locked(folder):
            ds = Dataset.open(folder, self.predictor.target)
            add_measurements(ds, [measured])
            n_confirm = sum(1 for r in ds.records if r.origin == "confirm")
            if self.opts.refit_every and n_confirm % self.opts.refit_every == 0:
                new = refit(ds)
                path = new.save(folder / f"predictor-refit-{n_confirm}.json")
                tmp = folder / (POINTER_FILE + ".tmp")
                tmp.write_text(path.name + "\n")
                os.replace(tmp, folder / POINTER_FILE)


def _current_path(opts: PredictorOptions) -> Path:
    """The predictor file in use: the latest refit named in the dataset's pointer, else ``path``."""
    if opts.hybrid and opts.dataset:
        pointer = Path(opts.dataset) / POINTER_FILE
        if pointer.is_file():
            name = pointer.read_text().strip()
            candidate = Path(opts.dataset) / name
            if name and "/" not in name and candidate.is_file():
                return candidate
    return Path(opts.path)


@contextmanager
def _locked(folder: Path) -> Iterator[None]:
    fd = os.open(folder / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
