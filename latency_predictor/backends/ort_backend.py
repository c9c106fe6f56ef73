"""ONNX Runtime backend: the default everywhere.

The network is exported to ONNX in memory (TorchScript exporter, opset 17) and run by an
``InferenceSession`` with explicit thread counts (1 intra-op and 1 inter-op thread by default:
the figure then does not depend on how many cores the machine happens to have free).

Providers: ``cpu`` (``CPUExecutionProvider``), ``cuda`` and ``tensorrt`` (the CUDA and TensorRT
execution providers of the ``onnxruntime-gpu`` build). ONNX Runtime silently falls back to the
CPU when a GPU provider cannot load; this backend checks the providers the session actually got
(``session.get_providers()``) and raises :class:`BackendUnavailableError` instead. On GPU
providers input and output stay on the device (I/O binding), so host copies are not timed.
"""

from __future__ import annotations

import hashlib
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from torch import nn

try:
    import onnxruntime as ort
    from onnxruntime.capi import onnxruntime_pybind11_state as ort_state
except ImportError as _missing:  # neither build installed: say which extra brings one
    raise ImportError(
        "LatNAS needs ONNX Runtime and none is installed: install exactly one build, "
        "pip install 'latnas[cpu]' (onnxruntime) or 'latnas[gpu]' (onnxruntime-gpu); "
        "from a checkout: bash scripts/install.sh [--gpu]"
    ) from _missing

from latency_predictor.backends.base import MeasuredBackend, Prepared, check_choice, check_positive_int
from latency_predictor.breakdown import Breakdown, parse_ort_profile
from latency_predictor.environment import cpu_model, package_version, usable_cpus
from latency_predictor.errors import BackendUnavailableError, ConfigError, InvalidModelError, MeasurementError
from latency_predictor.export import (
    DEFAULT_INPUT_SHAPE,
    DEFAULT_OPSET,
    INPUT_NAME,
    OUTPUT_NAME,
    export_onnx,
    sample_input,
)
from latency_predictor.protocol import LatencyResult
from latency_predictor.timing import MeasureConfig
from search_spaces import Arch

PROVIDERS: dict[str, str] = {
    "cpu": "CPUExecutionProvider",
    "cuda": "CUDAExecutionProvider",
    "tensorrt": "TensorrtExecutionProvider",
}
GRAPH_OPTIMIZATION: dict[str, ort.GraphOptimizationLevel] = {
    "disable": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
    "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
    "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
    "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
}
ORT_ERRORS: tuple[type[BaseException], ...] = (
    RuntimeError, ort_state.Fail, ort_state.InvalidArgument, ort_state.InvalidGraph, ort_state.RuntimeException,
    ort_state.EPFail, ort_state.NotImplemented, ort_state.EngineError, ort_state.InvalidProtobuf,
)
GPU_FIX = "install the GPU build of ONNX Runtime: `bash scripts/install.sh --gpu` (onnxruntime-gpu)"


