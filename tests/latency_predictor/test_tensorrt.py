"""TensorRT backend: what runs everywhere (missing-dependency error, cache keys), and what needs TensorRT."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

from latency_predictor import BackendUnavailableError, EngineBuildError
from latency_predictor.backends.tensorrt_backend import TensorRTBackend, check_tensorrt_version, engine_cache_key
from latency_predictor.export import build_eval_net, export_onnx
from search_spaces import Arch
from tests.latency_predictor.conftest import FAST, TINY_SHAPE

HAS_TRT = importlib.util.find_spec("tensorrt") is not None
needs_trt = pytest.mark.skipif(not HAS_TRT or not torch.cuda.is_available(), reason="needs TensorRT and a GPU")


@pytest.mark.skipif(HAS_TRT, reason="TensorRT is installed here")
def test_missing_tensorrt_names_the_extra() -> None:
    with pytest.raises(BackendUnavailableError, match=r"pip install 'latnas\[tensorrt\]'"):
        TensorRTBackend(TINY_SHAPE)


def test_engine_cache_key_changes_with_everything_the_engine_depends_on() -> None:
    base = dict(arch="act_relu-stem_c8-mb_k3_e1_c8_s1", precision="fp16", input_shape=(1, 3, 224, 224),
                gpu_name="NVIDIA H100", trt_version="10.3.0", workspace_mb=1024)
    key = engine_cache_key(**base)  # type: ignore[arg-type]
    assert key == engine_cache_key(**base) and key.endswith(".engine")  # type: ignore[arg-type]
    assert "fp16" in key and "1x3x224x224" in key
    for field, other in [("arch", "act_relu-stem_c8-mb_k3_e1_c16_s1"), ("precision", "int8"),
                         ("input_shape", (8, 3, 224, 224)), ("gpu_name", "NVIDIA L4"), ("trt_version", "10.4.0"),
                         ("workspace_mb", 512)]:
        assert engine_cache_key(**{**base, field: other}) != key, field  # type: ignore[arg-type]


def test_tensorrt_versions_the_backend_cannot_drive_are_refused() -> None:
    check_tensorrt_version("10.3.0", "int8")
    check_tensorrt_version("11.4.1", "fp32")
    with pytest.raises(BackendUnavailableError, match=r"tensorrt>=10,<11"):
        check_tensorrt_version("11.4.1", "fp16")
    with pytest.raises(BackendUnavailableError, match="too old"):
        check_tensorrt_version("8.6.1", "fp32")


@pytest.mark.parametrize("precision", ["fp32", "fp16", "int8"])
@pytest.mark.tensorrt
@needs_trt
def test_engine_is_built_cached_and_reused(precision: str, tiny_arch: Arch, tmp_path: Path) -> None:
    import tensorrt

    if precision != "fp32" and int(tensorrt.__version__.split(".")[0]) >= 11:
        pytest.skip("TensorRT 11 builds fp32 engines only")
    est = TensorRTBackend(TINY_SHAPE, precision=precision, cache_dir=tmp_path, measure=FAST,
                          calibration_samples=16, slot_dir=tmp_path / "slots")
    first = est.measure(tiny_arch)
    second = est.measure(tiny_arch)
    assert first.extra["engine_cached"] is False and second.extra["engine_cached"] is True
    assert Path(first.extra["engine_path"]).exists() and first.environment["tensorrt"]
    assert first.latency_ms > 0 and second.latency_ms > 0


@pytest.mark.tensorrt
@needs_trt
def test_parser_errors_become_engine_build_errors(tiny_arch: Arch, tmp_path: Path) -> None:
    est = TensorRTBackend(TINY_SHAPE, cache_dir=tmp_path)
    with pytest.raises(EngineBuildError, match="parser"):
        est.build_engine(b"not an onnx model", TINY_SHAPE)
    good = export_onnx(build_eval_net(tiny_arch), TINY_SHAPE)
    assert len(est.build_engine(good, TINY_SHAPE)) > 0
