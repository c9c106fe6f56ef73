"""A user's own evaluators and datasets, as the tests of ``accuracy=custom`` and ``data=custom`` use them
(``accuracy.fn=tests.nas.user_code:<name>``): good ones, and each way one can be wrong."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch.utils.data import TensorDataset

from nas.trial.custom import EvalContext


def _blobs(n: int, size: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """One-channel images with a bright blob; the target is its centre (x, y) in [0, 1]."""
    g = torch.Generator().manual_seed(seed)
    centres = torch.rand(n, 2, generator=g)
    grid = torch.linspace(0, 1, size)
    yy, xx = torch.meshgrid(grid, grid, indexing="ij")
    d2 = (xx[None] - centres[:, 0, None, None]) ** 2 + (yy[None] - centres[:, 1, None, None]) ** 2
    x = torch.exp(-d2 / 0.02)[:, None] + 0.05 * torch.randn(n, 1, size, size, generator=g)
    return x.float(), centres.float()


def regression(n_train: int = 64, n_val: int = 32, size: int = 16) -> dict[str, Any]:
    """Blob centres: a regression task with two outputs."""
    xt, yt = _blobs(n_train, size, 0)
    xv, yv = _blobs(n_val, size, 1)
    return {"train": TensorDataset(xt, yt), "val": TensorDataset(xv, yv), "num_classes": 2}


def classes(n_train: int = 64, n_val: int = 32, size: int = 16) -> tuple[Any, Any]:
    """Four classes of uint8 RGB images (the class sets the mean brightness of one channel)."""
    rng = np.random.default_rng(0)

    def part(n: int) -> TensorDataset:
        y = rng.integers(0, 4, n)
        x = rng.integers(0, 96, (n, 3, size, size)).astype(np.uint8)
        x[np.arange(n), y % 3] += np.uint8(100)
        return TensorDataset(torch.from_numpy(x), torch.from_numpy(y))

    train, val = part(n_train), part(n_val)
    train.classes = ["a", "b", "c", "d"]  # type: ignore[attr-defined]  # as torchvision datasets name them
    return train, val


def fit_regression(model: torch.nn.Module, context: EvalContext) -> dict[str, float]:
    """Trains the network on the blob centres (MSE), reporting each epoch; scores 1 / (1 + validation MSE)."""
    model.to(context.device)
    opt = torch.optim.Adam(model.parameters(), lr=float(context.options.get("lr", 3e-3)))
    rng = np.random.default_rng(context.seed)
    mse = float("nan")
    for _ in range(context.epochs):
        model.train()
        for x, y in context.data.train_batches(32, rng, context.device):
            loss = F.mse_loss(model(context.data.normalise(x)), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
        model.eval()
        with torch.no_grad():
            errs = [F.mse_loss(model(context.data.normalise(x)), y, reduction="sum").item()
                    for x, y in context.data.val_batches(64, context.device)]
        mse = sum(errs) / (2 * context.data.n_val)
        context.report(1.0 / (1.0 + mse), val_mse=mse)
    return {"score": 1.0 / (1.0 + mse), "val_mse": mse, "train_items": float(context.data.n_train)}


def constant(model: torch.nn.Module, context: EvalContext) -> float:
    """Scores every candidate 0.5 without training."""
    return 0.5


def with_reports(model: torch.nn.Module, context: EvalContext) -> dict[str, float]:
    """Two intermediate scores, then a final one with a metric of its own."""
    context.report(0.2, seen=1.0)
    context.report(0.3, seen=2.0)
    return {"score": 0.4, "seen": 3.0, "budget_epochs": float(context.epochs)}


def feature_map(model: torch.nn.Module, context: EvalContext) -> dict[str, float]:
    """What a dense-prediction head sees: the shape of the backbone's output."""
    model.eval()
    with torch.no_grad():
        out = model(torch.zeros(2, *context.data.input_shape))
    return {"score": 1.0, "out_ndim": float(out.ndim), "out_chs": float(out.shape[1])}


def per_rung(model: torch.nn.Module, context: EvalContext) -> dict[str, float]:
    """A score that grows with the rung, recording the budget each rung gave."""
    rung = -1 if context.rung is None else context.rung
    return {"score": 0.1 * (rung + 2), "seen_rung": float(rung), "seen_items": float(context.data.n_train)}


def fails_on_large(model: torch.nn.Module, context: EvalContext) -> float:
    """Raises for networks of more than 25k parameters (the space's smallest passes the driver's check)."""
    if sum(p.numel() for p in model.parameters()) > 25_000:
        raise ValueError("this head does not fit a network that large")
    return 0.5


def raises(model: torch.nn.Module, context: EvalContext) -> float:
    raise ValueError("the head does not fit")


def returns_nan(model: torch.nn.Module, context: EvalContext) -> float:
    return float("nan")


def returns_text(model: torch.nn.Module, context: EvalContext) -> Any:
    return "good"


def returns_negative(model: torch.nn.Module, context: EvalContext) -> float:
    return -0.25


def reserved_metric(model: torch.nn.Module, context: EvalContext) -> dict[str, float]:
    return {"score": 0.5, "reward": 1.0}


def no_score(model: torch.nn.Module, context: EvalContext) -> dict[str, float]:
    return {"mse": 1.0}


def reports_nan(model: torch.nn.Module, context: EvalContext) -> float:
    context.report(float("nan"))
    return 0.5


def tensor_score(model: torch.nn.Module, context: EvalContext) -> torch.Tensor:
    return torch.tensor(0.75)


NOT_A_FUNCTION = 3


def fit_small_only(model: torch.nn.Module, context: EvalContext) -> dict[str, float]:
    """:func:`fit_regression`, but raising for networks of more than 25k parameters."""
    fails_on_large(model, context)
    return fit_regression(model, context)
