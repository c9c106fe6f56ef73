"""ONNX Runtime on a GPU provider runs every node on GPU providers or refuses (checked with real ONNX Runtime).

On a machine without a usable CUDA provider ONNX Runtime itself shows what the settings do: a
session asked for the CUDA provider would run on the CPU, and here it is refused instead.
"""

from __future__ import annotations

import ctypes
import importlib.util
import warnings
from pathlib import Path

import onnxruntime as ort
import pytest
import torch

from latency_predictor import BackendUnavailableError
from latency_predictor.measurement.backends.ort_backend import (
    NO_CPU_FALLBACK,
    NVINFER,
    PROVIDERS,
    execution_providers,
    open_session,
    ort_engine_cache_dir,
    require_tensorrt_library,
    without_cpu_fallback,
)
from latency_predictor.measurement.export import build_eval_net, export_onnx
from search_spaces import Arch
from tests.latency_predictor.conftest import TINY_SHAPE

CUDA_USABLE = "CUDAExecutionProvider" in ort.get_available_providers() and torch.cuda.is_available()


def _names(providers: list) -> list[str]:  # type: ignore[type-arg]
    return [p if isinstance(p, str) else p[0] for p in providers]


def test_gpu_providers_are_registered_without_the_cpu(tmp_path: Path) -> None:
    assert _names(execution_providers("cpu", 0, False, None)) == ["CPUExecutionProvider"]
    assert execution_providers("cuda", 1, False, None) == [("CUDAExecutionProvider", {"device_id": 1})]
    trt = execution_providers("tensorrt", 1, True, tmp_path)
    # TensorRT first, CUDA for the nodes TensorRT declines, never the CPU
    assert _names(trt) == ["TensorrtExecutionProvider", "CUDAExecutionProvider"]
    options = trt[0][1]  # type: ignore[index]
    assert options["device_id"] == 1 and options["trt_fp16_enable"] is True
    assert options["trt_engine_cache_enable"] is True and options["trt_engine_cache_path"] == str(tmp_path)


def test_tensorrt_provider_engine_caches_are_kept_apart_by_weights(tiny_arch: Arch, tmp_path: Path) -> None:
    torch.manual_seed(0)
    net = build_eval_net(tiny_arch, num_classes=10)
    other = build_eval_net(tiny_arch, num_classes=10)  # same architecture and names, other weights
    a, b = export_onnx(net, TINY_SHAPE), export_onnx(other, TINY_SHAPE)
    assert ort_engine_cache_dir(tmp_path, a) != ort_engine_cache_dir(tmp_path, b)
    assert ort_engine_cache_dir(tmp_path, a) == ort_engine_cache_dir(tmp_path, export_onnx(net, TINY_SHAPE))


@pytest.mark.skipif(CUDA_USABLE, reason="this machine's CUDA provider works: nothing would fall back")
@pytest.mark.parametrize("provider", ["cuda", "tensorrt"])
def test_a_gpu_session_that_would_run_on_the_cpu_is_refused(provider: str, tiny_arch: Arch, tmp_path: Path) -> None:
    model = export_onnx(build_eval_net(tiny_arch, num_classes=10), TINY_SHAPE)
    providers = execution_providers(provider, 0, False, tmp_path)
    options = without_cpu_fallback(ort.SessionOptions())
    assert options.get_session_config_entry(NO_CPU_FALLBACK) == "1"
    with warnings.catch_warnings():  # the CPU build of ONNX Runtime warns that it drops the provider
        warnings.simplefilter("ignore")
        with pytest.raises(BackendUnavailableError, match=rf"{PROVIDERS[provider]}.*CPU fallback disabled"):
            open_session(model, options, providers, provider)
        # Without the setting ONNX Runtime would have given a session, running on the CPU alone:
        quiet = ort.InferenceSession(model, ort.SessionOptions(), providers=providers)
    assert quiet.get_providers() == ["CPUExecutionProvider"]


def _nvinfer_loadable() -> bool:
    if importlib.util.find_spec("tensorrt") is not None:
        return True
    try:
        ctypes.CDLL(NVINFER)
    except OSError:
        return False
    return True


@pytest.mark.skipif(_nvinfer_loadable(), reason="TensorRT 10's library is loadable here")
def test_tensorrt_provider_without_tensorrt_library_names_the_extra() -> None:
    with pytest.raises(BackendUnavailableError, match=r"libnvinfer\.so\.10.*pip install 'latnas\[gpu,tensorrt\]'"):
        require_tensorrt_library()
