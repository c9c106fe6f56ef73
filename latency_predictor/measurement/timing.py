"""The measurement protocol, independent of any runtime.

The method is the one trusted benchmarking tools share (trtexec, onnxruntime_perf_test,
``torch.utils.benchmark``):

1. **Warm-up** until both a number of runs and a duration are reached, so caches, allocators,
   lazy kernel selection and CPU frequency have settled before anything is recorded.
2. **Timed runs**, one sample per run, until both a minimum count and a minimum duration are
   reached (with a cap, ``max_time_s``, so a very slow network cannot stall a search).
3. **Stability check**: when the interquartile range relative to the median exceeds a
   threshold, the timed runs are repeated, up to ``max_repeats`` attempts. For runtimes that
   compute on the CPU, an attempt must also have had the CPU: its process CPU time per wall
   second must reach ``min_cpu_share`` of the runtime's busy threads, otherwise other work
   took the cores and the (possibly steadily) slow runs measured that. The first settled attempt
   is accepted; if none settles, the least disturbed attempt is reported and flagged
   ``stable=False``, and the flag travels with the number.

Python's garbage collector is paused while samples are taken (as :mod:`timeit` does), so a
collection does not land in one run's time.

The functions here take the runtime as callables, so they are tested with synthetic runs
whose durations are known, and every backend shares exactly the same protocol.
"""

from __future__ import annotations

import gc
import math
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, fields

from latency_predictor.errors import ConfigError, MeasurementError
from latency_predictor.measurement.protocol import LatencyStats

RunOnce = Callable[[], object]
"""Runs the network once (its return value is ignored)."""

TimeOnce = Callable[[], float]
"""Runs the network once and returns the elapsed time of that run in milliseconds."""

MIN_SAMPLES = 10
"""Fewest samples an attempt may end with, even when ``max_time_s`` is reached first."""


@dataclass(frozen=True)
class MeasureConfig:
    """Settings of the measurement protocol.

    Defaults take about 1.5 s for a 10 ms network when the first attempt is stable.

    Attributes:
        warmup_runs: warm-up runs before timing (at least this many...).
        warmup_s: ...and at least this long, in seconds.
        min_runs: timed runs per attempt (at least this many...).
        min_time_s: ...and at least this long, in seconds.
        max_time_s: cap on one attempt's timed runs, in seconds; an attempt stops when it is
            reached even before ``min_runs`` (but never before 10 runs). ``None``: no cap.
        stability_threshold: largest accepted IQR/median of an attempt.
        min_cpu_share: for CPU runtimes, the smallest accepted share of the expected CPU time
            (CPU seconds per wall second per busy thread) of an attempt; below it the process
            was descheduled by other work and the attempt is repeated. 0 disables the check.
        max_repeats: most attempts before the result is flagged unstable.
        throughput_batch_sizes: batch sizes at which inferences per second are reported.
    """

    warmup_runs: int = 10
    warmup_s: float = 0.2
    min_runs: int = 100
    min_time_s: float = 1.0
    max_time_s: float | None = 10.0
    stability_threshold: float = 0.10
    min_cpu_share: float = 0.9
    max_repeats: int = 3
    throughput_batch_sizes: tuple[int, ...] = (1,)

    def __post_init__(self) -> None:
        object.__setattr__(self, "throughput_batch_sizes", tuple(self.throughput_batch_sizes))
        for name in ("warmup_runs", "min_runs", "max_repeats"):
            _check_int(name, getattr(self, name), minimum=1 if name != "warmup_runs" else 0)
        for name in ("warmup_s", "min_time_s"):
            _check_number(name, getattr(self, name), positive=False)
        if self.max_time_s is not None:
            _check_number("max_time_s", self.max_time_s, positive=True)
            if self.max_time_s < self.min_time_s:
                raise ConfigError(
                    f"max_time_s ({self.max_time_s}) must be >= min_time_s ({self.min_time_s}) or None"
                )
        _check_number("stability_threshold", self.stability_threshold, positive=True)
        _check_number("min_cpu_share", self.min_cpu_share, positive=False)
        if self.min_cpu_share > 1:
            raise ConfigError(f"min_cpu_share must be in [0, 1], got {self.min_cpu_share!r}")
        if not self.throughput_batch_sizes:
            raise ConfigError("throughput_batch_sizes must list at least one batch size")
        for b in self.throughput_batch_sizes:
            _check_int("throughput_batch_sizes", b, minimum=1)
        if len(set(self.throughput_batch_sizes)) != len(self.throughput_batch_sizes):
            raise ConfigError(f"throughput_batch_sizes has duplicates: {list(self.throughput_batch_sizes)}")

    @classmethod
    def from_dict(cls, data: dict[str, object]) -> MeasureConfig:
        """Build from plain config values (e.g. a YAML mapping).

        Raises:
            ConfigError: an unknown key (the known ones are listed) or an invalid value.
        """
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ConfigError(f"unknown measurement setting(s) {unknown}; known: {sorted(known)}")
        return cls(**data)  # type: ignore[arg-type]


