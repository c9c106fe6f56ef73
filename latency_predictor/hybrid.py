"""Hybrid mode: the predictor screens, real measurement confirms the candidates that matter.

The search drives the loop; this module gives it the pieces:

1. :func:`select_for_measurement` picks, from predicted candidates, those worth a real
   measurement: near the latency target (within the predictor's error band, where a wrong
   prediction flips the reward), on the predicted Pareto front of latency against the
   search objective, and those the predictor is least sure of (widest ensemble spread).
2. The search measures them with the real backend and calls :func:`add_measurements`, which
   appends the results to the dataset (``origin="confirm"``).
3. :func:`refit` fits a new predictor on the whole dataset, confirmed measurements included.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from latency_predictor.dataset import DEFAULT_MIN_CPU_SHARE, Dataset, Record
from latency_predictor.errors import ConfigError
from latency_predictor.features import FeatureExtractor
from latency_predictor.predictor import PredictorEstimator
from latency_predictor.protocol import LatencyResult
from latency_predictor.train import fit_predictor
from search_spaces import Arch

REASONS: tuple[str, ...] = ("near_target", "pareto", "uncertain")


@dataclass(frozen=True)
class Confirmation:
    """A candidate chosen for real measurement, and why (one of :data:`REASONS`)."""

    arch: Arch
    reason: str
    predicted_ms: float


def pareto_front(latency_ms: np.ndarray, objective: np.ndarray) -> np.ndarray:
    """Indices of the candidates no other beats on both lower latency and higher objective."""
    order = np.lexsort((-objective, latency_ms))  # by latency, ties: best objective first
    front, best = [], -np.inf
    for i in order:
        if objective[i] > best:
            front.append(int(i))
            best = objective[i]
    return np.array(front, dtype=np.int64)


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


def refit(dataset: Dataset, members: int = 16, seed: int = 0) -> PredictorEstimator:
    """A new predictor fitted on every usable architecture of ``dataset`` (see :func:`fit_predictor`)."""
    return fit_predictor(dataset, members=members, seed=seed)
