"""Training on the proxy task: how good a candidate is when it is trained.

:func:`train_briefly` runs the ``train`` group's recipe, the one a NAS practitioner expects:
SGD (Nesterov) or Adam; a linear warm-up then a cosine (or constant) learning rate; label
smoothing; no weight decay on normalisation layers and biases; batch augmentation on the device
(:mod:`nas.accuracy.augment`: padded crop and flip for small images, resized crop and flip for
larger ones); mixed precision (bf16, or fp16 with loss scaling) on CUDA; the channels-last memory
format on CUDA, and on a CPU whose oneDNN kernels are held below AVX-512 (:func:`channels_last_on`);
every random choice seeded. It reports validation accuracy and loss after every epoch (so an
early-stopping scheduler can act on them). A non-finite loss raises
:class:`~nas.core.errors.TrainingError`.
"""

from __future__ import annotations

import math
import os
import platform
import time
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from nas.accuracy.augment import make_augment
from nas.core.config import TrainConfig
from nas.core.errors import TrainingError
from nas.data import TaskData

LossFn = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]
"""A training loss of ``(logits, labels, inputs)``."""


@dataclass(frozen=True)
class EpochResult:
    """Validation figures after one epoch of training.

    Attributes:
        epoch: 1-based epoch number.
        accuracy: validation accuracy in [0, 1].
        val_loss: mean validation cross-entropy.
        train_loss: mean training cross-entropy over the epoch.
        seconds: wall time of the epoch, evaluation included.
    """

    epoch: int
    accuracy: float
    val_loss: float
    train_loss: float
    seconds: float


def resolve_device(spec: str) -> torch.device:
    """``auto``: CUDA when a GPU is visible, else CPU; ``cpu``/``cuda``/``cuda:N`` as given.

    Raises:
        TrainingError: CUDA requested where no GPU is visible.
    """
    if spec == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if spec.startswith("cuda") and not torch.cuda.is_available():
        raise TrainingError(f"train.device={spec} but no CUDA GPU is visible here (use train.device=auto or cpu)")
    return torch.device(spec)


def _param_groups(model: nn.Module, cfg: TrainConfig) -> list[dict[str, Any]]:
    """Weight decay on the weights of convolutions and linear layers only (not on norms or biases)."""
    if not cfg.no_decay_norm_bias:
        return [{"params": [p for p in model.parameters() if p.requires_grad], "weight_decay": cfg.weight_decay}]
    decay: list[nn.Parameter] = []
    no_decay: list[nn.Parameter] = []
    for p in model.parameters():
        if p.requires_grad:
            (no_decay if p.ndim <= 1 else decay).append(p)
    return [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def _optimizer(model: nn.Module, cfg: TrainConfig) -> torch.optim.Optimizer:
    return make_optimizer(_param_groups(model, cfg), cfg)


def make_optimizer(groups: list[dict[str, Any]], cfg: TrainConfig) -> torch.optim.Optimizer:
    """The recipe's optimiser (``train.optimizer``) over parameter ``groups`` (each with its weight decay)."""
    if cfg.optimizer == "sgd":
        return torch.optim.SGD(groups, lr=cfg.lr, momentum=cfg.momentum, nesterov=cfg.momentum > 0)
    if cfg.optimizer == "adam":
        return torch.optim.AdamW(groups, lr=cfg.lr) if cfg.weight_decay else torch.optim.Adam(groups, lr=cfg.lr)
    raise TrainingError(f"train.optimizer: unknown optimiser {cfg.optimizer!r}")


def lr_factor(step: int, total: int, warmup: int, schedule: str) -> float:
    """The learning rate's multiplier at ``step`` of ``total``: a linear warm-up over ``warmup``
    steps, then cosine annealing to zero (``cosine``) or the full rate (``constant``)."""
    if warmup > 0 and step < warmup:
        return (step + 1) / warmup
    if schedule == "constant":
        return 1.0
    progress = (step - warmup) / max(1, total - warmup)
    return 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))


def amp_dtype(cfg: TrainConfig, device: torch.device) -> torch.dtype | None:
    """The autocast dtype of ``train.amp`` on ``device`` (None: full precision).

    Raises:
        TrainingError: bf16 or fp16 asked for where the device cannot run it.
    """
    if cfg.amp == "off" or (cfg.amp == "auto" and device.type != "cuda"):
        return None
    if device.type != "cuda":
        raise TrainingError(f"train.amp={cfg.amp} needs a CUDA device; this trial trains on {device} (use auto or off)")
    if cfg.amp == "fp16":
        return torch.float16
    if cfg.amp == "bf16" or torch.cuda.is_bf16_supported():
        if not torch.cuda.is_bf16_supported():
            raise TrainingError(f"train.amp=bf16 but {torch.cuda.get_device_name(device)} does not support bf16")
        return torch.bfloat16
    return torch.float16  # auto on a GPU without bf16


