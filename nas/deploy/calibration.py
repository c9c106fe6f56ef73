"""The INT8 calibration set and the validation images, as the deployed network sees them.

Both are normalised as in training (the dataset's per-channel mean and standard deviation) and
resized to the deployment input's height and width when the dataset's resolution differs. The
calibration set comes from the *training* images (``calibration.samples``, default 512, seeded),
never from the validation images the variants are then judged on; or from a ``.npy`` file of
already normalised images. Either is checked before any quantisation: its shape must be the
network's input and it must hold at least ``calibration.min_samples`` images.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from nas.core.config import CalibrationConfig
from nas.core.errors import ConfigError
from nas.data import ProxyData


def to_input(x: torch.Tensor, data: ProxyData, input_shape: tuple[int, ...]) -> torch.Tensor:
    """``uint8`` images as the network's input: normalised, and resized to ``input_shape``'s height and width."""
    y = data.normalise(x)
    if tuple(y.shape[-2:]) != tuple(input_shape[-2:]):
        y = F.interpolate(y, size=tuple(input_shape[-2:]), mode="bilinear", align_corners=False)
    return y


def calibration_set(cfg: CalibrationConfig, data: ProxyData | None, input_shape: tuple[int, ...]) -> np.ndarray:
    """The calibration images ``(samples, C, H, W)``, float32, checked.

    Raises:
        ConfigError: (``calibration.path``) the file is missing, not a ``.npy`` array, of another
            shape than the input, with non-finite values, or with fewer than ``min_samples`` images;
            (training images) fewer training images than ``samples``.
    """
    if cfg.path is not None:
        path = Path(cfg.path).expanduser()
        if not path.is_file():
            raise ConfigError("calibration.path", f"no file at {str(path)!r}")
        try:
            x = np.load(path, allow_pickle=False)
        except (ValueError, OSError) as err:
            raise ConfigError("calibration.path", f"{path.name} is not a .npy array: {err}") from None
        want = tuple(input_shape[1:])
        if x.ndim != 4 or tuple(x.shape[1:]) != want:
            raise ConfigError(
                "calibration.path", f"{path.name} holds an array of shape {list(x.shape)}; the network takes images "
                f"(N, {', '.join(map(str, want))}), normalised as in training"
            )
        if not np.issubdtype(x.dtype, np.floating) or not np.all(np.isfinite(x)):
            raise ConfigError("calibration.path", f"{path.name} must hold finite floating-point images, not {x.dtype}")
        if len(x) < cfg.min_samples:
            raise ConfigError(
                "calibration.path", f"{path.name} holds {len(x)} images, fewer than calibration.min_samples="
                f"{cfg.min_samples}: too few for reliable activation ranges"
            )
        return np.ascontiguousarray(x[: cfg.samples], dtype=np.float32)
    if data is None:
        raise ConfigError("calibration.path", "no dataset to draw calibration images from: data=... or a .npy file")
    if data.n_train < cfg.samples:
        raise ConfigError(
            "calibration.samples", f"{cfg.samples} calibration images asked for, but the training split has "
            f"{data.n_train}; lower calibration.samples (at least calibration.min_samples={cfg.min_samples})"
        )
    xb, _ = data.sample_train(cfg.samples, cfg.seed)
    return np.ascontiguousarray(to_input(xb, data, input_shape).numpy(), dtype=np.float32)


def validation_batches(data: ProxyData, input_shape: tuple[int, ...], limit: int | None,
                       batch: int | None = None) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """The validation split (at most ``limit`` images, in order) as network inputs and labels, in batches
    of ``batch`` images (default: the deployment batch size, which a static-shape model needs); the last
    batch is padded with zeros (its padding's outputs are dropped by :func:`nas.deploy.variants.run_all`)."""
    batch = batch or input_shape[0]
    seen = 0
    buf_x: list[np.ndarray] = []
    buf_y: list[np.ndarray] = []
    for xb, y in data.val_batches(256):
        if limit is not None and seen >= limit:
            break
        keep = len(y) if limit is None else min(len(y), limit - seen)
        buf_x.append(to_input(xb[:keep], data, input_shape).numpy())
        buf_y.append(y[:keep].numpy())
        seen += keep
        xs, ys = np.concatenate(buf_x), np.concatenate(buf_y)
        whole = len(xs) - len(xs) % batch
        for i in range(0, whole, batch):
            yield xs[i:i + batch], ys[i:i + batch]
        buf_x, buf_y = [xs[whole:]], [ys[whole:]]
    if not buf_x:
        return
    xs, ys = np.concatenate(buf_x), np.concatenate(buf_y)
    if len(xs):
        pad = np.zeros((batch - len(xs), *xs.shape[1:]), dtype=xs.dtype)
        yield np.concatenate([xs, pad]), ys
