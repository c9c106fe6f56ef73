"""INT8 with ONNX Runtime: static quantisation in QDQ format, and the check that it really runs in int8.

:func:`quantize_qdq` follows ONNX Runtime's documented recipe for CNNs on the CPU: the float model
is pre-processed (``quant_pre_process``: shape inference and the graph clean-up that lets every
convolution's bias be an initializer), then ``quantize_static`` inserts QuantizeLinear /
DequantizeLinear pairs with activation ranges calibrated on the given images (MinMax by default)
and per-channel int8 weights. On x86 CPUs without VNNI, unsigned 8-bit activations with signed
8-bit weights (U8S8) is the fast combination for ONNX Runtime's kernels (signed activations run
several times slower on AVX2), so uint8 activations are the default.

ONNX Runtime executes a QDQ model by fusing each ``DequantizeLinear -> Conv -> QuantizeLinear``
into an int8 kernel (``QLinearConv``) when it can; where it cannot, the convolution quietly runs
in float between the dequantise and quantise nodes. A latency labelled int8 must not be such a
float figure, so :func:`precision_of_graph` reads the graph ONNX Runtime actually optimised for
the session (``SessionOptions.optimized_model_filepath``) and :func:`check_graph_precision` refuses
an "int8" session in which any convolution or matrix product still computes in float, and an
"fp32" session that computes in int8.
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from latency_predictor.errors import ConfigError, ExportError, MeasurementError

CalibrationData = Callable[[int, tuple[int, ...]], np.ndarray]
"""``(count, input_shape) -> array of shape (count, *input_shape[1:])``: calibration images."""

INT8_COMPUTE_OPS: frozenset[str] = frozenset({
    "QLinearConv", "ConvInteger", "QGemm", "QLinearMatMul", "MatMulInteger", "DynamicQuantizeMatMul",
})
"""Operators of an optimised ONNX Runtime graph that compute convolutions or matrix products in int8."""
FLOAT_COMPUTE_OPS: frozenset[str] = frozenset({"Conv", "FusedConv", "Gemm", "FusedGemm", "MatMul", "FusedMatMul"})
"""The same operators computing in float (``com.microsoft.nchwc`` convolutions are also called ``Conv``)."""
QDQ_OPS: frozenset[str] = frozenset({"QuantizeLinear", "DequantizeLinear"})
ACTIVATION_TYPES = ("uint8", "int8")
CALIBRATION_METHODS = ("minmax", "entropy", "percentile")


def random_calibration_data(count: int, input_shape: tuple[int, ...]) -> np.ndarray:
    """``count`` reproducible standard-normal images: enough to *time* a quantised network.

    The calibration images set the activation scales, which decide the accuracy; the speed of the
    int8 kernels does not depend on them. A model to deploy is calibrated on real images
    (``python -m nas.optimize``).
    """
    rng = np.random.default_rng(0)
    return rng.standard_normal((count, *input_shape[1:]), dtype=np.float32)


@dataclass(frozen=True)
class QuantizeSettings:
    """How :func:`quantize_qdq` quantises.

    Attributes:
        per_channel: one weight scale per output channel (the accurate choice for convolutions).
        activation_type: ``uint8`` (U8S8: the fast kernels on x86 without VNNI) or ``int8``.
        calibrate_method: ``minmax``, ``entropy`` or ``percentile`` (ONNX Runtime's calibrators).
        reduce_range: 7-bit weights, for CPUs whose int8 dot products can saturate (x86 without VNNI).
    """

    per_channel: bool = True
    activation_type: str = "uint8"
    calibrate_method: str = "minmax"
    reduce_range: bool = False

    def __post_init__(self) -> None:
        if self.activation_type not in ACTIVATION_TYPES:
            raise ConfigError(f"activation_type must be one of {list(ACTIVATION_TYPES)}, got {self.activation_type!r}")
        if self.calibrate_method not in CALIBRATION_METHODS:
            raise ConfigError(
                f"calibrate_method must be one of {list(CALIBRATION_METHODS)}, got {self.calibrate_method!r}"
            )

    def describe(self) -> str:
        """The settings in words, for reports."""
        weights = "per-channel" if self.per_channel else "per-tensor"
        return (f"static QDQ, {weights} int8 weights{' (7-bit)' if self.reduce_range else ''}, "
                f"{self.activation_type} activations, {self.calibrate_method} calibration")


def check_calibration(images: np.ndarray, input_shape: tuple[int, ...], min_images: int = 1) -> np.ndarray:
    """``images`` as a contiguous float32 array, checked against the network's input.

    Raises:
        ConfigError: not ``(N, C, H, W)`` with the input's ``C, H, W``, fewer than ``min_images``
            or fewer than one batch of ``input_shape[0]``, or values that are not finite.
    """
    x = np.asarray(images)
    want = tuple(input_shape[1:])
    if x.ndim != 4 or tuple(x.shape[1:]) != want:
        raise ConfigError(
            f"calibration images have shape {list(x.shape)}; the network takes (N, {', '.join(map(str, want))})"
        )
    need = max(min_images, input_shape[0])
    if len(x) < need:
        raise ConfigError(f"{len(x)} calibration images are too few: at least {need} are needed")
    x = np.ascontiguousarray(x, dtype=np.float32)
    if not np.all(np.isfinite(x)):
        raise ConfigError("calibration images contain NaN or infinite values")
    return x


class _Reader:
    """ONNX Runtime's ``CalibrationDataReader`` protocol over an array, one batch of the input shape at a time."""

    def __init__(self, input_name: str, images: np.ndarray, batch: int) -> None:
        whole = len(images) - len(images) % batch
        self._batches = iter([images[i:i + batch] for i in range(0, whole, batch)])
        self._name = input_name

    def get_next(self) -> dict[str, np.ndarray] | None:
        x = next(self._batches, None)
        return None if x is None else {self._name: x}

    def rewind(self) -> None:  # the calibrators read the data once; rewinding is not needed
        return None


@contextmanager
def _quiet_root_logger() -> Iterator[None]:
    # ONNX Runtime's quantisation tools log advice through the root logger at WARNING.
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)
    try:
        yield
    finally:
        root.setLevel(level)


