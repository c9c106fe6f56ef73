"""One contract, run against every backend this machine can give (real runtimes, no mocks).

GPU variants carry the ``gpu`` marker, TensorRT's the ``tensorrt`` marker too; each skips itself
where its runtime is missing.
"""

from __future__ import annotations

import copy
import dataclasses
import importlib.util
import sys
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import pytest
import torch
from torch import nn

from latency_predictor import (
    BackendUnavailableError,
    ConfigError,
    ExportError,
    LatencyEstimator,
    LatencyResult,
    MeasurementError,
)
from latency_predictor.measurement.backends import (
    BACKENDS,
    OnnxRuntimeBackend,
    TorchBackend,
    backend_options,
    make_estimator,
)
from latency_predictor.measurement.backends.ort_backend import PROVIDERS
from latency_predictor.measurement.environment import usable_cpus
from latency_predictor.measurement.export import build_eval_net, export_onnx, sample_input
from search_spaces import Arch
from tests.latency_predictor.conftest import FAST, TINY_SHAPE

HAS_CUDA = torch.cuda.is_available()
HAS_TRT = importlib.util.find_spec("tensorrt") is not None
TRT_MAJOR = int(importlib.import_module("tensorrt").__version__.split(".")[0]) if HAS_TRT else 0
ORT_GPU = set(ort.get_available_providers())
needs_cuda = pytest.mark.skipif(not HAS_CUDA, reason="no CUDA device")
HAS_OPENVINO = importlib.util.find_spec("openvino") is not None
HAS_NNCF = importlib.util.find_spec("nncf") is not None
needs_openvino = pytest.mark.skipif(not HAS_OPENVINO, reason="OpenVINO not installed: pip install 'latnas[openvino]'")
HAS_LITERT = all(importlib.util.find_spec(m) is not None for m in ("ai_edge_litert", "litert_torch"))
needs_litert = pytest.mark.skipif(not HAS_LITERT, reason="LiteRT not installed: pip install 'latnas[litert]'")

CASES = [
    pytest.param("onnxruntime", {}, id="onnxruntime-cpu"),
    pytest.param("torch", {}, id="torch-cpu"),
    pytest.param("torch", {"precision": "bf16"}, id="torch-cpu-bf16"),
    pytest.param("openvino", {}, id="openvino-cpu", marks=[needs_openvino]),
    pytest.param("openvino", {"precision": "int8"}, id="openvino-cpu-int8", marks=[
        needs_openvino, pytest.mark.skipif(not HAS_NNCF, reason="NNCF not installed: pip install 'latnas[openvino]'")]),
    pytest.param("litert", {}, id="litert-cpu", marks=[needs_litert]),
    pytest.param("litert", {"precision": "int8"}, id="litert-cpu-int8", marks=[needs_litert]),
    pytest.param("onnxruntime", {"provider": "cuda"}, id="onnxruntime-cuda", marks=[
        pytest.mark.gpu, needs_cuda,
        pytest.mark.skipif("CUDAExecutionProvider" not in ORT_GPU, reason="onnxruntime-gpu not installed")]),
    *[pytest.param("onnxruntime", {"provider": "tensorrt", "precision": p}, id=f"onnxruntime-tensorrt-{p}", marks=[
        pytest.mark.tensorrt, pytest.mark.gpu, needs_cuda,
        pytest.mark.skipif(not HAS_TRT, reason="TensorRT not installed"),
        pytest.mark.skipif("TensorrtExecutionProvider" not in ORT_GPU, reason="onnxruntime-gpu not installed")])
      for p in ("fp32", "fp16")],
    pytest.param("torch", {"device": "cuda:0"}, id="torch-cuda", marks=[pytest.mark.gpu, needs_cuda]),
    pytest.param("torch", {"device": "cuda:0", "precision": "fp16"}, id="torch-cuda-fp16",
                 marks=[pytest.mark.gpu, needs_cuda]),
    pytest.param("torch", {"device": "cuda:0", "cuda_graphs": True}, id="torch-cuda-graphs",
                 marks=[pytest.mark.gpu, needs_cuda]),
    *[pytest.param("tensorrt", {"precision": p}, id=f"tensorrt-{p}", marks=[
        pytest.mark.tensorrt, pytest.mark.gpu, needs_cuda,
        pytest.mark.skipif(not HAS_TRT, reason="TensorRT not installed"),
        pytest.mark.skipif(p != "fp32" and TRT_MAJOR >= 11, reason="TensorRT 11 builds fp32 engines only")])
      for p in ("fp32", "fp16", "int8")],
]