ONEDNN_ISA_VARS = ("ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA")
"""oneDNN's variables that cap the instruction set of PyTorch's CPU convolutions; oneDNN reads them once,
when the process first runs one of its kernels, so they hold for the whole process."""
TRAINING_ISA = "AVX2"
"""The cap a search's trial processes get on an x86-64 CPU (:func:`trial_environment`)."""
_BELOW_AVX512 = frozenset({"SSE41", "AVX", "AVX2", "AVX2_VNNI", "AVX2_VNNI_2"})
_X86_64 = platform.machine().lower() in ("x86_64", "amd64")


def onednn_below_avx512() -> bool:
    """Whether this x86-64 process caps oneDNN below AVX-512 (``ONEDNN_MAX_CPU_ISA=AVX2`` or lower).

    There channels-last training on the CPU stays off oneDNN's AVX-512 kernels, with which it corrupted
    the heap in long processes, and it still trained faster than NCHW on the CPU measured (BENCHMARKS.md,
    "Training on the CPU").
    """
    if not _X86_64:
        return False
    for var in ONEDNN_ISA_VARS:
        value = os.environ.get(var, "").strip().upper()
        if value:
            return value in _BELOW_AVX512
    return False


def channels_last_on(cfg: TrainConfig, device: torch.device) -> bool:
    """Whether ``train.channels_last`` puts tensors in the channels-last memory format on ``device``:
    ``on``, or ``auto`` on CUDA and on a CPU whose oneDNN is held below AVX-512 (:func:`onednn_below_avx512`)."""
    if cfg.channels_last != "auto":
        return cfg.channels_last == "on"
    return device.type == "cuda" or (device.type == "cpu" and onednn_below_avx512())


def trial_environment(cfg: TrainConfig, times_torch_on_cpu: bool) -> dict[str, str]:
    """Environment variables for the processes of a search's trials: ``ONEDNN_MAX_CPU_ISA`` at
    :data:`TRAINING_ISA` where trials may train on an x86-64 CPU, so that ``train.channels_last=auto``
    trains channels-last there (:func:`channels_last_on`).

    None where the user set either of :data:`ONEDNN_ISA_VARS` (theirs holds), where ``channels_last``
    is ``off`` or training is on CUDA only, or where the trials time PyTorch itself on the CPU
    (``times_torch_on_cpu``): that latency must be the one the user deploys, with oneDNN's own choice.
    """
    if (not _X86_64 or any(os.environ.get(v) for v in ONEDNN_ISA_VARS)
            or cfg.channels_last == "off" or cfg.device.startswith("cuda") or times_torch_on_cpu):
        return {}
    return {ONEDNN_ISA_VARS[0]: TRAINING_ISA}


