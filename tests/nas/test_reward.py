"""The reward: squared penalty (default) and MnasNet's soft and hard forms, pinned by value."""

from __future__ import annotations

import math

import pytest

from nas.core.errors import RewardError
from nas.core.reward import (
    MNAS_SOFT_W,
    REWARDS,
    meets_target,
    mnas_hard,
    mnas_soft,
    mnasnet_reward,
    reward_fn,
    squared_penalty,
    throughput_reward,
)


@pytest.mark.parametrize(
    ("acc", "lat", "target", "expected"),
    [
        (0.9, 10.0, 50.0, 0.9),  # well below the target: accuracy itself
        (0.9, 50.0, 50.0, 0.9),  # exactly at the target counts as met
        (0.9, 100.0, 50.0, 0.9 * 0.25),  # twice the target: (1/2)^2
        (0.8, 75.0, 50.0, 0.8 * (50 / 75) ** 2),
        (0.0, 100.0, 50.0, 0.0),
        (1.0, 50.0000001, 50.0, (50 / 50.0000001) ** 2),  # just above: continuous at the target
    ],
)
def test_squared_penalty_values(acc: float, lat: float, target: float, expected: float) -> None:
    assert squared_penalty(acc, lat, target) == pytest.approx(expected, rel=1e-12)


def test_squared_penalty_is_monotone_in_latency_above_target() -> None:
    values = [squared_penalty(0.9, lat, 50.0) for lat in (50.0, 60.0, 80.0, 120.0, 500.0)]
    assert values == sorted(values, reverse=True)
    assert values[0] == 0.9


@pytest.mark.parametrize(
    ("acc", "lat", "target"),
    [(0.9, 10.0, 50.0), (0.9, 50.0, 50.0), (0.9, 100.0, 50.0), (0.5, 400.0, 80.0)],
)
def test_mnas_soft_is_the_same_power_on_both_sides(acc: float, lat: float, target: float) -> None:
    assert MNAS_SOFT_W == -0.07
    assert mnas_soft(acc, lat, target) == pytest.approx(acc * (lat / target) ** -0.07, rel=1e-12)


def test_mnas_soft_rewards_faster_networks_below_target() -> None:
    assert mnas_soft(0.9, 10.0, 50.0) > mnas_soft(0.9, 40.0, 50.0) > 0.9 > mnas_soft(0.9, 60.0, 50.0)
    assert mnas_soft(0.9, 50.0, 50.0) == pytest.approx(0.9)


@pytest.mark.parametrize(
    ("acc", "lat", "target", "expected"),
    [(0.9, 10.0, 50.0, 0.9), (0.9, 50.0, 50.0, 0.9), (0.9, 100.0, 50.0, 0.45), (0.6, 150.0, 50.0, 0.2)],
)
def test_mnas_hard_values(acc: float, lat: float, target: float, expected: float) -> None:
    assert mnas_hard(acc, lat, target) == pytest.approx(expected, rel=1e-12)


def test_general_form_matches_named_forms() -> None:
    for lat in (5.0, 50.0, 500.0):
        assert mnasnet_reward(0.7, lat, 50.0, 0.0, -2.0) == squared_penalty(0.7, lat, 50.0)
        assert mnasnet_reward(0.7, lat, 50.0, 0.0, -1.0) == mnas_hard(0.7, lat, 50.0)
        assert mnasnet_reward(0.7, lat, 50.0, -0.07, -0.07) == mnas_soft(0.7, lat, 50.0)


def test_registry_and_lookup() -> None:
    assert set(REWARDS) == {"squared", "mnas_soft", "mnas_hard"}
    assert reward_fn("squared") is squared_penalty
    with pytest.raises(RewardError, match=r"unknown reward 'cubic'.*mnas_hard"):
        reward_fn("cubic")


@pytest.mark.parametrize(
    ("acc", "lat", "target", "what"),
    [
        (math.nan, 10.0, 50.0, "accuracy"),
        (-0.1, 10.0, 50.0, "accuracy"),
        (0.9, 0.0, 50.0, "latency_ms"),
        (0.9, -1.0, 50.0, "latency_ms"),
        (0.9, math.inf, 50.0, "latency_ms"),
        (0.9, math.nan, 50.0, "latency_ms"),
        (0.9, 10.0, 0.0, "target_ms"),
        (0.9, 10.0, math.nan, "target_ms"),
    ],
)
@pytest.mark.parametrize("fn", [squared_penalty, mnas_soft, mnas_hard])
def test_invalid_inputs_raise(fn: object, acc: float, lat: float, target: float, what: str) -> None:
    with pytest.raises(RewardError, match=what):
        fn(acc, lat, target)  # type: ignore[operator]


def test_meets_target_includes_equality() -> None:
    assert meets_target(50.0, 50.0)
    assert meets_target(49.9, 50.0)
    assert not meets_target(50.01, 50.0)


@pytest.mark.parametrize(("acc", "thr", "goal", "expected"), [
    (0.8, 600.0, 500.0, 0.8),          # the goal reached: the accuracy
    (0.8, 500.0, 500.0, 0.8),          # exactly reached
    (0.8, 250.0, 500.0, 0.8 * 0.25),   # half the goal: a quarter
    (0.8, 0.0, 500.0, 0.0),
])
def test_throughput_reward_is_the_squared_penalty_on_throughput(acc: float, thr: float, goal: float,
                                                                 expected: float) -> None:
    assert throughput_reward(acc, thr, goal) == pytest.approx(expected)


@pytest.mark.parametrize(("acc", "thr", "goal"), [(math.nan, 1.0, 1.0), (0.5, -1.0, 1.0), (0.5, 1.0, 0.0)])
def test_throughput_reward_refuses_bad_input(acc: float, thr: float, goal: float) -> None:
    with pytest.raises(RewardError):
        throughput_reward(acc, thr, goal)
