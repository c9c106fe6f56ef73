"""Precision as an axis of latency: ONNX Runtime int8 really runs in int8, and nothing else is called int8."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from latency_predictor import ConfigError, MeasurementError
from latency_predictor.errors import InvalidModelError
from latency_predictor.estimators import make_latency_estimator
from latency_predictor.measurement.backends import make_estimator
from latency_predictor.measurement.export import export_onnx
from latency_predictor.measurement.quantize import GraphPrecision, check_graph_precision, quantize_qdq
from search_spaces import Arch, build
from tests.latency_predictor.conftest import FAST, TINY_SHAPE


def _int8_model(arch: Arch) -> tuple[bytes, bytes]:
    net = build(arch, num_classes=10).eval()
    fp32 = export_onnx(net, TINY_SHAPE)
    calibration = np.random.default_rng(0).standard_normal((16, *TINY_SHAPE[1:]), dtype=np.float32)
    return fp32, quantize_qdq(fp32, calibration, TINY_SHAPE)


def test_int8_measurement_times_a_network_whose_every_convolution_runs_in_int8(tiny_arch: Arch,
                                                                                slot_dir: Path) -> None:
    est = make_estimator("onnxruntime", input_shape=TINY_SHAPE, precision="int8", num_classes=10, measure=FAST,
                         slot_dir=slot_dir, calibration_samples=8)
    r = est.measure(tiny_arch)
    assert r.precision == "int8" and r.latency_ms > 0
    found = r.extra["graph_precision"]  # read back from the graph ONNX Runtime optimised for the timed session
    n = int(found.split(" of ")[0])
    assert n > 0 and found.startswith(f"{n} of {n} ")
    assert r.extra["quantize_s"] > 0 and "static QDQ, per-channel int8 weights" in r.extra["quantization"]
    assert "quantization" in r.environment  # part of the device fingerprint of int8 figures
    fp32 = make_estimator("onnxruntime", input_shape=TINY_SHAPE, num_classes=10, measure=FAST, slot_dir=slot_dir)
    assert fp32.measure(tiny_arch).extra["graph_precision"].startswith("0 of ")


@pytest.mark.parametrize(
    ("backend", "options", "words"),
    [
        ("onnxruntime", {"precision": "fp16"}, "provider 'tensorrt' runs it"),
        ("onnxruntime", {"precision": "bf16"}, "no ONNX Runtime provider runs it"),
        ("onnxruntime", {"precision": "int8", "provider": "cuda"}, "int8 on a GPU: the tensorrt backend"),
        ("torch", {"precision": "fp16"}, "CUDA only"),
        ("torch", {"precision": "int8"}, "precision must be one of"),
    ],
)
def test_a_precision_the_backend_cannot_run_is_refused_when_the_backend_is_built(
    backend: str, options: dict[str, str], words: str
) -> None:
    with pytest.raises(ConfigError, match=words):
        make_estimator(backend, input_shape=TINY_SHAPE, **options)


def test_measure_onnx_refuses_a_model_of_another_precision_than_asked(tiny_arch: Arch, slot_dir: Path) -> None:
    fp32_model, int8_model = _int8_model(tiny_arch)
    settings = {"input_shape": TINY_SHAPE, "measure": FAST, "slot_dir": slot_dir, "num_classes": 10}
    with pytest.raises(InvalidModelError, match="precision fp32 was requested but the model is quantised"):
        make_estimator("onnxruntime", **settings).measure_onnx(int8_model)
    with pytest.raises(InvalidModelError, match="precision int8 was requested but ONNX Runtime runs 0 of"):
        make_estimator("onnxruntime", precision="int8", **settings).measure_onnx(fp32_model)
    r = make_estimator("onnxruntime", precision="int8", **settings).measure_onnx(int8_model)
    assert r.precision == "int8"


def test_a_graph_left_partly_in_float_is_not_an_int8_figure() -> None:
    mixed = GraphPrecision(int8_ops=11, float_ops=22, qdq_ops=90)
    assert mixed.precision == "mixed"
    with pytest.raises(MeasurementError, match="runs 11 of 33 convolutions and matrix products in int8"):
        check_graph_precision(mixed, "int8")
    check_graph_precision(GraphPrecision(33, 0, 20), "int8")


def test_calibration_images_of_the_wrong_shape_or_too_few_are_refused(tiny_arch: Arch) -> None:
    model = export_onnx(build(tiny_arch, num_classes=10).eval(), (4, 3, 32, 32))
    with pytest.raises(ConfigError, match=r"shape \[8, 3, 16, 16\]; the network takes \(N, 3, 32, 32\)"):
        quantize_qdq(model, np.zeros((8, 3, 16, 16), np.float32), (4, 3, 32, 32))
    with pytest.raises(ConfigError, match="3 calibration images are too few: at least 4"):
        quantize_qdq(model, np.zeros((3, 3, 32, 32), np.float32), (4, 3, 32, 32))


def test_the_precision_has_one_place_in_the_latency_settings() -> None:
    with pytest.raises(ConfigError, match=r"latency\.options\.precision: .* one place, latency\.precision"):
        make_latency_estimator("onnxruntime", TINY_SHAPE, {"precision": "int8"}, {}, 10)
    est = make_latency_estimator("onnxruntime", TINY_SHAPE, {}, {}, 10, precision="int8")
    assert getattr(est, "precision") == "int8"  # noqa: B009
