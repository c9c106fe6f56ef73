"""Hand-designed reference networks, written in the canonical encoding.

Each matches torchvision's definition layer for layer, so parameter counts at 1000 classes
are exactly the published ones (pinned in the tests):

=================  ===========  =================
name               params       MACs at 224x224
=================  ===========  =================
mobilenetv2_100    3,504,872    ~300 M
efficientnet_b0    5,288,548    ~390 M
mnasnet_b1         4,383,312    ~315 M
=================  ===========  =================

Each can be width-scaled (:func:`scale_width`) and laid out for 32x32 inputs
(:func:`small_input_variant`); :func:`anchor_network` reads the ``<name>[@<width>]`` form a search
names an anchor network with (``latency.anchor``, ``target_anchor``).
"""

from __future__ import annotations

import dataclasses
import math

from search_spaces.arch import Arch, Block
from search_spaces.errors import SearchSpaceError

# (exp_ratio, out_chs, repeats, stride, kernel_size, se_ratio) per stage
_Stage = tuple[int, int, int, int, int, float]


def _stages(stem: int, stages: list[_Stage], head: int, act: str) -> Arch:
    blocks = []
    for e, c, n, s, k, se in stages:
        for i in range(n):
            blocks.append(Block("mbconv", k, e, c, s if i == 0 else 1, se))
    return Arch(stem, tuple(blocks), head, act)


def mobilenetv2_100() -> Arch:
    """MobileNetV2 1.0 (Sandler et al. 2018, Table 2)."""
    return _stages(
        32,
        [(1, 16, 1, 1, 3, 0), (6, 24, 2, 2, 3, 0), (6, 32, 3, 2, 3, 0), (6, 64, 4, 2, 3, 0),
         (6, 96, 3, 1, 3, 0), (6, 160, 3, 2, 3, 0), (6, 320, 1, 1, 3, 0)],
        1280, "relu6",
    )


def efficientnet_b0() -> Arch:
    """EfficientNet-B0 (Tan & Le 2019, Table 1)."""
    return _stages(
        32,
        [(1, 16, 1, 1, 3, 0.25), (6, 24, 2, 2, 3, 0.25), (6, 40, 2, 2, 5, 0.25),
         (6, 80, 3, 2, 3, 0.25), (6, 112, 3, 1, 5, 0.25), (6, 192, 4, 2, 5, 0.25),
         (6, 320, 1, 1, 3, 0.25)],
        1280, "silu",
    )


def mnasnet_b1() -> Arch:
    """MnasNet-B1 1.0 (Tan et al. 2019; torchvision's ``mnasnet1_0``).

    Its stem's separable conv (3x3 depthwise, 1x1 to 16) is an MBConv block with ratio 1.
    """
    return _stages(
        32,
        [(1, 16, 1, 1, 3, 0), (3, 24, 3, 2, 3, 0), (3, 40, 3, 2, 5, 0), (6, 80, 3, 2, 5, 0),
         (6, 96, 2, 1, 3, 0), (6, 192, 4, 2, 5, 0), (6, 320, 1, 1, 3, 0)],
        1280, "relu",
    )


REFERENCES = {
    "mobilenetv2_100": mobilenetv2_100,
    "efficientnet_b0": efficientnet_b0,
    "mnasnet_b1": mnasnet_b1,
}

# Published figures: parameters (exact, 1000 classes) and MACs at 224x224 (as published, rounded).
PUBLISHED = {
    "mobilenetv2_100": {"params": 3_504_872, "macs": 300_000_000},
    "efficientnet_b0": {"params": 5_288_548, "macs": 390_000_000},
    "mnasnet_b1": {"params": 4_383_312, "macs": 315_000_000},
}


