"""Structured channel pruning of a built network, whose result is again an :class:`Arch`.

Channels are removed in the units an :class:`Arch` can express, so the narrower network is an
ordinary candidate: it has a canonical string, is built by :func:`search_spaces.build`, and can
be measured and predicted like any other. The units (:func:`prune_units`):

* **width groups**: channels tied together by identity shortcuts. The stem's output and every
  block that adds its input to its output (stride 1, as many output channels as input channels)
  share one set of channels; a block without an identity shortcut starts a new group; the head
  convolution is a group of its own. Pruning a group to ``c`` channels sets the stem, ``out_chs``
  or ``head_chs`` of each of its members to ``c``. An MBConv block's expanded channels follow its
  input (``in_chs * exp_ratio``), so pruning a group also narrows the blocks that read it.
* **expansion**: an MBConv block with ``exp_ratio >= 3`` can keep fewer expanded channels, as a
  lower integer ratio (at least 2, so the block keeps its expansion convolution).

Which channels stay is decided by an importance score per channel (:func:`channel_importance`):
the L1 norm of each filter that writes the channel, with its BatchNorm folded in (the filter
criterion of Li et al. 2017 with the BatchNorm scale of network slimming), every layer's scores
divided by their mean so that layers of different scale count alike, averaged over the layers
that write the channel (a width group has several: removing a channel removes it from all of
them). :func:`prune_net`
copies the kept slices of every convolution, BatchNorm, squeeze-excitation and classifier weight
into the narrower network; a network pruned to its own widths is the same function.

Two shapes an :class:`Arch` cannot express are avoided: a block without an identity shortcut
whose input and output groups end with equal widths (the :class:`Arch` would give it one) has its
output group moved one ``multiple`` away, or, where that group cannot move, its input group
(:func:`resolve_widths`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from search_spaces.arch import Arch, Block
from search_spaces.builder import MBConv, Net, ResidualBlock, SqueezeExcite, build, squeeze_chs
from search_spaces.errors import ArchError

STEM = "stem"
HEAD = "head"


@dataclass(frozen=True)
class PruneUnit:
    """A set of channels pruned together.

    Attributes:
        name: ``stem`` or ``blocks.<i>`` (the group's first member), ``head``, or ``expand.<i>``.
        kind: ``width`` (a channel count) or ``expand`` (an MBConv block's expansion ratio).
        size: the count (``width``) or the ratio (``expand``) now.
        minimum: the smallest value pruning may leave.
        members: the blocks whose ``out_chs`` the group sets (``width``), or the block (``expand``).
    """

    name: str
    kind: str
    size: int
    minimum: int
    members: tuple[int, ...] = ()


def _identity(in_chs: int, block: Block) -> bool:
    """Whether the builder gives ``block`` an identity shortcut (the residual add without a projection)."""
    return block.stride == 1 and in_chs == block.out_chs


def width_groups(arch: Arch) -> tuple[dict[str, list[int]], list[str]]:
    """The width groups of ``arch``: members per group (``-1`` is the stem), and each block's output group."""
    groups: dict[str, list[int]] = {STEM: [-1]}
    of_block: list[str] = []
    current, chs = STEM, arch.stem_chs
    for i, b in enumerate(arch.blocks):
        if not _identity(chs, b):
            current = f"blocks.{i}"
            groups[current] = []
        groups[current].append(i)
        of_block.append(current)
        chs = b.out_chs
    if arch.head_chs:
        groups[HEAD] = []
    return groups, of_block


def prune_units(arch: Arch, multiple: int = 1) -> list[PruneUnit]:
    """Every unit of ``arch`` that can be pruned (see the module's description).

    Args:
        arch: the network.
        multiple: channel counts stay multiples of this (a width group smaller than two
            multiples cannot be pruned and is left out).
    """
    groups, _ = width_groups(arch)
    units = []
    for name, members in groups.items():
        size = arch.head_chs if name == HEAD else (arch.stem_chs if name == STEM else arch.blocks[members[0]].out_chs)
        if size >= 2 * multiple:
            units.append(PruneUnit(name, "width", size, multiple, tuple(m for m in members if m >= 0)))
    for i, b in enumerate(arch.blocks):
        if b.block_type == "mbconv" and b.exp_ratio >= 3:
            units.append(PruneUnit(f"expand.{i}", "expand", b.exp_ratio, 2, (i,)))
    return units


def _widths_of(arch: Arch) -> dict[str, int]:
    groups, _ = width_groups(arch)
    out = {}
    for name, members in groups.items():
        first = arch.blocks[members[0]].out_chs if members and members[0] >= 0 else arch.stem_chs
        out[name] = arch.head_chs if name == HEAD else first
    return out


def resolve_widths(arch: Arch, widths: Mapping[str, int], multiple: int = 1) -> dict[str, int]:
    """``widths`` (a new count per width group; others unchanged) adjusted so that the pruned network keeps
    exactly the shortcuts of ``arch``.

    A block without an identity shortcut whose input and output groups would end with equal
    counts would get one in the pruned :class:`Arch`; its output group is moved one ``multiple``
    down (or up, when at its minimum and below its original count); when it can move neither way
    (one ``multiple`` wide, and not pruned), the input group keeps one ``multiple`` more instead.

    Raises:
        ArchError: an unknown group, a count below 1 or above the group's size, or a clash that
            cannot be resolved.
    """
    current = _widths_of(arch)
    unknown = sorted(set(widths) - set(current))
    if unknown:
        raise ArchError(f"unknown width group(s) {unknown}; {arch.encode()} has {sorted(current)}")
    new = {**current, **{k: int(v) for k, v in widths.items()}}
    for name, c in new.items():
        if not 1 <= c <= current[name]:
            raise ArchError(f"width group {name!r} of {current[name]} channels cannot keep {c}")
    _, of_block = width_groups(arch)
    for _ in range(len(arch.blocks) + 1):
        clash = False
        in_group = STEM
        chs = arch.stem_chs
        for i, b in enumerate(arch.blocks):
            out_group = of_block[i]
            if b.stride == 1 and not _identity(chs, b) and new[in_group] == new[out_group]:
                clash = True
                down, up = new[out_group] - multiple, new[out_group] + multiple
                if down >= 1:
                    new[out_group] = down
                elif up <= current[out_group]:
                    new[out_group] = up
                elif new[in_group] + multiple <= current[in_group]:  # the output group cannot move: the input
                    new[in_group] += multiple  # group keeps one multiple more (it prunes less than asked)
                else:
                    raise ArchError(f"block {i} would gain an identity shortcut at {new[out_group]} channels")
            in_group, chs = out_group, b.out_chs
        if not clash:
            return new
    raise ArchError("the widths could not be resolved without changing the network's shortcuts")


def pruned_arch(arch: Arch, widths: Mapping[str, int], expand: Mapping[int, int] | None = None,
                multiple: int = 1) -> Arch:
    """The :class:`Arch` of ``arch`` with width groups narrowed to ``widths`` and MBConv blocks to ``expand`` ratios.

    Raises:
        ArchError: an unknown group or block, a count out of range, or an expansion ratio below 2
            or above the block's.
    """
    new = resolve_widths(arch, widths, multiple)
    _, of_block = width_groups(arch)
    blocks = []
    for i, b in enumerate(arch.blocks):
        e = (expand or {}).get(i, b.exp_ratio)
        if e != b.exp_ratio and (b.block_type != "mbconv" or not 2 <= e <= b.exp_ratio):
            raise ArchError(f"block {i} ({b.encode()}) cannot take expansion ratio {e}")
        blocks.append(dataclasses.replace(b, out_chs=new[of_block[i]], exp_ratio=e))
    unknown = sorted(set(expand or {}) - set(range(len(arch.blocks))))
    if unknown:
        raise ArchError(f"unknown block(s) {unknown} for an expansion ratio")
    pruned = Arch(new[STEM], tuple(blocks), new.get(HEAD, 0), arch.act, arch.stem_stride)
    _check_same_shortcuts(arch, pruned)
    return pruned


def _check_same_shortcuts(a: Arch, b: Arch) -> None:
    ca, cb = a.stem_chs, b.stem_chs
    for i, (x, y) in enumerate(zip(a.blocks, b.blocks, strict=True)):
        if _identity(ca, x) != _identity(cb, y):
            raise ArchError(f"block {i} would change its shortcut: {x.encode()} -> {y.encode()}")
        ca, cb = x.out_chs, y.out_chs


# ---------------------------------------------------------------------- importance


def _l1(w: torch.Tensor, dim: int) -> np.ndarray:
    """L1 norm of ``w`` over every dimension but ``dim``."""
    dims = [d for d in range(w.ndim) if d != dim]
    return w.detach().abs().sum(dim=dims).double().cpu().numpy() if dims else w.detach().abs().double().cpu().numpy()


def _folded_out(seq: nn.Sequential) -> np.ndarray:
    """Per output channel: L1 of the filter of ``seq`` (Conv2d, BatchNorm2d, ...) with the BatchNorm folded in."""
    conv, bn = seq[0], seq[1]
    assert isinstance(conv, nn.Conv2d) and isinstance(bn, nn.BatchNorm2d)
    var = bn.running_var if bn.running_var is not None else torch.ones_like(bn.weight)
    scale = (bn.weight / torch.sqrt(var + bn.eps)).detach().abs().double().cpu().numpy()
    return scale * _l1(conv.weight, 0)


def _bias(layer: nn.Conv2d) -> torch.Tensor:
    assert layer.bias is not None  # the squeeze-excitation convolutions have biases
    return layer.bias


def _normalised(v: np.ndarray) -> np.ndarray:
    m = float(v.mean())
    return v / m if m > 0 else np.zeros_like(v)


class _Scores:
    def __init__(self) -> None:
        self.parts: dict[str, list[np.ndarray]] = {}

    def add(self, key: str, v: np.ndarray) -> None:
        self.parts.setdefault(key, []).append(_normalised(v))

    def result(self) -> dict[str, np.ndarray]:
        return {k: np.mean(np.stack(vs), axis=0) for k, vs in self.parts.items()}


def _mb_parts(block: MBConv, spec: Block) -> tuple[
        nn.Sequential | None, nn.Sequential, SqueezeExcite | None, nn.Sequential]:
    """The expansion (None at ratio 1), depthwise, squeeze-excitation (or None) and projection of an MBConv."""
    body = list(block.body)
    expand = body.pop(0) if spec.exp_ratio != 1 else None
    dw, project = body[0], body[-1]
    se = body[1] if isinstance(body[1], SqueezeExcite) else None
    assert isinstance(dw, nn.Sequential) and isinstance(project, nn.Sequential)
    assert expand is None or isinstance(expand, nn.Sequential)
    return expand, dw, se, project


def _rb_parts(block: ResidualBlock) -> tuple[nn.Sequential, nn.Sequential, SqueezeExcite | None, nn.Sequential | None]:
    body = list(block.body)
    conv1, conv2 = body[0], body[1]
    se = body[2] if len(body) > 2 and isinstance(body[2], SqueezeExcite) else None
    short = block.shortcut if isinstance(block.shortcut, nn.Sequential) else None
    assert isinstance(conv1, nn.Sequential) and isinstance(conv2, nn.Sequential)
    return conv1, conv2, se, short


def channel_importance(net: Net) -> dict[str, np.ndarray]:
    """An importance score per channel of every prunable channel set of ``net``.

    Keys: the width groups (``stem``, ``blocks.<i>``, ``head``), ``mid.<i>`` (an MBConv block's
    expanded channels, when it has an expansion convolution), ``inner.<i>`` (a residual block's
    inner channels) and ``se.<i>`` (a squeeze-excitation gate's reduced channels). A channel's score
    is the mean, over the layers that write it, of its filter's L1 norm with the BatchNorm folded
    in, each layer's scores divided by their mean: a channel every writer has silenced scores 0
    and goes first.
    """
    arch = net.arch
    _, of_block = width_groups(arch)
    s = _Scores()
    s.add(STEM, _folded_out(net.stem))
    for i, (b, mod) in enumerate(zip(arch.blocks, net.blocks, strict=True)):
        out_group = of_block[i]
        if isinstance(mod, MBConv):
            expand, dw, se, project = _mb_parts(mod, b)
            if expand is not None:
                s.add(f"mid.{i}", _folded_out(expand))
                s.add(f"mid.{i}", _folded_out(dw))
            if se is not None:
                s.add(f"se.{i}", _folded_se(se))
            s.add(out_group, _folded_out(project))
        else:
            assert isinstance(mod, ResidualBlock)
            conv1, conv2, se, short = _rb_parts(mod)
            s.add(f"inner.{i}", _folded_out(conv1))
            s.add(out_group, _folded_out(conv2))
            if se is not None:
                s.add(f"se.{i}", _folded_se(se))
            if short is not None:
                s.add(out_group, _folded_out(short))
    if isinstance(net.head, nn.Sequential):
        s.add(HEAD, _folded_out(net.head))
    return s.result()


def _folded_se(se: SqueezeExcite) -> np.ndarray:
    return _l1(se.fc1.weight, 0) + np.abs(_bias(se.fc1).detach().double().cpu().numpy())


# ---------------------------------------------------------------------- slicing


def _keep(scores: np.ndarray, k: int) -> torch.Tensor:
    """Indices of the ``k`` highest scores, in their original order (ties: the lower index)."""
    if k > len(scores):
        raise ArchError(f"cannot keep {k} of {len(scores)} channels")
    order = np.argsort(-scores, kind="stable")[:k]
    return torch.as_tensor(np.sort(order), dtype=torch.long)


def _copy_conv_bn(old: nn.Sequential, new: nn.Sequential, out_idx: torch.Tensor, in_idx: torch.Tensor | None) -> None:
    oc, nc = old[0], new[0]
    ob, nb = old[1], new[1]
    assert isinstance(oc, nn.Conv2d) and isinstance(nc, nn.Conv2d)
    assert isinstance(ob, nn.BatchNorm2d) and isinstance(nb, nn.BatchNorm2d)
    w = oc.weight.detach()[out_idx]
    if in_idx is not None and oc.groups == 1:
        w = w[:, in_idx]
    nc.weight.data.copy_(w)
    if oc.bias is not None and nc.bias is not None:
        nc.bias.data.copy_(oc.bias.detach()[out_idx])
    for name in ("weight", "bias", "running_mean", "running_var"):
        src, dst = getattr(ob, name), getattr(nb, name)
        if src is not None and dst is not None:
            dst.data.copy_(src.detach()[out_idx])
    if ob.num_batches_tracked is not None and nb.num_batches_tracked is not None:
        nb.num_batches_tracked.data.copy_(ob.num_batches_tracked)


def _copy_se(old: SqueezeExcite, new: SqueezeExcite, chs: torch.Tensor, squeeze: torch.Tensor) -> None:
    new.fc1.weight.data.copy_(old.fc1.weight.detach()[squeeze][:, chs])
    _bias(new.fc1).data.copy_(_bias(old.fc1).detach()[squeeze])
    new.fc2.weight.data.copy_(old.fc2.weight.detach()[chs][:, squeeze])
    _bias(new.fc2).data.copy_(_bias(old.fc2).detach()[chs])


def prune_net(
    net: Net, widths: Mapping[str, int], expand: Mapping[int, int] | None = None, multiple: int = 1,
    importance: Mapping[str, np.ndarray] | None = None,
) -> Net:
    """A narrower copy of ``net``: width groups pruned to ``widths``, MBConv expansion ratios to ``expand``.

    The kept channels of each set are the most important ones (``importance``, default
    :func:`channel_importance`); their weights, biases and BatchNorm statistics are copied, so the
    result computes what ``net`` computes with the other channels removed. Its ``arch`` is
    :func:`pruned_arch` of ``net.arch``; it is in ``net``'s training mode, on ``net``'s device.

    Raises:
        ArchError: impossible widths or ratios (see :func:`pruned_arch`).
    """
    arch = net.arch
    new_arch = pruned_arch(arch, widths, expand, multiple)
    scores = dict(importance) if importance is not None else channel_importance(net)
    device = net.classifier.weight.device
    dropout = net.dropout.p if isinstance(net.dropout, nn.Dropout) else 0.0
    stem = net.stem[0]
    assert isinstance(stem, nn.Conv2d)
    out = build(new_arch, num_classes=net.classifier.out_features, in_chans=stem.in_channels,
                dropout=dropout).to(device)
    new_widths = _widths_of(new_arch)
    sel = {g: _keep(scores[g], c) for g, c in new_widths.items()}
    _, of_block = width_groups(arch)
    with torch.no_grad():
        _copy_conv_bn(net.stem, out.stem, sel[STEM], None)
        in_group, new_in = STEM, new_arch.stem_chs
        for i, (b, nb, old, new) in enumerate(zip(arch.blocks, new_arch.blocks, net.blocks, out.blocks, strict=True)):
            out_group = of_block[i]
            if isinstance(old, MBConv):
                assert isinstance(new, MBConv)
                o_exp, o_dw, o_se, o_proj = _mb_parts(old, b)
                n_exp, n_dw, n_se, n_proj = _mb_parts(new, nb)
                if o_exp is not None and n_exp is not None:
                    mid = _keep(scores[f"mid.{i}"], new_in * nb.exp_ratio)
                    _copy_conv_bn(o_exp, n_exp, mid, sel[in_group])
                else:
                    mid = sel[in_group]
                _copy_conv_bn(o_dw, n_dw, mid, None)
                if o_se is not None and n_se is not None:
                    squeeze = _keep(scores[f"se.{i}"], squeeze_chs(new_in, b.se_ratio))
                    _copy_se(o_se, n_se, mid, squeeze)
                _copy_conv_bn(o_proj, n_proj, sel[out_group], mid)
            else:
                assert isinstance(old, ResidualBlock) and isinstance(new, ResidualBlock)
                o1, o2, o_se, o_short = _rb_parts(old)
                n1, n2, n_se, n_short = _rb_parts(new)
                inner = _keep(scores[f"inner.{i}"], nb.out_chs)
                _copy_conv_bn(o1, n1, inner, sel[in_group])
                _copy_conv_bn(o2, n2, sel[out_group], inner)
                if o_se is not None and n_se is not None:
                    squeeze = _keep(scores[f"se.{i}"], squeeze_chs(new_in, b.se_ratio))
                    _copy_se(o_se, n_se, sel[out_group], squeeze)
                if o_short is not None and n_short is not None:
                    _copy_conv_bn(o_short, n_short, sel[out_group], sel[in_group])
            in_group, new_in = out_group, nb.out_chs
        if isinstance(net.head, nn.Sequential) and isinstance(out.head, nn.Sequential):
            _copy_conv_bn(net.head, out.head, sel[HEAD], sel[in_group])
            in_group = HEAD
        out.classifier.weight.data.copy_(net.classifier.weight.detach()[:, sel[in_group]])
        out.classifier.bias.data.copy_(net.classifier.bias.detach())
    out.train(net.training)
    return out


def widths(arch: Arch) -> dict[str, int]:
    """The channel count of every width group of ``arch``."""
    return _widths_of(arch)


__all__ = ["PruneUnit", "channel_importance", "prune_net", "prune_units", "pruned_arch", "resolve_widths",
           "width_groups", "widths"]
