"""What every measuring backend shares: option checks, the measure flow, the result record.

A backend only says how to *prepare* a network at one input shape (export, session, engine)
and what its environment is; :class:`MeasuredBackend` does the rest in the same order for all:

1. build the network of the architecture (inference mode);
2. prepare it at the deployment shape, and at each extra throughput batch size;
3. run the protocol (:func:`latency_predictor.measurement.timing.measure_latency`) on each prepared shape
   while holding the device's measurement slot (:mod:`latency_predictor.measurement.slot`);
4. return a :class:`LatencyResult` with stats, stability, throughput, environment and the
   time each stage took (``extra``: ``build_s``, ``export_s``, ``session_s``, ``measure_s``,
   ``slot_wait_s``, ``slot_key``: the physical device whose slot was held, ``slot_held_for``)
   and ``cpu_per_wall``, the process's CPU seconds per wall second while timing
   (about the runtime's thread count on an undisturbed CPU, lower when other work took the cores).

On a GPU the slot is taken *before* preparation: preparing autotunes (TensorRT's tactic timing,
cuDNN's benchmark mode on the first torch run, ONNX Runtime's CUDA algorithm search), and
choices timed while another trial's work shares the GPU are skewed, and TensorRT keeps them in
the cached engine for good. On the CPU preparation stays outside the slot, so the queue is short.
"""

from __future__ import annotations

import os
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, ExitStack, contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, TypedDict

from torch import nn

from latency_predictor.errors import ConfigError, MeasurementError
from latency_predictor.measurement.breakdown import Breakdown
from latency_predictor.measurement.environment import base_environment, usable_cpus
from latency_predictor.measurement.export import build_eval_net, validate_input_shape
from latency_predictor.measurement.protocol import LatencyResult
from latency_predictor.measurement.slot import SlotTicket, measurement_slot
from latency_predictor.measurement.timing import (
    MeasureConfig,
    Measurement,
    RunOnce,
    TimeOnce,
    measure_latency,
    throughput_per_s,
)
from search_spaces import Arch


@dataclass
class Prepared:
    """A network made ready to run at one input shape.

    Attributes:
        run_once: one inference on the prepared input.
        sync: waits for enqueued device work (wall-clock timing), if the runtime is asynchronous.
        time_once: one inference timed by the runtime itself (e.g. CUDA events), in ms.
        stage_s: seconds each preparation stage took (``export_s``, ``session_s``, ...).
        extra: details for the result's ``extra`` (providers, engine path, ...).
        resources: objects that must stay alive while ``run_once`` is used (engine, buffers).
        cpu_threads: threads busy on the CPU while the network runs (CPU runtimes), for the
            protocol's contention check; None for GPU runtimes.
    """

    run_once: RunOnce
    sync: Callable[[], object] | None = None
    time_once: TimeOnce | None = None
    stage_s: dict[str, float] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)
    resources: tuple[object, ...] = ()
    cpu_threads: int | None = None


def cache_root() -> Path:
    """Root of LatNAS's caches (built engines): ``$LATNAS_CACHE_DIR`` if set, else ``~/.cache/latnas``."""
    root = os.environ.get("LATNAS_CACHE_DIR")
    return Path(root) if root else Path.home() / ".cache" / "latnas"


def as_measure_config(measure: MeasureConfig | Mapping[str, Any] | None) -> MeasureConfig:
    """Accept a :class:`MeasureConfig`, a mapping of its fields (config values), or None (defaults)."""
    if measure is None:
        return MeasureConfig()
    if isinstance(measure, MeasureConfig):
        return measure
    if isinstance(measure, Mapping):
        return MeasureConfig.from_dict(dict(measure))
    raise ConfigError(f"measure must be a MeasureConfig or a mapping of its fields, got {type(measure).__name__}")


def check_choice(name: str, value: object, allowed: Sequence[str]) -> str:
    """``value`` if it is one of ``allowed``, else a ConfigError listing them."""
    if not isinstance(value, str) or value not in allowed:
        raise ConfigError(f"{name} must be one of {list(allowed)}, got {value!r}")
    return value


