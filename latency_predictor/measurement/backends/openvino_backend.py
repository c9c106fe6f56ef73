"""OpenVINO backend: the OpenVINO Runtime CPU plugin, reading the same ONNX export as ONNX Runtime.

The network is exported to ONNX in memory (:func:`~latency_predictor.measurement.export.export_onnx`),
read by ``ov.Core.read_model`` and compiled for ``CPU`` with its latency settings stated, not left
to the plugin's defaults:

* ``PERFORMANCE_HINT=LATENCY`` and ``NUM_STREAMS=1``: one request at a time, as a deployed model
  answers one image;
* ``INFERENCE_NUM_THREADS`` from ``intra_op_threads`` (1 by default, as for ONNX Runtime);
* ``INFERENCE_PRECISION_HINT`` from ``precision``: on a CPU with bf16 instructions the plugin would
  otherwise run an fp32 network in bf16.

The compiled model's properties are read back and checked (a setting the plugin did not take is an
error, not a figure of other settings), and its runtime graph is read to count the convolutions and
matrix products that run in each precision (:func:`runtime_precision`).

Compiled models are cached (OpenVINO's ``CACHE_DIR``) in one folder per digest of the model
(the ONNX bytes, and for int8 the calibration images): ``$LATNAS_CACHE_DIR/openvino/<digest>``
or ``~/.cache/latnas/openvino/<digest>``, so a network is never served another one's blob.

Precision (:data:`PRECISIONS`): ``fp32``; ``bf16`` and ``fp16`` where the CPU plugin lists them in
``OPTIMIZATION_CAPABILITIES``; ``int8`` by NNCF's post-training quantisation (``nncf.quantize``,
the performance preset: symmetric int8 weights and activations) calibrated on
``calibration_samples`` images of ``calibration_data``. The CPU plugin chooses each layer's kernel
itself and may leave some layers (depthwise or squeeze-excite convolutions) in f32; the record says
how many run in int8, and an "int8" network in which none does is refused.

``openvino`` (and ``nncf`` for int8) are imported when the backend is built: without them it raises
:class:`BackendUnavailableError` naming the extra, ``pip install 'latnas[openvino]'``.
"""

from __future__ import annotations

import functools
import hashlib
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, Unpack

import numpy as np
from torch import nn

from latency_predictor.errors import BackendUnavailableError, ConfigError, ExportError, MeasurementError
from latency_predictor.measurement.backends.base import (
    CommonOptions,
    MeasuredBackend,
    Prepared,
    cache_root,
    check_choice,
    check_positive_int,
    check_threads,
)
from latency_predictor.measurement.environment import package_version
from latency_predictor.measurement.export import DEFAULT_INPUT_SHAPE, DEFAULT_OPSET, export_onnx, sample_input
from latency_predictor.measurement.protocol import LatencyResult
from latency_predictor.measurement.quantize import CalibrationData, check_calibration, random_calibration_data
from search_spaces import Arch

OPENVINO_FIX = "pip install 'latnas[openvino]' (openvino and nncf)"
PRECISIONS: dict[str, str] = {"fp32": "FP32", "bf16": "BF16", "fp16": "FP16", "int8": "INT8"}
"""Each precision and the CPU plugin's ``OPTIMIZATION_CAPABILITIES`` entry that must list it."""
INFERENCE_PRECISION: dict[str, str] = {"fp32": "f32", "bf16": "bf16", "fp16": "f16", "int8": "f32"}
"""``INFERENCE_PRECISION_HINT`` per precision (int8: the layers NNCF left in float run in f32)."""
COMPUTE_LAYERS: frozenset[str] = frozenset({"Convolution", "FullyConnected", "MatMul", "Deconvolution"})
"""Layer types of a compiled CPU graph that compute convolutions and matrix products."""
INT8_TYPES = frozenset({"u8", "i8"})
QUANTIZATION = "NNCF post-training quantisation, performance preset (symmetric int8 weights and activations)"


def import_openvino() -> ModuleType:
    """``import openvino``, or a :class:`BackendUnavailableError` naming the extra to install."""
    try:
        import openvino
    except ImportError as err:
        raise BackendUnavailableError(f"OpenVINO is not installed ({err}); {OPENVINO_FIX}") from None
    return openvino


@functools.cache
def shared_core(ov: ModuleType) -> Any:
    """The process's one OpenVINO ``Core``, made on first use and kept until the process exits.

    One, not one per backend: OpenVINO's CPU plugin installs its own signal stack (``sigaltstack``) on the
    thread that compiles and, when its ``Core`` goes, puts back the stack it found there. Two Cores that go
    in the order they came leave the first one's stack installed after it was freed, and the next signal
    the process handles (Ctrl-C, a timer, a Python signal handler) kills it with SIGSEGV. Every setting a
    backend needs is given to ``compile_model``, never set on the Core, so backends share it safely.
    """
    return ov.Core()


