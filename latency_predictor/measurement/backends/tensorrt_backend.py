"""TensorRT backend: ONNX -> TensorRT engine through NVIDIA's documented Python API (TensorRT 10).

Build: ``trt.Builder`` -> ``create_network(0)`` (explicit batch, the only mode in TensorRT 10)
-> ``trt.OnnxParser.parse`` -> ``create_builder_config`` (workspace via
``set_memory_pool_limit(MemoryPoolType.WORKSPACE, ...)``, ``BuilderFlag.FP16`` / ``INT8``) ->
``build_serialized_network``. INT8 is calibrated by an ``IInt8EntropyCalibrator2`` over a few
hundred sample inputs (random by default; pass ``calibration_data`` for real images: the scales,
not the speed, depend on it).

Run: ``trt.Runtime.deserialize_cuda_engine`` -> ``create_execution_context`` -> one
``set_tensor_address`` per I/O tensor (its result checked) -> ``execute_async_v3(stream)``.
Buffers are torch CUDA tensors on the backend's device, the stream is created on that device,
everything runs inside ``torch.cuda.device(index)``, and each run is timed with
``torch.cuda.Event`` recorded on the execution stream, so no pycuda is needed.

Engines are cached on disk (``cache_dir``, default ``$LATNAS_CACHE_DIR/tensorrt`` or
``~/.cache/latnas/tensorrt``), keyed by a hash of the exported ONNX model (so the weights count:
a trained, a Conv+BN-fused and a freshly initialised network of one architecture get different
engines), the calibration images for INT8, precision, input shape, GPU name, TensorRT version
and workspace size: an engine is only reused where it is the engine of that very network.

``tensorrt`` is imported lazily: without it, constructing the backend raises
:class:`BackendUnavailableError` naming the extra to install. TensorRT 11 removed the weakly
typed precision flags and calibrators: there this backend builds fp32 engines only and refuses
fp16/int8 with a message naming TensorRT 10 (:func:`check_tensorrt_version`).
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, Unpack

import numpy as np
import torch
from torch import nn

from latency_predictor.errors import BackendUnavailableError, ConfigError, EngineBuildError, MeasurementError
from latency_predictor.measurement.backends import gpu
from latency_predictor.measurement.backends.base import (
    CommonOptions,
    MeasuredBackend,
    Prepared,
    cache_root,
    check_choice,
    check_positive_int,
)
from latency_predictor.measurement.export import DEFAULT_INPUT_SHAPE, DEFAULT_OPSET, export_onnx, sample_input
from latency_predictor.measurement.quantize import CalibrationData, random_calibration_data
from latency_predictor.measurement.slot import normalise_device
from search_spaces import Arch

PRECISIONS = ("fp32", "fp16", "int8")
TRT_FIX = "install the TensorRT extra on a machine with an NVIDIA GPU: pip install 'latnas[tensorrt]'"


def import_tensorrt() -> ModuleType:
    """``import tensorrt``, or a :class:`BackendUnavailableError` naming the extra to install."""
    try:
        import tensorrt
    except ImportError as err:
        raise BackendUnavailableError(f"TensorRT is not installed ({err}); {TRT_FIX}") from None
    return tensorrt


def check_tensorrt_version(version: str, precision: str) -> None:
    """Refuse TensorRT releases this backend cannot drive.

    The build uses TensorRT 10's weakly typed precision flags (``BuilderFlag.FP16`` / ``INT8``)
    and its INT8 calibrator; TensorRT 11 removed them (strongly typed networks only), so there
    only fp32 engines can be built this way.

    Raises:
        BackendUnavailableError: TensorRT older than 10, or fp16/int8 with TensorRT 11 or newer.
    """
    try:
        major = int(version.split(".")[0])
    except ValueError:
        raise BackendUnavailableError(f"cannot read the TensorRT version {version!r}") from None
    if major < 10:
        raise BackendUnavailableError(
            f"TensorRT {version} is too old: this backend uses the TensorRT 10 API; {TRT_FIX}"
        )
    if major >= 11 and precision != "fp32":
        raise BackendUnavailableError(
            f"TensorRT {version} removed the FP16/INT8 builder flags and calibrators this backend uses for "
            f"{precision}; use precision='fp32' or install TensorRT 10: pip install 'tensorrt>=10,<11'"
        )


def default_cache_dir() -> Path:
    """``$LATNAS_CACHE_DIR/tensorrt`` if set, else ``~/.cache/latnas/tensorrt``."""
    return cache_root() / "tensorrt"


def sha256_hex(data: bytes) -> str:
    """The SHA-256 of ``data`` in hex (what engine cache keys hash the ONNX model and calibration set with)."""
    return hashlib.sha256(data).hexdigest()


def engine_cache_key(
    arch: str, precision: str, input_shape: Sequence[int], gpu_name: str, trt_version: str, workspace_mb: int,
    onnx_sha256: str, calibration_sha256: str | None = None,
) -> str:
    """File name of a cached engine: readable prefix plus a hash of everything the engine depends on.

    Args:
        arch: the architecture string (for the readable prefix; the ONNX hash covers it too).
        precision: ``fp32``, ``fp16`` or ``int8``.
        input_shape: the engine's input shape.
        gpu_name: the GPU the engine is built for.
        trt_version: the TensorRT version building it.
        workspace_mb: the builder's workspace limit.
        onnx_sha256: hash of the exported ONNX model: architecture, weights, classifier width,
            shape and opset, so networks that differ only in their weights get their own engines.
        calibration_sha256: hash of the INT8 calibration images (None for fp32/fp16).
    """
    shape = "x".join(map(str, input_shape))
    material = "|".join([arch, precision, shape, gpu_name, trt_version, str(workspace_mb), onnx_sha256,
                         calibration_sha256 or "-"])
    digest = hashlib.sha256(material.encode()).hexdigest()[:16]
    arch_id = hashlib.sha1(arch.encode()).hexdigest()[:12]
    return f"{arch_id}-{precision}-{shape}-trt{trt_version}-{digest}.engine"


def load_or_build_engine(path: Path, build: Callable[[], bytes]) -> tuple[bytes, bool]:
    """The engine cached at ``path`` and True, or ``build()``'s engine, written to ``path``, and False.

    The file is written atomically (a temporary file renamed), so concurrent builders of the same
    engine never read half of one.
    """
    if path.exists():
        return path.read_bytes(), True
    engine = build()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    tmp.write_bytes(engine)
    os.replace(tmp, path)
    return engine, False


class TensorRTBackend(MeasuredBackend):
    """Measures networks as TensorRT engines.

    Args:
        input_shape: deployment shape ``(N, C, H, W)``; engines are built for exactly this shape.
        device: ``cuda:N``.
        precision: ``fp32``, ``fp16`` or ``int8`` (INT8 with FP16 fallback for layers without INT8).
        workspace_mb: builder workspace memory pool limit.
        calibration_samples: images used for INT8 calibration.
        calibration_data: source of calibration images (default: random normal images, enough for
            timing; an engine to deploy needs real ones: ``python -m nas.export`` passes training images).
        cache_dir: engine cache directory (default :func:`default_cache_dir`).
        opset: ONNX opset of the export.
        **common: the options every backend takes (:class:`CommonOptions`: ``measure``, ``slot``,
            ``slot_dir``, ``num_classes``, ``keep_samples``).

    Raises:
        ConfigError: an unknown precision, a CPU device, bad counts or shape.
        BackendUnavailableError: TensorRT or CUDA is missing.
    """

    name = "tensorrt"
    runtime_errors = (RuntimeError,)

    def __init__(
        self,
        input_shape: Sequence[int] = DEFAULT_INPUT_SHAPE,
        *,
        device: str = "cuda:0",
        precision: str = "fp32",
        workspace_mb: int = 1024,
        calibration_samples: int = 256,
        calibration_data: CalibrationData | None = None,
        cache_dir: str | Path | None = None,
        opset: int = DEFAULT_OPSET,
        **common: Unpack[CommonOptions],
    ) -> None:
        dev = normalise_device(device)
        if dev == "cpu":
            raise ConfigError("the tensorrt backend runs on a GPU: use device='cuda:<index>'")
        check_choice("precision", precision, PRECISIONS)
        self.workspace_mb = check_positive_int("workspace_mb", workspace_mb)
        self.calibration_samples = check_positive_int("calibration_samples", calibration_samples)
        self.calibration_data = calibration_data or random_calibration_data
        self.cache_dir = Path(cache_dir) if cache_dir is not None else default_cache_dir()
        self.opset = check_positive_int("opset", opset)
        super().__init__(input_shape, precision, dev, **common)
        self._trt = import_tensorrt()
        check_tensorrt_version(self.trt_version, precision)
        if not torch.cuda.is_available():
            raise BackendUnavailableError("TensorRT needs a CUDA device and torch sees none; " + TRT_FIX)
        self.device_index = int(dev.split(":")[1])
        if self.device_index >= torch.cuda.device_count():
            raise BackendUnavailableError(f"device {dev!r}: only {torch.cuda.device_count()} CUDA device(s) visible")
        self.gpu_name = torch.cuda.get_device_name(self.device_index)
        self._logger = _make_logger(self._trt)
        self._calibration: dict[tuple[int, ...], np.ndarray] = {}

    @property
    def trt_version(self) -> str:
        """The installed TensorRT version."""
        return str(self._trt.__version__)

    def engine_path(self, arch: str, input_shape: Sequence[int], onnx_model: bytes) -> Path:
        """Where the engine of ``onnx_model`` (the network of ``arch``) at ``input_shape`` is cached."""
        calibration = None
        if self.precision == "int8":
            calibration = sha256_hex(self.calibration_images(tuple(input_shape)).tobytes())
        key = engine_cache_key(
            arch, self.precision, input_shape, self.gpu_name, self.trt_version, self.workspace_mb,
            sha256_hex(onnx_model), calibration,
        )
        return self.cache_dir / key

    def calibration_images(self, input_shape: tuple[int, ...]) -> np.ndarray:
        """The INT8 calibration set at ``input_shape``: ``calibration_samples`` rounded up to whole batches.

        Raises:
            ConfigError: ``calibration_data`` returned the wrong shape.
        """
        if input_shape not in self._calibration:
            batch = input_shape[0]
            count = -(-self.calibration_samples // batch) * batch
            data = np.ascontiguousarray(self.calibration_data(count, input_shape), dtype=np.float32)
            if data.shape != (count, *input_shape[1:]):
                raise ConfigError(
                    f"calibration_data returned shape {data.shape}; expected {(count, *input_shape[1:])}"
                )
            self._calibration[input_shape] = data
        return self._calibration[input_shape]

    def build_engine(self, onnx_model: bytes, input_shape: tuple[int, ...]) -> bytes:
        """Build a serialised engine from an ONNX model.

        Raises:
            EngineBuildError: the parser rejected the model (its errors are listed) or the build failed
                (the builder's error log is included).
        """
        trt = self._trt
        self._logger.messages.clear()
        builder = trt.Builder(self._logger)
        network = builder.create_network(0)
        parser = trt.OnnxParser(network, self._logger)
        if not parser.parse(onnx_model):
            errors = [str(parser.get_error(i)) for i in range(parser.num_errors)]
            raise EngineBuildError("TensorRT's ONNX parser rejected the model:\n" + "\n".join(errors))
        config = builder.create_builder_config()
        config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, self.workspace_mb << 20)
        calibrator = None
        if self.precision in ("fp16", "int8"):
            config.set_flag(trt.BuilderFlag.FP16)
        with gpu.device_scope(self.device_index):
            if self.precision == "int8":
                config.set_flag(trt.BuilderFlag.INT8)
                calibrator = _make_calibrator(trt, self._calibration_batches(input_shape))
                config.int8_calibrator = calibrator
            serialized = builder.build_serialized_network(network, config)
        if serialized is None:
            log = "\n".join(self._logger.messages) or "(TensorRT logged no error)"
            raise EngineBuildError(f"TensorRT could not build the engine ({self.precision}):\n{log}")
        return bytes(serialized)

    def _calibration_batches(self, input_shape: tuple[int, ...]) -> list[torch.Tensor]:
        data = self.calibration_images(input_shape)
        batch = input_shape[0]
        dev = torch.device(self.device)
        return [torch.from_numpy(data[i:i + batch]).to(dev).contiguous() for i in range(0, len(data), batch)]

    def _engine_bytes(self, net: nn.Module, arch: str, input_shape: tuple[int, ...]) -> tuple[bytes, dict[str, Any]]:
        t0 = time.perf_counter()
        onnx_model = export_onnx(net, input_shape, self.opset)
        t1 = time.perf_counter()
        path = self.engine_path(arch, input_shape, onnx_model)
        engine, cached = load_or_build_engine(path, lambda: self.build_engine(onnx_model, input_shape))
        info: dict[str, Any] = {"engine_path": str(path), "engine_cached": cached, "export_s": t1 - t0}
        if not cached:
            info["engine_build_s"] = time.perf_counter() - t1
        return engine, info

    def _run_scope(self) -> AbstractContextManager[object]:
        return gpu.device_scope(self.device_index)

    def _open(self, engine_bytes: bytes, where: str) -> _OpenEngine:
        """Deserialise an engine on this backend's device, with its buffers bound and a stream of its own."""
        trt = self._trt
        with gpu.device_scope(self.device_index):
            runtime = trt.Runtime(self._logger)
            engine = runtime.deserialize_cuda_engine(engine_bytes)
            if engine is None:
                raise EngineBuildError(f"TensorRT could not deserialise {where}; delete it to rebuild")
            context = engine.create_execution_context()
            if context is None:
                raise MeasurementError("TensorRT could not create an execution context (out of GPU memory?)")
            buffers: dict[str, torch.Tensor] = {}
            inputs: list[str] = []
            outputs: list[str] = []
            dev = torch.device(self.device)
            for i in range(engine.num_io_tensors):
                name = engine.get_tensor_name(i)
                shape = tuple(engine.get_tensor_shape(name))
                dtype = torch.from_numpy(np.empty(0, dtype=trt.nptype(engine.get_tensor_dtype(name)))).dtype
                if engine.get_tensor_mode(name) == trt.TensorIOMode.INPUT:
                    buffers[name] = sample_input(shape, dtype).to(dev)
                    inputs.append(name)
                else:
                    buffers[name] = torch.empty(shape, dtype=dtype, device=dev)
                    outputs.append(name)
                bind_tensor(context, name, buffers[name].data_ptr())
            stream = gpu.new_stream(self.device_index)
        return _OpenEngine(runtime, engine, context, buffers, inputs, outputs, stream, self.device_index)

    def _prepare(self, arch: Arch, net: nn.Module, input_shape: tuple[int, ...]) -> Prepared:
        engine_bytes, info = self._engine_bytes(net, arch.encode(), input_shape)
        t0 = time.perf_counter()
        opened = self._open(engine_bytes, info["engine_path"])
        session_s = time.perf_counter() - t0
        opened.run_once()
        opened.stream.synchronize()
        stage_s = {k: float(v) for k, v in info.items() if k.endswith("_s")}
        stage_s["session_s"] = session_s
        return Prepared(
            run_once=opened.run_once, time_once=gpu.event_timer(opened.run_once, opened.stream),
            sync=opened.stream.synchronize, stage_s=stage_s,
            extra={"engine_path": info["engine_path"], "engine_cached": info["engine_cached"]},
            resources=(opened,),
        )

    def infer(self, engine_bytes: bytes, batches: Sequence[np.ndarray]) -> np.ndarray:
        """Run a serialised engine on ``batches`` (each of the engine's input shape); the outputs, concatenated.

        Not timed: for checking an engine's outputs against PyTorch's.

        Raises:
            EngineBuildError: the engine cannot be deserialised here.
            MeasurementError: a batch of the wrong shape, or the engine failed to run.
        """
        opened = self._open(engine_bytes, "the engine")
        if len(opened.inputs) != 1 or len(opened.outputs) != 1:
            raise MeasurementError(f"expected one input and one output, the engine has {opened.inputs} "
                                   f"and {opened.outputs}")
        x_buf, y_buf = opened.buffers[opened.inputs[0]], opened.buffers[opened.outputs[0]]
        out = []
        with gpu.device_scope(self.device_index):
            for x in batches:
                if tuple(x.shape) != tuple(x_buf.shape):
                    raise MeasurementError(f"batch of shape {tuple(x.shape)}; the engine takes {tuple(x_buf.shape)}")
                x_buf.copy_(torch.from_numpy(np.ascontiguousarray(x)).to(x_buf.dtype))
                opened.run_once()
                opened.stream.synchronize()
                out.append(y_buf.float().cpu().numpy())
        return np.concatenate(out)

    def _backend_environment(self) -> dict[str, str]:
        return {
            "tensorrt": self.trt_version,
            "device_name": self.gpu_name,
            "cuda": str(torch.version.cuda),
            "workspace_mb": str(self.workspace_mb),
        }


def bind_tensor(context: Any, name: str, address: int) -> None:
    """``context.set_tensor_address(name, address)``, whose False (a refused binding) becomes an error.

    Raises:
        MeasurementError: TensorRT refused the address (wrong name, misaligned or null pointer).
    """
    if not context.set_tensor_address(name, address):
        raise MeasurementError(f"TensorRT refused the device address of tensor {name!r} (set_tensor_address)")


@dataclass
class _OpenEngine:
    """A deserialised engine ready to run: everything here must stay alive while it runs."""

    runtime: Any
    engine: Any
    context: Any
    buffers: dict[str, torch.Tensor]
    inputs: list[str]
    outputs: list[str]
    stream: Any
    device_index: int

    def run_once(self) -> object:
        if not self.context.execute_async_v3(self.stream.cuda_stream):
            raise MeasurementError("TensorRT execute_async_v3 reported failure")
        return None


def _make_logger(trt: ModuleType) -> Any:
    """A TensorRT logger that keeps warnings and errors (for :class:`EngineBuildError` messages)."""

    base: Any = trt.ILogger

    class _Logger(base):
        def __init__(self) -> None:
            trt.ILogger.__init__(self)
            self.messages: list[str] = []

        def log(self, severity: Any, msg: str) -> None:
            if int(severity) <= int(trt.ILogger.Severity.WARNING):
                self.messages.append(f"[{severity.name}] {msg}")

    return _Logger()


def _make_calibrator(trt: ModuleType, batches: list[torch.Tensor]) -> Any:
    """An entropy calibrator (IInt8EntropyCalibrator2) feeding ``batches`` (CUDA tensors) once each."""

    base: Any = trt.IInt8EntropyCalibrator2

    class _Calibrator(base):
        def __init__(self) -> None:
            trt.IInt8EntropyCalibrator2.__init__(self)
            self._next = 0

        def get_batch_size(self) -> int:
            return int(batches[0].shape[0])

        def get_batch(self, names: list[str]) -> list[int] | None:
            if self._next >= len(batches):
                return None
            t = batches[self._next]
            self._next += 1
            return [int(t.data_ptr())] * len(names)

        def read_calibration_cache(self) -> bytes | None:
            return None  # each network has its own scales; the engine cache makes re-calibration rare

        def write_calibration_cache(self, cache: Any) -> None:
            return None  # see read_calibration_cache

    return _Calibrator()