def _make(backend: str, opts: dict[str, Any], slot_dir: Path, tmp_path: Path) -> LatencyEstimator:
    if backend == "tensorrt":
        opts = {**opts, "cache_dir": tmp_path / "engines", "calibration_samples": 16}
    if opts.get("provider") == "tensorrt" or backend == "openvino":
        opts = {**opts, "cache_dir": tmp_path / "engines"}
    measure = dataclasses.replace(FAST, throughput_batch_sizes=(1, 2))
    return make_estimator(backend, input_shape=TINY_SHAPE, measure=measure, slot_dir=slot_dir, **opts)


@pytest.mark.parametrize(("backend", "opts"), CASES)
def test_contract(backend: str, opts: dict[str, Any], tiny_arch: Arch, slot_dir: Path, tmp_path: Path) -> None:
    est = _make(backend, opts, slot_dir, tmp_path)
    assert isinstance(est, LatencyEstimator)
    assert est.name == backend and est.input_shape == TINY_SHAPE
    r = est.measure(tiny_arch)
    assert r.arch == tiny_arch.encode() and r.backend == backend and r.source == "measured"
    assert r.input_shape == TINY_SHAPE and r.precision == opts.get("precision", "fp32")
    assert r.device == ("cpu" if backend != "tensorrt" and opts.get("device", "cpu") == "cpu"
                        and opts.get("provider", "cpu") == "cpu" else "cuda:0")
    s = r.stats
    assert s.n >= FAST.min_runs and 0 < s.min <= s.p50 <= s.p90 <= s.p95 <= s.p99
    assert s.min <= s.mean and s.std >= 0 and s.cv >= 0 and s.iqr_rel >= 0
    assert r.latency_ms == s.p50 and 1 <= r.attempts <= FAST.max_repeats
    assert len(r.extra["attempt_iqr_rel"]) == len(r.extra["attempt_cpu_share"]) == r.attempts
    if r.stable:  # settled: steady runs, and (CPU runtimes) the process had the CPU
        assert s.iqr_rel <= FAST.stability_threshold
        assert all(v is None for v in r.extra["attempt_cpu_share"]) or r.extra["cpu_per_wall"] >= FAST.min_cpu_share
    assert set(r.throughput) == {1, 2} and all(v > 0 for v in r.throughput.values())
    env = r.environment
    for key in ("device_name", "cpu_model", "torch", "python", "cpus_usable"):
        assert env[key], key
    assert r.extra["slot_wait_s"] is not None and r.extra["build_s"] >= 0 and r.extra["measure_s"] > 0
    assert r.extra["slot_held_for"] == ("timing" if r.device == "cpu" else "preparation and timing")
    if backend == "onnxruntime" and r.device != "cpu":  # on the provider asked for, and nothing on the CPU
        assert r.extra["providers"][0] == PROVIDERS[opts["provider"]] and env["cpu_fallback"] == "disabled"
    assert LatencyResult.from_dict(r.to_dict()) == r


@pytest.mark.parametrize("backend", sorted(BACKENDS))
@pytest.mark.parametrize(
    "shape", [(1, 0, 32, 32), (3, 32, 32), (1, 3, 0, 32), (1, 3, -4, 32), (1, 3, 32, 32, 1), (1, 3, 32.0, 32)]
)
def test_bad_input_shape_is_a_config_error_before_any_work(backend: str, shape: tuple[Any, ...]) -> None:
    with pytest.raises(ConfigError, match="input_shape"):
        make_estimator(backend, input_shape=shape)


def test_a_network_of_one_input_channel_is_timed_at_its_shape(tiny_arch: Arch, slot_dir: Path) -> None:
    # A spectrogram or a grey image: the network is built for the shape's channels.
    est = make_estimator("onnxruntime", input_shape=(1, 1, 32, 32), measure=FAST, slot_dir=slot_dir)
    r = est.measure(tiny_arch)
    assert r.input_shape == (1, 1, 32, 32) and r.latency_ms > 0


def test_unknown_backend_and_option() -> None:
    with pytest.raises(ConfigError, match=r"known: \['litert', 'onnxruntime', 'openvino', 'tensorrt', 'torch'\]"):
        make_estimator("tflite")
    with pytest.raises(ConfigError, match=r"does not take option.*intra_op_threads"):
        make_estimator("torch", intra_op_threads=2)
    assert "intra_op_threads" in backend_options("onnxruntime")


