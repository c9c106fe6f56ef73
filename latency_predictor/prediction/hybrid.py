"""Hybrid mode: the predictor screens, real measurement confirms the candidates that matter.

:class:`HybridEstimator` is hybrid mode as a :class:`~latency_predictor.LatencyEstimator`
(``latency=predictor latency.options.hybrid=true`` in the search): the predictor screens and a
real measurement on *this* machine confirms the candidates that matter: those whose prediction
lies within the predictor's error band of the target (a wrong prediction would flip the reward)
and those the predictor is least sure of (ensemble spread above ``confirm_uncertain_rel`` of the
prediction), before the candidate trains; and, once its objective is known, those that could join
the Pareto front of the candidates finished so far (:meth:`HybridEstimator.final_latency`). So
every candidate on the final front has a measured latency. A confirmed latency replaces the
prediction (``latency_source=measured``, with the prediction kept in ``extra["predicted_ms"]``).
Confirmations are appended to the predictor's dataset, and every ``refit_every`` confirmations
the predictor is refitted on the whole dataset and the estimator switches to the new file
(``<dataset>/predictor-refit-N.json``, named in ``<dataset>/current_predictor``; a later hybrid
search on the same dataset starts from that latest refit). Dataset writes and refits are
serialised across processes by a lock file in the dataset folder (the folder must be on a file
system every trial node sees).

A predictor of the tail is confirmed in its own statistic: the measuring backend is made
(:func:`~latency_predictor.estimators.make_predictor_estimator`) with the timed runs the
predictor's :attr:`~latency_predictor.prediction.predictor.PredictorEstimator.statistic` needs
(:func:`~latency_predictor.measurement.statistic.protocol_for`), a confirmation with fewer runs is refused
before it reaches the dataset, and a refit predicts the same statistic.

For a batch of candidates, the pieces are also here:

1. :func:`select_for_measurement` picks, from predicted candidates, those worth a real
   measurement: near the latency target (within the predictor's error band, where a wrong
   prediction flips the reward), on the predicted Pareto front of latency against the
   search objective, and those the predictor is least sure of (widest ensemble spread).
2. The search measures them with the real backend and calls :func:`add_measurements`, which
   appends the results to the dataset (``origin="confirm"``).
3. :func:`refit` fits a new predictor on the whole dataset, confirmed measurements included.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from latency_predictor.errors import ConfigError
from latency_predictor.locking import locked
from latency_predictor.measurement.protocol import LatencyResult
from latency_predictor.measurement.statistic import check_runs
from latency_predictor.pareto import pareto_front
from latency_predictor.prediction.dataset import DEFAULT_MIN_CPU_SHARE, Dataset, Record
from latency_predictor.prediction.features import FeatureExtractor
from latency_predictor.prediction.predictor import PredictorEstimator, read_predictor
from latency_predictor.prediction.training import fit_predictor
from search_spaces import Arch

POINTER_FILE = "current_predictor"
LOCK_FILE = ".hybrid.lock"

REASONS: tuple[str, ...] = ("near_target", "pareto", "uncertain")


@dataclass(frozen=True)
class HybridOptions:
    """Where the predictor is, and how hybrid mode confirms and refits: the part of
    ``latency=predictor``'s ``latency.options`` read here (all of them:
    :class:`~latency_predictor.estimators.PredictorOptions`).

    Attributes:
        path: the predictor file (``python -m latency_predictor.train ... --out FILE``).
        hybrid: confirm the candidates that matter by real measurement on this machine.
        dataset: the predictor's dataset folder (hybrid: confirmations go there; refits read it).
        confirm_uncertain_rel: confirm when the ensemble spread exceeds this share of the prediction.
        refit_every: refit after this many confirmations (0: never).
        pareto_band: a finished candidate is confirmed when, with its predicted latency lowered by
            this share, it would join the Pareto front; None: the predictor's own error band
            (a predictor trained on few networks has a wide band and confirms more); 0: only
            when the prediction itself puts it on the front.
    """

    path: str
    hybrid: bool = False
    dataset: str | None = None
    confirm_uncertain_rel: float = 0.1
    refit_every: int = 10
    pareto_band: float | None = None


@dataclass(frozen=True)
class Confirmation:
    """A candidate chosen for real measurement, and why (one of :data:`REASONS`)."""

    arch: Arch
    reason: str
    predicted_ms: float


def select_for_measurement(
    archs: Sequence[Arch],
    predicted_ms: Sequence[float] | np.ndarray,
    budget: int,
    *,
    band: float,
    target_ms: float | None = None,
    objective: Sequence[float] | np.ndarray | None = None,
    uncertainty_ms: Sequence[float] | np.ndarray | None = None,
    exclude: Iterable[str] = (),
) -> list[Confirmation]:
    """Choose up to ``budget`` candidates to measure for real.

    The three groups take turns (near the target, Pareto front, most uncertain), each in its
    own order of importance, so a small budget still covers every group; a candidate chosen for
    one reason is not chosen again, and ``exclude`` (architecture strings already measured) is
    skipped.

    Args:
        archs: the candidates.
        predicted_ms: their predicted latencies.
        budget: most candidates to return.
        band: the predictor's relative error band (e.g. ``PredictorEstimator.error_band``):
            candidates with ``|predicted - target| <= band * target`` are near the target,
            closest first.
        target_ms: the latency target, if the search has one.
        objective: the search's objective per candidate (higher is better, e.g. accuracy): the
            predicted Pareto front of (latency, objective), best objective first.
        uncertainty_ms: per-candidate spread (``PredictorEstimator.predict_with_uncertainty``):
            the widest relative spread first.
        exclude: architecture strings not to choose.

    Raises:
        ConfigError: mismatched lengths, a negative budget or band, or a non-positive target.
    """
    n = len(archs)
    pred = np.asarray(predicted_ms, dtype=np.float64)
    if pred.shape != (n,):
        raise ConfigError(f"{n} candidates but {pred.size} predictions")
    if budget < 0 or band < 0:
        raise ConfigError(f"budget and band must be >= 0, got {budget} and {band}")
    queues: list[tuple[str, list[int]]] = []
    if target_ms is not None:
        if not target_ms > 0:
            raise ConfigError(f"target_ms must be > 0, got {target_ms}")
        dist = np.abs(pred - target_ms) / target_ms
        near = np.flatnonzero(dist <= band)
        queues.append(("near_target", [int(i) for i in near[np.argsort(dist[near], kind="stable")]]))
    if objective is not None:
        obj = np.asarray(objective, dtype=np.float64)
        if obj.shape != (n,):
            raise ConfigError(f"{n} candidates but {obj.size} objective values")
        front = pareto_front(pred, obj)
        queues.append(("pareto", [int(i) for i in front[np.argsort(-obj[front], kind="stable")]]))
    if uncertainty_ms is not None:
        unc = np.asarray(uncertainty_ms, dtype=np.float64)
        if unc.shape != (n,):
            raise ConfigError(f"{n} candidates but {unc.size} uncertainties")
        queues.append(("uncertain", [int(i) for i in np.argsort(-(unc / pred), kind="stable")]))
    taken = set(exclude)
    chosen: list[Confirmation] = []
    cursors = [0] * len(queues)
    while len(chosen) < budget and any(c < len(q) for c, (_, q) in zip(cursors, queues, strict=True)):
        for k, (reason, queue) in enumerate(queues):
            while cursors[k] < len(queue):
                i = queue[cursors[k]]
                cursors[k] += 1
                key = archs[i].encode()
                if key not in taken:
                    taken.add(key)
                    chosen.append(Confirmation(archs[i], reason, float(pred[i])))
                    break
            if len(chosen) >= budget:
                break
    return chosen


def add_measurements(
    dataset: Dataset, results: Iterable[LatencyResult], origin: str = "confirm",
    min_cpu_share: float = DEFAULT_MIN_CPU_SHARE,
) -> list[Record]:
    """Append measured results (e.g. confirmations made during a search) to ``dataset``.

    Raises:
        DatasetError: a predicted result, or an unknown origin.
        PredictorMismatchError: a result measured in another setting than the dataset's.
    """
    extractor = FeatureExtractor(dataset.target.input_shape, dataset.target.num_classes)
    return [dataset.add(r, origin, extractor(Arch.decode(r.arch)), min_cpu_share) for r in results]


def refit(dataset: Dataset, members: int = 16, seed: int = 0, statistic: str = "p50") -> PredictorEstimator:
    """A new predictor of ``statistic`` fitted on every usable architecture of ``dataset`` (:func:`fit_predictor`)."""
    return fit_predictor(dataset, members=members, seed=seed, statistic=statistic)


class HybridEstimator:
    """Predict, and confirm by real measurement where the prediction could mislead the search.

    Implements the :class:`~latency_predictor.LatencyEstimator` protocol (see the module's text).
    """

    name = "predictor"

    def __init__(self, predictor: PredictorEstimator, backend: Any, opts: HybridOptions,
                 target_ms: float | None) -> None:
        self.predictor = predictor
        self.backend = backend
        self.opts = opts
        self.target_ms = target_ms
        self.input_shape: tuple[int, ...] = tuple(backend.input_shape)
        self._loaded = current_predictor_path(opts)

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
        return it with the prediction it replaces and ``reason`` in ``extra``.

        Raises:
            MeasurementError: the measurement has fewer timed runs than the predictor's statistic needs.
        """
        measured: LatencyResult = self.backend.measure(arch)
        check_runs(measured, self.predictor.statistic)
        self._record(measured)
        extra = {**measured.extra, "predicted_ms": predicted.latency_ms, "confirm_reason": reason,
                 "predictor_digest": self.predictor.digest}
        return dataclasses.replace(measured, extra=extra)

    def environment(self) -> dict[str, str]:
        """The predictor's device (the measuring backend's is checked to be the same)."""
        return self.predictor.environment()

    def final_latency(
        self, arch: Arch, result: LatencyResult, objective: float, front: Sequence[Sequence[float]]
    ) -> LatencyResult:
        """``result``, or a real measurement when the predicted candidate could join ``front``
        (reason ``pareto``; see :meth:`may_join_front`)."""
        if not self.may_join_front(result, objective, front):
            return result
        return self.confirm(arch, result, "pareto")

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
        # The candidate first: on an exact tie with a point of the front it joins it.
        lat = np.array([optimistic, *(p[0] for p in front)], dtype=np.float64)
        obj = np.array([objective, *(p[1] for p in front)], dtype=np.float64)
        return 0 in pareto_front(lat, obj)

    def _reload_if_refitted(self) -> None:
        current = current_predictor_path(self.opts)
        if current != self._loaded:
            pred = read_predictor(current)
            pred.space = self.predictor.space
            self.predictor, self._loaded = pred, current

    def _record(self, measured: LatencyResult) -> None:
        if self.opts.dataset is None:
            return
        folder = Path(self.opts.dataset)
        with locked(folder / LOCK_FILE, 0o666):
            ds = Dataset.open(folder, self.predictor.target)
            add_measurements(ds, [measured])
            n_confirm = sum(1 for r in ds.records if r.origin == "confirm")
            if self.opts.refit_every and n_confirm % self.opts.refit_every == 0:
                new = refit(ds, statistic=self.predictor.statistic)
                path = new.save(folder / f"predictor-refit-{n_confirm}.json")
                tmp = folder / (POINTER_FILE + ".tmp")
                tmp.write_text(path.name + "\n")
                os.replace(tmp, folder / POINTER_FILE)


def current_predictor_path(opts: HybridOptions) -> Path:
    """The predictor file in use: the latest refit named in the dataset's pointer, else ``path``."""
    if opts.hybrid and opts.dataset:
        pointer = Path(opts.dataset) / POINTER_FILE
        if pointer.is_file():
            name = pointer.read_text().strip()
            candidate = Path(opts.dataset) / name
            if name and "/" not in name and candidate.is_file():
                return candidate
    return Path(opts.path)