def import_nncf() -> ModuleType:
    """``import nncf`` (int8), or a :class:`BackendUnavailableError` naming the extra to install."""
    try:
        import nncf
    except ImportError as err:
        raise BackendUnavailableError(
            f"precision int8 on OpenVINO quantises with NNCF, which is not installed ({err}); {OPENVINO_FIX}"
        ) from None
    return nncf


@dataclass(frozen=True)
class RuntimePrecision:
    """What a compiled OpenVINO CPU graph computes its convolutions and matrix products in.

    Attributes:
        counts: layers per runtime precision (``f32``, ``bf16``, ``u8``, ...).
    """

    counts: dict[str, int]

    @property
    def total(self) -> int:
        """Convolutions and matrix products in the graph."""
        return sum(self.counts.values())

    @property
    def int8(self) -> int:
        """Those that run with int8 (``u8``/``i8``) inputs."""
        return sum(n for p, n in self.counts.items() if p in INT8_TYPES)

    def describe(self) -> str:
        """In words, for records."""
        parts = ", ".join(f"{n} {p}" for p, n in sorted(self.counts.items()))
        return f"{self.total} convolutions and matrix products: {parts}"


def runtime_precision(compiled: Any) -> RuntimePrecision:
    """Count the compute layers of ``compiled`` (an ``ov.CompiledModel``) by the precision they run in."""
    counts: Counter[str] = Counter()
    for op in compiled.get_runtime_model().get_ops():
        info = op.get_rt_info()
        if str(info["layerType"].astype(str)) in COMPUTE_LAYERS:
            counts[str(info["runtimePrecision"].astype(str))] += 1
    return RuntimePrecision(dict(counts))


def check_runtime_precision(found: RuntimePrecision, requested: str) -> None:
    """Refuse a compiled graph that does not compute in the ``requested`` precision.

    Raises:
        MeasurementError: int8 requested and no layer runs in int8; fp32 requested and some run in
            another precision; bf16 or fp16 requested and none runs in it.
    """
    want = {"bf16": "bf16", "fp16": "f16"}.get(requested)
    if requested == "int8" and not found.int8:
        raise MeasurementError(f"precision int8 was requested but OpenVINO runs {found.describe()}: none in int8")
    if requested == "fp32" and set(found.counts) - {"f32"}:
        raise MeasurementError(f"precision fp32 was requested but OpenVINO runs {found.describe()}")
    if want is not None and not found.counts.get(want):
        raise MeasurementError(f"precision {requested} was requested but OpenVINO runs {found.describe()}")