@pytest.mark.skipif("CUDAExecutionProvider" in ORT_GPU and HAS_CUDA, reason="this machine has CUDA")
def test_cuda_provider_on_a_cpu_machine_names_the_fix() -> None:
    with pytest.raises(BackendUnavailableError, match=r"install\.sh --gpu"):
        make_estimator("onnxruntime", provider="cuda")


@pytest.mark.skipif(HAS_CUDA, reason="this machine has CUDA")
def test_torch_cuda_on_a_cpu_machine_is_unavailable() -> None:
    with pytest.raises(BackendUnavailableError, match="CUDA"):
        make_estimator("torch", device="cuda:0")


@pytest.mark.parametrize(
    ("backend", "opts", "match"),
    [("torch", {"precision": "fp16"}, "fp16.*CUDA only"), ("torch", {"cuda_graphs": True}, "cuda_graphs"),
     ("torch", {"device": "gpu"}, "device"), ("torch", {"threads": 0}, "threads"),
     ("onnxruntime", {"precision": "fp16"}, "fp16"), ("onnxruntime", {"provider": "rocm"}, "provider"),
     ("onnxruntime", {"intra_op_threads": 0}, "intra_op_threads"), ("tensorrt", {"device": "cpu"}, "GPU"),
     ("tensorrt", {"precision": "int4"}, "precision"), ("onnxruntime", {"measure": {"min_runs": 0}}, "min_runs")],
)
def test_impossible_settings_are_config_errors(backend: str, opts: dict[str, Any], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        make_estimator(backend, **opts)


def test_onnxruntime_output_equals_torch(tiny_arch: Arch) -> None:
    net = build_eval_net(tiny_arch)
    x = sample_input(TINY_SHAPE)
    with torch.no_grad():
        expected = net(x).numpy()
    got = OnnxRuntimeBackend(TINY_SHAPE).run(net, x.numpy())
    assert got.shape == (1, 1000)
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)


def test_thread_counts_are_recorded_and_restored(tiny_arch: Arch, slot_dir: Path) -> None:
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        r = TorchBackend(TINY_SHAPE, threads=1, measure=FAST, slot_dir=slot_dir).measure(tiny_arch)
        assert r.environment["torch_threads"] == "1" and torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
    r = OnnxRuntimeBackend(TINY_SHAPE, intra_op_threads=2, measure=FAST, slot_dir=slot_dir).measure(tiny_arch)
    assert r.environment["intra_op_threads"] == "2" and r.environment["inter_op_threads"] == "1"
    assert r.extra["providers"] == ["CPUExecutionProvider"]
    assert r.extra["export_s"] > 0 and r.extra["session_s"] > 0


@pytest.mark.parametrize("backend", ["onnxruntime", "torch"])
def test_breakdown_covers_the_blocks(backend: str, tiny_arch: Arch, slot_dir: Path) -> None:
    est = make_estimator(backend, input_shape=TINY_SHAPE, slot_dir=slot_dir)
    bd = est.breakdown(tiny_arch, runs=10, warmup_runs=2)
    names = [b.block for b in bd.blocks]
    expected = ["stem", *[f"blocks.{i}" for i in range(tiny_arch.depth)], "head", "pool", "classifier"]
    assert names[: len(expected)] == expected and set(names) <= {*expected, "other"}
    assert sum(b.share for b in bd.blocks) == pytest.approx(1.0)
    assert all(b.ms >= 0 for b in bd.blocks) and bd.total_ms == pytest.approx(sum(b.ms for b in bd.blocks))
    assert bd.runs == 10 and "blocks.1" in bd.format_table()


@needs_openvino
def test_openvino_output_equals_torch(tiny_arch: Arch, tmp_path: Path) -> None:
    net = build_eval_net(tiny_arch)
    x = sample_input(TINY_SHAPE)
    with torch.no_grad():
        expected = net(x).numpy()
    got = make_estimator("openvino", input_shape=TINY_SHAPE, cache_dir=tmp_path).run(net, x.numpy())
    assert got.shape == (1, 1000)
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)


_TWO_BACKENDS = """
import gc, os, signal, sys
from latency_predictor.measurement.backends import make_estimator
from latency_predictor.measurement.export import build_eval_net, sample_input
from search_spaces import Arch
net = build_eval_net(Arch.decode(sys.argv[1]))
x = sample_input((1, 3, 16, 16)).numpy()
first = make_estimator("openvino", input_shape=(1, 3, 16, 16), cache_dir=sys.argv[2])
first.run(net, x)
second = make_estimator("openvino", input_shape=(1, 3, 16, 16), cache_dir=sys.argv[2])
second.run(net, x)
del first  # the backends go in the order they came
gc.collect()
del second
gc.collect()
signal.signal(signal.SIGUSR1, lambda *_: print("handled", flush=True))
os.kill(os.getpid(), signal.SIGUSR1)
"""