def small_input_variant(arch: Arch) -> Arch:
    """The network for 32x32 inputs (CIFAR): its first two downsampling blocks after the stem run
    at stride 1, so it downsamples 8x instead of 32x and ends on a 4x4 map, as the CIFAR versions
    of these networks do (which also keep the first convolution at stride 1; here the stem keeps
    stride 2 and the first two stride-2 stages give up theirs, for the same 8x)."""
    blocks, relaxed = [], 0
    for b in arch.blocks:
        if b.stride == 2 and relaxed < 2:
            b = dataclasses.replace(b, stride=1)
            relaxed += 1
        blocks.append(b)
    return Arch(arch.stem_chs, tuple(blocks), arch.head_chs, arch.act)


def reference(name: str) -> Arch:
    """Return a reference network by name.

    Raises:
        SearchSpaceError: unknown name (the message lists the known ones).
    """
    try:
        return REFERENCES[name]()
    except KeyError:
        raise SearchSpaceError(f"unknown reference network {name!r}; known: {sorted(REFERENCES)}") from None


def resolve_arch(text: str) -> Arch:
    """An architecture from a reference name or a canonical architecture string."""
    if text in REFERENCES:
        return REFERENCES[text]()
    return Arch.decode(text)


MULTIPLIERS = (0.35, 0.5, 0.75, 1.0, 1.25)
"""The width multipliers the benchmarks scale the references to (and 0.25 below them)."""

WIDTH_RANGE = (0.25, 1.4)
"""The widths an anchor network may have: from 0.25, the narrowest the benchmarks scale a reference
to, to 1.4, MobileNetV2's widest published width."""

SMALL_INPUT_MAX = 64
"""Inputs up to this many pixels a side take the 32x32 layout (:func:`small_input_variant`)."""


def round8(x: float) -> int:
    """``x`` rounded to the nearest multiple of 8, at least 8, never more than 10% below ``x``."""
    r = max(8, int(x + 4) // 8 * 8)
    return r + 8 if r < 0.9 * x else r


def scale_width(arch: Arch, multiplier: float) -> Arch:
    """``arch`` with every channel count multiplied by ``multiplier`` and rounded to 8.

    As in MobileNetV2, the head is only widened (``multiplier > 1``), never narrowed.
    """
    blocks = tuple(dataclasses.replace(b, out_chs=round8(b.out_chs * multiplier)) for b in arch.blocks)
    head = round8(arch.head_chs * multiplier) if arch.head_chs and multiplier > 1 else arch.head_chs
    return dataclasses.replace(arch, stem_chs=round8(arch.stem_chs * multiplier), blocks=blocks, head_chs=head)


def parse_anchor(spec: str) -> tuple[str, float]:
    """The reference name and width of an anchor written ``<name>[@<width>]`` (no width: 1).

    Raises:
        SearchSpaceError: an unknown name (the known ones are listed) or a width that is not a
            number within :data:`WIDTH_RANGE`.
    """
    name, at, width_text = str(spec).strip().partition("@")
    if name not in REFERENCES:
        raise SearchSpaceError(f"unknown anchor network {name!r} in {spec!r}: write <reference>[@<width>] with a "
                               f"reference of {sorted(REFERENCES)}, e.g. mobilenetv2_100@0.35")
    if not at:
        return name, 1.0
    lo, hi = WIDTH_RANGE
    try:
        width = float(width_text)
    except ValueError:
        width = math.nan
    if not (math.isfinite(width) and lo <= width <= hi):
        raise SearchSpaceError(f"anchor network {spec!r}: the width after '@' must be a number from {lo:g} to "
                               f"{hi:g}, e.g. {name}@0.35")
    return name, width


def anchor_network(spec: str, input_hw: int) -> Arch:
    """The anchor network ``spec`` (``<name>[@<width>]``, e.g. ``mobilenetv2_100@0.35``) for inputs of
    ``input_hw`` pixels a side: the reference width-scaled (:func:`scale_width`), in its 32x32 layout
    (:func:`small_input_variant`) for inputs up to :data:`SMALL_INPUT_MAX` pixels.

    Raises:
        SearchSpaceError: see :func:`parse_anchor`.
    """
    name, width = parse_anchor(spec)
    base = REFERENCES[name]()
    return scale_width(small_input_variant(base) if input_hw <= SMALL_INPUT_MAX else base, width)
