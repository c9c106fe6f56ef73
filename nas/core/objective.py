"""How a latency record and an accuracy become a reward: the one place that reads the ``latency``
settings that shape the reward (the statistic the target bounds, the serving scenario).

``single_stream`` (the default): the target bounds one image's latency at ``target_stat``
(p50 unless set); the reward is the search's reward of that figure (:mod:`nas.core.reward`).
``server``: the target bounds a batch's latency at ``target_stat``; the candidate's figure is the
throughput of its best batch within the bound (:func:`latency_predictor.measurement.scenario.server_point`),
and the reward :func:`nas.core.reward.throughput_reward` against ``throughput_goal``.

The trial and the driver's final latency pass both score through :class:`Objective`, so a
re-measured candidate is scored exactly as its trial was.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from latency_predictor import LatencyResult
from latency_predictor.measurement.scenario import server_point
from latency_predictor.measurement.statistic import stat_value
from nas.core.config import LatencyConfig
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
    """

    target_ms: float
    reward: str = "squared"
    stat: str = "p50"
    scenario: str = "single_stream"
    throughput_goal: float | None = None

    @classmethod
    def of(cls, latency: LatencyConfig, target_ms: float, reward: str) -> Objective:
        """The objective of a search's ``latency`` settings, target and reward."""
        return cls(target_ms, reward, latency.target_stat, latency.scenario, latency.throughput_goal)

    def figures(self, result: LatencyResult) -> dict[str, float]:
        """The metrics a latency record gives a candidate: ``meets_target`` and, for a server,
        ``server_batch`` (NaN: no batch within the bound) and ``throughput_per_s``."""
        if self.scenario != "server":
            return {"meets_target": float(meets_target(stat_value(result, self.stat), self.target_ms))}
        point = server_point(result, self.target_ms, self.stat)
        met = point.batch is not None and point.throughput_per_s >= float(self.throughput_goal or math.inf)
        return {"meets_target": float(met), "server_batch": math.nan if point.batch is None else float(point.batch),
                "throughput_per_s": point.throughput_per_s}

    def score(self, accuracy: float, result: LatencyResult) -> float:
        """The reward of ``accuracy`` with this latency record."""
        if self.scenario != "server":
            return reward_fn(self.reward)(accuracy, stat_value(result, self.stat), self.target_ms)
        point = server_point(result, self.target_ms, self.stat)
        return throughput_reward(accuracy, point.throughput_per_s, float(self.throughput_goal or math.nan))