@needs_openvino
def test_openvino_backends_that_go_in_the_order_they_came_leave_the_process_able_to_handle_signals(
        tiny_arch: Arch, tmp_path: Path) -> None:
    # OpenVINO's CPU plugin swaps its own signal stack in while a Core compiles and puts back what it found
    # when the Core goes: one Core per backend left a freed stack installed, and the next handled signal
    # (here SIGUSR1; in a test run, whatever signal came next) ended the process with SIGSEGV.
    import subprocess

    root = Path(__file__).resolve().parents[2]
    proc = subprocess.run([sys.executable, "-c", _TWO_BACKENDS, tiny_arch.encode(), str(tmp_path)], cwd=root,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and proc.stdout.strip().endswith("handled"), (proc.returncode, proc.stderr[-2000:])


@needs_openvino
def test_openvino_states_its_latency_settings_and_caches_by_digest(tiny_arch: Arch, slot_dir: Path,
                                                                    tmp_path: Path) -> None:
    cache = tmp_path / "compiled"
    est = make_estimator("openvino", input_shape=TINY_SHAPE, measure=FAST, slot_dir=slot_dir, cache_dir=cache)
    torch.manual_seed(0)
    r = est.measure(tiny_arch)
    env = r.environment
    assert (env["performance_hint"], env["num_streams"], env["intra_op_threads"]) == ("LATENCY", "1", "1")
    assert env["inference_precision"] == "f32" and r.extra["runtime_precision"].endswith("f32")
    first = sorted(p.name for p in cache.iterdir())
    assert len(first) == 1 and any((cache / first[0]).iterdir())  # one folder per model digest, holding a blob
    torch.manual_seed(0)
    est.measure(tiny_arch)  # the same network, the same weights: the same folder
    assert sorted(p.name for p in cache.iterdir()) == first
    torch.manual_seed(1)
    est.measure(tiny_arch)  # other weights: another digest
    assert len(list(cache.iterdir())) == 2


@needs_openvino
def test_openvino_precision_the_cpu_cannot_run_is_unavailable() -> None:
    import openvino

    from latency_predictor.measurement.backends.openvino_backend import shared_core

    runs = set(shared_core(openvino).get_property("CPU", "OPTIMIZATION_CAPABILITIES"))
    missing = [p for p, cap in (("fp16", "FP16"), ("bf16", "BF16")) if cap not in runs]
    if not missing:
        pytest.skip(f"this CPU runs every precision OpenVINO offers ({sorted(runs)})")
    with pytest.raises(BackendUnavailableError, match=rf"precision '{missing[0]}'.*use precision='fp32'"):
        make_estimator("openvino", precision=missing[0])


def test_openvino_not_installed_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "openvino", None)  # what `import openvino` meets where it is not installed
    with pytest.raises(BackendUnavailableError, match=r"pip install 'latnas\[openvino\]'"):
        make_estimator("openvino")


@needs_litert
def test_litert_output_equals_torch_and_int8_is_full_integer(tiny_arch: Arch) -> None:
    torch.manual_seed(0)  # int8's error is judged against the logits of one fixed network
    net = build_eval_net(tiny_arch)
    x = sample_input(TINY_SHAPE)
    with torch.no_grad():
        expected = net(x).numpy()
    got = make_estimator("litert", input_shape=TINY_SHAPE).run(net, x.numpy())
    assert got.shape == (1, 1000)
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)
    int8 = make_estimator("litert", input_shape=TINY_SHAPE, precision="int8")
    model = int8.convert(net, TINY_SHAPE)
    interp = int8.interpreter(model)
    assert interp.get_input_details()[0]["dtype"] == np.int8 and interp.get_output_details()[0]["dtype"] == np.int8
    got8 = int8.run_model(model, x.numpy())  # within a few quantisation steps of the float logits
    assert np.abs(got8 - expected).max() <= 0.1 * np.abs(expected).max()
    assert np.corrcoef(got8.ravel(), expected.ravel())[0, 1] > 0.99


