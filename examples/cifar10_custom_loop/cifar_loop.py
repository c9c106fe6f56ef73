"""A training loop of your own for CIFAR-10 candidates: AdamW, a one-cycle learning rate, mixup and flips.

The search loads CIFAR-10 itself (``data=cifar10_jpeg data.path=<archive>``: decoded once, cached,
split into training and validation images) and hands every candidate's evaluation the same split
as ``context.data``; this function trains the network its own way and returns the validation
accuracy. Settings come from ``accuracy.options`` (``context.options``).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn


def _validate(model: nn.Module, data: Any, device: torch.device) -> tuple[float, float]:
    model.eval()
    correct, loss_sum, n = 0, 0.0, 0
    with torch.no_grad():
        for xb, y in data.val_batches(256, device):
            logits = model(data.normalise(xb))
            loss_sum += float(F.cross_entropy(logits, y, reduction="sum"))
            correct += int((logits.argmax(1) == y).sum())
            n += len(y)
    return correct / n, loss_sum / n


def evaluate(model: nn.Module, context: Any) -> dict[str, float]:
    """Train for ``context.epochs`` epochs; the score is the validation accuracy (in [0, 1])."""
    opts = context.options
    lr, batch = float(opts.get("lr", 2e-3)), int(opts.get("batch_size", 128))
    alpha = float(opts.get("mixup_alpha", 0.2))
    data, device = context.data, context.device
    model.to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=float(opts.get("weight_decay", 5e-4)))
    steps = max(1, math.ceil(data.n_train / batch) * context.epochs)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=lr, total_steps=steps, pct_start=0.25)
    rng = np.random.default_rng(context.seed)
    accuracy = val_loss = 0.0
    for _ in range(context.epochs):
        model.train()
        for xb, y in data.train_batches(batch, rng, device):
            x = data.normalise(xb)
            flip = torch.from_numpy(rng.random(len(x)) < 0.5).to(device)
            x = torch.where(flip[:, None, None, None], x.flip(-1), x)
            lam = float(rng.beta(alpha, alpha)) if alpha > 0 else 1.0
            perm = torch.from_numpy(rng.permutation(len(x))).to(device)
            logits = model(lam * x + (1 - lam) * x[perm])
            loss = lam * F.cross_entropy(logits, y) + (1 - lam) * F.cross_entropy(logits, y[perm])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sched.step()
        accuracy, val_loss = _validate(model, data, device)
        context.report(accuracy, val_loss=val_loss)  # an early-stopping scheduler (ASHA) may stop a poor one here
    return {"score": accuracy, "val_loss": val_loss}
