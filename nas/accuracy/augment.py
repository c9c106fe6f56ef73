"""Training-time augmentation of a batch, on the device it trains on (no per-image Python loop).

* ``crop``: pad by an eighth of the side (4 pixels at 32x32) and take a random crop of the
  original size, the standard for small images (CIFAR); ``crop_flip`` also mirrors half the
  images left to right.
* ``resized_crop``: a random crop of 35-100% of the area with an aspect ratio in [3/4, 4/3],
  resized back to the side (bilinear), the standard for larger images (ImageNet); with ``_flip``,
  mirrored too.
* ``none``: the images as they are.

``auto`` picks the crop for images up to 64 pixels and the resized crop above, each with flips
only when the dataset is mirror-invariant (a mirrored digit is not the same digit). Every random
choice comes from the ``torch.Generator`` passed in, so a seeded run is repeatable.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F

from nas.core.config import AUGMENTS
from nas.core.errors import TrainingError

Augment = Callable[[torch.Tensor, torch.Generator], torch.Tensor]
SMALL_IMAGES = 64
"""Images up to this side get the padded crop; larger ones the resized crop."""


def resolve(name: str, resolution: int, mirror_invariant: bool) -> str:
    """The augmentation ``auto`` stands for at this resolution; other names as they are.

    Raises:
        TrainingError: an unknown name.
    """
    if name not in AUGMENTS:
        raise TrainingError(f"train.augment: {name!r} is not one of {list(AUGMENTS)}")
    if name != "auto":
        return name
    base = "crop" if resolution <= SMALL_IMAGES else "resized_crop"
    return base + ("_flip" if mirror_invariant else "")


def _flip(x: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    mask = torch.rand(x.shape[0], device=x.device, generator=gen) < 0.5
    return torch.where(mask.view(-1, 1, 1, 1), x.flip(-1), x)


def random_crop(x: torch.Tensor, gen: torch.Generator, pad: int | None = None) -> torch.Tensor:
    """Zero-pad by ``pad`` (default side // 8) and crop each image at a random offset to its size."""
    b, c, h, w = x.shape
    p = max(1, h // 8) if pad is None else pad
    padded = F.pad(x, (p, p, p, p))
    oy = torch.randint(0, 2 * p + 1, (b,), device=x.device, generator=gen)
    ox = torch.randint(0, 2 * p + 1, (b,), device=x.device, generator=gen)
    rows = (oy[:, None] + torch.arange(h, device=x.device)[None, :])  # (b, h)
    cols = (ox[:, None] + torch.arange(w, device=x.device)[None, :])  # (b, w)
    bi = torch.arange(b, device=x.device)[:, None, None, None]
    ci = torch.arange(c, device=x.device)[None, :, None, None]
    return padded[bi, ci, rows[:, None, :, None], cols[:, None, None, :]]


def random_resized_crop(x: torch.Tensor, gen: torch.Generator, scale: tuple[float, float] = (0.35, 1.0),
                        ratio: tuple[float, float] = (3 / 4, 4 / 3)) -> torch.Tensor:
    """A random crop of ``scale`` of the area and aspect ``ratio``, resized back to the image's size."""
    b = x.shape[0]
    dev = x.device
    area = torch.empty(b, device=dev).uniform_(*scale, generator=gen)
    log_r = torch.empty(b, device=dev).uniform_(math.log(ratio[0]), math.log(ratio[1]), generator=gen)
    aspect = torch.exp(log_r)
    sw = torch.sqrt(area * aspect).clamp(max=1.0)  # crop width and height as shares of the image
    sh = torch.sqrt(area / aspect).clamp(max=1.0)
    cx = (torch.rand(b, device=dev, generator=gen) * 2 - 1) * (1 - sw)  # centre, in [-1, 1] coordinates
    cy = (torch.rand(b, device=dev, generator=gen) * 2 - 1) * (1 - sh)
    theta = torch.zeros(b, 2, 3, device=dev, dtype=x.dtype)
    theta[:, 0, 0], theta[:, 0, 2], theta[:, 1, 1], theta[:, 1, 2] = sw, cx, sh, cy
    grid = F.affine_grid(theta, list(x.shape), align_corners=False)
    return F.grid_sample(x, grid, mode="bilinear", padding_mode="reflection", align_corners=False)


def make_augment(name: str, resolution: int, mirror_invariant: bool) -> Augment:
    """The batch augmentation ``name`` (see the module's text) for normalised float images."""
    kind = resolve(name, resolution, mirror_invariant)
    crop: Callable[[torch.Tensor, torch.Generator], torch.Tensor] | None = {
        "none": None, "crop": random_crop, "crop_flip": random_crop,
        "resized_crop": random_resized_crop, "resized_crop_flip": random_resized_crop,
    }[kind]
    flip = kind.endswith("_flip")

    def augment(x: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
        if crop is not None:
            x = crop(x, gen)
        return _flip(x, gen) if flip else x

    return augment