@needs_litert
def test_litert_converts_a_network_once_and_again_once_its_weights_change(tiny_arch: Arch) -> None:
    # Converting takes seconds to tens of seconds a network: a second timing of the same network reuses the first
    # conversion, and a network whose weights changed (trained since) is never served the old one.
    torch.manual_seed(0)
    est = make_estimator("litert", input_shape=TINY_SHAPE)
    net = build_eval_net(tiny_arch)
    first = est.convert(net, TINY_SHAPE)
    assert est.convert(copy.deepcopy(net).to(memory_format=torch.channels_last), TINY_SHAPE) is first
    with torch.no_grad():
        next(iter(net.parameters())).mul_(-2.0)
        x = sample_input(TINY_SHAPE)
        expected = net(x).numpy()
    again = est.convert(net, TINY_SHAPE)
    assert again is not first and again != first
    np.testing.assert_allclose(est.run_model(again, x.numpy()), expected, rtol=1e-4, atol=1e-5)
    assert make_estimator("litert", input_shape=TINY_SHAPE, precision="int8").convert(net, TINY_SHAPE) != again


class _DataDependent(nn.Module):
    """A network whose output shape depends on its input's values: torch.export refuses it."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.flatten()[: int((x > 0).sum())]


@needs_litert
def test_litert_converts_a_network_trained_channels_last_to_the_same_outputs(tiny_arch: Arch) -> None:
    # A network trained on the CPU channels-last keeps its weights in that layout; the converter read them as
    # contiguous and the model.tflite of such a network disagreed with PyTorch by half its largest logit.
    torch.manual_seed(0)
    net = build_eval_net(tiny_arch)
    for m in net.modules():  # BatchNorm statistics of a trained network, not the identity of a fresh one
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.uniform_(-1, 1)
            m.running_var.uniform_(0.5, 2.0)
    net = net.to(memory_format=torch.channels_last)
    x = sample_input(TINY_SHAPE)
    with torch.no_grad():
        expected = net(x).numpy()
    got = make_estimator("litert", input_shape=TINY_SHAPE).run(net, x.numpy())
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)
    assert any(not p.is_contiguous() for p in net.parameters())  # the caller's network is left as it was given


@needs_litert
def test_litert_a_network_the_converter_rejects_is_an_export_error_with_its_reason(tiny_arch: Arch,
                                                                                  slot_dir: Path) -> None:
    est = make_estimator("litert", input_shape=TINY_SHAPE, measure=FAST, slot_dir=slot_dir)
    with pytest.raises(ExportError, match=r"^LiteRT's converter \(litert-torch\) rejected the network: \w+: \S") as err:
        est.measure(tiny_arch, net=_DataDependent().eval())
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("backend", ["openvino", "litert"])
def test_threads_above_the_cores_is_one_clear_line(backend: str) -> None:
    cpus = usable_cpus()
    with pytest.raises(ConfigError, match=rf"^intra_op_threads={cpus + 1} is more than the {cpus} CPU"):
        make_estimator(backend, intra_op_threads=cpus + 1)


@pytest.mark.parametrize("precision", ["fp16", "bf16"])
def test_litert_a_precision_it_cannot_run_is_refused(precision: str) -> None:
    with pytest.raises(ConfigError, match=rf"precision '{precision}' cannot run on LiteRT.*\['fp32', 'int8'\]"):
        make_estimator("litert", precision=precision)


@pytest.mark.parametrize("module", ["ai_edge_litert", "litert_torch"])
def test_litert_not_installed_names_the_extra(monkeypatch: pytest.MonkeyPatch, module: str) -> None:
    monkeypatch.setitem(sys.modules, module, None)  # what `import` meets where it is not installed
    with pytest.raises(BackendUnavailableError, match=r"pip install 'latnas\[litert\]'"):
        make_estimator("litert")


@needs_openvino
@pytest.mark.skipif(not HAS_NNCF, reason="NNCF not installed: pip install 'latnas[openvino]'")
def test_openvino_a_model_in_another_precision_than_asked_is_refused(tiny_arch: Arch, slot_dir: Path) -> None:
    fp32 = make_estimator("openvino", input_shape=TINY_SHAPE, measure=FAST, slot_dir=slot_dir)
    int8 = make_estimator("openvino", input_shape=TINY_SHAPE, measure=FAST, slot_dir=slot_dir, precision="int8")
    onnx = export_onnx(build_eval_net(tiny_arch), TINY_SHAPE)
    quantized = int8.quantize(int8.read(onnx), int8.calibration_images(TINY_SHAPE), 1)
    assert int8.measure_model(quantized, "int8").precision == "int8"
    with pytest.raises(MeasurementError, match=r"precision fp32 was requested but OpenVINO runs .* u8"):
        fp32.measure_model(quantized, "int8 timed as fp32")
