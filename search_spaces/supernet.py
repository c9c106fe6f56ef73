"""A weight-sharing supernet over a search space: every network of the space in one module.

:class:`Supernet` holds, for each block position of each stage (as many positions as the stage's
largest depth), one weight set per block type the stage offers (MBConv and residual blocks do
not share weights), each at the largest input and output widths, expansion ratio, kernel size
and squeeze width that position can have (:mod:`search_spaces.elastic`). A subnet, an
:class:`~search_spaces.arch.Arch` of the space, uses:

* **depth**: the first ``d`` positions of each stage;
* **width**: the leading output channels of each stage (and of the stem and the head);
* **expansion ratio**: the leading ``in_chs * exp_ratio`` channels of an MBConv block;
* **kernel**: the transformed centre of the position's largest kernel;
* **SE**: the gate on or off, its leading squeeze channels when on;
* **block type**: the position's weight set of that type;
* the activation, which has no weights.

``supernet(x, arch)`` runs the subnet in place; :meth:`Supernet.extract` returns it as the
network :func:`~search_spaces.build` makes for ``arch`` (same modules, same parameter count) with
the supernet's weights copied in, so export, latency measurement and fine-tuning see an
ordinary network whose outputs equal the supernet's for that subnet.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import cast

import torch
import torch.nn.functional as F
from torch import nn

from search_spaces.arch import Arch, Block
from search_spaces.builder import Net, build, squeeze_chs
from search_spaces.elastic import (
    Activation,
    ElasticConvBN,
    ElasticSqueezeExcite,
    activation,
)
from search_spaces.profile import count_macs
from search_spaces.space import SearchSpace

SUPERNET_VERSION = 1
"""The layout of :class:`Supernet`'s weights; a checkpoint of another version cannot be loaded."""


def _max_squeeze(in_chs: Sequence[int], se_ratios: Sequence[float]) -> int:
    on = [r for r in se_ratios if r > 0]
    return max(squeeze_chs(c, r) for c in in_chs for r in on) if on else 0


class ElasticMBConv(nn.Module):
    """Every MBConv block one position can hold: 1x1 expansion (when some ratio exceeds 1),
    depthwise kxk, optional SE, 1x1 projection; identity shortcut when stride 1 and widths match."""

    def __init__(self, in_chs: Sequence[int], out_chs: Sequence[int], exp_ratios: Sequence[int],
                 kernel_sizes: Sequence[int], se_ratios: Sequence[float], stride: int) -> None:
        super().__init__()
        max_in, max_out = max(in_chs), max(out_chs)
        max_mid = max_in * max(exp_ratios)
        self.stride = stride
        self.expand = ElasticConvBN(max_in, max_mid, (1,)) if max(exp_ratios) > 1 else None
        self.dw = ElasticConvBN(max_mid, max_mid, kernel_sizes, depthwise=True)
        squeeze = _max_squeeze(in_chs, se_ratios)
        self.se = ElasticSqueezeExcite(max_mid, squeeze) if squeeze else None
        self.project = ElasticConvBN(max_mid, max_out, (1,))

    def run(self, x: torch.Tensor, in_chs: int, block: Block, act: Activation) -> torch.Tensor:
        """The block ``block`` (with ``in_chs`` input channels) on ``x``."""
        mid = in_chs * block.exp_ratio
        y = x
        if block.exp_ratio != 1:
            assert self.expand is not None  # the space offers this ratio, so the layer exists
            y = self.expand.run(y, in_chs, mid, 1, 1, act)
        y = self.dw.run(y, mid, mid, block.kernel_size, block.stride, act)
        if block.se_ratio > 0:
            assert self.se is not None
            y = self.se.run(y, mid, squeeze_chs(in_chs, block.se_ratio), act)
        y = self.project.run(y, mid, block.out_chs, 1, 1)
        return x + y if block.stride == 1 and in_chs == block.out_chs else y

    def state(self, in_chs: int, block: Block) -> dict[str, torch.Tensor]:
        """The block's state keyed as the builder's ``MBConv`` (``body.<i>.…``)."""
        mid = in_chs * block.exp_ratio
        parts: list[dict[str, torch.Tensor]] = []
        if block.exp_ratio != 1:
            assert self.expand is not None
            parts.append(self.expand.state(in_chs, mid, 1))
        parts.append(self.dw.state(mid, mid, block.kernel_size))
        if block.se_ratio > 0:
            assert self.se is not None
            parts.append(self.se.state(mid, squeeze_chs(in_chs, block.se_ratio)))
        parts.append(self.project.state(mid, block.out_chs, 1))
        return {f"body.{i}.{k}": v for i, part in enumerate(parts) for k, v in part.items()}


