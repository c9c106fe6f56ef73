"""An anchor network measured beside a network: the verdict against it holds while the host's speed
changes, where a verdict on the absolute figure flips."""

from __future__ import annotations

import pytest

from latency_predictor import MeasurementError
from latency_predictor.estimators import measuring_part
from latency_predictor.measurement.backends import make_estimator
from latency_predictor.measurement.paired import alternate, anchor_figures, measure_paired, pair
from latency_predictor.measurement.statistic import stat_value
from search_spaces import Arch, anchor_network, reference
from search_spaces.references import scale_width, small_input_variant
from tests.latency_predictor.conftest import FAST, TINY_SHAPE
from tests.latency_predictor.hosts import DriftingHost

ANCHOR = anchor_network("mobilenetv2_100@0.35", 32)
FASTER = scale_width(small_input_variant(reference("mobilenetv2_100")), 0.25)  # 0.9x the anchor on this host
SLOWER = scale_width(small_input_variant(reference("mobilenetv2_100")), 0.5)  # 1.1x the anchor
COST = {ANCHOR: 1.0, FASTER: 0.9, SLOWER: 1.1}


def test_a_host_that_halves_its_speed_flips_the_raw_verdict_but_not_the_paired_one() -> None:
    # The host runs at half speed for the 2nd to 5th measurement, then recovers.
    host = DriftingHost(COST.__getitem__, slow=range(1, 5))
    target_ms = 1.0  # the anchor's figure on the quiet host: "no slower than the anchor"
    paired = measure_paired(host.measure, ANCHOR, [FASTER], rounds=3)[FASTER]
    assert host.calls == [FASTER, ANCHOR] * 3  # each round: the network, then the anchor right after it
    fig = anchor_figures(paired)
    assert fig is not None
    # Round by round the raw figure flips from meeting the target to missing it ...
    raw = host.figures[0::2]
    assert raw == pytest.approx([0.9, 1.8, 1.8])
    assert [ms <= target_ms for ms in raw] == [True, False, False]
    assert fig.latency_ms == pytest.approx(1.8) and paired.latency_ms == pytest.approx(1.8)  # the median round's
    # ... while the ratios are 0.45 (the flip fell inside the first pair), 0.9 and 1.8 (inside the
    # last), and their median keeps the verdict of the quiet host.
    assert fig.ratios == pytest.approx((0.45, 0.9, 1.8))
    assert fig.x_anchor == pytest.approx(0.9) and fig.x_anchor <= 1.0
    assert fig.rounds == 3 and fig.stat == "p50"

    slower = measure_paired(DriftingHost(COST.__getitem__, slow=range(1, 5)).measure, ANCHOR, [SLOWER], 3)[SLOWER]
    x = anchor_figures(slower)
    assert x is not None and x.x_anchor == pytest.approx(1.1) and x.x_anchor > 1.0  # misses, as on a quiet host


def test_rounds_alternate_the_networks_with_the_anchor_and_the_anchor_with_itself_is_x1() -> None:
    host = DriftingHost(COST.__getitem__)
    out = measure_paired(host.measure, ANCHOR, [FASTER, ANCHOR, SLOWER], rounds=2, name="mobilenetv2_100@0.35")
    assert host.calls == [FASTER, ANCHOR, SLOWER, ANCHOR] * 2
    assert list(out) == [FASTER, ANCHOR, SLOWER]
    own = anchor_figures(out[ANCHOR])
    assert own is not None and own.x_anchor == 1.0 and own.anchor_ms == pytest.approx(1.0)
    fig = anchor_figures(out[SLOWER])
    assert fig is not None and fig.anchor == "mobilenetv2_100@0.35" and fig.anchor_ms == pytest.approx(1.0)
    alone = DriftingHost(COST.__getitem__)
    assert anchor_figures(measure_paired(alone.measure, ANCHOR, [ANCHOR], rounds=3)[ANCHOR]) is not None
    assert alone.calls == [ANCHOR] * 3  # the anchor alone: measured once per round
    assert alternate([FASTER], ANCHOR, lambda a: COST[a], 2) == {FASTER: [(0.9, 1.0), (0.9, 1.0)]}


def test_the_figures_are_those_of_the_median_round_at_the_targets_statistic() -> None:
    host = DriftingHost(COST.__getitem__, slow={2}, runs=200)  # the second round's network at half speed
    results = [host.measure(FASTER) for _ in range(3)]
    anchors = [host.measure(ANCHOR) for _ in range(3)]
    paired = pair(results, anchors, "p90")
    fig = anchor_figures(paired)
    assert fig is not None and fig.stat == "p90"
    assert paired.stats == results[0].stats  # the median of 0.9, 0.9, 1.8 (the first of the two equal)
    assert fig.x_anchor == pytest.approx(stat_value(results[0], "p90") / stat_value(anchors[0], "p90"))
    with pytest.raises(MeasurementError, match="as many anchor results"):
        pair(results, anchors[:2])
    with pytest.raises(MeasurementError, match="needs at least 1000"):
        pair(results, anchors, "p99")  # 50 runs are no p99
    assert anchor_figures(results[0]) is None


def test_a_real_backend_measures_its_own_anchor() -> None:
    est = make_estimator("onnxruntime", input_shape=TINY_SHAPE, num_classes=10, slot=False, measure=FAST)
    assert measuring_part(est) is est
    tiny = Arch.decode("act_relu-stem_c8-mb_k3_e2_c16_s2_se0.25-rb_k3_c16_s1-mb_k5_e1_c24_s2-head_c32")
    fig = anchor_figures(measure_paired(est.measure, ANCHOR, [tiny], rounds=1)[tiny])
    assert fig is not None and fig.anchor_ms > 0 and fig.x_anchor == pytest.approx(fig.latency_ms / fig.anchor_ms)
