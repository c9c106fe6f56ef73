"""LiteRT backend: the LiteRT interpreter (``ai-edge-litert``) with its XNNPACK delegate on the CPU.

The network is converted from PyTorch by ``litert-torch`` (``litert_torch.convert``: ``torch.export``,
then lowering to a ``.tflite`` flatbuffer, in memory) and run by
``ai_edge_litert.interpreter.Interpreter`` with ``num_threads`` pinned to ``intra_op_threads``.
The interpreter applies XNNPACK, its default CPU delegate, when it allocates the tensors; the
delegate's nodes are read back from the interpreter (:func:`delegate_partitions`) and a network
XNNPACK did not take is refused, not timed on LiteRT's reference kernels.

Precision (:data:`PRECISIONS`): ``fp32``; ``int8`` by full-integer post-training quantisation:
the network is exported (``torch.export``), annotated by litert-torch's PT2E quantiser (static,
symmetric int8, per-channel weights), calibrated on ``calibration_samples`` images of
``calibration_data``, converted (``convert_pt2e``) and lowered, so every convolution and matrix
product, and the model's input and output, are int8 (checked on the converted model:
:func:`compute_precision`). The timed input is the sample image quantised with the input's scale.

Each estimator keeps the networks it converted in memory (:data:`CONVERTED_BYTES` at most), keyed by a
digest of the network's modules, weights and buffers, the input shape, the precision and, at int8, the
calibration images: timing a network again (a benchmark's second pass, a search's final latency pass, the
parity check) does not convert it again, and a network whose weights changed is converted afresh.

A network the converter rejects raises :class:`ExportError` with the converter's reason (that
candidate fails, the search goes on). ``ai_edge_litert`` and ``litert_torch`` are looked up when
the backend is built and imported when first used: without them the error names
``pip install 'latnas[litert]'``.
"""

from __future__ import annotations

import copy
import hashlib
import importlib.util
import itertools
import os
import time
from collections import Counter, OrderedDict
from collections.abc import Sequence
from types import ModuleType
from typing import Any, Unpack

import numpy as np
import torch
from torch import nn

from latency_predictor.errors import BackendUnavailableError, ConfigError, ExportError, MeasurementError
from latency_predictor.measurement.backends.base import (
    CommonOptions,
    MeasuredBackend,
    Prepared,
    check_choice,
    check_positive_int,
    check_threads,
)
from latency_predictor.measurement.environment import cpu_model, package_version
from latency_predictor.measurement.export import DEFAULT_INPUT_SHAPE, sample_input
from latency_predictor.measurement.quantize import CalibrationData, check_calibration, random_calibration_data
from search_spaces import Arch

LITERT_FIX = "pip install 'latnas[litert]' (ai-edge-litert and litert-torch)"
PRECISIONS = ("fp32", "int8")
"""What LiteRT's XNNPACK delegate runs here: fp32, and int8 from full-integer quantisation."""
MODULES = {"ai_edge_litert": "ai-edge-litert (the LiteRT interpreter)", "litert_torch": "litert-torch (the converter)"}
CONVERTED_BYTES = 256 * 2**20
"""The most bytes of converted networks an estimator keeps for reuse; the least recently used go first."""
COMPUTE_OPS = frozenset({"CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED", "BATCH_MATMUL", "TRANSPOSE_CONV"})
"""LiteRT operators that compute convolutions and matrix products."""
DELEGATE_OP = "DELEGATE"
"""The operator name of a node a delegate took over."""
CONVERTER_ERRORS: tuple[type[BaseException], ...] = (RuntimeError, ValueError, TypeError, NotImplementedError,
                                                     KeyError, AttributeError, AssertionError)
"""What litert-torch (torch.export, its lowering passes, the MLIR converter) raises on a network it cannot take."""


def require_modules() -> None:
    """Check that the interpreter and the converter are installed (without importing them: that takes seconds).

    Raises:
        BackendUnavailableError: one is missing (the message names the extra).
    """
    missing = [what for name, what in MODULES.items() if _missing(name)]
    if missing:
        raise BackendUnavailableError(f"LiteRT is not installed: {', '.join(missing)} missing; {LITERT_FIX}")


