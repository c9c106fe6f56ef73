"""CUDA pieces the torch and TensorRT backends share: the device's stream, event timing, graph capture.

Every function here takes the device index explicitly. torch's defaults follow the *current*
device, not the one the network lives on: a bare ``Event.record()`` records on the current
device's stream, a bare ``torch.cuda.Stream()`` is created there, and ``torch.cuda.graph(g)``
without ``stream=`` captures on a side stream created once, on whichever device was current at
the first capture. With the network on ``cuda:1`` while device 0 is current, such events time an
idle stream (about 0 ms) and such a capture records nothing, so its replay does nothing. So:

* timing events are recorded on the network's device's stream (:func:`device_stream`);
* a graph is captured inside ``torch.cuda.device(index)`` on a stream of that device;
* a captured graph keeps what it reads alive: a CUDA graph holds raw device addresses, not
  references, so the weights and the static input must outlive it; after they are freed (and
  ``torch.cuda.empty_cache()`` hands the memory back) a replay would read whatever reuses it.

``cuda`` below is ``torch.cuda``; the tests replace it with a simulation of the documented
semantics (``tests/latency_predictor/simcuda.py``) to check the above on machines without a GPU.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

from torch import cuda

WARMUP_BEFORE_CAPTURE = 3
"""Eager runs on the capture stream before a graph is captured (lazy initialisation, autotuning)."""


def device_scope(index: int) -> AbstractContextManager[Any]:
    """``torch.cuda.device(index)``: makes ``index`` the current device for the block."""
    return cuda.device(index)


def device_stream(index: int) -> Any:
    """The current stream of device ``index``: where torch launches the work on tensors of that device."""
    return cuda.current_stream(index)


def new_stream(index: int) -> Any:
    """A new stream on device ``index`` (whatever device is current)."""
    return cuda.Stream(device=index)


def synchronizer(index: int) -> Callable[[], None]:
    """Waits for all work on device ``index`` (for wall-clock timing)."""

    def sync() -> None:
        cuda.synchronize(index)

    return sync


def event_timer(run_once: Callable[[], object], stream: Any) -> Callable[[], float]:
    """Times ``run_once`` with a pair of CUDA events recorded on ``stream``, in ms.

    ``stream`` must be the stream ``run_once`` enqueues its work on (:func:`device_stream` for
    torch work and graph replays, the execution stream for TensorRT).
    """
    start = cuda.Event(enable_timing=True)
    end = cuda.Event(enable_timing=True)

    def time_once() -> float:
        start.record(stream)
        run_once()
        end.record(stream)
        end.synchronize()
        return float(start.elapsed_time(end))

    return time_once


@dataclass
class CapturedGraph:
    """A CUDA graph with what its replay reads.

    Attributes:
        graph: the captured ``torch.cuda.CUDAGraph``.
        output: the static output the replay writes.
        keep: the captured callable and the objects it reads (weights, static input), held so
            their device memory outlives the graph.
        device: the device index the graph was captured on.
    """

    graph: Any
    output: object
    keep: tuple[object, ...]
    device: int

    def replay(self) -> object:
        """Replay the graph (on the current stream of its device); the static output."""
        self.graph.replay()
        return self.output


def capture_graph(forward: Callable[[], object], index: int, keep: tuple[object, ...] = ()) -> CapturedGraph:
    """Capture ``forward()`` on device ``index`` in a CUDA graph, after warm-up runs on the capture stream.

    Follows torch's documented recipe (warm-up on a side stream that waits for the current one,
    then ``torch.cuda.graph``), with the device and the capture stream named explicitly.

    Args:
        forward: the work to capture; it must launch on device ``index`` only.
        index: the CUDA device.
        keep: objects ``forward`` reads from device memory (weights, static input) that must stay
            alive while the graph is replayed.
    """
    with cuda.device(index):
        capture = cuda.Stream(device=index)
        capture.wait_stream(cuda.current_stream(index))
        with cuda.stream(capture):
            for _ in range(WARMUP_BEFORE_CAPTURE):
                forward()
        cuda.current_stream(index).wait_stream(capture)
        graph = cuda.CUDAGraph()
        with cuda.graph(graph, stream=capture):
            output = forward()
    return CapturedGraph(graph, output, (forward, *keep), index)
