"""Serving scenarios: one request at a time (``single_stream``, batch 1) or a server that batches.

A server's question is how many images per second it sustains while each batch stays within
the latency bound, the way trtexec's min/opt/max shapes and Triton's dynamic batching are tuned.
:func:`server_point` answers it from one measurement taken at several batch sizes
(``MeasureConfig.throughput_batch_sizes``; a backend records each batch's percentiles in
``extra["batch_stats"]``): among the batches whose latency at the target's statistic is within
the bound, the one with the highest throughput (``batch * 1000 / p50`` images per second).
When none is, the best throughput discounted by the squared latency penalty of its batch
(``(bound / latency) ** 2``) stands in, so a slightly slow network still scores above a very slow
one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from latency_predictor.errors import ConfigError, MeasurementError
from latency_predictor.measurement.protocol import LatencyResult
from latency_predictor.measurement.statistic import check_stat

SCENARIOS = ("single_stream", "server")
"""``single_stream``: one image at a time, the target bounds its latency; ``server``: batches."""

DEFAULT_BATCH_SIZES = (1, 2, 4, 8, 16, 32)


def check_scenario(scenario: str, batch_sizes: Sequence[int]) -> tuple[int, ...]:
    """The batch sizes of a valid scenario, sorted.

    Raises:
        ConfigError: an unknown scenario, or (server) an empty, non-positive or repeated batch list.
    """
    if scenario not in SCENARIOS:
        raise ConfigError(f"latency scenario {scenario!r} is unknown; choose one of {list(SCENARIOS)}")
    sizes = list(batch_sizes)
    if scenario == "server":
        if not sizes:
            raise ConfigError("the server scenario needs at least one batch size (e.g. [1, 2, 4, 8, 16, 32])")
        bad = [b for b in sizes if isinstance(b, bool) or not isinstance(b, int) or b < 1]
        if bad:
            raise ConfigError(f"batch sizes must be whole numbers >= 1, got {bad[0]!r}")
        if len(set(sizes)) != len(sizes):
            raise ConfigError(f"batch sizes {sizes} repeat a size")
    return tuple(sorted(sizes))


@dataclass(frozen=True)
class ServerPoint:
    """A network's best operating point as a server within a latency bound.

    Attributes:
        batch: the batch size chosen (None: no batch is within the bound).
        throughput_per_s: its images per second; when no batch is within the bound, the best
            throughput discounted by its batch's squared latency penalty.
        latency_ms: the chosen batch's latency at the statistic (the best discounted one's when none is within).
        per_batch: batch -> ``{"latency_ms", "throughput_per_s", "within"}``.
    """

    batch: int | None
    throughput_per_s: float
    latency_ms: float
    per_batch: dict[int, dict[str, float]] = field(default_factory=dict)


def batch_latencies(result: LatencyResult, stat: str) -> dict[int, tuple[float, float]]:
    """Batch size -> (latency at ``stat``, p50) in ms, from a measurement at several batch sizes.

    Raises:
        MeasurementError: the record holds one batch size only (measured without the server scenario).
    """
    check_stat(stat)
    raw = result.extra.get("batch_stats")
    if not raw:
        raise MeasurementError(
            f"{result.backend} measured {result.arch[:40]}... at batch {result.input_shape[0]} only: the server "
            "scenario needs its batch sizes measured (latency.batch_sizes)"
        )
    return {int(b): (float(s[stat]), float(s["p50"])) for b, s in raw.items()}


def server_point(result: LatencyResult, bound_ms: float, stat: str = "p50") -> ServerPoint:
    """The highest-throughput batch whose latency at ``stat`` is within ``bound_ms`` (see the module)."""
    per: dict[int, dict[str, float]] = {}
    for b, (lat, p50) in sorted(batch_latencies(result, stat).items()):
        per[b] = {"latency_ms": lat, "throughput_per_s": b * 1e3 / p50, "within": float(lat <= bound_ms)}
    within = [b for b, v in per.items() if v["within"]]
    if within:
        best = max(within, key=lambda b: (per[b]["throughput_per_s"], -b))
        return ServerPoint(best, per[best]["throughput_per_s"], per[best]["latency_ms"], per)

    def discounted(b: int) -> float:
        return per[b]["throughput_per_s"] * (bound_ms / per[b]["latency_ms"]) ** 2

    best = max(per, key=discounted)
    return ServerPoint(None, discounted(best), per[best]["latency_ms"], per)