class OnnxRuntimeBackend(MeasuredBackend):
    """Measures networks with ONNX Runtime.

    Args:
        input_shape: deployment shape ``(N, C, H, W)``.
        provider: ``cpu``, ``cuda`` or ``tensorrt``.
        precision: ``fp32``; ``fp16`` only with the ``tensorrt`` provider (its FP16 mode).
        intra_op_threads: threads inside one operator.
        inter_op_threads: threads running independent operators.
        device_id: GPU index for the ``cuda`` and ``tensorrt`` providers.
        opset: ONNX opset of the export.
        graph_optimization: ``disable``, ``basic``, ``extended`` or ``all`` (ONNX Runtime's levels).
        measure: protocol settings (:class:`MeasureConfig` or a mapping of its fields).
        slot: take the device's measurement slot while timing.
        slot_dir: directory of the slot lock files.
        num_classes: classifier width of the built network.
        keep_samples: keep the per-run times in ``extra["samples_ms"]``.

    Raises:
        ConfigError: an unknown provider, precision or level, or invalid counts or shape.
        BackendUnavailableError: the provider is not in this ONNX Runtime build.
    """

    name = "onnxruntime"
    runtime_errors = ORT_ERRORS

    def __init__(
        self,
        input_shape: Sequence[int] = DEFAULT_INPUT_SHAPE,
        *,
        provider: str = "cpu",
        precision: str = "fp32",
        intra_op_threads: int = 1,
        inter_op_threads: int = 1,
        device_id: int = 0,
        opset: int = DEFAULT_OPSET,
        graph_optimization: str = "all",
        measure: MeasureConfig | Mapping[str, Any] | None = None,
        slot: bool = True,
        slot_dir: str | Path | None = None,
        num_classes: int = 1000,
        keep_samples: bool = False,
    ) -> None:
        self.provider = check_choice("provider", provider, list(PROVIDERS))
        check_choice("precision", precision, ["fp32", "fp16"])
        if precision == "fp16" and provider != "tensorrt":
            raise ConfigError(
                "precision 'fp16' with ONNX Runtime needs provider='tensorrt'; for fp16 on CUDA use the "
                "torch or tensorrt backend"
            )
        self.intra_op_threads = check_positive_int("intra_op_threads", intra_op_threads)
        self.inter_op_threads = check_positive_int("inter_op_threads", inter_op_threads)
        if isinstance(device_id, bool) or not isinstance(device_id, int) or device_id < 0:
            raise ConfigError(f"device_id must be an integer >= 0, got {device_id!r}")
        self.device_id = device_id
        self.opset = check_positive_int("opset", opset)
        self.graph_optimization = check_choice("graph_optimization", graph_optimization, list(GRAPH_OPTIMIZATION))
        device = "cpu" if provider == "cpu" else f"cuda:{device_id}"
        super().__init__(input_shape, precision, device, measure, slot, slot_dir, num_classes, keep_samples)
        available = ort.get_available_providers()
        if PROVIDERS[provider] not in available:
            raise BackendUnavailableError(
                f"provider {provider!r} ({PROVIDERS[provider]}) is not in this ONNX Runtime build "
                f"(available: {available}); {GPU_FIX}"
            )

    def session_options(self, profile_prefix: str | None = None) -> ort.SessionOptions:
        """The session settings: explicit thread counts, sequential execution, optimisation level."""
        so = ort.SessionOptions()
        so.intra_op_num_threads = self.intra_op_threads
        so.inter_op_num_threads = self.inter_op_threads
        so.execution_mode = (
            ort.ExecutionMode.ORT_PARALLEL if self.inter_op_threads > 1 else ort.ExecutionMode.ORT_SEQUENTIAL
        )
        so.graph_optimization_level = GRAPH_OPTIMIZATION[self.graph_optimization]
        so.log_severity_level = 3
        if profile_prefix is not None:
            so.enable_profiling = True
            so.profile_file_prefix = profile_prefix
        return so

    def _providers(self) -> list[Any]:
        if self.provider == "cpu":
            return [PROVIDERS["cpu"]]
        opts: dict[str, Any] = {"device_id": self.device_id}
        if self.provider == "tensorrt":
            opts["trt_fp16_enable"] = self.precision == "fp16"
        return [(PROVIDERS[self.provider], opts), PROVIDERS["cpu"]]

    def create_session(self, model: bytes, profile_prefix: str | None = None) -> ort.InferenceSession:
        """An inference session on the requested provider, checked to really run there.

        Raises:
            MeasurementError: ONNX Runtime rejected the model.
            BackendUnavailableError: the session fell back from the requested provider.
        """
        try:
            sess = ort.InferenceSession(model, self.session_options(profile_prefix), providers=self._providers())
        except ORT_ERRORS as err:
            raise MeasurementError(f"onnxruntime could not create a session: {err}") from err
        self._check_providers(sess)
        return sess

    def _check_providers(self, sess: ort.InferenceSession) -> None:
        got = sess.get_providers()
        if not got or got[0] != PROVIDERS[self.provider]:
            raise BackendUnavailableError(
                f"requested {PROVIDERS[self.provider]} but the session runs on {got} (ONNX Runtime fell back: "
                f"the GPU, CUDA or cuDNN/TensorRT libraries are missing); {GPU_FIX} on a machine with an "
                "NVIDIA GPU and matching CUDA libraries"
            )

    def _prepare(self, arch: Arch, net: nn.Module, input_shape: tuple[int, ...]) -> Prepared:
        t0 = time.perf_counter()
        model = export_onnx(net, input_shape, self.opset)
        t1 = time.perf_counter()
        sess = self.create_session(model)
        t2 = time.perf_counter()
        prepared = self._ready(sess, INPUT_NAME, OUTPUT_NAME, input_shape)
        prepared.stage_s.update(export_s=t1 - t0, session_s=t2 - t1)
        prepared.extra.update(onnx_bytes=len(model), opset=self.opset)
        return prepared

    def _ready(self, sess: ort.InferenceSession, input_name: str, output_name: str,
               input_shape: tuple[int, ...]) -> Prepared:
        """A session bound to a sample input of ``input_shape``, run once."""
        x = sample_input(input_shape).numpy()
        if self.provider == "cpu":
            feed = {input_name: x}

            def run_once() -> object:
                return sess.run(None, feed)
        else:
            binding = sess.io_binding()
            binding.bind_ortvalue_input(input_name, ort.OrtValue.ortvalue_from_numpy(x, "cuda", self.device_id))
            binding.bind_output(output_name, "cuda", self.device_id)

            def run_once() -> object:
                sess.run_with_iobinding(binding)
                return None
        try:
            run_once()
        except ORT_ERRORS as err:
            raise MeasurementError(f"onnxruntime: the prepared network failed to run: {err}") from err
        return Prepared(
            run_once=run_once, extra={"providers": sess.get_providers()},
            cpu_threads=min(self.intra_op_threads, usable_cpus()) if self.provider == "cpu" else None,
        )

    def measure_onnx(self, model: bytes, name: str | None = None) -> LatencyResult:
        """Measure an ONNX model as it is, with this estimator's settings and protocol.

        The model must take one float32 input of exactly :attr:`input_shape` (static shape) and is
        timed at that shape only, so ``throughput_batch_sizes`` may list only its batch size.
        ONNX Runtime parses the bytes; nothing else reads them.

        Args:
            model: the serialised ONNX model.
            name: what the record is of (default ``onnx-<first 16 hex digits of its SHA-256>``).

        Raises:
            InvalidModelError: ONNX Runtime cannot read the model, or it takes another input.
            ConfigError: throughput batch sizes other than the model's own.
            MeasurementError: running the model failed or gave an invalid time.
        """
        batch = self.input_shape[0]
        if tuple(self.measure_config.throughput_batch_sizes) != (batch,):
            raise ConfigError(
                f"an ONNX model is timed at its own batch size {batch} only: throughput_batch_sizes must be "
                f"[{batch}], got {list(self.measure_config.throughput_batch_sizes)}"
            )
        t0 = time.perf_counter()
        try:
            sess = ort.InferenceSession(model, self.session_options(), providers=self._providers())
        except ORT_ERRORS as err:
            raise InvalidModelError(f"not a valid ONNX model: onnxruntime could not read it: {err}") from err
        session_s = time.perf_counter() - t0
        self._check_providers(sess)
        inputs, outputs = sess.get_inputs(), sess.get_outputs()
        if len(inputs) != 1 or not outputs:
            raise InvalidModelError(f"the ONNX model must take exactly one input, it takes {len(inputs)}")
        shape, dtype = inputs[0].shape, inputs[0].type
        if list(shape) != list(self.input_shape) or dtype != "tensor(float)":
            raise InvalidModelError(
                f"the ONNX model takes {dtype} of shape {shape}; the settings say tensor(float) of shape "
                f"{list(self.input_shape)} (static dimensions)"
            )
        with self._run_scope():
            prepared = self._ready(sess, inputs[0].name, outputs[0].name, self.input_shape)
        prepared.extra["onnx_bytes"] = len(model)
        label = name or "onnx-" + hashlib.sha256(model).hexdigest()[:16]
        return self.measure_prepared(label, {batch: prepared}, {"session_s": session_s})

    def _backend_environment(self) -> dict[str, str]:
        env = {
            "onnxruntime": ort.__version__,
            "onnx": package_version("onnx"),
            "provider": PROVIDERS[self.provider],
            "intra_op_threads": str(self.intra_op_threads),
            "inter_op_threads": str(self.inter_op_threads),
            "graph_optimization": self.graph_optimization,
        }
        env["device_name"] = cpu_model() if self.provider == "cpu" else _gpu_name(self.device_id)
        return env

    def run(self, net: nn.Module, x: np.ndarray) -> np.ndarray:
        """Export ``net`` at ``x.shape``, run it once on ``x`` in a session of this estimator, return the logits.

        Checks the exported graph against PyTorch on the same weights; not timed.
        """
        sess = self.create_session(export_onnx(net, x.shape, self.opset))
        try:
            out = sess.run([OUTPUT_NAME], {INPUT_NAME: x})[0]
        except ORT_ERRORS as err:
            raise MeasurementError(f"onnxruntime: the network failed to run: {err}") from err
        return np.asarray(out)

    def breakdown(self, arch: Arch, runs: int = 50, warmup_runs: int = 10) -> Breakdown:
        """Per-block times of ``arch`` from ONNX Runtime's profiler, with this estimator's settings.

        Args:
            arch: the network.
            runs: profiled inferences.
            warmup_runs: inferences run first and left out of the figures.
        """
        check_positive_int("runs", runs)
        net = self.build_net(arch)
        model = export_onnx(net, self.input_shape, self.opset)
        x = sample_input(self.input_shape).numpy()
        with tempfile.TemporaryDirectory(prefix="latnas-ort-profile-") as tmp:
            sess = self.create_session(model, profile_prefix=str(Path(tmp) / "profile"))
            with self.held_slot():
                try:
                    for _ in range(warmup_runs + runs):
                        sess.run(None, {INPUT_NAME: x})
                except ORT_ERRORS as err:
                    raise MeasurementError(f"onnxruntime: profiling run failed: {err}") from err
            path = sess.end_profiling()
            return parse_ort_profile(path, arch.encode(), runs, skip_runs=warmup_runs)


def _gpu_name(device_id: int) -> str:
    import torch

    if torch.cuda.is_available() and device_id < torch.cuda.device_count():
        return torch.cuda.get_device_name(device_id)
    return f"cuda:{device_id} (name unavailable: this torch build sees no CUDA device)"
