"""The one interface the search sees: ``measure(arch) -> LatencyResult``.

Measurement backends (ONNX Runtime, PyTorch, TensorRT) and learned predictors implement the
same :class:`LatencyEstimator` protocol, so the search cannot tell them apart (the idea of
Once-for-All's ``EvolutionFinder(efficiency_predictor, ...)``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

import numpy as np

from latency_predictor.errors import MeasurementError
from search_spaces import Arch

Source = Literal["measured", "predicted"]


@dataclass(frozen=True)
class LatencyStats:
    """Summary of timed runs, in milliseconds (``cv`` and ``iqr_rel`` are ratios)."""

    n: int
    min: float
    mean: float
    std: float
    p50: float
    p90: float
    p95: float
    p99: float
    cv: float
    iqr_rel: float
    ci95: dict[str, list[float]] = field(default_factory=dict)

    @classmethod
    def from_samples(cls, samples_ms: Any) -> LatencyStats:
        """Compute the summary of a sequence of per-run times in milliseconds.

        Raises:
            MeasurementError: no samples, or a non-finite or non-positive time.
        """
        x = np.asarray(samples_ms, dtype=np.float64)
        if x.size == 0:
            raise MeasurementError("no timed runs to summarise")
        if not np.all(np.isfinite(x)) or np.any(x <= 0):
            raise MeasurementError("timed runs contain non-finite or non-positive times")
        p25, p50, p75, p90, p95, p99 = np.percentile(x, [25, 50, 75, 90, 95, 99])
        mean = float(x.mean())
        std = float(x.std(ddof=1)) if x.size > 1 else 0.0
        return cls(
            n=int(x.size), min=float(x.min()), mean=mean, std=std, p50=float(p50), p90=float(p90),
            p95=float(p95), p99=float(p99), cv=std / mean, iqr_rel=float((p75 - p25) / p50),
            ci95={f"p{round(q * 100)}": percentile_ci(np.sort(x), q) for q in (0.5, 0.9, 0.95, 0.99)},
        )


def percentile_ci(sorted_x: np.ndarray, q: float, z: float = 1.96) -> list[float]:
    """A distribution-free ~95% confidence interval of the ``q`` quantile from sorted samples.

    The rank of the quantile among ``n`` samples is Binomial(n, q); the interval runs between the
    order statistics ``z`` standard deviations either side of ``n q``. Where that reaches past the
    slowest run, the upper end is the slowest run and the interval is open above (too few runs
    for this percentile: see :mod:`latency_predictor.measurement.statistic`).
    """
    n = len(sorted_x)
    half = z * math.sqrt(n * q * (1 - q))
    lo = min(max(math.floor(n * q - half), 1), n)
    hi = min(max(math.ceil(n * q + half) + 1, 1), n)
    return [float(sorted_x[lo - 1]), float(sorted_x[hi - 1])]


@dataclass(frozen=True)
class LatencyResult:
    """One latency figure with everything needed to trust (or distrust) it.

    Attributes:
        arch: canonical architecture string.
        backend: ``onnxruntime``, ``torch``, ``tensorrt`` or ``predictor``.
        source: ``measured`` or ``predicted``.
        device: what ran it (e.g. ``cpu``, ``cuda:0``).
        precision: ``fp32``, ``fp16``, ``bf16`` or ``int8``.
        input_shape: the deployment shape, batch first (e.g. ``(1, 3, 224, 224)``).
        stats: summary of the accepted repeat; for predictions, ``p50`` is the prediction.
        stable: False when the spread never fell under the threshold: the number is noisy.
        attempts: how many measurement repeats were made to reach (or give up on) stability.
        throughput: inferences per second at each batch size measured.
        environment: device name, CPU model or GPU, library versions, thread counts.
        extra: backend-specific details (providers, engine path, uncertainty, ...).
    """

    arch: str
    backend: str
    source: Source
    device: str
    precision: str
    input_shape: tuple[int, ...]
    stats: LatencyStats
    stable: bool = True
    attempts: int = 1
    throughput: dict[int, float] = field(default_factory=dict)
    environment: dict[str, str] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not math.isfinite(self.stats.p50) or self.stats.p50 <= 0:
            raise MeasurementError(f"invalid latency {self.stats.p50!r} ms for {self.arch}")

    @property
    def latency_ms(self) -> float:
        """The headline number: the median (p50) in milliseconds."""
        return self.stats.p50

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable record."""
        d = asdict(self)
        d["input_shape"] = list(self.input_shape)
        d["throughput"] = {str(k): v for k, v in self.throughput.items()}
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> LatencyResult:
        """Inverse of :meth:`to_dict`."""
        d = dict(d)
        d["stats"] = LatencyStats(**d["stats"])
        d["input_shape"] = tuple(d["input_shape"])
        d["throughput"] = {int(k): float(v) for k, v in d.get("throughput", {}).items()}
        return cls(**d)


@runtime_checkable
class LatencyEstimator(Protocol):
    """Anything that gives the latency of an architecture: a backend or a learned predictor.

    The search calls these three methods and nothing else, so it cannot tell a measuring
    backend, a predictor and hybrid mode apart.
    """

    name: str
    input_shape: tuple[int, ...]

    def measure(self, arch: Arch) -> LatencyResult:
        """Latency of ``arch`` at :attr:`input_shape`.

        Raises:
            LatencyError: (a subclass of) when the network cannot be exported, built or run.
        """
        ...

    def environment(self) -> dict[str, str]:
        """What the figures are for: ``device_name`` (CPU or GPU model), library versions, threads."""
        ...

    def final_latency(
        self, arch: Arch, result: LatencyResult, objective: float, front: Sequence[Sequence[float]]
    ) -> LatencyResult:
        """The latency a finished candidate's reward uses, once its objective is known.

        Args:
            arch: the candidate.
            result: what :meth:`measure` gave for it.
            objective: its search objective, higher is better (accuracy or a score).
            front: ``[latency_ms, objective]`` pairs of the Pareto front of the candidates
                finished so far.

        Measuring backends and plain predictors return ``result``; hybrid mode measures a
        predicted candidate that could join ``front``.
        """
        ...
