"""The latency statistic a target bounds: p50 (the default), p90, p95 or p99.

A real-time budget ("over 50 ms and the service is unusable") bounds the tail, not the median,
so a target may be stated for a high percentile. A percentile means something only with enough
timed runs beyond it: MLPerf's rule of thumb asks for about 1,000 samples for a p99 (so that ~10
runs lie above it). :data:`MIN_RUNS` holds the runs each statistic needs; :func:`protocol_for`
raises a protocol's ``min_runs`` to it and lifts the per-attempt time cap, which would otherwise
stop an attempt early, and :func:`check_runs` refuses a result with fewer runs (a remote agent
or a cached record may have used another protocol). Each result also carries a distribution-free
95% confidence interval for every percentile (``LatencyStats.ci95``, from order statistics).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from latency_predictor.errors import ConfigError, MeasurementError
from latency_predictor.measurement.protocol import LatencyResult

TARGET_STATS = ("p50", "p90", "p95", "p99")
"""The statistics a latency target may bound."""

MIN_RUNS = {"p50": 1, "p90": 100, "p95": 200, "p99": 1000}
"""Timed runs a statistic needs: about 10 runs beyond the percentile (MLPerf's ~1,000 for a p99)."""


def check_stat(stat: str) -> str:
    """``stat`` if it is one of :data:`TARGET_STATS`.

    Raises:
        ConfigError: any other name, listing the known ones.
    """
    if stat not in TARGET_STATS:
        raise ConfigError(f"latency target statistic {stat!r} is not recorded; choose one of {list(TARGET_STATS)}")
    return stat


def protocol_for(stat: str, measure: Mapping[str, Any]) -> dict[str, Any]:
    """The protocol settings ``measure`` with enough timed runs for ``stat``.

    ``min_runs`` is raised to :data:`MIN_RUNS` and the per-attempt cap ``max_time_s`` lifted
    (``None``) when it would stop the attempt earlier; a p50 leaves ``measure`` as it is.
    """
    need = MIN_RUNS[check_stat(stat)]
    out = dict(measure)
    if need > 1 and int(out.get("min_runs", 100)) < need:
        out["min_runs"] = need
        out["max_time_s"] = None
    return out


def stat_value(result: LatencyResult, stat: str) -> float:
    """The statistic ``stat`` of ``result``, in ms."""
    return float(getattr(result.stats, check_stat(stat)))


def check_runs(result: LatencyResult, stat: str) -> None:
    """Refuse a measured ``result`` whose statistic rests on too few runs.

    Raises:
        MeasurementError: fewer timed runs than :data:`MIN_RUNS` asks for ``stat``.
    """
    need = MIN_RUNS[check_stat(stat)]
    if result.source == "measured" and result.stats.n < need:
        raise MeasurementError(
            f"a {stat} from {result.stats.n} timed runs of {result.arch[:60]}... is not a {stat}: it needs at least "
            f"{need} (raise latency.measure.min_runs, and max_time_s or null)"
        )
