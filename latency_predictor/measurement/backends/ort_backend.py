"""ONNX Runtime backend: the default everywhere.

The network is exported to ONNX in memory (TorchScript exporter, opset 17) and run by an
``InferenceSession`` with explicit thread counts (1 intra-op and 1 inter-op thread by default:
the figure then does not depend on how many cores the machine happens to have free).

Providers: ``cpu`` (``CPUExecutionProvider``), ``cuda`` and ``tensorrt`` (the CUDA and TensorRT
execution providers of the ``onnxruntime-gpu`` build). ONNX Runtime quietly runs on the CPU what
a GPU provider cannot: every node when the provider fails to load, single nodes it declines, and
(in its Python API) the whole session after a provider error at run time. A GPU figure with CPU
work in it is wrong, so on a GPU provider this backend

* registers only GPU providers: ``[CUDA]``, or ``[TensorRT, CUDA]`` so CUDA takes the nodes
  TensorRT declines (:func:`execution_providers`);
* sets ``session.disable_cpu_ep_fallback``: ONNX Runtime then refuses to create a session with
  any node on the CPU, and this backend raises :class:`BackendUnavailableError` with its reason;
* checks the providers the session got (``session.get_providers()``) and turns the Python API's
  run-time fallback off (``disable_fallback``);
* enables the TensorRT provider's engine cache in a folder per ONNX model hash (its own cache
  key hashes node and tensor names, not weights: two networks of one architecture would share
  an engine) (:func:`ort_engine_cache_dir`);
* makes the libraries loadable first (:func:`load_gpu_libraries`): cuDNN 9 and CUDA 12 through
  ``onnxruntime.preload_dlls`` where torch is a CPU build (a CUDA build of torch, imported first,
  has loaded them), and TensorRT 10's ``libnvinfer.so.10`` by importing ``tensorrt``;
* binds input and output to device memory (I/O binding, output buffer allocated once) and ends
  each run with ``synchronize_outputs``, so a run's time includes its device work and no copies.

Precision (:data:`PRECISIONS`): ``fp32`` everywhere; ``int8`` on the CPU provider, where the
exported network is quantised statically (QDQ format, per-channel weights, calibrated on
``calibration_samples`` images: :mod:`latency_predictor.measurement.quantize`) before its session is made,
and the graph ONNX Runtime optimised is read back to check that every convolution and matrix
product runs in int8 (any left in float is an error, not an "int8" figure of a float network);
``fp16`` with the ``tensorrt`` provider (its FP16 mode).
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import platform
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Unpack

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

from latency_predictor.errors import BackendUnavailableError, ConfigError, InvalidModelError, MeasurementError
from latency_predictor.measurement.backends.base import (
    CommonOptions,
    MeasuredBackend,
    Prepared,
    cache_root,
    check_choice,
    check_positive_int,
)
from latency_predictor.measurement.breakdown import Breakdown, parse_ort_profile
from latency_predictor.measurement.environment import cpu_model, package_version, usable_cpus
from latency_predictor.measurement.export import (
    DEFAULT_INPUT_SHAPE,
    DEFAULT_OPSET,
    INPUT_NAME,
    OUTPUT_NAME,
    export_onnx,
    sample_input,
)
from latency_predictor.measurement.protocol import LatencyResult
from latency_predictor.measurement.quantize import (
    CalibrationData,
    GraphPrecision,
    QuantizeSettings,
    check_graph_precision,
    precision_of_graph,
    quantize_qdq,
    random_calibration_data,
)
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
NO_CPU_FALLBACK = "session.disable_cpu_ep_fallback"
"""Session option: fail session creation when any node would run on the CPU."""
NVINFER = "libnvinfer.so.10"
"""TensorRT 10's library, which ONNX Runtime's TensorRT provider loads by this name."""
PRECISIONS: dict[str, tuple[str, ...]] = {"cpu": ("fp32", "int8"), "cuda": ("fp32",), "tensorrt": ("fp32", "fp16")}
"""The precisions each provider runs: int8 (static QDQ quantisation) on the CPU, fp16 in TensorRT's FP16 mode."""
ProviderList = list[str | tuple[str, dict[str, Any]]]


