"""How a latency record and an accuracy become a reward: the one place that reads the ``latency``
settings that shape the reward (the statistic the target bounds, the serving scenario).

``single_stream`` (the default): the target bounds one image's latency at ``target_stat``
(p50 unless set); the reward is the search's reward of that figure (:mod:`nas.core.reward`).
``server``: the target bounds a batch's latency at ``target_stat``; the candidate's figure is the
throughput of its best batch within the bound (:func:`latency_predictor.measurement.scenario.server_point`),
and the reward :func:`nas.core.reward.throughput_reward` against ``throughput_goal``.

A target relative to an anchor network (``target_anchor``, ``target_x``): the reward and "meets
target" take the candidate's ``x_anchor`` (its figure over the anchor's, at ``target_stat``; see
:mod:`latency_predictor.measurement.paired`) as the latency and ``target_x`` as the target, in the
same formula; a latency record without it cannot be scored against that target.

The trial and the driver's final latency pass both score through :class:`Objective`, so a
re-measured candidate is scored exactly as its trial was.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from latency_predictor import LatencyResult
from latency_predictor.measurement.paired import anchor_figures
from latency_predictor.measurement.scenario import server_point
from latency_predictor.measurement.statistic import stat_value
from nas.core.config import LatencyConfig, SearchConfig
from nas.core.errors import RewardError
from nas.core.reward import meets_target, reward_fn, throughput_reward


@dataclass(frozen=True)
class Objective:
    """The reward's latency side: the target, its statistic and the serving scenario.

    Attributes:
        target_ms: the latency target (server: the bound on a batch's latency).
        reward: the reward's name (single stream).
        stat: the statistic the target bounds.
        scenario: ``single_stream`` or ``server``.
        throughput_goal: images per second (server).
        target_x: a target relative to the anchor network: the most ``x_anchor`` that meets it
            (None: ``target_ms`` is the target).
        anchor: the anchor network as named (``target_anchor``), for messages.
    """

    target_ms: float
    reward: str = "squared"
    stat: str = "p50"
    scenario: str = "single_stream"
    throughput_goal: float | None = None
    target_x: float | None = None
    anchor: str | None = None

    @classmethod
    def of(cls, latency: LatencyConfig, target_ms: float, reward: str, target_x: float | None = None,
           anchor: str | None = None) -> Objective:
        """The objective of a search's ``latency`` settings, target and reward (``target_x`` and
        ``anchor``: a target relative to that network)."""
        return cls(target_ms, reward, latency.target_stat, latency.scenario, latency.throughput_goal, target_x,
                   anchor)

    @classmethod
    def of_search(cls, cfg: SearchConfig) -> Objective:
        """The objective of a search's configuration: ``target_ms``, or ``target_anchor`` and ``target_x``."""
        if cfg.target_anchor is not None:
            return cls.of(cfg.latency, math.nan, cfg.search.reward, cfg.target_x, cfg.target_anchor)
        return cls.of(cfg.latency, float(cfg.target_ms or math.nan), cfg.search.reward)

    @property
    def relative(self) -> bool:
        """Whether the target is relative to the anchor network."""
        return self.target_x is not None

    @property
    def target(self) -> float:
        """The number the candidates' figure is held to: ``target_x``, else ``target_ms``."""
        return self.target_x if self.target_x is not None else self.target_ms

    def describe(self) -> str:
        """The target in words: ``50 ms``, ``50 ms p99``, ``x1 mobilenetv2_100@0.35`` (``p99`` appended too)."""
        stat = "" if self.stat == "p50" else f" {self.stat}"
        if self.target_x is not None:
            return f"x{self.target_x:g} {self.anchor or 'the anchor'}{stat}"
        return f"{self.target_ms:g} ms{stat}"

    def _bounded(self, result: LatencyResult) -> tuple[float, float]:
        """The candidate's figure the target bounds, and the target: ``x_anchor`` and ``target_x`` for a
        relative target, else the latency at :attr:`stat` and ``target_ms``."""
        if self.target_x is None:
            return stat_value(result, self.stat), self.target_ms
        fig = anchor_figures(result)
        if fig is None:
            raise RewardError(f"the target is relative to {self.anchor or 'an anchor network'}, but the latency of "
                              f"{result.arch[:60]}... was not paired with it (no x_anchor)")
        return fig.x_anchor, self.target_x

    def over(self, result: LatencyResult) -> float:
        """How many times the target ``result``'s figure is (at most 1: it meets the target): ``x_anchor``
        over ``target_x`` for a relative target, else the latency at :attr:`stat` over ``target_ms``
        (single stream; a server's target bounds each batch size's latency instead)."""
        figure, target = self._bounded(result)
        return figure / target

    def figures(self, result: LatencyResult) -> dict[str, float]:
        """The metrics a latency record gives a candidate: ``meets_target`` and, for a server,
        ``server_batch`` (NaN: no batch within the bound) and ``throughput_per_s``."""
        if self.scenario != "server":
            return {"meets_target": float(meets_target(*self._bounded(result)))}
        point = server_point(result, self.target_ms, self.stat)
        met = point.batch is not None and point.throughput_per_s >= float(self.throughput_goal or math.inf)
        return {"meets_target": float(met), "server_batch": math.nan if point.batch is None else float(point.batch),
                "throughput_per_s": point.throughput_per_s}

    def score(self, accuracy: float, result: LatencyResult) -> float:
        """The reward of ``accuracy`` with this latency record."""
        if self.scenario != "server":
            return reward_fn(self.reward)(accuracy, *self._bounded(result))
        point = server_point(result, self.target_ms, self.stat)
        return throughput_reward(accuracy, point.throughput_per_s, float(self.throughput_goal or math.nan))
