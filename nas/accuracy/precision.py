"""A trained candidate's accuracy at the deployment precision (``latency.precision``).

A network deployed in int8 is not the float network the proxy task trained: its accuracy after
quantisation is what the reward should weigh against the int8 latency. After its last epoch a
candidate is therefore evaluated again, on the same validation images, at the precision the search
measures latency at, where that can be done here:

* ``int8``: the network is exported, quantised with ONNX Runtime's static QDQ quantisation
  (per-channel weights, calibrated on ``calibration_samples`` training images, normalised as in
  training: :func:`latency_predictor.measurement.quantize.quantize_qdq`) and run by ONNX Runtime on the CPU.
  It is the int8 network the ONNX Runtime backend times; for TensorRT's int8 it is an estimate
  (TensorRT calibrates its own scales), which ``python -m nas.optimize`` replaces by the engine's.
* ``fp16`` / ``bf16``: the network cast to that type, on the trial's CUDA device (half-precision
  convolutions on the CPU run orders of magnitude slower, so a CPU trial keeps the fp32 figure).

:func:`precision_evaluator` returns None where the precision is fp32 or cannot be evaluated here;
the trial then records the float accuracy with ``accuracy_precision=fp32``.
"""

from __future__ import annotations

import copy
from collections.abc import Callable

import numpy as np
import onnxruntime as ort
import torch
from torch import nn

from latency_predictor.measurement.export import INPUT_NAME, OUTPUT_NAME, export_onnx
from latency_predictor.measurement.quantize import quantize_qdq
from nas.data import TaskData

EVAL_BATCH = 64
"""Batch of the exported evaluation model (the last validation batch is padded to it)."""


def precision_evaluator(
    precision: str, data: TaskData, device: torch.device, calibration_samples: int, seed: int, threads: int = 1,
) -> Callable[[nn.Module], float] | None:
    """The validation accuracy of a trained network at ``precision``, or None where it is not evaluated.

    Args:
        precision: the search's ``latency.precision``.
        data: the proxy task (validation images; calibration from its training images).
        device: where the trial trains (fp16/bf16 are evaluated on CUDA only).
        calibration_samples: int8: training images the activation ranges are calibrated on.
        seed: seed of the calibration images' choice.
        threads: ONNX Runtime threads for the int8 evaluation.
    """
    if precision == "int8":
        return lambda model: int8_accuracy(model, data, calibration_samples, seed, threads)
    if precision in ("fp16", "bf16") and device.type == "cuda":
        if precision == "bf16" and not torch.cuda.is_bf16_supported():
            return None
        dtype = torch.float16 if precision == "fp16" else torch.bfloat16
        return lambda model: cast_accuracy(model, data, device, dtype)
    return None


def int8_accuracy(model: nn.Module, data: TaskData, calibration_samples: int, seed: int, threads: int = 1) -> float:
    """Validation accuracy of ``model`` quantised to int8 by ONNX Runtime (static QDQ), run by ONNX Runtime.

    Raises:
        LatencyError: the network cannot be exported or quantised.
    """
    net = copy.deepcopy(model).to("cpu").eval()
    shape = (EVAL_BATCH, *data.input_shape)
    xb, _ = data.sample_train(calibration_samples, seed)
    calibration = data.normalise(xb).numpy()
    if len(calibration) < EVAL_BATCH:  # fewer training images than one batch: repeat them
        calibration = np.resize(calibration, (EVAL_BATCH, *calibration.shape[1:]))
    quantized = quantize_qdq(export_onnx(net, shape), calibration, shape)
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.log_severity_level = 3
    session = ort.InferenceSession(quantized, so, providers=["CPUExecutionProvider"])
    correct = n = 0
    for xb, y in data.val_batches(EVAL_BATCH):
        x = data.normalise(xb).numpy()
        k = len(x)
        if k < EVAL_BATCH:
            x = np.concatenate([x, np.zeros((EVAL_BATCH - k, *x.shape[1:]), dtype=x.dtype)])
        logits = session.run([OUTPUT_NAME], {INPUT_NAME: x})[0][:k]
        correct += int((logits.argmax(1) == y.numpy()).sum())
        n += k
    return correct / n


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
