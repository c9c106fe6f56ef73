"""Each deployment variant as an artefact of its own: made, run on the validation images, timed.

A variant is one FP32 network (the candidate's, or a pruned one) at one precision, made the way
the latency backend runs it, so what is timed is the file that is shipped:

==============  =========  ==========================================================================
backend         precision  artefact
==============  =========  ==========================================================================
onnxruntime     fp32       ``model.onnx`` (Conv+BN fused), run and timed by ONNX Runtime
onnxruntime     int8       ``model.onnx`` quantised statically (QDQ, per-channel weights, calibrated
                           on training images; :func:`latency_predictor.measurement.quantize.quantize_qdq`),
                           timed with ``precision='int8'``, which refuses a graph that would run any
                           convolution in float
tensorrt        fp32/fp16  ``model.engine`` built from the fused ONNX model
tensorrt        int8       ``model.engine`` calibrated on the same training images
torch           fp32/bf16  ``model.pt`` (weights in that type), run in eager PyTorch (fp16: CUDA)
openvino        fp32       ``model.xml``/``model.bin`` (OpenVINO IR of the fused ONNX model), run and timed
                           by OpenVINO's CPU plugin
openvino        int8       the same, quantised by NNCF (post-training, calibrated on the same training
                           images), timed with ``precision='int8'``, which refuses a graph with no
                           layer in int8
==============  =========  ==========================================================================

:func:`run_all` feeds the validation images through a variant in batches of the deployment batch
size and returns its logits; :func:`judge` turns them into accuracy, top-1 agreement and the
largest logit difference against the FP32 network's.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import torch
from torch import nn

from latency_predictor import LatencyResult
from latency_predictor.measurement.backends import (
    MeasuredBackend,
    OnnxRuntimeBackend,
    OpenVinoBackend,
    TensorRTBackend,
    TorchBackend,
)
from latency_predictor.measurement.backends.openvino_backend import QUANTIZATION as OPENVINO_QUANTIZATION
from latency_predictor.measurement.backends.ort_backend import ORT_ERRORS
from latency_predictor.measurement.backends.tensorrt_backend import load_or_build_engine
from latency_predictor.measurement.environment import usable_cpus
from latency_predictor.measurement.export import INPUT_NAME, OUTPUT_NAME
from latency_predictor.measurement.quantize import QuantizeSettings, quantize_qdq
from nas.core.errors import OptimizeError
from search_spaces import Arch

Batches = Callable[[], Iterable[tuple[np.ndarray, np.ndarray]]]
"""The validation images as ``(inputs, labels)`` batches (a fresh iterator per call)."""
Runner = Callable[[np.ndarray], np.ndarray]
"""One batch of the deployment shape -> its logits."""


@dataclass
class Network:
    """An FP32 network that variants are made from.

    Attributes:
        name: ``fp32`` (the candidate) or ``pruned-<ratio>``.
        arch: its architecture.
        net: the network, BatchNorm not folded, in inference mode.
        fused: the Conv+BN-fused copy.
        onnx: the fused network's ONNX model at the deployment shape.
        onnx_path: where that model is on disk.
        folder: where its variants' folders go.
    """

    name: str
    arch: Arch
    net: nn.Module
    fused: nn.Module
    onnx: bytes
    onnx_path: Path
    folder: Path


@dataclass
class Artefact:
    """A variant made: its files, how to run it, how to time it.

    Attributes:
        name: the variant's name (``int8``, ``pruned-0.3``, ``pruned-0.3-int8``, ``tensorrt-int8``).
        precision: what it computes in.
        source: the FP32 network it was made from.
        backend: the runtime that runs and times it.
        files: its files (their total size is the variant's size on disk).
        run: one batch -> logits.
        time: one measurement with the protocol (:class:`LatencyResult`).
        notes: how it was made (calibration, quantisation settings, engine).
    """

    name: str
    precision: str
    source: str
    backend: str
    files: list[Path]
    run: Runner
    time: Callable[[], LatencyResult]
    notes: dict[str, Any] = field(default_factory=dict)


def variant_name(network: str, precision: str, backend: str, extra_engine: bool = False) -> str:
    """``int8``, ``pruned-0.3-int8``, ``tensorrt-int8`` ...: the FP32 network's name, then the precision."""
    base = "" if network == "fp32" else network
    prec = "" if precision == "fp32" and not extra_engine else precision
    prefix = "tensorrt" if extra_engine else ""
    parts = [p for p in (base, prefix, prec) if p]
    return "-".join(parts) or "fp32"


def _ort_runner(model: bytes) -> Runner:
    so = ort.SessionOptions()
    so.intra_op_num_threads = usable_cpus()
    so.inter_op_num_threads = 1
    so.log_severity_level = 3
    session = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])

    def run(x: np.ndarray) -> np.ndarray:
        try:
            return np.asarray(session.run([OUTPUT_NAME], {INPUT_NAME: x})[0])
        except ORT_ERRORS as err:
            raise OptimizeError(f"ONNX Runtime could not run the variant: {err}") from None

    return run