class ElasticResidual(nn.Module):
    """Every residual basic block one position can hold: two kxk convolutions, optional SE,
    identity or 1x1 projection shortcut (the projection exists when some subnet needs it)."""

    def __init__(self, in_chs: Sequence[int], out_chs: Sequence[int], kernel_sizes: Sequence[int],
                 se_ratios: Sequence[float], stride: int) -> None:
        super().__init__()
        max_in, max_out = max(in_chs), max(out_chs)
        self.conv1 = ElasticConvBN(max_in, max_out, kernel_sizes)
        self.conv2 = ElasticConvBN(max_out, max_out, kernel_sizes)
        squeeze = _max_squeeze(in_chs, se_ratios)
        self.se = ElasticSqueezeExcite(max_out, squeeze) if squeeze else None
        needs_projection = stride != 1 or any(i != o for i in in_chs for o in out_chs)
        self.shortcut = ElasticConvBN(max_in, max_out, (1,)) if needs_projection else None

    def run(self, x: torch.Tensor, in_chs: int, block: Block, act: Activation) -> torch.Tensor:
        """The block ``block`` (with ``in_chs`` input channels) on ``x``."""
        out, k = block.out_chs, block.kernel_size
        y = self.conv1.run(x, in_chs, out, k, block.stride, act)
        y = self.conv2.run(y, out, out, k, 1)
        if block.se_ratio > 0:
            assert self.se is not None
            y = self.se.run(y, out, squeeze_chs(in_chs, block.se_ratio), act)
        if block.stride == 1 and in_chs == out:
            return act(y + x)
        assert self.shortcut is not None
        return act(y + self.shortcut.run(x, in_chs, out, 1, block.stride))

    def state(self, in_chs: int, block: Block) -> dict[str, torch.Tensor]:
        """The block's state keyed as the builder's ``ResidualBlock``."""
        out, k = block.out_chs, block.kernel_size
        parts = [self.conv1.state(in_chs, out, k), self.conv2.state(out, out, k)]
        if block.se_ratio > 0:
            assert self.se is not None
            parts.append(self.se.state(out, squeeze_chs(in_chs, block.se_ratio)))
        state = {f"body.{i}.{key}": v for i, part in enumerate(parts) for key, v in part.items()}
        if not (block.stride == 1 and in_chs == out):
            assert self.shortcut is not None
            state.update({f"shortcut.{key}": v for key, v in self.shortcut.state(in_chs, out, 1).items()})
        return state


@dataclass(frozen=True)
class _Step:
    """One block of a subnet: where its weights are and what it is."""

    stage: int
    position: int
    in_chs: int
    block: Block


