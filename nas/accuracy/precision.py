"""A trained candidate's accuracy at the deployment precision (``latency.precision``).

A network deployed in int8 is not the float network the proxy task trained: its accuracy after
quantisation is what the reward should weigh against the int8 latency. After its last epoch a
candidate is therefore evaluated again, on the same validation images, at the precision the search
measures latency at, where that can be done here:

* ``int8``: the network is exported and quantised by the deploying runtime's own int8 path,
  calibrated on ``calibration_samples`` training images normalised as in training, and run by that
  runtime on the CPU (:data:`INT8_RUNTIMES`):

  - ``latency=openvino``: NNCF's post-training quantisation, compiled by OpenVINO's CPU plugin
    (:meth:`~latency_predictor.measurement.backends.openvino_backend.OpenVinoBackend.quantize`, as
    the backend and ``nas.optimize`` quantise);
  - any other backend: ONNX Runtime's static QDQ quantisation (per-channel weights:
    :func:`latency_predictor.measurement.quantize.quantize_qdq`), run by ONNX Runtime. It is the int8
    network the ONNX Runtime backend times; for TensorRT's and LiteRT's int8 it is an estimate
    (they calibrate their own scales), which ``python -m nas.optimize`` replaces by the engine's.
* ``fp16`` / ``bf16``: the network cast to that type, on the trial's CUDA device (half-precision
  convolutions on the CPU run orders of magnitude slower, so a CPU trial keeps the fp32 figure).

:func:`precision_evaluator` returns None where the precision is fp32 or cannot be evaluated here;
the trial then records the float accuracy with ``accuracy_precision=fp32``.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import onnxruntime as ort
import torch
from torch import nn

from latency_predictor.measurement.backends import OpenVinoBackend
from latency_predictor.measurement.export import INPUT_NAME, OUTPUT_NAME, export_onnx
from latency_predictor.measurement.quantize import quantize_qdq
from nas.data import TaskData

EVAL_BATCH = 64
"""Batch of the exported evaluation model (the last validation batch is padded to it)."""

INT8_RUNTIMES = {"openvino": "openvino"}
"""Latency backend -> the runtime whose int8 path quantises and runs the network the reward scores;
any other backend: ``onnxruntime``."""

Runner = Callable[[np.ndarray], np.ndarray]
"""Runs one normalised batch of :data:`EVAL_BATCH` images and returns the logits."""


@dataclass(frozen=True)
class PrecisionEvaluator:
    """The validation accuracy of a trained network at a precision, by one runtime.

    Attributes:
        precision: ``int8``, ``fp16`` or ``bf16``.
        runtime: what quantises (int8) or casts it and runs it: ``onnxruntime``, ``openvino`` or ``torch``.
        evaluate: the trained network -> its validation accuracy at ``precision``.
    """

    precision: str
    runtime: str
    evaluate: Callable[[nn.Module], float]

    def __call__(self, model: nn.Module) -> float:
        return self.evaluate(model)


def int8_runtime(backend: str) -> str:
    """The runtime whose int8 network the reward scores when latency is timed by ``backend``."""
    return INT8_RUNTIMES.get(backend, "onnxruntime")


def precision_evaluator(
    precision: str, backend: str, data: TaskData, device: torch.device, calibration_samples: int, seed: int,
    threads: int = 1,
) -> PrecisionEvaluator | None:
    """The validation accuracy of a trained network at ``precision``, or None where it is not evaluated.

    Args:
        precision: the search's ``latency.precision``.
        backend: the search's latency backend (``latency.backend``): int8 is quantised and run by its
            runtime where it has its own here (:data:`INT8_RUNTIMES`).
        data: the proxy task (validation images; calibration from its training images).
        device: where the trial trains (fp16/bf16 are evaluated on CUDA only).
        calibration_samples: int8: training images the activation ranges are calibrated on.
        seed: seed of the calibration images' choice.
        threads: the int8 runtime's threads.
    """
    if precision == "int8":
        runtime = int8_runtime(backend)
        return PrecisionEvaluator(
            precision, runtime, lambda model: int8_accuracy(model, data, calibration_samples, seed, threads, runtime))
    if precision in ("fp16", "bf16") and device.type == "cuda":
        if precision == "bf16" and not torch.cuda.is_bf16_supported():
            return None
        dtype = torch.float16 if precision == "fp16" else torch.bfloat16
        return PrecisionEvaluator(precision, "torch", lambda model: cast_accuracy(model, data, device, dtype))
    return None


def int8_accuracy(model: nn.Module, data: TaskData, calibration_samples: int, seed: int, threads: int = 1,
                  runtime: str = "onnxruntime") -> float:
    """Validation accuracy of ``model`` quantised to int8 by ``runtime`` and run by it.

    ``onnxruntime``: static QDQ quantisation, run by ONNX Runtime; ``openvino``: NNCF's post-training
    quantisation, run by OpenVINO's CPU plugin. Both are calibrated on the same ``calibration_samples``
    training images.

    Raises:
        LatencyError: the network cannot be exported, quantised or compiled, or OpenVINO is not installed.
    """
    net = copy.deepcopy(model).to("cpu").eval()
    shape = (EVAL_BATCH, *data.input_shape)
    xb, _ = data.sample_train(calibration_samples, seed)
    calibration = data.normalise(xb).numpy()
    if len(calibration) < EVAL_BATCH:  # fewer training images than one batch: repeat them
        calibration = np.resize(calibration, (EVAL_BATCH, *calibration.shape[1:]))
    onnx_model = export_onnx(net, shape)
    if runtime == "openvino":
        run = _openvino_int8(onnx_model, calibration, shape, threads)
    else:
        run = _onnxruntime_int8(onnx_model, calibration, shape, threads)
    correct = n = 0
    for xb, y in data.val_batches(EVAL_BATCH):
        x = data.normalise(xb).numpy()
        k = len(x)
        if k < EVAL_BATCH:
            x = np.concatenate([x, np.zeros((EVAL_BATCH - k, *x.shape[1:]), dtype=x.dtype)])
        logits = run(x)[:k]
        correct += int((logits.argmax(1) == y.numpy()).sum())
        n += k
    return correct / n


def _onnxruntime_int8(onnx_model: bytes, calibration: np.ndarray, shape: tuple[int, ...], threads: int) -> Runner:
    """ONNX Runtime's session of ``onnx_model`` quantised statically (QDQ) on ``calibration``."""
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.log_severity_level = 3
    session = ort.InferenceSession(quantize_qdq(onnx_model, calibration, shape), so,
                                   providers=["CPUExecutionProvider"])
    return lambda x: np.asarray(session.run([OUTPUT_NAME], {INPUT_NAME: x})[0])


def _openvino_int8(onnx_model: bytes, calibration: np.ndarray, shape: tuple[int, ...], threads: int) -> Runner:
    """OpenVINO's CPU plugin running ``onnx_model`` quantised by NNCF on ``calibration`` (the backend's own
    quantisation and compile settings; its compiled graph checked to run in int8)."""
    ov = OpenVinoBackend(shape, precision="int8", intra_op_threads=threads, slot=False)
    compiled, _ = ov.compile_model(ov.quantize(ov.read(onnx_model), calibration, shape[0]))
    request = compiled.create_infer_request()
    return lambda x: np.array(request.infer({0: x})[compiled.output(0)])


def cast_accuracy(model: nn.Module, data: TaskData, device: torch.device, dtype: torch.dtype) -> float:
    """Validation accuracy of ``model`` with weights and inputs cast to ``dtype`` (as the torch backend runs it)."""
    net = copy.deepcopy(model).to(device=device, dtype=dtype).eval()
    correct = n = 0
    with torch.no_grad():
        for xb, y in data.val_batches(256, device):
            logits = net(data.normalise(xb).to(dtype))
            correct += int((logits.argmax(1) == y).sum())
            n += len(y)
    return correct / n
