"""Brief training on the proxy task: how good a candidate is when it is trained.

:func:`train_briefly` runs a few epochs of SGD (Nesterov) or Adam with a cosine or constant
learning rate, reporting validation accuracy and loss after every epoch (so an early-stopping
scheduler can act on them). A non-finite loss raises :class:`~nas.core.errors.TrainingError`.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from nas.core.config import TrainConfig
from nas.core.errors import TrainingError
from nas.data import Dataset


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


def _optimizer(model: nn.Module, cfg: TrainConfig) -> torch.optim.Optimizer:
    if cfg.optimizer == "sgd":
        return torch.optim.SGD(
            model.parameters(), lr=cfg.lr, momentum=cfg.momentum, nesterov=cfg.momentum > 0,
            weight_decay=cfg.weight_decay,
        )
    if cfg.optimizer == "adam":
        return torch.optim.Adam(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    raise TrainingError(f"train.optimizer: unknown optimiser {cfg.optimizer!r}")


def evaluate(model: nn.Module, data: Dataset, device: torch.device, batch_size: int = 256) -> tuple[float, float]:
    """Validation accuracy and mean cross-entropy of ``model`` on ``data``."""
    model.eval()
    correct, loss_sum = 0, 0.0
    with torch.no_grad():
        for i in range(0, len(data.y_val), batch_size):
            x = data.batch(data.x_val[i : i + batch_size], device)
            y = data.labels(data.y_val[i : i + batch_size], device)
            logits = model(x)
            loss_sum += float(F.cross_entropy(logits, y, reduction="sum"))
            correct += int((logits.argmax(1) == y).sum())
    n = len(data.y_val)
    return correct / n, loss_sum / n


def train_briefly(
    model: nn.Module,
    data: Dataset,
    cfg: TrainConfig,
    device: torch.device,
    on_epoch: Callable[[EpochResult], None] | None = None,
    step_guard: Callable[[], AbstractContextManager[Any]] = nullcontext,
    step_check: Callable[[], None] | None = None,
) -> list[EpochResult]:
    """Train ``model`` for ``cfg.epochs`` epochs, evaluating after each.

    Args:
        model: a freshly built network (its initialisation is the caller's, seeded).
        data: the proxy task.
        cfg: epochs, batch size, optimiser, learning rate and schedule, seed.
        device: where to train.
        on_epoch: called with each epoch's result as soon as it is known.
        step_guard: entered around every training step and evaluation pass (the search passes
            :func:`latency_predictor.slot.device_work`, so no latency measurement of the same
            device overlaps a step).
        step_check: called after every training step and evaluation pass; raises to stop
            training (the search's per-trial time limit).

    Raises:
        TrainingError: the loss became NaN or infinite.
    """
    model.to(device)
    opt = _optimizer(model, cfg)
    n = len(data.y_train)
    steps_per_epoch = math.ceil(n / cfg.batch_size)
    total = steps_per_epoch * cfg.epochs
    sched = (
        torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=total)
        if cfg.lr_schedule == "cosine"
        else torch.optim.lr_scheduler.ConstantLR(opt, factor=1.0, total_iters=0)
    )
    rng = np.random.default_rng(cfg.seed)
    results: list[EpochResult] = []
    for epoch in range(1, cfg.epochs + 1):
        t0 = time.perf_counter()
        model.train()
        order = rng.permutation(n)
        loss_sum = 0.0
        for step in range(steps_per_epoch):
            idx = np.sort(order[step * cfg.batch_size : (step + 1) * cfg.batch_size])
            with step_guard():
                x = data.batch(data.x_train[idx], device)
                y = data.labels(data.y_train[idx], device)
                loss = F.cross_entropy(model(x), y)
                if not torch.isfinite(loss):
                    raise TrainingError(
                        f"training loss became {loss.detach().item()} at epoch {epoch}, step {step + 1}; "
                        f"try a lower train.lr (now {cfg.lr:g})"
                    )
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                sched.step()
                loss_sum += loss.detach().item() * len(idx)
            if step_check is not None:
                step_check()
        with step_guard():
            acc, val_loss = evaluate(model, data, device)
        if step_check is not None:
            step_check()
        if not math.isfinite(val_loss):
            raise TrainingError(f"validation loss became {val_loss} after epoch {epoch}; try a lower train.lr")
        res = EpochResult(epoch, acc, val_loss, loss_sum / n, time.perf_counter() - t0)
        results.append(res)
        if on_epoch is not None:
            on_epoch(res)
    return results