def _missing(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is None
    except ValueError:  # a module put in sys.modules as None: treated as absent, as its import would fail
        return True


def import_module(name: str) -> ModuleType:
    """``import name`` (``ai_edge_litert.interpreter``, ``litert_torch``), or an error naming the extra."""
    try:
        return importlib.import_module(name)
    except ImportError as err:
        raise BackendUnavailableError(f"LiteRT cannot be imported ({err}); {LITERT_FIX}") from None


def delegate_partitions(interpreter: Any) -> int:
    """Nodes of ``interpreter``'s execution plan that a delegate (XNNPACK, on the CPU) took over.

    LiteRT lists a delegated partition as one node named ``DELEGATE``; its Python API shows the
    node list only through ``_get_ops_details``.
    """
    return sum(op["op_name"] == DELEGATE_OP for op in interpreter._get_ops_details())


def compute_precision(interpreter: Any) -> dict[str, int]:
    """Convolutions and matrix products of the model by the type of their input (``float32``, ``int8``)."""
    dtypes = {t["index"]: np.dtype(t["dtype"]).name for t in interpreter.get_tensor_details()}
    counts: Counter[str] = Counter()
    for op in interpreter._get_ops_details():
        if op["op_name"] in COMPUTE_OPS:
            counts[dtypes.get(int(op["inputs"][0]), "unknown")] += 1
    return dict(counts)


def check_compute_precision(counts: dict[str, int], requested: str) -> None:
    """Refuse a converted model whose convolutions and matrix products are not all in ``requested``.

    Raises:
        MeasurementError: naming how many run in which type.
    """
    want = "int8" if requested == "int8" else "float32"
    if not counts or set(counts) != {want}:
        raise MeasurementError(f"precision {requested} was requested but the converted model computes its "
                               f"convolutions and matrix products in {counts or 'nothing'}")


class LiteRTBackend(MeasuredBackend):
    """Measures networks with the LiteRT interpreter and its XNNPACK delegate.

    Args:
        input_shape: deployment shape ``(N, C, H, W)``.
        precision: ``fp32`` or ``int8`` (full-integer post-training quantisation).
        intra_op_threads: the interpreter's ``num_threads``; at most the CPUs this process may use.
        calibration_samples: int8: images the activation ranges are calibrated on.
        calibration_data: int8: source of the calibration images (default: random normal images,
            enough for timing; a model to deploy is calibrated on training images).
        **common: the options every backend takes (:class:`CommonOptions`).

    Raises:
        ConfigError: a precision LiteRT does not run here, more threads than CPUs, bad counts or shape.
        BackendUnavailableError: the interpreter or the converter is not installed.
    """

    name = "litert"
    runtime_errors = (RuntimeError, ValueError)

    def __init__(
        self,
        input_shape: Sequence[int] = DEFAULT_INPUT_SHAPE,
        *,
        precision: str = "fp32",
        intra_op_threads: int = 1,
        calibration_samples: int = 32,
        calibration_data: CalibrationData | None = None,
        **common: Unpack[CommonOptions],
    ) -> None:
        check_choice("precision", precision, ["fp32", "fp16", "bf16", "int8"])
        if precision not in PRECISIONS:
            raise ConfigError(
                f"precision {precision!r} cannot run on LiteRT's XNNPACK CPU delegate as this backend drives it, "
                f"which runs {list(PRECISIONS)} (int8: full-integer quantisation)"
            )
        self.intra_op_threads = check_threads(intra_op_threads)
        self.calibration_samples = check_positive_int("calibration_samples", calibration_samples)
        self.calibration_data = calibration_data or random_calibration_data
        self._converted: OrderedDict[str, bytes] = OrderedDict()
        super().__init__(input_shape, precision, "cpu", **common)
        require_modules()

    def convert(self, net: nn.Module, input_shape: tuple[int, ...]) -> bytes:
        """``net`` converted at ``input_shape`` to a LiteRT flatbuffer (full-integer at int8).

        Raises:
            ExportError: the converter rejected the network (its reason is included).
            ConfigError: ``calibration_data`` returned images of the wrong shape.
        """
        images = self._calibration_images(input_shape) if self.precision == "int8" else None
        key = network_digest(net, input_shape, self.precision, images)
        if key in self._converted:
            self._converted.move_to_end(key)
            return self._converted[key]
        model = self._convert(net, input_shape, images)
        self._converted[key] = model
        while len(self._converted) > 1 and sum(map(len, self._converted.values())) > CONVERTED_BYTES:
            self._converted.popitem(last=False)
        return model

    def _calibration_images(self, input_shape: tuple[int, ...]) -> torch.Tensor:
        batch = input_shape[0]
        count = -(-self.calibration_samples // batch) * batch
        return torch.from_numpy(check_calibration(self.calibration_data(count, input_shape), input_shape))

    def _convert(self, net: nn.Module, input_shape: tuple[int, ...], images: torch.Tensor | None) -> bytes:
        os.environ.setdefault("LITERT_TORCH_SHOW_PROGRESS", "n")  # its progress lines would flood a search's log
        litert_torch = import_module("litert_torch")
        x = (sample_input(input_shape),)
        # The converter reads channels-last weights (a network trained channels-last on the CPU) as if they were
        # contiguous and computes other outputs; a contiguous copy converts right, and the caller's network stays.
        if any(not p.is_contiguous() for p in itertools.chain(net.parameters(), net.buffers())):
            net = copy.deepcopy(net)
            for t in itertools.chain(net.parameters(), net.buffers()):
                t.data = t.data.contiguous()
        try:
            with torch.no_grad():
                if images is not None:
                    return self._convert_int8(litert_torch, net, x, images, input_shape[0])
                return bytes(litert_torch.convert(net, x).model_content())
        except CONVERTER_ERRORS as err:
            # the first line is the reason; torch.export appends pages of debugging advice (kept in __cause__)
            reason = next(iter(str(err).strip().splitlines()), "")
            raise ExportError(f"LiteRT's converter (litert-torch) rejected the network: "
                              f"{type(err).__name__}: {reason}") from err

    def _convert_int8(self, litert_torch: ModuleType, net: nn.Module, x: tuple[torch.Tensor], images: torch.Tensor,
                      batch: int) -> bytes:
        from litert_torch.quantize.pt2e_quantizer import PT2EQuantizer, get_symmetric_quantization_config
        from litert_torch.quantize.quant_config import QuantConfig
        from torchao.quantization.pt2e import move_exported_model_to_eval
        from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

        quantizer = PT2EQuantizer().set_global(get_symmetric_quantization_config(is_per_channel=True, is_dynamic=False))
        observed = prepare_pt2e(torch.export.export(net, x).module(), quantizer)
        for i in range(0, len(images), batch):
            observed(images[i:i + batch])
        quantized = move_exported_model_to_eval(convert_pt2e(observed, fold_quantize=False))
        model = litert_torch.convert(quantized, x, quant_config=QuantConfig(pt2e_quantizer=quantizer))
        return bytes(model.model_content())

    def interpreter(self, model: bytes) -> Any:
        """An interpreter of ``model`` with :attr:`intra_op_threads` threads, tensors allocated, XNNPACK checked.

        Raises:
            MeasurementError: LiteRT could not load the model, or it computes in another precision.
            BackendUnavailableError: the XNNPACK delegate took no part of the network.
        """
        lite = import_module("ai_edge_litert.interpreter")
        try:
            interp = lite.Interpreter(model_content=model, num_threads=self.intra_op_threads,
                                      experimental_op_resolver_type=lite.OpResolverType.AUTO)
            interp.allocate_tensors()
        except (RuntimeError, ValueError) as err:
            raise MeasurementError(f"LiteRT could not load the converted network: {err}") from err
        if not delegate_partitions(interp):
            raise BackendUnavailableError("LiteRT's XNNPACK delegate took no part of the network: it would run on "
                                          "LiteRT's reference kernels, which no deployment uses")
        check_compute_precision(compute_precision(interp), self.precision)
        return interp

    def _prepare(self, arch: Arch, net: nn.Module, input_shape: tuple[int, ...]) -> Prepared:
        t0 = time.perf_counter()
        model = self.convert(net, input_shape)
        t1 = time.perf_counter()
        interp = self.interpreter(model)
        session_s = time.perf_counter() - t1
        detail = interp.get_input_details()[0]
        interp.set_tensor(detail["index"], _as_input(sample_input(input_shape).numpy(), detail))
        try:
            interp.invoke()
        except (RuntimeError, ValueError) as err:
            raise MeasurementError(f"litert: the converted network failed to run: {err}") from err
        counts = compute_precision(interp)
        extra: dict[str, Any] = {
            "tflite_bytes": len(model), "xnnpack_partitions": delegate_partitions(interp),
            "compute_precision": ", ".join(f"{n} {t}" for t, n in sorted(counts.items())),
        }
        if self.precision == "int8":
            extra["quantization"] = (f"full-integer post-training (PT2E, symmetric int8, per-channel weights), "
                                     f"{self.calibration_samples} calibration images")
        return Prepared(run_once=interp.invoke, stage_s={"convert_s": t1 - t0, "session_s": session_s},
                        extra=extra, resources=(interp,), cpu_threads=self.intra_op_threads)

    def run(self, net: nn.Module, x: np.ndarray) -> np.ndarray:
        """Convert ``net`` at ``x.shape``, run it once on ``x`` as this estimator does; the logits (dequantised).

        Checks the converted network against PyTorch on the same weights; not timed.
        """
        return self.run_model(self.convert(net, tuple(x.shape)), x)

    def run_model(self, model: bytes, x: np.ndarray) -> np.ndarray:
        """Run a converted ``model`` once on ``x`` (quantised for an int8 input); its output, dequantised."""
        interp = self.interpreter(model)
        detail, out = interp.get_input_details()[0], interp.get_output_details()[0]
        interp.set_tensor(detail["index"], _as_input(np.asarray(x, dtype=np.float32), detail))
        try:
            interp.invoke()
        except (RuntimeError, ValueError) as err:
            raise MeasurementError(f"litert: the network failed to run: {err}") from err
        y = interp.get_tensor(out["index"])
        scale, zero = out["quantization"]
        return (y.astype(np.float32) - zero) * scale if scale else np.asarray(y, dtype=np.float32)

    def _backend_environment(self) -> dict[str, str]:
        return {
            "ai_edge_litert": package_version("ai-edge-litert"),
            "litert_torch": package_version("litert-torch"),
            "device_name": cpu_model(),
            "delegate": "XNNPACK",
            "intra_op_threads": str(self.intra_op_threads),
        }


def network_digest(net: nn.Module, input_shape: Sequence[int], precision: str, images: torch.Tensor | None) -> str:
    """A digest of what a conversion of ``net`` depends on: its modules (their classes and settings, as ``repr``
    gives them), every parameter and buffer (by name, type, shape and value, in either memory layout), the input
    shape, the precision and the int8 calibration images."""
    h = hashlib.sha256(repr((type(net).__module__, repr(net), tuple(input_shape), precision)).encode())
    for name, t in itertools.chain(net.named_parameters(), net.named_buffers()):
        h.update(f"{name} {t.dtype} {tuple(t.shape)}".encode())
        h.update(t.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
    if images is not None:
        h.update(images.numpy().tobytes())
    return h.hexdigest()


def _as_input(x: np.ndarray, detail: dict[str, Any]) -> np.ndarray:
    """``x`` in the type the model's input takes: quantised with its scale and zero point for an int8 input."""
    dtype = np.dtype(detail["dtype"])
    if dtype == np.float32:
        return np.ascontiguousarray(x, dtype=np.float32)
    scale, zero = detail["quantization"]
    info = np.iinfo(dtype)
    return np.clip(np.round(x / scale + zero), info.min, info.max).astype(dtype)