def execution_providers(provider: str, device_id: int, fp16: bool, engine_cache: Path | None) -> ProviderList:
    """The providers, in precedence order, of a session for ``provider`` (``cpu``, ``cuda``, ``tensorrt``).

    The CPU provider is never registered after a GPU one: with CPU fallback disabled ONNX Runtime
    refuses that combination, and without it nodes would run on the CPU unnoticed.

    Args:
        provider: the requested provider.
        device_id: the GPU of the GPU providers.
        fp16: TensorRT's FP16 mode.
        engine_cache: folder of the TensorRT provider's engine cache (None: no cache).
    """
    if provider == "cpu":
        return [PROVIDERS["cpu"]]
    cuda = (PROVIDERS["cuda"], {"device_id": device_id})
    if provider == "cuda":
        return [cuda]
    trt: dict[str, Any] = {"device_id": device_id, "trt_fp16_enable": fp16}
    if engine_cache is not None:
        trt.update(trt_engine_cache_enable=True, trt_engine_cache_path=str(engine_cache))
    return [(PROVIDERS["tensorrt"], trt), cuda]


def without_cpu_fallback(options: ort.SessionOptions) -> ort.SessionOptions:
    """``options`` set so that a session with any node on the CPU is refused (``session.disable_cpu_ep_fallback``)."""
    options.add_session_config_entry(NO_CPU_FALLBACK, "1")
    return options


def ort_engine_cache_dir(root: Path, onnx_model: bytes) -> Path:
    """The TensorRT provider's engine cache folder for ``onnx_model``: one per model hash under ``root``.

    ONNX Runtime names cached engines by a hash of the graph's names and its own versions, not of
    the weights; a folder per model hash keeps a network from being served another one's engine.
    """
    return root / hashlib.sha256(onnx_model).hexdigest()[:20]


def open_session(model: bytes, options: ort.SessionOptions, providers: ProviderList,
                 requested: str) -> ort.InferenceSession:
    """An inference session of ``model`` that really runs on the first of ``providers``.

    Raises:
        BackendUnavailableError: a GPU provider was requested and ONNX Runtime could not place
            every node on GPU providers (a provider failed to load, or would leave nodes to the
            CPU), or the session came up on other providers.
        MeasurementError: ONNX Runtime rejected the model on the CPU provider.
    """
    names = [p if isinstance(p, str) else p[0] for p in providers]
    gpu = requested != "cpu"
    try:
        # enable_fallback=0: no retry on other providers (ONNX Runtime versions without it ignore it).
        sess = ort.InferenceSession(model, options, providers=providers, enable_fallback=0)
    except ORT_ERRORS as err:
        if not gpu:
            raise MeasurementError(f"onnxruntime could not create a session: {err}") from err
        cause = f" (first: {err.__cause__})" if err.__cause__ is not None else ""
        raise BackendUnavailableError(
            f"ONNX Runtime could not run the network on {' + '.join(names)} with CPU fallback disabled: "
            f"{err}{cause}. A provider that fails to load (GPU, CUDA 12, cuDNN 9 or TensorRT 10 libraries "
            f"missing) leaves every node to the CPU; {GPU_FIX} on a machine with an NVIDIA GPU"
        ) from err
    got = sess.get_providers()
    if not got or got[0] != names[0] or any(n not in got for n in names):
        raise BackendUnavailableError(
            f"requested {names} but the session runs on {got} (ONNX Runtime fell back: the GPU, CUDA or "
            f"cuDNN/TensorRT libraries are missing); {GPU_FIX} on a machine with an NVIDIA GPU and matching "
            "CUDA libraries"
        )
    if gpu:
        sess.disable_fallback()  # a provider error while running raises instead of moving the session to CPU
    return sess


