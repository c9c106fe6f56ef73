"""The latency screen (``search.latency_screen``): judge a proposal's latency before it trains.

Regularised evolution's mutations do not look at latency, so many of its proposals miss the target
by far, and each still costs a training at the first rung before the reward says so. With
``search.latency_screen=L`` the driver measures (or, with ``latency=predictor``, predicts) each new
proposal's latency before it becomes a trial, as the trials do (beside the anchor network when the
target is relative to one), and a proposal over ``L`` times the target is not trained: the sampler
draws another in its place and never proposes it again. The reward is untouched: a proposal that
passes is trained, measured and scored as before, and the screen's figure only decides whether it
is tried.

``search.latency_floor=F`` refuses, the same way, a proposal under ``F`` times the target: one that
would leave most of the budget unused. Regularised evolution breeds from its fittest members, and
when small networks score best at a cheap first rung (they learn fast), the population drifts to
them and the search settles far inside the target; a floor keeps every trial within ``[F, L]``
times it. The two may be given together or either alone.

The screen measures while trials train on the same machine, so its figure reads higher than a
quiet one; a target relative to an anchor (``target_anchor``), measured beside it, moves much less
with the load than milliseconds do, and ``L`` above 1 (1.2, say) leaves a margin for what remains.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from latency_predictor import LatencyError, LatencyResult
from latency_predictor.measurement.paired import measure_paired
from latency_predictor.measurement.protocol import LatencyStats
from nas.core.config import SearchAlgConfig, SearchConfig
from nas.core.errors import ConfigError
from nas.core.objective import Objective
from nas.driver.progress import log
from nas.trial.evaluate import latency_estimator, with_preprocessing
from search_spaces import Arch, SearchSpace, anchor_network


@dataclass
class LatencyScreen:
    """Judges architectures by their latency against the target, before they train (callable: True to try one).

    Attributes:
        limit: the most times the target a proposal may be (``search.latency_screen``; inf: no limit).
        measure: how one network's latency is taken here (the search's backend, the input pipeline's cost added).
        objective: the search's target and its statistic.
        floor: the fewest times the target a proposal may be (``search.latency_floor``; None: none).
        anchor: the anchor network a relative target is measured beside (None: the target is in ms).
        anchor_name: the anchor as named (``mobilenetv2_100@0.35``), for records.
        status: where each refusal is said.
        max_refused: proposals it may refuse in a row before the search ends (``search.max_refused``).
        passed: proposals let through, with their figure (times the target).
        refused: proposals refused, with their figure.
        unmeasured: proposals that could not be measured here (let through: their trial measures them).
        in_a_row: proposals refused since the last one let through.
        seconds: time spent screening.
    """

    limit: float
    measure: Callable[[Arch], LatencyResult]
    objective: Objective
    floor: float | None = None
    anchor: Arch | None = None
    anchor_name: str | None = None
    status: Callable[[str], None] = print
    max_refused: int = SearchAlgConfig.max_refused
    passed: list[tuple[str, float]] = field(default_factory=list)
    refused: list[tuple[str, float]] = field(default_factory=list)
    unmeasured: list[str] = field(default_factory=list)
    in_a_row: int = 0
    seconds: float = 0.0

    def over(self, arch: Arch) -> float:
        """How many times the target ``arch`` is, measured here now."""
        if self.anchor is None:
            return self.objective.over(self.measure(arch))
        paired = measure_paired(self.measure, self.anchor, [arch], 1, self.objective.stat, self.anchor_name)
        return self.objective.over(paired[arch])

    def __call__(self, arch: Arch) -> bool:
        t0 = time.perf_counter()
        try:
            x = self.over(arch)
        except LatencyError as err:
            self.unmeasured.append(arch.arch_id)
            self.in_a_row = 0
            log.warning("latency screen: %s could not be measured here (%s: %s); it is tried, and its trial "
                        "measures it", arch.arch_id, type(err).__name__, err)
            return True
        finally:
            self.seconds += time.perf_counter() - t0
        if x <= self.limit and (self.floor is None or x >= self.floor):
            self.passed.append((arch.arch_id, x))
            self.in_a_row = 0
            log.info("latency screen: %s at %.2fx the target: tried", arch.arch_id, x)
            return True
        self.refused.append((arch.arch_id, x))
        self.in_a_row += 1
        why = f"over {self.limit:g}x" if x > self.limit else f"under {self.floor:g}x"
        self.status(f"latency screen: {arch.arch_id} at {x:.2f}x the target ({why}): not trained")
        return False

    def bounds(self) -> str:
        """What the screen lets through, in words: ``over 1.2x``, ``under 0.6x``, ``outside 0.6x-1.2x``."""
        if self.floor is None:
            return f"over {self.limit:g}x"
        if self.limit == float("inf"):
            return f"under {self.floor:g}x"
        return f"outside {self.floor:g}x-{self.limit:g}x"

    def metrics(self) -> dict[str, float]:
        """The screen's figures for the search's record."""
        return {"screen_passed": float(len(self.passed)), "screen_refused": float(len(self.refused)),
                "screen_seconds": self.seconds}

    @property
    def gave_up(self) -> bool:
        """Whether the last ``max_refused`` proposals were all refused (the sampler then ends the search)."""
        return self.in_a_row >= self.max_refused

    def summary_line(self) -> str:
        """What the screen did, in one line."""
        judged = len(self.passed) + len(self.refused)
        line = (f"Latency screen: {len(self.refused)} of {judged} proposal(s) {self.bounds()} the target "
                f"{self.objective.describe()} were not trained (each measured here before its trial, "
                f"{self.seconds:.0f} s in all)")
        if self.refused:
            xs = sorted(x for _, x in self.refused)
            line += f"; refused at {xs[0]:.2f}x-{xs[-1]:.2f}x"
        if self.unmeasured:
            line += f"; {len(self.unmeasured)} could not be measured here and were tried"
        return line + "."


def make_screen(cfg: SearchConfig, num_classes: int, space: SearchSpace, target_ms: float,
                preprocessing: LatencyStats | None, on_cluster: bool, status: Callable[[str], None]
                ) -> LatencyScreen | None:
    """The screen ``search.latency_screen`` and ``search.latency_floor`` ask for (None: neither is set), measuring
    with the search's latency backend.

    Raises:
        ConfigError: asked for on a joined cluster whose trials measure on other machines.
        LatencyError: the backend cannot be built here.
    """
    limit, floor = cfg.search.latency_screen, cfg.search.latency_floor
    if limit is None and floor is None:
        return None
    key = "search.latency_screen" if limit is not None else "search.latency_floor"
    lat = cfg.latency
    if on_cluster and lat.backend not in ("remote", "predictor"):
        raise ConfigError(key, "measures each proposal in the driver, and on a joined cluster "
                          "the trials measure on other machines: leave it null there, or measure on one device "
                          "with latency=remote")
    est = latency_estimator(lat, num_classes, space, target_ms)

    def measure(arch: Arch) -> LatencyResult:
        return with_preprocessing(est.measure(arch), lat, preprocessing)

    anchor = None
    if cfg.target_anchor is not None and cfg.anchor is not None:  # a relative target: judged beside the anchor
        anchor = anchor_network(cfg.anchor, max(lat.input_shape[2:]))
    return LatencyScreen(float("inf") if limit is None else float(limit), measure, Objective.of_search(cfg),
                         None if floor is None else float(floor), anchor, cfg.anchor, status,
                         cfg.search.max_refused)


__all__ = ["LatencyScreen", "make_screen"]