def _check_int(name: str, value: object, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(f"{name} must be an integer >= {minimum}, got {value!r}")


def _check_number(name: str, value: object, positive: bool) -> None:
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    if not ok or value < 0 or (positive and value == 0):  # type: ignore[operator]
        raise ConfigError(f"{name} must be a finite number {'> 0' if positive else '>= 0'}, got {value!r}")


@dataclass(frozen=True)
class Measurement:
    """What the protocol measured.

    Attributes:
        stats: summary of the accepted attempt.
        samples_ms: per-run times of the accepted attempt, in milliseconds.
        stable: whether the accepted attempt's IQR/median is under the threshold.
        attempts: attempts made (1 when the first one was stable).
        attempt_iqr_rel: IQR/median of every attempt, in order.
        warmup_runs: warm-up runs made.
        warmup_s: seconds spent warming up.
        timed_s: seconds spent in timed runs, all attempts together.
        cpu_s: CPU seconds this process used (all its threads) during the accepted attempt.
        accepted_wall_s: wall seconds of the accepted attempt; for a CPU runtime with T threads,
            ``cpu_s / accepted_wall_s`` is about T when the process had the cores to itself and
            lower when other work took them.
        attempt_cpu_share: per attempt, CPU seconds per wall second per expected busy thread
            (None where not checked).
    """

    stats: LatencyStats
    samples_ms: tuple[float, ...]
    stable: bool
    attempts: int
    attempt_iqr_rel: tuple[float, ...]
    warmup_runs: int
    warmup_s: float
    timed_s: float
    cpu_s: float = 0.0
    accepted_wall_s: float = 0.0
    attempt_cpu_share: tuple[float | None, ...] = ()


def wall_clock(run_once: RunOnce, sync: Callable[[], object] | None = None) -> TimeOnce:
    """Time ``run_once`` with :func:`time.perf_counter`, calling ``sync`` before stopping the clock.

    ``sync`` is needed when ``run_once`` only enqueues work (e.g. on a GPU stream).
    """

    def time_once() -> float:
        t0 = time.perf_counter()
        run_once()
        if sync is not None:
            sync()
        return (time.perf_counter() - t0) * 1e3

    return time_once


@contextmanager
def _gc_paused() -> Iterator[None]:
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _warm_up(time_once: TimeOnce, config: MeasureConfig) -> tuple[int, float]:
    n = 0
    t0 = time.perf_counter()
    while n < config.warmup_runs or time.perf_counter() - t0 < config.warmup_s:
        time_once()
        n += 1
    return n, time.perf_counter() - t0


def _timed_attempt(time_once: TimeOnce, config: MeasureConfig) -> list[float]:
    samples: list[float] = []
    t0 = time.perf_counter()
    while True:
        samples.append(time_once())
        elapsed = time.perf_counter() - t0
        if len(samples) >= config.min_runs and elapsed >= config.min_time_s:
            return samples
        if config.max_time_s is not None and elapsed >= config.max_time_s and len(samples) >= MIN_SAMPLES:
            return samples


@dataclass(frozen=True)
class _Attempt:
    stats: LatencyStats
    samples: list[float]
    wall_s: float
    cpu_s: float
    cpu_share: float | None  # CPU seconds per wall second per expected thread; None: not checked

    def had_cpu(self, config: MeasureConfig) -> bool:
        return self.cpu_share is None or self.cpu_share >= config.min_cpu_share

    def settled(self, config: MeasureConfig) -> bool:
        return self.stats.iqr_rel <= config.stability_threshold and self.had_cpu(config)

    def disturbance(self, config: MeasureConfig) -> tuple[float, float]:
        """Sort key: attempts that had the CPU first (by spread), then by how much CPU they had."""
        if self.had_cpu(config):
            return (0.0, self.stats.iqr_rel)
        return (1.0, -(self.cpu_share or 0.0))


def _attempt(timer: TimeOnce, config: MeasureConfig, cpu_threads: int | None) -> _Attempt:
    t0, c0 = time.perf_counter(), time.process_time()
    samples = _timed_attempt(timer, config)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    share = cpu / wall / cpu_threads if cpu_threads and wall > 0 else None
    return _Attempt(LatencyStats.from_samples(samples), samples, wall, cpu, share)


def measure_latency(
    run_once: RunOnce,
    config: MeasureConfig | None = None,
    *,
    sync: Callable[[], object] | None = None,
    time_once: TimeOnce | None = None,
    cpu_threads: int | None = None,
) -> Measurement:
    """Run the measurement protocol on one prepared network.

    Args:
        run_once: runs the network once on its prepared input.
        config: protocol settings (defaults: :class:`MeasureConfig`).
        sync: waits until the work ``run_once`` enqueued is done (e.g. a CUDA synchronise);
            used by the default wall-clock timer.
        time_once: replaces the wall-clock timer: runs the network once and returns the time of
            that run in milliseconds (e.g. measured with CUDA events). ``run_once`` is then unused.
        cpu_threads: for runtimes that compute on the CPU, the threads that run busy while the
            network runs. An attempt then also needs ``config.min_cpu_share`` of that many CPU
            seconds per wall second to settle: a process that was descheduled part of the time
            measured the machine's load, even if its runs were steadily slow. None: no check
            (GPU runtimes, synthetic runs).

    Returns:
        The accepted attempt's statistics and samples, with the stability flag.

    Raises:
        MeasurementError: a run produced an invalid time (non-finite or non-positive).
    """
    config = config or MeasureConfig()
    timer = time_once if time_once is not None else wall_clock(run_once, sync)
    with _gc_paused():
        warm_n, warm_s = _warm_up(timer, config)
        attempts: list[_Attempt] = []
        for _ in range(config.max_repeats):
            attempts.append(_attempt(timer, config, cpu_threads))
            if attempts[-1].settled(config):
                break
    best = attempts[-1]
    if not best.settled(config):  # never settled: report the least disturbed attempt
        best = min(attempts, key=lambda a: a.disturbance(config))
    return Measurement(
        stats=best.stats,
        samples_ms=tuple(best.samples),
        stable=best.settled(config),
        attempts=len(attempts),
        attempt_iqr_rel=tuple(a.stats.iqr_rel for a in attempts),
        warmup_runs=warm_n,
        warmup_s=warm_s,
        timed_s=sum(a.wall_s for a in attempts),
        cpu_s=best.cpu_s,
        accepted_wall_s=best.wall_s,
        attempt_cpu_share=tuple(a.cpu_share for a in attempts),
    )


def throughput_per_s(batch_size: int, stats: LatencyStats) -> float:
    """Inferences per second when one batch of ``batch_size`` takes ``stats.p50`` milliseconds."""
    if batch_size < 1:
        raise ConfigError(f"batch size must be >= 1, got {batch_size}")
    if not math.isfinite(stats.p50) or stats.p50 <= 0:
        raise MeasurementError(f"cannot compute throughput from a p50 of {stats.p50!r} ms")
    return batch_size * 1e3 / stats.p50
