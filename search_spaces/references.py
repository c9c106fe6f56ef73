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

Each can be width-scaled (:func:`scale_width`), depth-scaled (its stages' repeats, as EfficientNet's
compound scaling does) and laid out for 32x32 inputs (:func:`small_input_variant`).

Beside them, the classic CIFAR ResNets (He et al. 2016, :func:`cifar_resnet`): a 3x3 stem at full
resolution, three stages of basic blocks at widths W, 2W and 4W (32x32, 16x16 and 8x8 for CIFAR),
and a 1x1 convolution with BatchNorm as the shortcut where the shape changes. Their depths are the
paper's 6n+2 (``resnet8`` ... ``resnet110``); ``resnet8`` at width 16 is MLPerf Tiny's image
classification reference, layer for layer (its shortcut convolution carries a BatchNorm here, which
export folds away). On a CPU at 32x32 they are the first networks a practitioner tries.

A reference *member* is written ``<name>[@<width>][:d<depth>]``: ``mobilenetv2_100@0.35``,
``mnasnet_b1@0.5:d0.75``, ``resnet14@1.5`` (width 24). :func:`member` builds one,
:data:`FAMILIES` lists the members a sweep covers, and :func:`anchor_network` reads the same form
for a search's anchor network (``latency.anchor``, ``target_anchor``).
"""

from __future__ import annotations

import dataclasses
import math

from search_spaces.arch import Arch, Block
from search_spaces.errors import SearchSpaceError

# (exp_ratio, out_chs, repeats, stride, kernel_size, se_ratio) per stage
_Stage = tuple[int, int, int, int, int, float]


def _stages(stem: int, stages: list[_Stage], head: int, act: str, depth: float = 1.0) -> Arch:
    blocks = []
    for e, c, n, s, k, se in stages:
        for i in range(math.ceil(n * depth)):
            blocks.append(Block("mbconv", k, e, c, s if i == 0 else 1, se))
    return Arch(stem, tuple(blocks), head, act)


def mobilenetv2_100(depth: float = 1.0) -> Arch:
    """MobileNetV2 1.0 (Sandler et al. 2018, Table 2)."""
    return _stages(
        32,
        [(1, 16, 1, 1, 3, 0), (6, 24, 2, 2, 3, 0), (6, 32, 3, 2, 3, 0), (6, 64, 4, 2, 3, 0),
         (6, 96, 3, 1, 3, 0), (6, 160, 3, 2, 3, 0), (6, 320, 1, 1, 3, 0)],
        1280, "relu6", depth,
    )


def efficientnet_b0(depth: float = 1.0) -> Arch:
    """EfficientNet-B0 (Tan & Le 2019, Table 1)."""
    return _stages(
        32,
        [(1, 16, 1, 1, 3, 0.25), (6, 24, 2, 2, 3, 0.25), (6, 40, 2, 2, 5, 0.25),
         (6, 80, 3, 2, 3, 0.25), (6, 112, 3, 1, 5, 0.25), (6, 192, 4, 2, 5, 0.25),
         (6, 320, 1, 1, 3, 0.25)],
        1280, "silu", depth,
    )


def mnasnet_b1(depth: float = 1.0) -> Arch:
    """MnasNet-B1 1.0 (Tan et al. 2019; torchvision's ``mnasnet1_0``).

    Its stem's separable conv (3x3 depthwise, 1x1 to 16) is an MBConv block with ratio 1.
    """
    return _stages(
        32,
        [(1, 16, 1, 1, 3, 0), (3, 24, 3, 2, 3, 0), (3, 40, 3, 2, 5, 0), (6, 80, 3, 2, 5, 0),
         (6, 96, 2, 1, 3, 0), (6, 192, 4, 2, 5, 0), (6, 320, 1, 1, 3, 0)],
        1280, "relu", depth,
    )


RESNET_DEPTHS: tuple[int, ...] = (8, 14, 20, 26, 32, 44, 56, 110)
"""The CIFAR ResNets' depths, 6n+2 layers (n basic blocks per stage): the paper's 20-110, MLPerf Tiny's 8,
and 14 and 26 between them (50 is left out: ``resnet50`` names the ImageNet network elsewhere)."""
RESNET_WIDTHS: tuple[int, ...] = tuple(range(8, 65, 8))
"""Their first stage's width W (then 2W and 4W): multiples of 8 from 8 to 64; the paper's is 16."""
RESNET_BASE_WIDTH = 16


def cifar_resnet(depth: int = 20, width: int = RESNET_BASE_WIDTH) -> Arch:
    """The CIFAR ResNet of ``depth`` layers (6n+2) and first-stage width ``width`` (He et al. 2016, section 4.2),
    with projection shortcuts (a 1x1 convolution and BatchNorm) where the shape changes.

    Raises:
        SearchSpaceError: a depth not in :data:`RESNET_DEPTHS` or a width not in :data:`RESNET_WIDTHS`.
    """
    if depth not in RESNET_DEPTHS:
        raise SearchSpaceError(f"a CIFAR ResNet's depth {depth!r} is not one of {list(RESNET_DEPTHS)}")
    if width not in RESNET_WIDTHS:
        raise SearchSpaceError(f"a CIFAR ResNet's width {width!r} is not one of {list(RESNET_WIDTHS)}")
    n = (depth - 2) // 6
    blocks = [Block("residual", 3, 1, chs, 2 if stage and i == 0 else 1)
              for stage, chs in enumerate((width, 2 * width, 4 * width)) for i in range(n)]
    return Arch(width, tuple(blocks), 0, "relu", stem_stride=1)


REFERENCES = {
    "mobilenetv2_100": mobilenetv2_100,
    "efficientnet_b0": efficientnet_b0,
    "mnasnet_b1": mnasnet_b1,
}
"""The ImageNet references by name (the leaderboard compares a search with these). The CIFAR ResNets are
named ``resnet<depth>`` (:func:`reference` and :func:`member` build them; :data:`FAMILIES` lists them)."""

_MOBILE = {"mobilenetv2_100": mobilenetv2_100, "efficientnet_b0": efficientnet_b0, "mnasnet_b1": mnasnet_b1}

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
    if arch.stem_stride == 1:  # full resolution from the stem: already a small-input network (CIFAR ResNets)
        return arch
    blocks, relaxed = [], 0
    for b in arch.blocks:
        if b.stride == 2 and relaxed < 2:
            b = dataclasses.replace(b, stride=1)
            relaxed += 1
        blocks.append(b)
    return dataclasses.replace(arch, blocks=tuple(blocks))


def _known_names() -> str:
    return f"{sorted(REFERENCES)} or resnet<depth> with a depth of {list(RESNET_DEPTHS)}"


def _resnet_depth(name: str) -> int | None:
    """The depth of a ``resnet<depth>`` name (None: not such a name)."""
    digits = name.removeprefix("resnet")
    if digits == name or not digits.isdigit() or str(int(digits)) != digits:
        return None
    return int(digits)


def is_reference(name: str) -> bool:
    """Whether ``name`` names a reference network: an ImageNet reference, or ``resnet<depth>`` with a depth of
    :data:`RESNET_DEPTHS`."""
    return name in REFERENCES or _resnet_depth(name) in RESNET_DEPTHS


def reference(name: str) -> Arch:
    """Return a reference network by name: one of :data:`REFERENCES`, or ``resnet<depth>`` (width 16).

    Raises:
        SearchSpaceError: unknown name (the message lists the known ones).
    """
    if name in REFERENCES:
        return REFERENCES[name]()
    depth = _resnet_depth(name)
    if depth not in RESNET_DEPTHS:
        raise SearchSpaceError(f"unknown reference network {name!r}; known: {_known_names()}")
    return cifar_resnet(depth)


def resolve_arch(text: str, input_hw: int = 224) -> Arch:
    """An architecture from a reference member (``mobilenetv2_100``, ``resnet14@1.5``, ``mnasnet_b1@0.5:d0.75``:
    see :func:`member`; for inputs of ``input_hw`` pixels a side) or a canonical architecture string."""
    if is_reference(text.partition("@")[0].partition(":")[0]):
        return member(text, input_hw)
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


DEPTH_RANGE = (0.25, 2.0)
"""The depth multipliers an ImageNet reference member may have (each stage's repeats, rounded up)."""


@dataclasses.dataclass(frozen=True)
class Member:
    """One member of a reference family: ``<name>[@<width>][:d<depth>]``.

    Attributes:
        name: an ImageNet reference (:data:`REFERENCES`) or ``resnet<depth>``.
        width: the width multiplier (a CIFAR ResNet's is relative to width 16: 1.5 is width 24).
        depth: the depth multiplier of an ImageNet reference's stages (1 for a CIFAR ResNet, whose
            depth is in its name).
    """

    name: str
    width: float = 1.0
    depth: float = 1.0

    @property
    def family(self) -> str:
        """``resnet_cifar`` for a CIFAR ResNet, else the reference's name."""
        return "resnet_cifar" if self.name.startswith("resnet") else self.name

    def __str__(self) -> str:
        text = self.name + ("" if self.width == 1 else f"@{self.width:g}")
        return text + ("" if self.depth == 1 else f":d{self.depth:g}")

    def arch(self, input_hw: int) -> Arch:
        """The member's network for inputs of ``input_hw`` pixels a side (the 32x32 layout up to
        :data:`SMALL_INPUT_MAX`; a CIFAR ResNet has one layout)."""
        depth = _resnet_depth(self.name)
        if depth is not None:
            return cifar_resnet(depth, round(RESNET_BASE_WIDTH * self.width))
        base = _MOBILE[self.name](self.depth)
        return scale_width(small_input_variant(base) if input_hw <= SMALL_INPUT_MAX else base, self.width)


def _number(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        return math.nan
    return value if math.isfinite(value) else math.nan


def parse_member(spec: str) -> Member:
    """The reference member ``spec`` names: ``<name>[@<width>][:d<depth>]``.

    Raises:
        SearchSpaceError: one line naming what is wrong and the allowed values: an unknown name, a
            width outside :data:`WIDTH_RANGE` (a CIFAR ResNet: one giving a width of
            :data:`RESNET_WIDTHS`), a depth multiplier outside :data:`DEPTH_RANGE` (a CIFAR ResNet takes
            its depth from its name).
    """
    text = str(spec).strip()
    head, colon, depth_text = text.partition(":")
    name, at, width_text = head.partition("@")
    example = "e.g. mobilenetv2_100@0.35, mnasnet_b1@0.5:d0.75 or resnet14@1.5"
    if not is_reference(name):
        raise SearchSpaceError(f"unknown reference network {name!r} in {spec!r}: write "
                               f"<reference>[@<width>][:d<depth>] with a reference of {_known_names()}; {example}")
    width = _number(width_text) if at else 1.0
    resnet = _resnet_depth(name) is not None
    if resnet:
        allowed = [w / RESNET_BASE_WIDTH for w in RESNET_WIDTHS]
        if not any(math.isclose(width, a) for a in allowed):
            raise SearchSpaceError(f"reference {spec!r}: a CIFAR ResNet's width after '@' multiplies its width 16 and "
                                   f"must be one of {[f'{a:g}' for a in allowed]} (widths {list(RESNET_WIDTHS)})")
        if colon:
            raise SearchSpaceError(f"reference {spec!r}: a CIFAR ResNet's depth is in its name (resnet<depth>, depth "
                                   f"one of {list(RESNET_DEPTHS)}), not after ':d'")
        return Member(name, width)
    lo, hi = WIDTH_RANGE
    if not lo <= width <= hi:  # NaN fails too
        raise SearchSpaceError(f"reference {spec!r}: the width after '@' must be a number from {lo:g} to {hi:g}, "
                               f"e.g. {name}@0.35")
    depth = 1.0
    if colon:
        dlo, dhi = DEPTH_RANGE
        depth = _number(depth_text[1:]) if depth_text.startswith("d") else math.nan
        if not dlo <= depth <= dhi:
            raise SearchSpaceError(f"reference {spec!r}: the depth after ':' must be 'd' and a multiplier from {dlo:g} "
                                   f"to {dhi:g}, e.g. {name}@0.35:d0.75")
    return Member(name, width, depth)


def member(spec: str, input_hw: int = 32) -> Arch:
    """The network of the reference member ``spec`` (see :func:`parse_member`) for ``input_hw``-pixel inputs.

    Raises:
        SearchSpaceError: see :func:`parse_member`.
    """
    return parse_member(spec).arch(input_hw)


FAMILIES: dict[str, tuple[str, ...]] = {
    "resnet_cifar": tuple(f"resnet{d}" + ("" if w == RESNET_BASE_WIDTH else f"@{w / RESNET_BASE_WIDTH:g}")
                          for d in (8, 14, 20, 26, 32) for w in (8, 16, 24, 32, 40, 48)),
    **{name: tuple(f"{name}@{w:g}" + ("" if d == 1 else f":d{d:g}") for d in (0.5, 0.75, 1.0)
                   for w in (0.25, 0.35, 0.5, 0.75, 1.0))
       for name in sorted(_MOBILE)},
}
"""The members a reference sweep covers, family by family: the CIFAR ResNets at depths 8-32 and widths
8-48; each ImageNet reference at widths 0.25-1 and depth multipliers 0.5, 0.75 and 1. All of them are
members of the ``cifar`` space."""


def anchor_network(spec: str, input_hw: int) -> Arch:
    """The anchor network ``spec`` (``<name>[@<width>][:d<depth>]``, e.g. ``mobilenetv2_100@0.35``) for inputs of
    ``input_hw`` pixels a side: the reference width-scaled (:func:`scale_width`), in its 32x32 layout
    (:func:`small_input_variant`) for inputs up to :data:`SMALL_INPUT_MAX` pixels.

    Raises:
        SearchSpaceError: see :func:`parse_member`.
    """
    return member(spec, input_hw)
