"""A simulation of the parts of ``torch.cuda`` the GPU backends use, with their documented semantics.

It stands in for ``torch.cuda`` in :mod:`latency_predictor.measurement.backends.gpu` on machines without a
GPU, so the device handling can be checked there. What it models (torch's and CUDA's documented
behaviour, the parts that make the wrong device or freed memory show):

* a current device, and one current stream per device; ``torch.cuda.device(i)`` switches the
  device, ``torch.cuda.stream(s)`` the current stream of ``s``'s device;
* work on tensors of device ``d`` goes to ``d``'s current stream whatever device is current
  (:meth:`SimCuda.launch`, which the test's "network" calls);
* ``Event.record()`` without a stream records on the *current device's* current stream, and an
  event pair times only the work enqueued on its stream between the two records;
* ``torch.cuda.graph(g)`` without ``stream=`` captures on one side stream created at the first
  capture on the device current then; work launched on a stream that is not capturing is not
  captured; ``replay()`` launches the captured work on the current stream of the capture device;
* a graph holds device addresses, not references: a replay after the memory it reads was freed
  is an error here (on a GPU it silently reads whatever reuses the memory).
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any


class Buffer:
    """Device memory a kernel reads (weights, an input): the graph refers to it by address only."""


@dataclass
class Kernel:
    ms: float
    reads: tuple[weakref.ref[Buffer], ...]


@dataclass(eq=False)
class Stream:
    sim: SimCuda
    device: int
    clock_ms: float = 0.0
    capturing: Graph | None = None

    def wait_stream(self, other: Stream) -> None:
        return None

    def enqueue(self, kernel: Kernel) -> None:
        if self.capturing is not None:
            self.capturing.kernels.append(kernel)
            return
        if any(ref() is None for ref in kernel.reads):
            raise RuntimeError("replayed work read device memory that was freed")
        self.clock_ms += kernel.ms


@dataclass(eq=False)
class Event:
    enable_timing: bool = False
    stream: Stream | None = None
    at_ms: float = 0.0
    sim: SimCuda | None = None

    def record(self, stream: Stream | None = None) -> None:
        assert self.sim is not None
        stream = stream or self.sim.current_stream()
        if self.stream is not None and self.stream.device != stream.device:
            raise RuntimeError("the stream's device must match the event's device")
        self.stream, self.at_ms = stream, stream.clock_ms

    def synchronize(self) -> None:
        return None

    def elapsed_time(self, end: Event) -> float:
        assert self.stream is not None and end.stream is not None
        if self.stream.device != end.stream.device:
            raise RuntimeError("events on different devices")
        # Events on one stream bracket exactly the work enqueued between them.
        return end.at_ms - self.at_ms if self.stream is end.stream else 0.0


@dataclass(eq=False)
class Graph:
    sim: SimCuda
    kernels: list[Kernel] = field(default_factory=list)
    device: int | None = None

    def replay(self) -> None:
        assert self.device is not None
        stream = self.sim.current_stream(self.device)
        for kernel in self.kernels:
            stream.enqueue(kernel)


class SimCuda:
    """Stands in for ``torch.cuda`` (only what :mod:`latency_predictor.measurement.backends.gpu` calls)."""

    def __init__(self, devices: int = 2, current: int = 0) -> None:
        self.devices = devices
        self.current = current
        self.streams: dict[int, Stream] = {d: Stream(self, d) for d in range(devices)}
        self.default_capture_stream: Stream | None = None
        self.synchronized: list[int] = []
        sim = self

        class _Event(Event):
            def __init__(self, enable_timing: bool = False) -> None:
                super().__init__(enable_timing, sim=sim)

        class _Graph(Graph):
            def __init__(self) -> None:
                super().__init__(sim)

        self.Event = _Event
        self.CUDAGraph = _Graph

    # what the test's network calls: its kernels run on its own device
    def launch(self, device: int, ms: float, reads: tuple[Buffer, ...] = ()) -> None:
        self.current_stream(device).enqueue(Kernel(ms, tuple(weakref.ref(b) for b in reads)))

    # torch.cuda
    def current_stream(self, device: int | None = None) -> Stream:
        return self.streams[self.current if device is None else device]

    def Stream(self, device: int | None = None) -> Stream:
        return Stream(self, self.current if device is None else device)

    @contextmanager
    def device(self, index: int) -> Iterator[None]:
        before, self.current = self.current, index
        try:
            yield
        finally:
            self.current = before

    @contextmanager
    def stream(self, s: Stream) -> Iterator[None]:
        before, self.streams[s.device] = self.streams[s.device], s
        try:
            yield
        finally:
            self.streams[s.device] = before

    @contextmanager
    def graph(self, g: Graph, stream: Stream | None = None) -> Iterator[None]:
        if stream is None:
            if self.default_capture_stream is None:
                self.default_capture_stream = self.Stream()
            stream = self.default_capture_stream
        g.device, stream.capturing = stream.device, g
        with self.stream(stream):
            yield
        stream.capturing = None

    def synchronize(self, device: int | None = None) -> None:
        self.synchronized.append(self.current if device is None else device)

    def empty_cache(self) -> None:
        return None


def as_any(sim: SimCuda) -> Any:
    """``sim`` typed for monkeypatching in place of ``torch.cuda``."""
    return sim
