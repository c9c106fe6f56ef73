"""End-to-end latency: the input pipeline (decode, resize, normalise) timed and added to a network's."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from PIL import Image

from latency_predictor import ConfigError
from latency_predictor.measurement.backends import make_estimator
from latency_predictor.measurement.preprocess import (
    Preprocessing,
    add_preprocessing,
    measure_preprocessing,
    pipeline,
    sample_image,
)
from latency_predictor.measurement.timing import MeasureConfig
from search_spaces import load_space

FAST = MeasureConfig(warmup_runs=2, warmup_s=0.0, min_runs=20, min_time_s=0.0, max_time_s=2.0, max_repeats=1)


def test_the_pipeline_gives_the_networks_normalised_nchw_input() -> None:
    spec = Preprocessing.create("raw", [60, 80], [2, 3, 16, 16], mean=[0.4, 0.5, 0.6], std=[0.2, 0.25, 0.3])
    out = pipeline(spec)()
    assert out.shape == (2, 3, 16, 16) and out.dtype == np.float32
    want = np.asarray(Image.fromarray(sample_image(spec)).resize((16, 16), Image.Resampling.BILINEAR), np.float32)
    want = (want / 255 - np.array([0.4, 0.5, 0.6])) / np.array([0.2, 0.25, 0.3])
    np.testing.assert_allclose(out[1], want.transpose(2, 0, 1), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("fmt", ["jpeg", "png"])
def test_an_encoded_image_is_decoded_to_the_same_picture(fmt: str) -> None:
    raw = pipeline(Preprocessing.create("raw", [48, 64], [1, 3, 24, 24]))()
    decoded = pipeline(Preprocessing.create(fmt, [48, 64], [1, 3, 24, 24]))()
    assert decoded.shape == raw.shape
    err = np.abs(decoded - raw).mean()
    assert (err == 0.0) if fmt == "png" else (0.0 < err < 0.2)  # PNG is lossless; JPEG close, not equal


def test_the_pipeline_is_timed_with_the_protocol_and_added_to_every_percentile() -> None:
    spec = Preprocessing.create("jpeg", [120, 160], [1, 3, 32, 32])
    pre = measure_preprocessing(spec, FAST)
    assert pre.n >= 20 and 0 < pre.p50 <= pre.p99
    est = make_estimator("onnxruntime", input_shape=[1, 3, 32, 32], num_classes=10, intra_op_threads=1, measure=FAST)
    model = est.measure(load_space("tiny").extremes()[0])
    total = add_preprocessing(model, pre, spec.describe())
    for k in ("p50", "p90", "p95", "p99"):
        assert getattr(total.stats, k) == pytest.approx(getattr(model.stats, k) + getattr(pre, k))
    assert total.latency_ms > model.latency_ms
    assert total.extra["model_stats"]["p50"] == model.stats.p50 and total.extra["preprocessing"]["p50"] == pre.p50
    assert total.extra["preprocessing_pipeline"] == "jpeg 120x160 -> 1x3x32x32"
    assert add_preprocessing(total, pre) is total  # never counted twice
    again = type(total).from_dict(total.to_dict())  # the record round-trips through JSON fields
    assert again.stats.p50 == total.stats.p50 and again.extra["preprocessing"] == dataclasses.asdict(pre)


@pytest.mark.parametrize(("args", "words"), [
    (("gif", [10, 10], [1, 3, 8, 8]), "'gif' is unknown"),
    (("jpeg", [10], [1, 3, 8, 8]), "[height, width]"),
    (("jpeg", [0, 10], [1, 3, 8, 8]), "[height, width]"),
    (("jpeg", [10, 10], [1, 1, 8, 8]), "(N, 3, H, W)"),
])
def test_a_bad_pipeline_is_refused_naming_the_problem(args: tuple, words: str) -> None:
    with pytest.raises(ConfigError, match=None) as err:
        Preprocessing.create(*args)
    assert words in str(err.value)