class Supernet(nn.Module):
    """Every network of ``space`` in one module of shared weights (see the module's text).

    Args:
        space: the search space (MBConv and residual blocks, the builder's vocabulary).
        num_classes: classifier outputs.
        in_chans: input channels.
        dropout: dropout before the classifier (as :func:`~search_spaces.build`'s).
    """

    def __init__(self, space: SearchSpace, num_classes: int, in_chans: int = 3, dropout: float = 0.0) -> None:
        super().__init__()
        self.space = space
        self.num_classes = num_classes
        self.in_chans = in_chans
        self.dropout = dropout
        self.stem = ElasticConvBN(in_chans, max(space.stem_chs), (3,))
        previous: tuple[int, ...] = space.stem_chs
        self.stages = nn.ModuleList()
        for st in space.stages:
            positions = nn.ModuleList()
            for j in range(max(st.depth)):
                in_chs = previous if j == 0 else st.out_chs
                stride = st.stride if j == 0 else 1
                kinds = nn.ModuleDict()
                if "mbconv" in st.block.block_type:
                    kinds["mbconv"] = ElasticMBConv(in_chs, st.out_chs, st.block.exp_ratio, st.block.kernel_size,
                                                    st.block.se_ratio, stride)
                if "residual" in st.block.block_type:
                    kinds["residual"] = ElasticResidual(in_chs, st.out_chs, st.block.kernel_size, st.block.se_ratio,
                                                        stride)
                positions.append(kinds)
            self.stages.append(positions)
            # the next stage's first block takes this stage's widths, or, when this stage may be
            # left out (depth 0), also what this stage would have taken
            previous = tuple(sorted(set(previous) | set(st.out_chs))) if 0 in st.depth else st.out_chs
        heads = [h for h in space.head_chs if h > 0]
        self.head = ElasticConvBN(max(previous), max(heads), (1,)) if heads else None
        features = max(space.head_chs) if heads and 0 not in space.head_chs else max(max(previous), *space.head_chs)
        self.classifier = nn.Linear(features, num_classes)
        self._init_weights()

    def _init_weights(self) -> None:
        # The builder's scheme (torchvision's): Kaiming-normal convolutions, zero biases, unit
        # BatchNorm, a small normal classifier; kernel transformations start as the identity.
        for m in self.modules():
            if isinstance(m, ElasticConvBN):
                nn.init.kaiming_normal_(m.conv.weight, mode="fan_out")
            elif isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out")
                if m.bias is not None:
                    nn.init.zeros_(m.bias)
            elif isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, 0, 0.01)
                nn.init.zeros_(m.bias)

    # ------------------------------------------------------------------ a subnet
    def _steps(self, arch: Arch) -> Iterator[_Step]:
        decisions = self.space.to_decisions(arch)  # raises OutOfSpaceError for a network not in the space
        k, in_chs = 0, arch.stem_chs
        for i, st in enumerate(self.space.stages):
            depth = int(decisions.get(f"s{i}.depth", st.depth[0]))
            for j in range(depth):
                block = arch.blocks[k + j]
                yield _Step(i, j, in_chs, block)
                in_chs = block.out_chs
            k += depth

    def _block(self, step: _Step) -> ElasticMBConv | ElasticResidual:
        kinds = cast(nn.ModuleDict, cast(nn.ModuleList, self.stages[step.stage])[step.position])
        return cast(ElasticMBConv | ElasticResidual, kinds[step.block.block_type])

    def forward(self, x: torch.Tensor, arch: Arch) -> torch.Tensor:
        """The logits of subnet ``arch`` on ``x``.

        Raises:
            OutOfSpaceError: ``arch`` is not a network of this supernet's space.
        """
        act = activation(arch.act)
        y = self.stem.run(x, self.in_chans, arch.stem_chs, 3, arch.stem_stride, act)
        chs = arch.stem_chs
        for step in self._steps(arch):
            y = self._block(step).run(y, step.in_chs, step.block, act)
            chs = step.block.out_chs
        if arch.head_chs:
            assert self.head is not None
            y = self.head.run(y, chs, arch.head_chs, 1, 1, act)
            chs = arch.head_chs
        y = torch.flatten(F.adaptive_avg_pool2d(y, 1), 1)
        y = F.dropout(y, self.dropout, self.training)
        return F.linear(y, self.classifier.weight[:, :chs], self.classifier.bias)

    def subnet_state(self, arch: Arch) -> dict[str, torch.Tensor]:
        """The state dict of ``build(arch)`` holding this supernet's weights for ``arch`` (views, not copies).

        Raises:
            OutOfSpaceError: ``arch`` is not a network of this supernet's space.
        """
        state = {f"stem.{k}": v for k, v in self.stem.state(self.in_chans, arch.stem_chs, 3).items()}
        chs = arch.stem_chs
        for n, step in enumerate(self._steps(arch)):
            state.update({f"blocks.{n}.{k}": v for k, v in self._block(step).state(step.in_chs, step.block).items()})
            chs = step.block.out_chs
        if arch.head_chs:
            assert self.head is not None
            state.update({f"head.{k}": v for k, v in self.head.state(chs, arch.head_chs, 1).items()})
            chs = arch.head_chs
        state["classifier.weight"] = self.classifier.weight[:, :chs]
        state["classifier.bias"] = self.classifier.bias
        return state

    def extract(self, arch: Arch) -> Net:
        """Subnet ``arch`` as a standalone network: ``build(arch)`` with this supernet's weights copied in.

        The copy is independent: training it leaves the supernet as it was.

        Raises:
            OutOfSpaceError: ``arch`` is not a network of this supernet's space.
        """
        with torch.no_grad():
            state = {k: v.detach().clone() for k, v in self.subnet_state(arch).items()}
        with torch.device("meta"):
            net = build(arch, num_classes=self.num_classes, in_chans=self.in_chans, dropout=self.dropout)
        net.load_state_dict(state, strict=True, assign=True)
        net.train(self.training)
        return net


def sandwich_ends(space: SearchSpace, resolution: int) -> tuple[Arch, tuple[Arch, ...]]:
    """The ends of the sandwich rule for ``space``: its smallest network by MACs at ``resolution`` x
    ``resolution``, and its largest network of each block type, largest first (the first is the
    teacher of in-place distillation). Where a space offers MBConv and residual blocks, which have
    separate weights, the largest of each trains every step, not only the larger of the two."""
    corners = space.extremes()
    macs = []
    for arch in corners:
        with torch.device("meta"):
            net = build(arch, num_classes=1)
        macs.append(count_macs(net, (1, 3, resolution, resolution)))
    smallest = corners[min(range(len(corners)), key=lambda i: macs[i])]
    largest: dict[frozenset[str], int] = {}
    for i, arch in enumerate(corners):
        kinds = frozenset(b.block_type for b in arch.blocks)
        if kinds not in largest or macs[i] > macs[largest[kinds]]:
            largest[kinds] = i
    ends = sorted(largest.values(), key=lambda i: -macs[i])
    return smallest, tuple(corners[i] for i in ends if corners[i] != smallest)