def check_positive_int(name: str, value: object) -> int:
    """``value`` if it is an integer >= 1, else a ConfigError naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{name} must be an integer >= 1, got {value!r}")
    return value


def check_threads(threads: int, key: str = "intra_op_threads") -> int:
    """``threads`` if it is a count >= 1 of at most the CPUs this process may use.

    More threads than cores time the runtime against itself: the figure is not a deployment's.

    Raises:
        ConfigError: below 1, or above the usable CPUs (the count is named).
    """
    check_positive_int(key, threads)
    cpus = usable_cpus()
    if threads > cpus:
        raise ConfigError(f"{key}={threads} is more than the {cpus} CPU(s) this process may use: use at most {cpus}")
    return threads


class CommonOptions(TypedDict, total=False):
    """The options every measuring backend takes, after its own (defaults in :class:`MeasuredBackend`).

    Attributes:
        measure: protocol settings (:class:`MeasureConfig` or a mapping of its fields).
        slot: take the device's measurement slot while timing (default True).
        slot_dir: directory of the slot lock files (default:
            :func:`~latency_predictor.measurement.slot.default_slot_dir`).
        num_classes: classifier width of the built network (default 1000).
        keep_samples: keep the per-run times in ``extra["samples_ms"]`` (default False).
    """

    measure: MeasureConfig | Mapping[str, Any] | None
    slot: bool
    slot_dir: str | Path | None
    num_classes: int
    keep_samples: bool


class MeasuredBackend(ABC):
    """Base of the measuring backends; implements :class:`~latency_predictor.LatencyEstimator`.

    Attributes:
        name: the backend's registry name.
        input_shape: the deployment shape ``(N, C, H, W)``; ``N`` is the batch size.
        precision: ``fp32``, ``fp16``, ``bf16`` or ``int8``.
        device: ``cpu`` or ``cuda:N``.
        measure_config: the protocol settings.
        slot: whether :meth:`measure` takes the device's measurement slot.
        slot_dir: directory of the slot lock files (None: the default).
    """

    name: str
    runtime_errors: ClassVar[tuple[type[BaseException], ...]] = (RuntimeError,)
    has_breakdown: ClassVar[bool] = False
    """Whether :meth:`breakdown` gives per-block times."""

    def __init__(
        self,
        input_shape: Sequence[int],
        precision: str,
        device: str,
        measure: MeasureConfig | Mapping[str, Any] | None = None,
        slot: bool = True,
        slot_dir: str | Path | None = None,
        num_classes: int = 1000,
        keep_samples: bool = False,
    ) -> None:
        # Any channel count: the networks are built for the shape's (one channel for a spectrogram, say).
        self.input_shape: tuple[int, ...] = validate_input_shape(input_shape, in_chans=None)
        self.precision = precision
        self.device = device
        self.measure_config = as_measure_config(measure)
        self.slot = bool(slot)
        self.slot_dir = slot_dir
        self.num_classes = check_positive_int("num_classes", num_classes)
        self.keep_samples = bool(keep_samples)
        self._environment: dict[str, str] | None = None

    def __repr__(self) -> str:
        shape = "x".join(map(str, self.input_shape))
        return f"{type(self).__name__}(device={self.device!r}, precision={self.precision!r}, input_shape={shape})"

    @abstractmethod
    def _prepare(self, arch: Arch, net: nn.Module, input_shape: tuple[int, ...]) -> Prepared:
        """Make ``net`` ready to run at ``input_shape`` (export, session, engine); run it once."""

    @abstractmethod
    def _backend_environment(self) -> dict[str, str]:
        """Backend facts: device name, library versions, thread counts."""

    def _breakdown(self, arch: Arch, runs: int, warmup_runs: int) -> Breakdown:
        """Per-block times (backends with :attr:`has_breakdown`)."""
        raise ConfigError(f"the {self.name} backend gives no per-block times")

    def breakdown(self, arch: Arch, runs: int = 50, warmup_runs: int = 10) -> Breakdown:
        """Per-block times of ``arch`` with this estimator's settings (backends with :attr:`has_breakdown`).

        Args:
            arch: the network.
            runs: timed (profiled) inferences.
            warmup_runs: inferences run first and left out of the figures.

        Raises:
            ConfigError: ``runs`` below 1, or a backend without per-block times.
        """
        check_positive_int("runs", runs)
        return self._breakdown(arch, runs, warmup_runs)

    def _run_scope(self) -> AbstractContextManager[object]:
        """Process-wide settings held while preparing and timing (e.g. torch's thread count)."""
        return nullcontext()

    def environment(self) -> dict[str, str]:
        """What the measurements of this estimator run on (computed once)."""
        if self._environment is None:
            self._environment = {**base_environment(), **self._backend_environment()}
        return dict(self._environment)

    def final_latency(
        self, arch: Arch, result: LatencyResult, objective: float, front: Sequence[Sequence[float]]
    ) -> LatencyResult:
        """A measured latency is final (see :class:`~latency_predictor.LatencyEstimator`)."""
        return result

    def held_slot(self) -> AbstractContextManager[SlotTicket | None]:
        """The device's measurement slot, or a no-op when ``slot=False``."""
        if not self.slot:
            return nullcontext()
        return measurement_slot(self.device, self.slot_dir)

    @property
    def slot_covers_preparation(self) -> bool:
        """Whether :meth:`measure` holds the slot while preparing too (on a GPU: autotuning is timed)."""
        return self.device != "cpu"

    @contextmanager
    def prepared(self, arch: Arch, net: nn.Module | None = None) -> Iterator[Prepared]:
        """``arch`` prepared at :attr:`input_shape`, with the run settings and the device's slot held.

        For checks that run or time the prepared network their own way (a GPU test compares
        the runtime's clock with the wall clock); :meth:`measure` is the measurement.
        """
        with self._run_scope(), self.held_slot():
            yield self._prepare(arch, net if net is not None else self.build_net(arch), self.input_shape)

    def build_net(self, arch: Arch) -> nn.Module:
        """The network of ``arch`` in inference mode, with this estimator's class count."""
        return build_eval_net(arch, num_classes=self.num_classes, in_chans=self.input_shape[1])

    def measure(self, arch: Arch, net: nn.Module | None = None) -> LatencyResult:
        """Measure ``arch`` at :attr:`input_shape` (and each throughput batch size).

        Args:
            arch: the architecture (names the result; builds the network when ``net`` is None).
            net: the network of ``arch`` to time instead of a freshly built one, e.g. with trained
                or Conv+BN-fused weights; it must be in inference mode.

        Raises:
            ExportError: the network could not be exported.
            EngineBuildError: an engine could not be built (TensorRT).
            BackendUnavailableError: the runtime did not give the requested device or provider.
            MeasurementError: running the network failed or gave an invalid time.
        """
        cfg = self.measure_config
        with self._run_scope():
            t0 = time.perf_counter()
            if net is None:
                net = self.build_net(arch)
            stage_s: dict[str, float] = {"build_s": time.perf_counter() - t0}
            shapes = {self.input_shape[0]: self.input_shape}
            for b in cfg.throughput_batch_sizes:
                shapes.setdefault(b, (b, *self.input_shape[1:]))
            with ExitStack() as slot:
                ticket = slot.enter_context(self.held_slot()) if self.slot_covers_preparation else None
                prepared: dict[int, Prepared] = {}
                for b, shape in shapes.items():
                    prepared[b] = p = self._prepare(arch, net, shape)
                    for k, v in p.stage_s.items():
                        stage_s[k] = stage_s.get(k, 0.0) + v
                return self.measure_prepared(arch.encode(), prepared, stage_s, held=ticket)

    def measure_prepared(
        self, name: str, prepared: Mapping[int, Prepared], stage_s: Mapping[str, float],
        held: SlotTicket | None = None,
    ) -> LatencyResult:
        """Take the slot, time networks already prepared (one per batch size), build the record.

        Args:
            name: what the record is of (an architecture string, or a label for a model file).
            prepared: the network prepared at :attr:`input_shape` (key: its batch size) and at
                each other throughput batch size.
            stage_s: seconds the preparation stages took (``build_s``, ``export_s``, ...).
            held: the slot the caller has held since the preparation (GPU backends,
                :attr:`slot_covers_preparation`); None: taken here, for the timing.

        Raises:
            MeasurementError: running the network failed or gave an invalid time.
        """
        cfg = self.measure_config
        with self._run_scope(), ExitStack() as slot:
            ticket = held if held is not None else slot.enter_context(self.held_slot())
            measured = {b: self._time(p) for b, p in prepared.items()}
        main = measured[self.input_shape[0]]
        extra: dict[str, Any] = {
            **prepared[self.input_shape[0]].extra,
            **stage_s,
            "measure_s": sum(m.warmup_s + m.timed_s for m in measured.values()),
            "warmup_runs": main.warmup_runs,
            "cpu_per_wall": main.cpu_s / main.accepted_wall_s if main.accepted_wall_s > 0 else None,
            "attempt_cpu_share": list(main.attempt_cpu_share),
            "attempt_iqr_rel": list(main.attempt_iqr_rel),
            "slot_wait_s": ticket.waited_s if ticket is not None else None,
            "slot_key": ticket.path.stem if ticket is not None else None,
            "slot_held_for": None if ticket is None else ("preparation and timing" if held is not None else "timing"),
            "stability_threshold": cfg.stability_threshold,
        }
        others = {b: m.stats.p50 for b, m in measured.items() if b != self.input_shape[0]}
        if others:
            extra["throughput_p50_ms"] = others
            # every batch's own percentiles: a bound on a batch's latency is checked on them (server scenario)
            extra["batch_stats"] = {str(b): {"n": m.stats.n, "p50": m.stats.p50, "p90": m.stats.p90,
                                             "p95": m.stats.p95, "p99": m.stats.p99}
                                    for b, m in sorted(measured.items())}
        if self.keep_samples:
            extra["samples_ms"] = list(main.samples_ms)
        return LatencyResult(
            arch=name, backend=self.name, source="measured", device=self.device,
            precision=self.precision, input_shape=self.input_shape, stats=main.stats, stable=main.stable,
            attempts=main.attempts,
            throughput={b: throughput_per_s(b, measured[b].stats) for b in cfg.throughput_batch_sizes},
            environment=self.environment(), extra=extra,
        )

    def _time(self, p: Prepared) -> Measurement:
        try:
            return measure_latency(
                p.run_once, self.measure_config, sync=p.sync, time_once=p.time_once, cpu_threads=p.cpu_threads
            )
        except self.runtime_errors as err:
            raise MeasurementError(f"{self.name}: running the network failed: {err}") from err