class OpenVinoBackend(MeasuredBackend):
    """Measures networks with the OpenVINO Runtime CPU plugin.

    Args:
        input_shape: deployment shape ``(N, C, H, W)``.
        precision: ``fp32``; ``bf16`` or ``fp16`` where the CPU runs them; ``int8`` (NNCF's
            post-training quantisation).
        intra_op_threads: ``INFERENCE_NUM_THREADS``; at most the CPUs this process may use.
        opset: ONNX opset of the export.
        cache_dir: root of the compiled-model caches (default ``$LATNAS_CACHE_DIR/openvino`` or
            ``~/.cache/latnas/openvino``).
        calibration_samples: int8: images the activation ranges are calibrated on.
        calibration_data: int8: source of the calibration images (default: random normal images,
            enough for timing; a model to deploy is calibrated on training images).
        **common: the options every backend takes (:class:`CommonOptions`).

    Raises:
        ConfigError: an unknown precision, more threads than CPUs, bad counts or shape.
        BackendUnavailableError: OpenVINO (or NNCF for int8) is not installed, or this CPU does not
            run the precision.
    """

    name = "openvino"
    runtime_errors = (RuntimeError,)

    def __init__(
        self,
        input_shape: Sequence[int] = DEFAULT_INPUT_SHAPE,
        *,
        precision: str = "fp32",
        intra_op_threads: int = 1,
        opset: int = DEFAULT_OPSET,
        cache_dir: str | Path | None = None,
        calibration_samples: int = 32,
        calibration_data: CalibrationData | None = None,
        **common: Unpack[CommonOptions],
    ) -> None:
        check_choice("precision", precision, list(PRECISIONS))
        self.intra_op_threads = check_threads(intra_op_threads)
        self.opset = check_positive_int("opset", opset)
        self.calibration_samples = check_positive_int("calibration_samples", calibration_samples)
        self.calibration_data = calibration_data or random_calibration_data
        self.cache_dir = Path(cache_dir) if cache_dir is not None else cache_root() / "openvino"
        super().__init__(input_shape, precision, "cpu", **common)
        self._ov = import_openvino()
        self._nncf = import_nncf() if precision == "int8" else None
        self.core = shared_core(self._ov)
        capabilities = list(self.core.get_property("CPU", "OPTIMIZATION_CAPABILITIES"))
        if PRECISIONS[precision] not in capabilities:
            raise BackendUnavailableError(
                f"precision {precision!r}: OpenVINO's CPU plugin does not run it on this CPU "
                f"({self.cpu_name}), which runs {capabilities}; use precision='fp32'"
            )

    @property
    def cpu_name(self) -> str:
        """The CPU as OpenVINO names it."""
        return str(self.core.get_property("CPU", "FULL_DEVICE_NAME"))

    def compile_config(self, cache: Path | None) -> dict[str, Any]:
        """The ``compile_model`` properties: latency hint, one stream, the thread count, the precision."""
        config: dict[str, Any] = {
            "PERFORMANCE_HINT": "LATENCY", "NUM_STREAMS": "1",
            "INFERENCE_NUM_THREADS": str(self.intra_op_threads),
            "INFERENCE_PRECISION_HINT": INFERENCE_PRECISION[self.precision],
        }
        if cache is not None:
            config["CACHE_DIR"] = str(cache)
        return config

    def model_cache_dir(self, onnx_model: bytes, calibration: np.ndarray | None) -> Path:
        """The compiled-model cache folder of ``onnx_model`` (and its int8 calibration images)."""
        digest = hashlib.sha256(onnx_model)
        if calibration is not None:
            digest.update(calibration.tobytes())
        return self.cache_dir / digest.hexdigest()[:20]

    def read(self, onnx_model: bytes) -> Any:
        """``onnx_model`` read by OpenVINO (an ``ov.Model``).

        Raises:
            ExportError: OpenVINO's ONNX frontend rejected the network (its reason is included).
        """
        try:
            return self.core.read_model(onnx_model)
        except RuntimeError as err:
            raise ExportError(f"OpenVINO could not read the ONNX export: {err}") from err

    def calibration_images(self, input_shape: tuple[int, ...]) -> np.ndarray:
        """``calibration_samples`` images (rounded up to whole batches) of ``calibration_data``.

        Raises:
            ConfigError: ``calibration_data`` returned images of the wrong shape.
        """
        count = -(-self.calibration_samples // input_shape[0]) * input_shape[0]
        return check_calibration(self.calibration_data(count, input_shape), input_shape)

    def quantize(self, model: Any, images: np.ndarray, batch: int) -> Any:
        """``model`` quantised to int8 by NNCF, its activation ranges calibrated on ``images``.

        Raises:
            ExportError: NNCF could not quantise the network.
        """
        nncf = self._nncf or import_nncf()
        batches = [images[i:i + batch] for i in range(0, len(images) - len(images) % batch, batch)]
        try:
            return nncf.quantize(model, nncf.Dataset(batches), preset=nncf.QuantizationPreset.PERFORMANCE,
                                 subset_size=len(batches))
        except (RuntimeError, ValueError, TypeError, KeyError) as err:
            raise ExportError(f"NNCF could not quantise the network: {type(err).__name__}: {err}") from err

    def compile(self, onnx_model: bytes, input_shape: tuple[int, ...]) -> tuple[Any, dict[str, Any], dict[str, float]]:
        """``onnx_model`` read, quantised for int8, and compiled with :meth:`compile_config`, checked.

        Returns:
            the compiled model, details for the record, and the seconds each stage took.

        Raises:
            ExportError: OpenVINO could not read the network, or NNCF could not quantise it.
            BackendUnavailableError: the compiled model did not take a latency setting.
            MeasurementError: the compiled graph computes in another precision than requested.
        """
        t0 = time.perf_counter()
        model = self.read(onnx_model)
        stage_s = {"read_s": time.perf_counter() - t0}
        calibration = None
        if self.precision == "int8":
            t1 = time.perf_counter()
            calibration = self.calibration_images(input_shape)
            model = self.quantize(model, calibration, input_shape[0])
            stage_s["quantize_s"] = time.perf_counter() - t1
        cache = self.model_cache_dir(onnx_model, calibration)
        cache.mkdir(parents=True, exist_ok=True)
        t2 = time.perf_counter()
        compiled, found = self.compile_model(model, cache)
        stage_s["compile_s"] = time.perf_counter() - t2
        extra: dict[str, Any] = {"runtime_precision": found.describe(), "onnx_bytes": len(onnx_model),
                                 "opset": self.opset}
        if calibration is not None:
            extra["quantization"] = f"{QUANTIZATION}, {len(calibration)} calibration images"
        return compiled, extra, stage_s

    def compile_model(self, model: Any, cache: Path | None = None) -> tuple[Any, RuntimePrecision]:
        """``model`` (an ``ov.Model``) compiled for the CPU with :meth:`compile_config`, checked.

        Returns:
            the compiled model and what its compute layers run in.

        Raises:
            BackendUnavailableError: the compiled model did not take a latency setting.
            MeasurementError: OpenVINO could not compile it, or it computes in another precision.
        """
        try:
            compiled = self.core.compile_model(model, "CPU", self.compile_config(cache))
        except RuntimeError as err:
            raise MeasurementError(f"OpenVINO could not compile the network for CPU: {err}") from err
        self._check_settings(compiled)
        found = runtime_precision(compiled)
        check_runtime_precision(found, self.precision)
        return compiled, found

    def save(self, model: Any, path: Path) -> list[Path]:
        """Write ``model`` (an ``ov.Model``) as OpenVINO IR: ``path`` (``.xml``) and its ``.bin``; both paths."""
        self._ov.save_model(model, str(path), compress_to_fp16=False)
        return [path, path.with_suffix(".bin")]

    def measure_model(self, model: Any, name: str) -> LatencyResult:
        """Measure an OpenVINO model as it is (an ``ov.Model``: a deployment variant), with this
        estimator's settings and protocol, at :attr:`input_shape` only.

        Raises:
            ConfigError: throughput batch sizes other than the model's own.
            MeasurementError: compiling or running it failed, or it computes in another precision.
        """
        batch = self.input_shape[0]
        if tuple(self.measure_config.throughput_batch_sizes) != (batch,):
            raise ConfigError(f"an OpenVINO model is timed at its own batch size {batch} only: "
                              f"throughput_batch_sizes must be [{batch}]")
        t0 = time.perf_counter()
        compiled, found = self.compile_model(model)
        prepared = self._ready(compiled, self.input_shape)
        prepared.extra["runtime_precision"] = found.describe()
        return self.measure_prepared(name, {batch: prepared}, {"compile_s": time.perf_counter() - t0})

    def _check_settings(self, compiled: Any) -> None:
        got = {k: str(compiled.get_property(k)) for k in ("PERFORMANCE_HINT", "NUM_STREAMS", "INFERENCE_NUM_THREADS")}
        want = {"PERFORMANCE_HINT": "LATENCY", "NUM_STREAMS": "1", "INFERENCE_NUM_THREADS": str(self.intra_op_threads)}
        if got != want:
            raise BackendUnavailableError(f"OpenVINO compiled the network with {got}, not the requested {want}")

    def _prepare(self, arch: Arch, net: nn.Module, input_shape: tuple[int, ...]) -> Prepared:
        t0 = time.perf_counter()
        onnx_model = export_onnx(net, input_shape, self.opset)
        export_s = time.perf_counter() - t0
        compiled, extra, stage_s = self.compile(onnx_model, input_shape)
        prepared = self._ready(compiled, input_shape)
        prepared.stage_s.update(export_s=export_s, **stage_s)
        prepared.extra.update(extra)
        return prepared

    def _ready(self, compiled: Any, input_shape: tuple[int, ...]) -> Prepared:
        """An inference request of ``compiled`` holding a sample input of ``input_shape``, run once."""
        request = compiled.create_infer_request()
        request.set_input_tensor(self._ov.Tensor(sample_input(input_shape).numpy()))
        try:
            request.infer()
        except RuntimeError as err:
            raise MeasurementError(f"openvino: the compiled network failed to run: {err}") from err
        return Prepared(run_once=request.infer, resources=(compiled, request), cpu_threads=self.intra_op_threads)

    def run(self, net: nn.Module, x: np.ndarray) -> np.ndarray:
        """Export ``net`` at ``x.shape``, compile it as this estimator does, run it once on ``x``; the logits.

        Checks the compiled network against PyTorch on the same weights; not timed.
        """
        compiled, _, _ = self.compile(export_onnx(net, x.shape, self.opset), tuple(x.shape))
        try:
            out = compiled.create_infer_request().infer({0: np.ascontiguousarray(x, dtype=np.float32)})
        except RuntimeError as err:
            raise MeasurementError(f"openvino: the network failed to run: {err}") from err
        return np.array(out[compiled.output(0)])

    def _backend_environment(self) -> dict[str, str]:
        env = {
            "openvino": self._ov.get_version(),
            "device_name": self.cpu_name,
            "performance_hint": "LATENCY",
            "num_streams": "1",
            "intra_op_threads": str(self.intra_op_threads),
            "inference_precision": INFERENCE_PRECISION[self.precision],
            "cpu_pinning": str(self.core.get_property("CPU", "ENABLE_CPU_PINNING")),
        }
        if self.precision == "int8":
            env["nncf"] = package_version("nncf")
        return env
