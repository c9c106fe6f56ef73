"""TensorRT backend: what runs everywhere (missing-dependency error, cache keys), and what needs TensorRT."""

from __future__ import annotations

import copy
import importlib.util
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from torch.fx.experimental.optimization import fuse as fuse_conv_bn

from latency_predictor import BackendUnavailableError, EngineBuildError, MeasurementError
from latency_predictor.measurement.backends.tensorrt_backend import (
    TensorRTBackend,
    bind_tensor,
    check_tensorrt_version,
    engine_cache_key,
    load_or_build_engine,
    sha256_hex,
)
from latency_predictor.measurement.export import build_eval_net, export_onnx
from search_spaces import Arch
from tests.latency_predictor.conftest import FAST, TINY, TINY_SHAPE

HAS_TRT = importlib.util.find_spec("tensorrt") is not None
needs_trt = pytest.mark.skipif(not HAS_TRT or not torch.cuda.is_available(), reason="needs TensorRT and a GPU")


@pytest.mark.skipif(HAS_TRT, reason="TensorRT is installed here")
def test_missing_tensorrt_names_the_extra() -> None:
    with pytest.raises(BackendUnavailableError, match=r"pip install 'latnas\[tensorrt\]'"):
        TensorRTBackend(TINY_SHAPE)


def test_engine_cache_key_changes_with_everything_the_engine_depends_on() -> None:
    base = dict(arch="act_relu-stem_c8-mb_k3_e1_c8_s1", precision="fp16", input_shape=(1, 3, 224, 224),
                gpu_name="NVIDIA H100", trt_version="10.3.0", workspace_mb=1024, onnx_sha256="ab" * 32)
    key = engine_cache_key(**base)  # type: ignore[arg-type]
    assert key == engine_cache_key(**base) and key.endswith(".engine")  # type: ignore[arg-type]
    assert "fp16" in key and "1x3x224x224" in key
    for field, other in [("arch", "act_relu-stem_c8-mb_k3_e1_c16_s1"), ("precision", "int8"),
                         ("input_shape", (8, 3, 224, 224)), ("gpu_name", "NVIDIA L4"), ("trt_version", "10.4.0"),
                         ("workspace_mb", 512), ("onnx_sha256", "cd" * 32), ("calibration_sha256", "ef" * 32)]:
        assert engine_cache_key(**{**base, field: other}) != key, field  # type: ignore[arg-type]


def _key(net: torch.nn.Module, arch: str) -> str:
    onnx_sha = sha256_hex(export_onnx(net, TINY_SHAPE))
    return engine_cache_key(arch, "fp16", TINY_SHAPE, "NVIDIA H100", "10.3.0", 1024, onnx_sha)


def test_networks_that_differ_only_in_their_weights_get_their_own_engines(tiny_arch: Arch) -> None:
    # What export measures: the network as built, then Conv+BN-fused; what a search measures
    # after training: the same architecture with other weights. None may reuse another's engine.
    torch.manual_seed(0)
    net = build_eval_net(tiny_arch, num_classes=10)
    trained = copy.deepcopy(net)
    with torch.no_grad():
        next(trained.parameters()).add_(0.5)
    fused = fuse_conv_bn(net)
    arch = tiny_arch.encode()
    keys = {_key(net, arch), _key(trained, arch), _key(fused, arch)}
    assert len(keys) == 3
    # and the same network exports to the same bytes, so its engine is found again
    assert _key(net, arch) == _key(copy.deepcopy(net), arch)


def test_engine_cache_builds_once_per_network_and_serves_it_again(tiny_arch: Arch, tmp_path: Path) -> None:
    built: list[bytes] = []

    def builder(onnx_model: bytes) -> Callable[[], bytes]:
        def build() -> bytes:  # stands in for TensorRT's builder: an "engine" derived from the model
            built.append(onnx_model)
            return sha256_hex(onnx_model).encode()
        return build

    net = build_eval_net(tiny_arch, num_classes=10)
    unfused, fused = export_onnx(net, TINY_SHAPE), export_onnx(fuse_conv_bn(net), TINY_SHAPE)
    path = {m: tmp_path / _key_of(m) for m in (unfused, fused)}
    first, cached = load_or_build_engine(path[unfused], builder(unfused))
    assert not cached and first == sha256_hex(unfused).encode()
    second, cached = load_or_build_engine(path[fused], builder(fused))
    assert not cached and second != first, "the fused network was served the unfused one's engine"
    again, cached = load_or_build_engine(path[unfused], builder(unfused))
    assert cached and again == first and built == [unfused, fused]
    assert not list(tmp_path.glob("*.tmp*"))


def _key_of(onnx_model: bytes) -> str:
    return engine_cache_key(TINY, "fp32", TINY_SHAPE, "NVIDIA H100", "10.3.0", 1024, sha256_hex(onnx_model))


def test_a_refused_tensor_address_is_an_error() -> None:
    class Context:  # the one call of TensorRT's IExecutionContext that bind_tensor makes
        def __init__(self, accept: bool) -> None:
            self.accept = accept

        def set_tensor_address(self, name: str, address: int) -> bool:
            return self.accept

    bind_tensor(Context(True), "input", 1024)
    with pytest.raises(MeasurementError, match="refused the device address of tensor 'input'"):
        bind_tensor(Context(False), "input", 0)


def test_tensorrt_versions_the_backend_cannot_drive_are_refused() -> None:
    check_tensorrt_version("10.3.0", "int8")
    check_tensorrt_version("11.4.1", "fp32")
    with pytest.raises(BackendUnavailableError, match=r"tensorrt>=10,<11"):
        check_tensorrt_version("11.4.1", "fp16")
    with pytest.raises(BackendUnavailableError, match="too old"):
        check_tensorrt_version("8.6.1", "fp32")


@pytest.mark.parametrize("precision", ["fp32", "fp16", "int8"])
@pytest.mark.tensorrt
@pytest.mark.gpu
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
@pytest.mark.gpu
@needs_trt
def test_parser_errors_become_engine_build_errors(tiny_arch: Arch, tmp_path: Path) -> None:
    est = TensorRTBackend(TINY_SHAPE, cache_dir=tmp_path)
    with pytest.raises(EngineBuildError, match="parser"):
        est.build_engine(b"not an onnx model", TINY_SHAPE)
    good = export_onnx(build_eval_net(tiny_arch), TINY_SHAPE)
    assert len(est.build_engine(good, TINY_SHAPE)) > 0
