"""The CUDA pieces of the GPU backends time and capture the network's device, and keep a graph's memory alive.

Run here against a simulation of ``torch.cuda``'s documented semantics (``simcuda.py``); each
test first shows that the simulation reproduces the defect, so it is not passing vacuously. The
same checks on a real GPU are in ``tests/gpu/test_runtimes.py`` (marked ``gpu``).
"""

from __future__ import annotations

import gc
import weakref
from collections.abc import Callable

import pytest

from latency_predictor.measurement.backends import gpu
from tests.latency_predictor.simcuda import Buffer, SimCuda, as_any

MS = 2.0


@pytest.fixture
def sim(monkeypatch: pytest.MonkeyPatch) -> SimCuda:
    """Two GPUs, device 0 current: the setting where a network on cuda:1 shows the defects."""
    s = SimCuda(devices=2, current=0)
    monkeypatch.setattr(gpu, "cuda", as_any(s))
    return s


def network(sim: SimCuda, device: int) -> tuple[Callable[[], object], Buffer, Buffer]:
    """A forward pass on ``device`` reading its weights and input; the weights and input."""
    weights, x = Buffer(), Buffer()

    def forward() -> object:
        sim.launch(device, MS, reads=(weights, x))
        return "logits"

    return forward, weights, x


def test_events_time_the_network_on_its_device_not_the_current_one(sim: SimCuda) -> None:
    forward, _, _ = network(sim, 1)
    start, end = sim.Event(enable_timing=True), sim.Event(enable_timing=True)
    start.record()  # bare records: the current device's (0) stream, idle
    forward()
    end.record()
    assert start.elapsed_time(end) == 0.0
    assert gpu.event_timer(forward, gpu.device_stream(1))() == MS


def test_a_graph_captured_while_another_device_is_current_replays_the_network(sim: SimCuda) -> None:
    forward, weights, x = network(sim, 1)
    bare = sim.CUDAGraph()
    with sim.graph(bare):  # no device, no stream: a side stream of device 0 captures nothing
        forward()
    assert bare.kernels == []
    captured = gpu.capture_graph(forward, 1, keep=(weights, x))
    assert captured.device == 1 and len(captured.graph.kernels) == 1
    assert gpu.event_timer(captured.replay, gpu.device_stream(1))() == MS
    assert captured.replay() == "logits"
    assert sim.current == 0, "the capture changed the caller's current device"


def test_a_captured_graph_keeps_the_memory_it_reads_alive(sim: SimCuda) -> None:
    other, _, _ = network(sim, 1)
    bare = sim.CUDAGraph()
    with sim.device(1), sim.graph(bare, stream=sim.Stream(1)):
        other()
    forward, weights, x = network(sim, 1)
    captured = gpu.capture_graph(forward, 1)
    alive = weakref.ref(weights)
    del other, forward, weights, x  # what preparation drops when it returns
    gc.collect()
    sim.empty_cache()  # the trial calls torch.cuda.empty_cache()
    with sim.device(1), pytest.raises(RuntimeError, match="freed"):
        bare.replay()  # a graph alone does not keep its memory
    assert alive() is not None
    assert gpu.event_timer(captured.replay, gpu.device_stream(1))() == MS


def test_wall_clock_sync_waits_for_the_network_device(sim: SimCuda) -> None:
    gpu.synchronizer(1)()
    assert sim.synchronized == [1]
