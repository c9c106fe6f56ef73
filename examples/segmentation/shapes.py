"""Dense prediction on synthetic shapes: segment the bright shape in a noisy image.

Two functions a search calls (docs/custom.md):

* ``datasets``: the training and validation datasets, images ``(3, size, size)`` in [0, 1] with
  a random disc or rectangle, and its mask ``(1, size, size)`` as the target;
* ``evaluate``: puts a small head of its own on the candidate backbone (the space is
  ``features_only``: the network ends at its feature map), trains both for ``context.epochs``
  epochs and scores the candidate by the validation masks' intersection over union.

Nothing here imports LatNAS: the search hands the network and a context in.
"""

from __future__ import annotations

from typing import Any, cast

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import TensorDataset


def _shapes(n: int, size: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    grid = torch.arange(size, dtype=torch.float32)
    yy, xx = torch.meshgrid(grid, grid, indexing="ij")
    centre = torch.rand(n, 2, generator=g) * size * 0.6 + size * 0.2
    radius = torch.rand(n, generator=g) * size * 0.15 + size * 0.1
    disc = torch.rand(n, generator=g) < 0.5
    dx, dy = xx[None] - centre[:, 0, None, None], yy[None] - centre[:, 1, None, None]
    r = radius[:, None, None]
    inside = torch.where(disc[:, None, None], dx**2 + dy**2 <= r**2, (dx.abs() <= r) & (dy.abs() <= 0.6 * r))
    mask = inside.float()[:, None]
    colour = torch.rand(n, 3, 1, 1, generator=g) * 0.5 + 0.5
    image = 0.35 * torch.rand(n, 3, size, size, generator=g) + mask * colour * 0.6
    return image.clamp(0, 1), mask


def datasets(n_train: int = 512, n_val: int = 128, size: int = 32, seed: int = 0) -> dict[str, Any]:
    """Training and validation shapes (different seeds), one output channel: the mask's logit."""
    x_train, m_train = _shapes(n_train, size, seed)
    x_val, m_val = _shapes(n_val, size, seed + 1)
    return {"train": TensorDataset(x_train, m_train), "val": TensorDataset(x_val, m_val), "num_classes": 1}


class Segmenter(nn.Module):
    """The candidate backbone and a light head: 3x3 conv, 1x1 conv to one logit, upsampled to the input."""

    def __init__(self, backbone: nn.Module, feature_chs: int) -> None:
        super().__init__()
        self.backbone = backbone
        self.head = nn.Sequential(nn.Conv2d(feature_chs, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 1, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        logits = self.head(self.backbone(x))
        return F.interpolate(logits, size=x.shape[-2:], mode="bilinear", align_corners=False)


def _soft_dice(logits: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    # The shapes cover a small share of each image: BCE alone first learns "all background"; the
    # Dice term rewards overlap from the first steps.
    p = torch.sigmoid(logits)
    return 1 - (2 * (p * mask).sum() + 1) / (p.sum() + mask.sum() + 1)


def _iou(logits: torch.Tensor, mask: torch.Tensor) -> tuple[float, float]:
    pred = logits > 0
    truth = mask > 0.5
    return float((pred & truth).sum()), float((pred | truth).sum())


def evaluate(model: nn.Module, context: Any) -> dict[str, float]:
    """Train the backbone with the head for ``context.epochs`` epochs (Adam, BCE + Dice); the score is the
    validation IoU."""
    torch.manual_seed(context.seed)
    feature_chs = cast(int, model.feature_chs)  # a LatNAS backbone says how many channels its feature map has
    net = Segmenter(model, feature_chs).to(context.device)
    lr = float(context.options.get("lr", 3e-3))
    batch = int(context.options.get("batch_size", 32))
    opt = torch.optim.Adam(net.parameters(), lr=lr)
    rng = np.random.default_rng(context.seed)
    iou = bce = 0.0
    for _ in range(context.epochs):
        net.train()
        for x, mask in context.data.train_batches(batch, rng, context.device):
            logits = net(x)
            loss = F.binary_cross_entropy_with_logits(logits, mask) + _soft_dice(logits, mask)
            opt.zero_grad()
            loss.backward()
            opt.step()
        net.eval()
        inter = union = loss_sum = 0.0
        with torch.no_grad():
            for x, mask in context.data.val_batches(128, context.device):
                logits = net(x)
                loss_sum += float(F.binary_cross_entropy_with_logits(logits, mask, reduction="sum")) / mask[0].numel()
                i, u = _iou(logits, mask)
                inter, union = inter + i, union + u
        iou, bce = inter / max(union, 1.0), loss_sum / context.data.n_val
        context.report(iou, val_bce=bce)  # lets an early-stopping scheduler (ASHA) stop a poor candidate here
    return {"score": iou, "val_bce": bce, "head_params": float(sum(p.numel() for p in net.head.parameters()))}