def _torch_runner(net: nn.Module, device: str, dtype: torch.dtype) -> Runner:
    model = copy.deepcopy(net).to(device=device, dtype=dtype).eval()

    def run(x: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            return model(torch.from_numpy(x).to(device=device, dtype=dtype)).float().cpu().numpy()

    return run


@dataclass
class Maker:
    """Makes the variants of FP32 networks for one latency backend.

    Attributes:
        estimators: the backend at each precision to make (and fp32), built (and so checked) before any work.
        calibration: the INT8 calibration images at the deployment shape.
        quantize: the ONNX Runtime quantisation settings.
        calibration_note: where the calibration images came from, for the report.
    """

    estimators: dict[str, MeasuredBackend]
    calibration: np.ndarray
    quantize: QuantizeSettings
    calibration_note: str

    def make(self, network: Network, precision: str) -> Artefact:
        """The variant of ``network`` at ``precision`` with this backend.

        Raises:
            LatencyError: quantising, building or running the variant failed.
        """
        est = self.estimators[precision]
        if isinstance(est, OnnxRuntimeBackend):
            return self._onnxruntime(network, precision, est)
        if isinstance(est, TensorRTBackend):
            return self.tensorrt(network, precision, est, extra=False)
        if isinstance(est, TorchBackend):
            return self._torch(network, precision, est)
        if isinstance(est, OpenVinoBackend):
            return self._openvino(network, precision, est)
        raise OptimizeError(f"variants cannot be made for the {est.name} backend")

    def _onnxruntime(self, network: Network, precision: str, est: OnnxRuntimeBackend) -> Artefact:
        name = variant_name(network.name, precision, est.name)
        shape = est.input_shape
        notes: dict[str, Any] = {}
        if precision == "fp32":
            model, path = network.onnx, network.onnx_path
        else:  # int8: the only other precision ONNX Runtime runs on the CPU
            model = quantize_qdq(network.onnx, self.calibration, shape, self.quantize)
            path = network.folder / name / "model.onnx"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(model)
            notes = {"quantization": self.quantize.describe(), "calibration": self.calibration_note}
        return Artefact(name, precision, network.name, est.name, [path], _ort_runner(model),
                        lambda: est.measure_onnx(model, name=f"{name} {network.arch.encode()}"), notes)

    def _openvino(self, network: Network, precision: str, est: OpenVinoBackend) -> Artefact:
        name = variant_name(network.name, precision, est.name)
        model = est.read(network.onnx)
        notes: dict[str, Any] = {}
        if precision == "int8":  # the only other precision made by default on the CPU plugin
            model = est.quantize(model, self.calibration, est.input_shape[0])
            notes = {"quantization": OPENVINO_QUANTIZATION, "calibration": self.calibration_note}
        folder = network.folder / name
        folder.mkdir(parents=True, exist_ok=True)
        files = est.save(model, folder / "model.xml")
        compiled, found = est.compile_model(model)
        notes["runtime_precision"] = found.describe()
        request = compiled.create_infer_request()

        def run(x: np.ndarray) -> np.ndarray:
            try:
                return np.array(request.infer({0: x})[compiled.output(0)])
            except RuntimeError as err:
                raise OptimizeError(f"OpenVINO could not run the variant: {err}") from None

        label = f"{name} {network.arch.encode()}"
        return Artefact(name, precision, network.name, est.name, files, run,
                        lambda: est.measure_model(model, name=label), notes)

    def tensorrt(self, network: Network, precision: str, est: TensorRTBackend, extra: bool) -> Artefact:
        """A TensorRT engine of ``network`` (``extra``: an engine beside another backend's variants)."""
        name = variant_name(network.name, precision, est.name, extra_engine=extra)
        shape = est.input_shape
        cached = est.engine_path(network.arch.encode(), shape, network.onnx)
        engine, _ = load_or_build_engine(cached, lambda: est.build_engine(network.onnx, shape))
        path = network.folder / name / "model.engine"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(engine)
        notes: dict[str, Any] = {"tensorrt": est.trt_version, "gpu": est.gpu_name}
        if precision == "int8":
            notes["calibration"] = self.calibration_note
        arch, fused = network.arch, network.fused
        return Artefact(name, precision, network.name, est.name, [path],
                        lambda x: est.infer(engine, [x]), lambda: est.measure(arch, net=fused), notes)

    def _torch(self, network: Network, precision: str, est: TorchBackend) -> Artefact:
        name = variant_name(network.name, precision, est.name)
        path = network.folder / name / "model.pt"
        path.parent.mkdir(parents=True, exist_ok=True)
        cast = copy.deepcopy(network.net).to(dtype=est.dtype)
        torch.save(cast.state_dict(), path)
        arch, net = network.arch, network.net
        return Artefact(name, precision, network.name, est.name, [path], _torch_runner(net, est.device, est.dtype),
                        lambda: est.measure(arch, net=net), {"weights": str(est.dtype).replace("torch.", "")})


def trt_calibration(images: np.ndarray) -> Callable[[int, tuple[int, ...]], np.ndarray]:
    """TensorRT's calibration source over ``images`` (repeated when it asks for more than there are)."""

    def data(count: int, input_shape: tuple[int, ...]) -> np.ndarray:
        return np.resize(images, (count, *images.shape[1:])).astype(np.float32)

    return data


def run_all(run: Runner, batches: Batches) -> tuple[np.ndarray, np.ndarray]:
    """``run`` over every validation batch: the logits and the labels (a padded last batch is cut)."""
    outs, labels = [], []
    for x, y in batches():
        outs.append(np.asarray(run(x), dtype=np.float64)[: len(y)])
        labels.append(y)
    if not outs:
        raise OptimizeError("no validation images to evaluate the variants on")
    return np.concatenate(outs), np.concatenate(labels)


@dataclass(frozen=True)
class Figures:
    """A variant's outputs judged against the labels and an FP32 network's outputs.

    Attributes:
        accuracy: top-1 accuracy on the validation images.
        agreement: share of images whose top-1 class equals the FP32 network's.
        max_abs_diff: the largest absolute logit difference from the FP32 network.
        images: how many validation images.
    """

    accuracy: float
    agreement: float
    max_abs_diff: float
    images: int


def judge(logits: np.ndarray, labels: np.ndarray, reference: np.ndarray) -> Figures:
    """Accuracy of ``logits`` and their agreement with (and largest difference from) ``reference``."""
    if logits.shape != reference.shape:
        raise OptimizeError(f"a variant's outputs have shape {logits.shape}, the FP32 network's {reference.shape}")
    if not np.all(np.isfinite(logits)):
        return Figures(float("nan"), 0.0, float("inf"), len(labels))
    top = logits.argmax(1)
    return Figures(
        accuracy=float((top == labels).mean()), agreement=float((top == reference.argmax(1)).mean()),
        max_abs_diff=float(np.abs(logits - reference).max()), images=len(labels),
    )