@functools.cache
def load_gpu_libraries(provider: str) -> dict[str, str]:
    """Make the shared libraries of ``provider`` (``cuda`` or ``tensorrt``) loadable in this process.

    * CUDA 12 and cuDNN 9 (what onnxruntime-gpu 1.19+ links): a CUDA build of torch loaded them
      when it was imported (before ONNX Runtime, as LatNAS does); with a CPU build of torch,
      ``onnxruntime.preload_dlls()`` (ONNX Runtime 1.21+) loads them from the ``nvidia-*`` wheels.
    * TensorRT 10 (``tensorrt``): the pip wheel puts ``libnvinfer.so.10`` in the process only
      when ``tensorrt`` is imported; the provider then finds it by name.

    Returns:
        What was done, for the environment record.

    Raises:
        BackendUnavailableError: TensorRT's library cannot be loaded (the message names the extra).
    """
    import torch

    done: dict[str, str] = {}
    if torch.version.cuda:
        done["cuda_libraries"] = f"torch {torch.__version__} (CUDA {torch.version.cuda})"
    elif hasattr(ort, "preload_dlls"):
        ort.preload_dlls()
        done["cuda_libraries"] = "onnxruntime.preload_dlls()"
    else:
        done["cuda_libraries"] = "system loader path"
    if provider == "tensorrt":
        done["tensorrt_library"] = require_tensorrt_library()
    return done


def require_tensorrt_library() -> str:
    """Load TensorRT 10's ``libnvinfer.so.10`` (importing ``tensorrt`` first when installed); where it came from.

    Raises:
        BackendUnavailableError: it cannot be loaded (the message names the extra to install).
    """
    if platform.system() != "Linux":
        return "not checked (not Linux)"
    origin = "system loader path"
    try:
        import tensorrt

        origin = f"tensorrt {tensorrt.__version__}"
    except ImportError:
        pass  # TensorRT may come from the system instead (LD_LIBRARY_PATH): tried next
    try:
        ctypes.CDLL(NVINFER)
    except OSError as err:
        raise BackendUnavailableError(
            f"ONNX Runtime's TensorRT provider needs TensorRT 10 ({NVINFER}) and it cannot be loaded ({err}); "
            "pip install 'latnas[gpu,tensorrt]' (the tensorrt wheel provides it), or add TensorRT 10's lib "
            "folder to LD_LIBRARY_PATH"
        ) from None
    return origin


