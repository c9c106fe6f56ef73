"""The reward: how an accuracy and a latency become one number to maximise.

Pure functions of floats. All forms are MnasNet's weighted product (Tan et al. 2019, eq. 2)::

    reward = accuracy * (latency / target) ** w,   w = alpha if latency <= target else beta

* ``squared`` (the default): ``alpha = 0, beta = -2``: accuracy itself when the target is
  met, ``accuracy * (target / latency) ** 2`` when it is not;
* ``mnas_soft``: ``alpha = beta = -0.07``, MnasNet's soft constraint (a faster network is
  rewarded a little even below the target);
* ``mnas_hard``: ``alpha = 0, beta = -1``, MnasNet's hard constraint.

In the server scenario (``latency.scenario=server``) the target bounds each batch's latency and
the efficiency term is the throughput within that bound (:func:`throughput_reward`)::

    reward = accuracy                               if throughput >= goal
    reward = accuracy * (throughput / goal) ** 2    if throughput <  goal
"""

from __future__ import annotations

import math
from collections.abc import Callable

from nas.core.errors import RewardError

RewardFn = Callable[[float, float, float], float]

MNAS_SOFT_W = -0.07
"""MnasNet's exponent for the soft constraint (alpha = beta = -0.07)."""


def _check(accuracy: float, latency_ms: float, target_ms: float) -> None:
    if not math.isfinite(accuracy) or accuracy < 0:
        raise RewardError(f"accuracy must be a finite number >= 0, got {accuracy!r}")
    if not math.isfinite(latency_ms) or latency_ms <= 0:
        raise RewardError(f"latency_ms must be a finite number > 0, got {latency_ms!r}")
    if not math.isfinite(target_ms) or target_ms <= 0:
        raise RewardError(f"target_ms must be a finite number > 0, got {target_ms!r}")


def mnasnet_reward(accuracy: float, latency_ms: float, target_ms: float, alpha: float, beta: float) -> float:
    """MnasNet's weighted product ``accuracy * (latency / target) ** w``.

    Args:
        accuracy: the candidate's accuracy (or proxy score), >= 0.
        latency_ms: its latency in milliseconds, > 0.
        target_ms: the latency target in milliseconds, > 0.
        alpha: exponent ``w`` when ``latency_ms <= target_ms``.
        beta: exponent ``w`` when ``latency_ms > target_ms``.

    Raises:
        RewardError: a non-finite or out-of-range input.
    """
    _check(accuracy, latency_ms, target_ms)
    w = alpha if latency_ms <= target_ms else beta
    return accuracy * (latency_ms / target_ms) ** w


def squared_penalty(accuracy: float, latency_ms: float, target_ms: float) -> float:
    """``accuracy`` when the target is met, else ``accuracy * (target_ms / latency_ms) ** 2``."""
    return mnasnet_reward(accuracy, latency_ms, target_ms, 0.0, -2.0)


def mnas_soft(accuracy: float, latency_ms: float, target_ms: float) -> float:
    """MnasNet's soft constraint: ``accuracy * (latency_ms / target_ms) ** -0.07`` on both sides."""
    return mnasnet_reward(accuracy, latency_ms, target_ms, MNAS_SOFT_W, MNAS_SOFT_W)


def mnas_hard(accuracy: float, latency_ms: float, target_ms: float) -> float:
    """MnasNet's hard constraint: ``accuracy`` when met, else ``accuracy * target_ms / latency_ms``."""
    return mnasnet_reward(accuracy, latency_ms, target_ms, 0.0, -1.0)


REWARDS: dict[str, RewardFn] = {
    "squared": squared_penalty,
    "mnas_soft": mnas_soft,
    "mnas_hard": mnas_hard,
}


def reward_fn(name: str) -> RewardFn:
    """The reward function called ``name`` (one of :data:`REWARDS`).

    Raises:
        RewardError: an unknown name (listing the known ones).
    """
    try:
        return REWARDS[name]
    except KeyError:
        raise RewardError(f"unknown reward {name!r}; choose one of {sorted(REWARDS)}") from None


def throughput_reward(accuracy: float, throughput_per_s: float, goal_per_s: float) -> float:
    """The server scenario's reward, the squared penalty with throughput in place of latency:
    ``accuracy`` when the throughput within the latency bound reaches the goal, else
    ``accuracy * (throughput / goal) ** 2``.

    Raises:
        RewardError: a non-finite or out-of-range input.
    """
    if not math.isfinite(accuracy) or accuracy < 0:
        raise RewardError(f"accuracy must be a finite number >= 0, got {accuracy!r}")
    if not math.isfinite(throughput_per_s) or throughput_per_s < 0:
        raise RewardError(f"throughput must be a finite number >= 0, got {throughput_per_s!r}")
    if not math.isfinite(goal_per_s) or goal_per_s <= 0:
        raise RewardError(f"the throughput goal must be a finite number > 0, got {goal_per_s!r}")
    return accuracy * min(1.0, throughput_per_s / goal_per_s) ** 2


def meets_target(latency_ms: float, target_ms: float) -> bool:
    """Whether ``latency_ms`` is within the target (equal counts as met)."""
    return latency_ms <= target_ms