def recalibrate_batchnorm(net: nn.Module, batches: Iterable[torch.Tensor]) -> None:
    """Replace ``net``'s BatchNorm running statistics with those of ``batches`` (network inputs):
    reset, then averaged over the batches with equal weight (``momentum=None``), with only the
    BatchNorm layers in training mode (dropout and the rest stay in inference mode) and no
    gradients. The network ends in inference mode with its momenta as they were.

    The one home of BatchNorm recalibration: a supernet's subnet (:mod:`nas.oneshot.subnet`) and a
    pruned network (:mod:`nas.deploy.prune`) both use it.
    """
    norms = [m for m in net.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    momenta = [m.momentum for m in norms]
    for m in norms:
        m.reset_running_stats()
        m.momentum = None
    net.eval()
    for m in norms:
        m.train()
    with torch.no_grad():
        for xb in batches:
            net(xb)
    for m, momentum in zip(norms, momenta, strict=True):
        m.momentum = momentum
    net.eval()


def evaluate(model: nn.Module, data: TaskData, device: torch.device, batch_size: int = 256,
             autocast: torch.dtype | None = None, channels_last: bool = False) -> tuple[float, float]:
    """Validation accuracy and mean cross-entropy of ``model`` on ``data``."""
    model.eval()
    correct, loss_sum, n = 0, 0.0, 0
    with torch.no_grad():
        for xb, y in data.val_batches(batch_size, device):
            x = data.normalise(xb)
            if channels_last:
                x = x.contiguous(memory_format=torch.channels_last)
            with torch.autocast(device.type, dtype=autocast or torch.float32, enabled=autocast is not None):
                logits = model(x).float()
            loss_sum += float(F.cross_entropy(logits, y, reduction="sum"))
            correct += int((logits.argmax(1) == y).sum())
            n += len(y)
    return correct / n, loss_sum / n


def train_briefly(
    model: nn.Module,
    data: TaskData,
    cfg: TrainConfig,
    device: torch.device,
    on_epoch: Callable[[EpochResult], None] | None = None,
    step_guard: Callable[[], AbstractContextManager[Any]] = nullcontext,
    step_check: Callable[[], None] | None = None,
    loss_fn: LossFn | None = None,
) -> list[EpochResult]:
    """Train ``model`` for ``cfg.epochs`` epochs with the ``train`` group's recipe, evaluating after each.

    Args:
        model: a freshly built network (its initialisation is the caller's, seeded).
        data: the proxy task (in memory, streamed, or the user's datasets).
        cfg: the recipe: epochs, batch size, optimiser, learning rate, warm-up and schedule,
            label smoothing, augmentation, mixed precision, memory format, seed.
        device: where to train.
        on_epoch: called with each epoch's result as soon as it is known.
        step_guard: entered around every training step and evaluation pass (the search passes
            :func:`latency_predictor.measurement.slot.device_work`, so no latency measurement of the same
            device overlaps a step).
        step_check: called after every training step and evaluation pass; raises to stop
            training (the search's per-trial time limit).
        loss_fn: the training loss of ``(logits, labels, inputs)`` (the augmented, normalised batch
            the logits came from); None: cross-entropy with the recipe's label smoothing.
            Knowledge distillation passes a loss that also asks a teacher about ``inputs``.

    Raises:
        TrainingError: the loss became NaN or infinite, or the recipe cannot run on ``device``.
    """
    autocast = amp_dtype(cfg, device)
    channels_last = channels_last_on(cfg, device)
    model.to(device)
    if channels_last:
        model.to(memory_format=torch.channels_last)  # type: ignore[call-overload]
    opt = _optimizer(model, cfg)
    steps_per_epoch = math.ceil(data.n_train / cfg.batch_size)
    total = steps_per_epoch * cfg.epochs
    warmup = min(total, round(cfg.warmup_epochs * steps_per_epoch))
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: lr_factor(s, total, warmup, cfg.lr_schedule))
    scaler = torch.amp.GradScaler(device.type, enabled=autocast is torch.float16)
    # ``auto`` crops and flips images; the user's data (data=custom) may be anything else: only a named crop.
    augment = make_augment(cfg.augment if data.images or cfg.augment != "auto" else "none", data.resolution,
                           data.mirror_invariant)
    rng = np.random.default_rng(cfg.seed)
    gen = torch.Generator(device=device).manual_seed(cfg.seed)
    results: list[EpochResult] = []
    for epoch in range(1, cfg.epochs + 1):
        t0 = time.perf_counter()
        model.train()
        loss_sum, seen = 0.0, 0
        for step, (xb, y) in enumerate(data.train_batches(cfg.batch_size, rng, device)):
            with step_guard():
                x = augment(data.normalise(xb), gen)
                if channels_last:
                    x = x.contiguous(memory_format=torch.channels_last)
                with torch.autocast(device.type, dtype=autocast or torch.float32, enabled=autocast is not None):
                    logits = model(x)
                if loss_fn is None:
                    loss = F.cross_entropy(logits.float(), y, label_smoothing=cfg.label_smoothing)
                else:
                    loss = loss_fn(logits.float(), y, x)
                if not torch.isfinite(loss):
                    raise TrainingError(
                        f"training loss became {loss.detach().item()} at epoch {epoch}, step {step + 1}; "
                        f"try a lower train.lr (now {cfg.lr:g})"
                    )
                opt.zero_grad(set_to_none=True)
                scaler.scale(loss).backward()
                scaler.step(opt)
                scaler.update()
                sched.step()
                loss_sum += loss.detach().item() * len(y)
                seen += len(y)
            if step_check is not None:
                step_check()
        with step_guard():
            acc, val_loss = evaluate(model, data, device, autocast=autocast, channels_last=channels_last)
        if step_check is not None:
            step_check()
        if not math.isfinite(val_loss):
            raise TrainingError(f"validation loss became {val_loss} after epoch {epoch}; try a lower train.lr")
        res = EpochResult(epoch, acc, val_loss, loss_sum / max(seen, 1), time.perf_counter() - t0)
        results.append(res)
        if on_epoch is not None:
            on_epoch(res)
    return results
