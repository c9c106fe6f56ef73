"""The latency statistic a target bounds: enough runs for it, and its confidence interval."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from latency_predictor import ConfigError, MeasurementError
from latency_predictor.measurement.protocol import LatencyResult, LatencyStats
from latency_predictor.measurement.statistic import MIN_RUNS, check_runs, protocol_for, stat_value
from latency_predictor.prediction.dataset import within_rel_se

SAMPLES = np.random.default_rng(0).lognormal(0.0, 0.25, 5000)


def _result(n: int, source: str = "measured") -> LatencyResult:
    return LatencyResult(arch="a" * 80, backend="onnxruntime", source=source, device="cpu",  # type: ignore[arg-type]
                         precision="fp32", input_shape=(1, 3, 32, 32), stats=LatencyStats.from_samples(SAMPLES[:n]))


def test_a_high_percentile_gets_the_runs_it_needs_and_the_cap_lifted() -> None:
    quick = {"min_runs": 30, "max_time_s": 3.0, "warmup_runs": 5}
    assert protocol_for("p50", quick) == quick
    assert protocol_for("p99", quick) == {"min_runs": 1000, "max_time_s": None, "warmup_runs": 5}
    assert protocol_for("p90", quick)["min_runs"] == 100
    assert protocol_for("p99", {"min_runs": 5000, "max_time_s": 3.0}) == {"min_runs": 5000, "max_time_s": 3.0}
    with pytest.raises(ConfigError, match=r"'p42' is not recorded.*p99"):
        protocol_for("p42", quick)


def test_a_percentile_from_too_few_runs_is_refused() -> None:
    with pytest.raises(MeasurementError, match=r"a p99 from 30 timed runs .* needs at least 1000"):
        check_runs(_result(30), "p99")
    check_runs(_result(30), "p50")
    check_runs(_result(MIN_RUNS["p99"]), "p99")
    check_runs(_result(1, source="predicted"), "p99")  # a prediction has no runs to count
    assert stat_value(_result(1000), "p95") == LatencyStats.from_samples(SAMPLES[:1000]).p95


def test_the_confidence_interval_covers_the_true_percentile_and_narrows_with_runs() -> None:
    true_p99 = float(np.exp(0.25 * 2.3263))  # of the log-normal the samples come from
    rng = np.random.default_rng(1)
    covered = 0
    for _ in range(200):
        stats = LatencyStats.from_samples(rng.lognormal(0.0, 0.25, 1000))
        lo, hi = stats.ci95["p99"]
        covered += lo <= true_p99 <= hi
    assert covered >= 180  # ~95% nominal
    wide = np.diff(LatencyStats.from_samples(SAMPLES[:1000]).ci95["p99"])[0]
    narrow = np.diff(LatencyStats.from_samples(SAMPLES).ci95["p99"])[0]
    assert narrow < wide
    # old records without intervals still load
    d = dataclasses.asdict(_result(100))
    del d["stats"]["ci95"]
    assert LatencyResult.from_dict(d).stats.ci95 == {}


def test_a_percentiles_standard_error_comes_from_its_interval() -> None:
    r = _result(1000)
    lo, hi = r.stats.ci95["p99"]
    assert within_rel_se(r, "p99") == pytest.approx((hi - lo) / (2 * 1.96 * r.stats.p99))
    assert within_rel_se(r, "p99") > within_rel_se(r, "p50")  # the same runs pin the tail down less well
    # a record without intervals (written before them): the normal approximation, wider than the median's too
    old = dataclasses.replace(r, stats=dataclasses.replace(r.stats, ci95={}))
    assert within_rel_se(old, "p99") > within_rel_se(old, "p50") > 0
    with pytest.raises(ConfigError, match="'p42' is not recorded"):
        within_rel_se(r, "p42")
