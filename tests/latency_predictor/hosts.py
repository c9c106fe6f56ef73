"""A replayed host for the latency tests: an estimator whose figures follow a script, as a host whose
speed changes at known measurements would give them."""

from __future__ import annotations

from collections.abc import Callable, Container, Sequence

from latency_predictor import LatencyResult, LatencyStats
from search_spaces import Arch


class DriftingHost:
    """A :class:`~latency_predictor.LatencyEstimator` whose figure of a network is ``cost(arch)`` ms on
    a quiet host, and ``slowdown`` times that at the measurements (counted from 0) in ``slow``: a host
    whose speed drops for a few measurements and comes back.

    Attributes:
        calls: the networks measured, in order.
        figures: the figure (p50, ms) each measurement gave, in order.
    """

    name = "drifting"

    def __init__(self, cost: Callable[[Arch], float], slow: Container[int] = (), slowdown: float = 2.0,
                 input_shape: tuple[int, ...] = (1, 3, 32, 32), runs: int = 50) -> None:
        self.cost = cost
        self.slow = slow
        self.slowdown = slowdown
        self.input_shape = input_shape
        self.runs = runs
        self.calls: list[Arch] = []
        self.figures: list[float] = []

    def measure(self, arch: Arch) -> LatencyResult:
        factor = self.slowdown if len(self.calls) in self.slow else 1.0
        self.calls.append(arch)
        ms = self.cost(arch) * factor
        self.figures.append(ms)
        # runs spread around the figure (their median), so that p50 < p90 < p99 as in a real measurement
        samples = [ms * (1 + 0.001 * (i - (self.runs - 1) / 2)) for i in range(self.runs)]
        return LatencyResult(arch.encode(), self.name, "measured", "cpu", "fp32", self.input_shape,
                             LatencyStats.from_samples(samples))

    def environment(self) -> dict[str, str]:
        return {"device_name": "drifting host"}

    def final_latency(self, arch: Arch, result: LatencyResult, objective: float,
                      front: Sequence[Sequence[float]]) -> LatencyResult:
        return result
