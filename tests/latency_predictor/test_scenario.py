"""The server scenario: a network's best batch within a latency bound, from a real measurement."""

from __future__ import annotations

import numpy as np
import pytest

from latency_predictor import ConfigError, MeasurementError
from latency_predictor.measurement.backends import make_estimator
from latency_predictor.measurement.scenario import check_scenario, server_point
from search_spaces import load_space

QUICK = {"warmup_runs": 2, "warmup_s": 0.0, "min_runs": 20, "min_time_s": 0.0, "max_time_s": 1.0, "max_repeats": 1}


@pytest.fixture(scope="module")
def batched():  # type: ignore[no-untyped-def]
    est = make_estimator("onnxruntime", input_shape=(1, 3, 32, 32), num_classes=10, slot=False,
                         measure={**QUICK, "throughput_batch_sizes": [1, 4, 16]})
    return est.measure(load_space("tiny").sample(np.random.default_rng(0)))


def test_every_batch_size_is_measured_with_its_own_percentiles(batched) -> None:  # type: ignore[no-untyped-def]
    stats = batched.extra["batch_stats"]
    assert set(stats) == {"1", "4", "16"}
    assert stats["1"]["p50"] == batched.stats.p50 and stats["16"]["n"] >= 10
    assert all(s["p50"] <= s["p99"] for s in stats.values())


def test_the_best_batch_within_the_bound_is_chosen(batched) -> None:  # type: ignore[no-untyped-def]
    s = batched.extra["batch_stats"]
    # a bound every batch meets: the highest throughput wins
    loose = server_point(batched, bound_ms=1e6, stat="p99")
    thr = {b: b * 1e3 / s[str(b)]["p50"] for b in (1, 4, 16)}
    assert loose.batch == max(thr, key=thr.__getitem__) and loose.throughput_per_s == pytest.approx(thr[loose.batch])
    # a bound at batch 1's p99: only the batches whose own p99 is within it may be chosen
    bound = s["1"]["p99"]
    tight = server_point(batched, bound_ms=bound, stat="p99")
    within = [b for b in (1, 4, 16) if s[str(b)]["p99"] <= bound]
    assert tight.batch == max(within, key=thr.__getitem__)
    assert [b for b, v in tight.per_batch.items() if v["within"]] == within
    # a bound nothing meets: no batch, a discounted throughput below every batch's own
    none = server_point(batched, bound_ms=s["1"]["p50"] / 10, stat="p50")
    assert none.batch is None and 0 < none.throughput_per_s < min(thr.values())


def test_a_single_batch_record_is_refused_for_the_server(batched) -> None:  # type: ignore[no-untyped-def]
    est = make_estimator("onnxruntime", input_shape=(1, 3, 32, 32), num_classes=10, slot=False, measure=QUICK)
    single = est.measure(load_space("tiny").sample(np.random.default_rng(0)))
    with pytest.raises(MeasurementError, match="needs its batch sizes measured"):
        server_point(single, 10.0)


@pytest.mark.parametrize(("scenario", "sizes", "words"), [
    ("batched", [1], "scenario 'batched' is unknown"),
    ("server", [], "at least one batch size"),
    ("server", [1, 0], "whole numbers >= 1, got 0"),
    ("server", [1, 2.5], "whole numbers >= 1, got 2.5"),
    ("server", [4, 4], "repeat a size"),
])
def test_bad_scenarios_are_refused(scenario: str, sizes: list, words: str) -> None:  # type: ignore[type-arg]
    with pytest.raises(ConfigError, match=words):
        check_scenario(scenario, sizes)
    assert check_scenario("server", [8, 1, 2]) == (1, 2, 8)
