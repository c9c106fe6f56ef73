"""The measurement protocol, driven by synthetic runs whose durations the test controls."""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator

import numpy as np
import pytest

from latency_predictor import ConfigError, LatencyStats, MeasurementError
from latency_predictor.measurement.timing import MeasureConfig, measure_latency, throughput_per_s

# Deterministic counts: no time minimums, so warm-up and attempts are exactly so many runs.
COUNTED = MeasureConfig(warmup_runs=5, warmup_s=0.0, min_runs=20, min_time_s=0.0, max_repeats=3)


def _feed(values: Iterator[float]) -> tuple[list[float], object]:
    seen: list[float] = []

    def time_once() -> float:
        v = next(values)
        seen.append(v)
        return v

    return seen, time_once


def _spin(ms: float) -> None:
    end = time.perf_counter() + ms / 1e3
    while time.perf_counter() < end:
        pass


def test_stats_of_known_samples() -> None:
    s = LatencyStats.from_samples(np.arange(1, 101, dtype=float))
    assert (s.n, s.min, s.p50, s.mean) == (100, 1.0, 50.5, 50.5)
    assert s.p90 == pytest.approx(90.1) and s.p99 == pytest.approx(99.01)
    assert s.std == pytest.approx(np.std(np.arange(1, 101), ddof=1))
    assert s.iqr_rel == pytest.approx((75.25 - 25.75) / 50.5)
    assert s.min <= s.p50 <= s.p90 <= s.p95 <= s.p99


def test_counts_are_honoured_and_constant_runs_are_stable() -> None:
    seen, time_once = _feed(itertools.repeat(2.0))
    m = measure_latency(lambda: None, COUNTED, time_once=time_once)  # type: ignore[arg-type]
    assert m.warmup_runs == 5 and m.stats.n == 20 and len(seen) == 25
    assert m.stable and m.attempts == 1 and m.stats.p50 == 2.0 and m.stats.iqr_rel == 0.0


def test_noisy_runs_are_repeated_then_flagged_unstable() -> None:
    seen, time_once = _feed(itertools.cycle([1.0, 3.0]))
    m = measure_latency(lambda: None, COUNTED, time_once=time_once)  # type: ignore[arg-type]
    assert not m.stable
    assert m.attempts == 3 and len(m.attempt_iqr_rel) == 3 and len(seen) == 5 + 3 * 20
    assert all(r > COUNTED.stability_threshold for r in m.attempt_iqr_rel)


def test_a_later_stable_attempt_is_accepted() -> None:
    noisy = itertools.islice(itertools.cycle([1.0, 3.0]), 5 + 20)
    _, time_once = _feed(itertools.chain(noisy, itertools.repeat(1.5)))
    m = measure_latency(lambda: None, COUNTED, time_once=time_once)  # type: ignore[arg-type]
    assert m.stable and m.attempts == 2 and m.stats.p50 == 1.5


def test_wall_clock_with_real_sleeps_flags_noise() -> None:
    """Runs alternating 1 ms and 4 ms (real sleeps, perf_counter timing) never settle."""
    flip = itertools.cycle([0.001, 0.004])
    cfg = MeasureConfig(warmup_runs=2, warmup_s=0.0, min_runs=20, min_time_s=0.0, max_repeats=2)
    m = measure_latency(lambda: time.sleep(next(flip)), cfg)
    assert not m.stable and m.attempts == 2
    assert m.stats.min >= 1.0


def test_wall_clock_times_are_never_shorter_than_the_work() -> None:
    cfg = MeasureConfig(warmup_runs=3, warmup_s=0.0, min_runs=30, min_time_s=0.0, max_repeats=1)
    m = measure_latency(lambda: _spin(2.0), cfg)
    assert m.stats.min >= 2.0 and m.stats.p50 >= 2.0


def test_runs_that_did_not_have_the_cpu_never_settle() -> None:
    """Steady 2 ms runs that spend their time off the CPU (as when other work takes the core)."""
    cfg = MeasureConfig(warmup_runs=1, warmup_s=0.0, min_runs=10, min_time_s=0.0, max_repeats=2,
                        stability_threshold=10.0)
    off_cpu = measure_latency(lambda: time.sleep(0.002), cfg, cpu_threads=1)
    assert not off_cpu.stable and off_cpu.attempts == 2
    assert all(s is not None and s < 0.5 for s in off_cpu.attempt_cpu_share)
    assert off_cpu.cpu_s / off_cpu.accepted_wall_s < 0.5
    unchecked = measure_latency(lambda: time.sleep(0.002), cfg)  # no cpu_threads: GPU-like runtime
    assert unchecked.stable and unchecked.attempt_cpu_share == (None,)


def test_warmup_and_timed_minimum_durations() -> None:
    cfg = MeasureConfig(warmup_runs=1, warmup_s=0.05, min_runs=1, min_time_s=0.05, max_repeats=1)
    m = measure_latency(lambda: _spin(1.0), cfg)
    assert m.warmup_s >= 0.05 and m.warmup_runs > 1
    assert m.timed_s >= 0.05 and m.stats.n > 1


def test_max_time_caps_a_slow_network() -> None:
    cfg = MeasureConfig(warmup_runs=0, warmup_s=0.0, min_runs=1000, min_time_s=0.0, max_time_s=0.02, max_repeats=1)
    m = measure_latency(lambda: _spin(1.0), cfg)
    assert 10 <= m.stats.n < 1000


def test_sync_is_called_before_the_clock_stops() -> None:
    calls = []
    m = measure_latency(lambda: None, COUNTED, sync=lambda: calls.append(_spin(0.5)))
    assert len(calls) == 25 and m.stats.p50 >= 0.5


def test_invalid_times_are_refused() -> None:
    with pytest.raises(MeasurementError, match="non-positive"):
        measure_latency(lambda: None, COUNTED, time_once=lambda: 0.0)


def test_throughput() -> None:
    stats = LatencyStats.from_samples([4.0, 4.0, 4.0])
    assert throughput_per_s(8, stats) == pytest.approx(2000.0)


@pytest.mark.parametrize(
    ("field", "value"),
    [("warmup_runs", -1), ("min_runs", 0), ("min_time_s", -1.0), ("warmup_s", float("nan")),
     ("stability_threshold", 0.0), ("max_repeats", 0), ("throughput_batch_sizes", (0,)),
     ("throughput_batch_sizes", ()), ("throughput_batch_sizes", (1, 1)), ("max_time_s", 0.0),
     ("min_runs", 2.5), ("max_repeats", True), ("min_cpu_share", 1.5), ("min_cpu_share", -0.1)],
)
def test_invalid_config_names_the_field(field: str, value: object) -> None:
    with pytest.raises(ConfigError, match=field):
        MeasureConfig(**{field: value})  # type: ignore[arg-type]


def test_config_from_plain_values() -> None:
    cfg = MeasureConfig.from_dict({"min_runs": 20, "throughput_batch_sizes": [1, 8]})
    assert cfg.min_runs == 20 and cfg.throughput_batch_sizes == (1, 8)
    with pytest.raises(ConfigError, match="min_run"):
        MeasureConfig.from_dict({"min_run": 20})
    with pytest.raises(ConfigError, match="max_time_s"):
        MeasureConfig(min_time_s=5.0, max_time_s=1.0)