def quantize_qdq(
    model: bytes, calibration: np.ndarray, input_shape: tuple[int, ...], settings: QuantizeSettings | None = None,
) -> bytes:
    """Quantise a float ONNX model to int8 (QDQ format), calibrated on ``calibration``.

    Args:
        model: the float model (one input of ``input_shape``).
        calibration: images ``(N, C, H, W)``, normalised as the network's inputs are; fed in
            batches of ``input_shape[0]`` (a partial last batch is left out).
        input_shape: the model's input shape.
        settings: quantisation settings (default :class:`QuantizeSettings`).

    Raises:
        ConfigError: calibration images of the wrong shape, or fewer than one batch.
        ExportError: ONNX Runtime's pre-processing or quantisation failed (its message is included).
    """
    import onnx  # here, not at the top: the package's import pays for it only when it quantises (a second on two cores)
    from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static
    from onnxruntime.quantization.shape_inference import quant_pre_process

    s = settings or QuantizeSettings()
    images = check_calibration(calibration, input_shape)
    graph = onnx.load_from_string(model).graph
    input_name = graph.input[0].name
    method = {"minmax": CalibrationMethod.MinMax, "entropy": CalibrationMethod.Entropy,
              "percentile": CalibrationMethod.Percentile}[s.calibrate_method]
    act = QuantType.QUInt8 if s.activation_type == "uint8" else QuantType.QInt8
    with tempfile.TemporaryDirectory(prefix="latnas-quantize-") as tmp, _quiet_root_logger():
        src, pre, out = Path(tmp) / "float.onnx", Path(tmp) / "pre.onnx", Path(tmp) / "int8.onnx"
        src.write_bytes(model)
        try:
            quant_pre_process(str(src), str(pre))
            quantize_static(
                str(pre), str(out), _Reader(input_name, images, input_shape[0]), quant_format=QuantFormat.QDQ,
                per_channel=s.per_channel, reduce_range=s.reduce_range, activation_type=act,
                weight_type=QuantType.QInt8, calibrate_method=method, calibration_providers=["CPUExecutionProvider"],
            )
        except (RuntimeError, ValueError, TypeError, KeyError, onnx.checker.ValidationError) as err:
            raise ExportError(f"ONNX Runtime could not quantise the network: {type(err).__name__}: {err}") from err
        return out.read_bytes()


@dataclass(frozen=True)
class GraphPrecision:
    """What an optimised ONNX Runtime graph computes in.

    Attributes:
        int8_ops: convolutions and matrix products with int8 kernels.
        float_ops: convolutions and matrix products computing in float.
        qdq_ops: QuantizeLinear / DequantizeLinear nodes left (at the int8 section's borders).
    """

    int8_ops: int
    float_ops: int
    qdq_ops: int

    @property
    def precision(self) -> str:
        """``int8`` when every convolution and matrix product runs in int8, ``fp32`` when none does, else ``mixed``."""
        if self.int8_ops and not self.float_ops:
            return "int8"
        return "fp32" if not self.int8_ops else "mixed"

    def describe(self) -> str:
        """In words, for records."""
        total = self.int8_ops + self.float_ops
        return f"{self.int8_ops} of {total} convolutions and matrix products in int8"


def precision_of_graph(optimized_model: Path | bytes) -> GraphPrecision:
    """Count the int8 and float compute operators of a graph ONNX Runtime optimised (and serialised)."""
    import onnx

    model = (onnx.load_from_string(optimized_model) if isinstance(optimized_model, bytes)
             else onnx.load(str(optimized_model)))
    ops = [n.op_type for n in model.graph.node]
    return GraphPrecision(
        int8_ops=sum(o in INT8_COMPUTE_OPS for o in ops), float_ops=sum(o in FLOAT_COMPUTE_OPS for o in ops),
        qdq_ops=sum(o in QDQ_OPS for o in ops),
    )


def check_graph_precision(found: GraphPrecision, requested: str) -> None:
    """Refuse a session whose optimised graph does not compute in the ``requested`` precision.

    Raises:
        MeasurementError: ``int8`` requested and a convolution or matrix product computes in float
            (or none in int8); ``fp32`` requested and some compute in int8.
    """
    if requested == "int8" and found.precision != "int8":
        raise MeasurementError(
            f"precision int8 was requested but ONNX Runtime runs {found.describe()}: the rest would be timed in "
            "float; the network's quantised form is not fully supported by ONNX Runtime's int8 kernels here"
        )
    if requested == "fp32" and found.int8_ops:
        raise MeasurementError(
            f"precision fp32 was requested but the model is quantised ({found.describe()}); measure it with "
            "precision='int8'"
        )