class OnnxRuntimeBackend(MeasuredBackend):
    """Measures networks with ONNX Runtime.

    Args:
        input_shape: deployment shape ``(N, C, H, W)``.
        provider: ``cpu``, ``cuda`` or ``tensorrt``.
        precision: ``fp32``; ``int8`` with the ``cpu`` provider (static QDQ quantisation, checked to
            run in int8); ``fp16`` with the ``tensorrt`` provider (its FP16 mode).
        intra_op_threads: threads inside one operator.
        inter_op_threads: threads running independent operators.
        device_id: GPU index for the ``cuda`` and ``tensorrt`` providers.
        opset: ONNX opset of the export.
        graph_optimization: ``disable``, ``basic``, ``extended`` or ``all`` (ONNX Runtime's levels).
        cache_dir: root of the TensorRT provider's engine caches (default
            ``$LATNAS_CACHE_DIR/onnxruntime-tensorrt`` or ``~/.cache/latnas/onnxruntime-tensorrt``).
        calibration_samples: int8: images the activation ranges are calibrated on.
        calibration_data: int8: source of the calibration images (default: random normal images,
            enough for timing; ``python -m nas.optimize`` calibrates a model to deploy on training images).
        **common: the options every backend takes (:class:`CommonOptions`: ``measure``, ``slot``,
            ``slot_dir``, ``num_classes``, ``keep_samples``).

    Raises:
        ConfigError: an unknown provider, precision or level, or invalid counts or shape.
        BackendUnavailableError: the provider is not in this ONNX Runtime build, or its libraries
            (TensorRT's) cannot be loaded.
    """

    name = "onnxruntime"
    runtime_errors = ORT_ERRORS
    has_breakdown = True

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
        cache_dir: str | Path | None = None,
        calibration_samples: int = 32,
        calibration_data: CalibrationData | None = None,
        **common: Unpack[CommonOptions],
    ) -> None:
        self.provider = check_choice("provider", provider, list(PROVIDERS))
        check_choice("precision", precision, ["fp32", "fp16", "bf16", "int8"])
        if precision not in PRECISIONS[provider]:
            elsewhere = [n for n, ps in PRECISIONS.items() if precision in ps]
            where = f"provider {elsewhere[0]!r} runs it" if elsewhere else "no ONNX Runtime provider runs it here"
            raise ConfigError(
                f"precision {precision!r} cannot run on ONNX Runtime's {provider} provider, which runs "
                f"{list(PRECISIONS[provider])}; {where} (fp16 or bf16 on CUDA: the torch or tensorrt backend; "
                "int8 on a GPU: the tensorrt backend)"
            )
        self.calibration_samples = check_positive_int("calibration_samples", calibration_samples)
        self.calibration_data = calibration_data or random_calibration_data
        self.intra_op_threads = check_positive_int("intra_op_threads", intra_op_threads)
        self.inter_op_threads = check_positive_int("inter_op_threads", inter_op_threads)
        if isinstance(device_id, bool) or not isinstance(device_id, int) or device_id < 0:
            raise ConfigError(f"device_id must be an integer >= 0, got {device_id!r}")
        self.device_id = device_id
        self.opset = check_positive_int("opset", opset)
        self.graph_optimization = check_choice("graph_optimization", graph_optimization, list(GRAPH_OPTIMIZATION))
        device = "cpu" if provider == "cpu" else f"cuda:{device_id}"
        super().__init__(input_shape, precision, device, **common)
        self.cache_dir = Path(cache_dir) if cache_dir is not None else cache_root() / "onnxruntime-tensorrt"
        available = ort.get_available_providers()
        if PROVIDERS[provider] not in available:
            raise BackendUnavailableError(
                f"provider {provider!r} ({PROVIDERS[provider]}) is not in this ONNX Runtime build "
                f"(available: {available}); {GPU_FIX}"
            )
        self.gpu_libraries = load_gpu_libraries(provider) if provider != "cpu" else {}

    def session_options(self, profile_prefix: str | None = None,
                        optimized_path: Path | None = None) -> ort.SessionOptions:
        """The session settings: explicit thread counts, sequential execution, optimisation level
        (``optimized_path``: where ONNX Runtime writes the graph it optimised)."""
        so = ort.SessionOptions()
        so.intra_op_num_threads = self.intra_op_threads
        so.inter_op_num_threads = self.inter_op_threads
        so.execution_mode = (
            ort.ExecutionMode.ORT_PARALLEL if self.inter_op_threads > 1 else ort.ExecutionMode.ORT_SEQUENTIAL
        )
        so.graph_optimization_level = GRAPH_OPTIMIZATION[self.graph_optimization]
        so.log_severity_level = 3
        if self.provider != "cpu":
            without_cpu_fallback(so)
        if profile_prefix is not None:
            so.enable_profiling = True
            so.profile_file_prefix = profile_prefix
        if optimized_path is not None:
            so.optimized_model_filepath = str(optimized_path)
        return so

    def providers(self, model: bytes) -> ProviderList:
        """The providers a session of ``model`` gets (:func:`execution_providers`)."""
        cache = ort_engine_cache_dir(self.cache_dir, model) if self.provider == "tensorrt" else None
        return execution_providers(self.provider, self.device_id, self.precision == "fp16", cache)

    def create_session(self, model: bytes, profile_prefix: str | None = None,
                       optimized_path: Path | None = None) -> ort.InferenceSession:
        """An inference session on the requested provider, checked to really run there (:func:`open_session`).

        Raises:
            MeasurementError: ONNX Runtime rejected the model.
            BackendUnavailableError: the session would run any of it on another provider.
        """
        providers = self.providers(model)
        if self.provider == "tensorrt":
            ort_engine_cache_dir(self.cache_dir, model).mkdir(parents=True, exist_ok=True)
        return open_session(model, self.session_options(profile_prefix, optimized_path), providers, self.provider)

    def _prepare(self, arch: Arch, net: nn.Module, input_shape: tuple[int, ...]) -> Prepared:
        t0 = time.perf_counter()
        model = export_onnx(net, input_shape, self.opset)
        t1 = time.perf_counter()
        stage_s = {"export_s": t1 - t0}
        extra: dict[str, Any] = {}
        if self.precision == "int8":
            model = self.quantize(model, input_shape)
            stage_s["quantize_s"] = time.perf_counter() - t1
            extra["quantization"] = QuantizeSettings().describe() + f", {self.calibration_samples} calibration images"
        t2 = time.perf_counter()
        sess, graph = self.checked_session(model)
        prepared = self._ready(sess, INPUT_NAME, OUTPUT_NAME, input_shape)
        prepared.stage_s.update(stage_s, session_s=time.perf_counter() - t2)
        prepared.extra.update(extra, onnx_bytes=len(model), opset=self.opset)
        if graph:
            prepared.extra["graph_precision"] = graph
        return prepared

    def quantize(self, model: bytes, input_shape: tuple[int, ...]) -> bytes:
        """``model`` quantised to int8 for timing, calibrated on ``calibration_samples`` images of ``calibration_data``.

        Raises:
            ConfigError: ``calibration_data`` returned images of the wrong shape.
            ExportError: ONNX Runtime could not quantise the network.
        """
        count = -(-self.calibration_samples // input_shape[0]) * input_shape[0]
        return quantize_qdq(model, self.calibration_data(count, input_shape), input_shape)

    def checked_session(self, model: bytes) -> tuple[ort.InferenceSession, str | None]:
        """A session of ``model`` (:meth:`create_session`) whose optimised graph computes in :attr:`precision`.

        On the CPU provider the graph ONNX Runtime optimised for the session is written to a temporary
        file and read back (:func:`~latency_predictor.measurement.quantize.precision_of_graph`): int8 requested and
        any convolution or matrix product left in float, or fp32 requested of a quantised model, is an
        error. Returns the session and what the graph computes in (None on GPU providers, whose graph
        the TensorRT or CUDA provider compiles).

        Raises:
            MeasurementError: the session computes in another precision than requested.
        """
        sess, found = self._session_and_graph(model)
        if found is None:
            return sess, None
        check_graph_precision(found, self.precision)
        return sess, found.describe()

    def _session_and_graph(self, model: bytes) -> tuple[ort.InferenceSession, GraphPrecision | None]:
        if self.provider != "cpu":
            return self.create_session(model), None
        with tempfile.TemporaryDirectory(prefix="latnas-ort-graph-") as tmp:
            path = Path(tmp) / "optimized.onnx"
            sess = self.create_session(model, optimized_path=path)
            return sess, precision_of_graph(path)

    def _ready(self, sess: ort.InferenceSession, input_name: str, output_name: str,
               input_shape: tuple[int, ...]) -> Prepared:
        """A session bound to a sample input of ``input_shape``, run once."""
        x = sample_input(input_shape).numpy()
        resources: tuple[object, ...] = (sess,)
        sync = None
        if self.provider == "cpu":
            feed = {input_name: x}

            def run_once() -> object:
                return sess.run(None, feed)
        else:
            binding, x_dev, y_dev = self._bind(sess, x, input_name, output_name)
            resources = (sess, binding, x_dev, y_dev)
            sync = binding.synchronize_outputs

            def run_once() -> object:
                sess.run_with_iobinding(binding)
                # Run may return before the device work ends; a run is over when its output is.
                binding.synchronize_outputs()
                return None
        try:
            run_once()
        except ORT_ERRORS as err:
            raise MeasurementError(f"onnxruntime: the prepared network failed to run: {err}") from err
        return Prepared(
            run_once=run_once, sync=sync, extra={"providers": sess.get_providers()},
            cpu_threads=min(self.intra_op_threads, usable_cpus()) if self.provider == "cpu" else None,
            resources=resources,
        )

    def _bind(self, sess: ort.InferenceSession, x: np.ndarray, input_name: str,
              output_name: str) -> tuple[Any, Any, Any]:
        """I/O binding of ``sess`` to device buffers: the input copied once, the output allocated once."""
        out = next(o for o in sess.get_outputs() if o.name == output_name)
        if not all(isinstance(d, int) for d in out.shape):
            raise MeasurementError(f"onnxruntime: the output {out.name!r} has no fixed shape ({out.shape})")
        x_dev = ort.OrtValue.ortvalue_from_numpy(x, "cuda", self.device_id)
        y_dev = ort.OrtValue.ortvalue_from_shape_and_type(list(out.shape), np.float32, "cuda", self.device_id)
        binding = sess.io_binding()
        binding.bind_ortvalue_input(input_name, x_dev)
        binding.bind_ortvalue_output(output_name, y_dev)
        binding.synchronize_inputs()
        return binding, x_dev, y_dev

    def measure_onnx(self, model: bytes, name: str | None = None) -> LatencyResult:
        """Measure an ONNX model as it is, with this estimator's settings and protocol.

        The model must take one float32 input of exactly :attr:`input_shape` (static shape) and is
        timed at that shape only, so ``throughput_batch_sizes`` may list only its batch size. On the
        CPU provider it must compute in :attr:`precision` (an int8 model is measured with
        ``precision='int8'``, and must run every convolution in int8: :meth:`checked_session`).
        ONNX Runtime parses the bytes; LatNAS reads only the graph ONNX Runtime optimised from them.

        Args:
            model: the serialised ONNX model.
            name: what the record is of (default ``onnx-<first 16 hex digits of its SHA-256>``).

        Raises:
            InvalidModelError: ONNX Runtime cannot read the model, it takes another input, or it
                computes in another precision than :attr:`precision`.
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
            sess, found = self._session_and_graph(model)
        except MeasurementError as err:  # ONNX Runtime refused the bytes on the CPU provider
            raise InvalidModelError(f"not a valid ONNX model: onnxruntime could not read it: {err}") from err
        graph = None
        if found is not None:
            try:
                check_graph_precision(found, self.precision)
            except MeasurementError as err:
                raise InvalidModelError(str(err)) from None
            graph = found.describe()
        session_s = time.perf_counter() - t0
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
        if graph:
            prepared.extra["graph_precision"] = graph
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
        if self.precision == "int8":
            env["quantization"] = QuantizeSettings().describe()
        env["device_name"] = cpu_model() if self.provider == "cpu" else _gpu_name(self.device_id)
        if self.provider != "cpu":
            env["cpu_fallback"] = "disabled"
            env.update(self.gpu_libraries)
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

    def _breakdown(self, arch: Arch, runs: int, warmup_runs: int) -> Breakdown:
        """From ONNX Runtime's profiler."""
        net = self.build_net(arch)
        model = export_onnx(net, self.input_shape, self.opset)
        if self.precision == "int8":
            model = self.quantize(model, self.input_shape)
        x = sample_input(self.input_shape).numpy()
        with tempfile.TemporaryDirectory(prefix="latnas-ort-profile-") as tmp, self.held_slot():
            sess = self.create_session(model, profile_prefix=str(Path(tmp) / "profile"))
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
