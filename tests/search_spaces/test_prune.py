"""Structured pruning of a built network into a narrower Arch: the same function on the channels kept."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from search_spaces import ArchError, build, load_space, resolve_arch
from search_spaces.builder import Net
from search_spaces.prune import prune_net, prune_units, pruned_arch, width_groups, widths
from search_spaces.references import small_input_variant

ARCHS = [
    load_space("mobile_cifar").sample(np.random.default_rng(0)).encode(),
    "act_silu-stem_c16-mb_k3_e1_c16_s1_se0.25-mb_k5_e4_c24_s2_se0.25-rb_k3_c32_s2_se0.25-rb_k3_c32_s1-head_c64",
]


def _net(arch: str, seed: int = 0) -> Net:
    """A network with distinct BatchNorm affine terms and statistics (estimated on random images) and
    squeeze-excitation biases, as after training."""
    torch.manual_seed(seed)
    net = build(resolve_arch(arch), num_classes=10)
    for m in net.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.weight.data.uniform_(0.5, 1.5)
            m.bias.data.normal_(0.0, 0.1)
            m.momentum = None
        elif m.__class__.__name__ == "SqueezeExcite":
            m.fc1.bias.data.normal_(0.0, 0.1)
            m.fc2.bias.data.normal_(0.0, 0.1)
    net.train()
    with torch.no_grad():
        net(torch.randn(16, 3, 16, 16))
    return net.eval()


@pytest.mark.parametrize("arch", ARCHS)
def test_pruning_to_its_own_widths_is_the_same_network(arch: str) -> None:
    net = _net(arch)
    same = prune_net(net, widths(net.arch))
    x = torch.randn(2, 3, 16, 16)
    assert same.arch == net.arch
    with torch.no_grad():
        assert torch.equal(same(x), net(x))


@pytest.mark.parametrize("arch", ARCHS)
def test_a_pruned_network_computes_what_the_original_computes_with_those_channels_silenced(arch: str) -> None:
    """Silence the channels pruning will remove (their BatchNorm outputs 0): the original network then
    computes exactly what the pruned one does, which checks every slice copied."""
    net = _net(arch)
    units = prune_units(net.arch, 8)
    target = {u.name: max(u.minimum, u.size // 2 // 8 * 8) for u in units if u.kind == "width"}
    expand = {u.members[0]: 2 for u in units if u.kind == "expand"}
    pruned = prune_net(net, target, expand, multiple=8)
    assert pruned.arch == pruned_arch(net.arch, target, expand, 8)
    assert pruned.arch != net.arch
    silenced = _silence(net, pruned)
    x = torch.randn(3, 3, 16, 16)
    with torch.no_grad():
        torch.testing.assert_close(pruned(x), silenced(x), rtol=1e-4, atol=1e-5)
    built = build(pruned.arch, num_classes=10).state_dict()
    assert {k: v.shape for k, v in built.items()} == {k: v.shape for k, v in pruned.state_dict().items()}


def _silence(net: Net, pruned: Net) -> Net:
    """A copy of ``net`` whose BatchNorms output 0 on every channel ``pruned`` dropped (found by value)."""
    out = _copy(net)
    old_bns = [m for m in out.modules() if isinstance(m, nn.BatchNorm2d)]
    new_bns = [m for m in pruned.modules() if isinstance(m, nn.BatchNorm2d)]
    assert len(old_bns) == len(new_bns)
    for old, new in zip(old_bns, new_bns, strict=True):
        kept = [_index(old.running_mean, v) for v in new.running_mean]
        drop = sorted(set(range(old.num_features)) - set(kept))
        old.weight.data[drop] = 0.0
        old.bias.data[drop] = 0.0
    sq = [m for m in out.modules() if m.__class__.__name__ == "SqueezeExcite"]
    new_sq = [m for m in pruned.modules() if m.__class__.__name__ == "SqueezeExcite"]
    for old, new in zip(sq, new_sq, strict=True):
        kept = [_index(old.fc1.bias, v) for v in new.fc1.bias]
        drop = sorted(set(range(old.fc1.out_channels)) - set(kept))
        old.fc1.weight.data[drop] = 0.0
        old.fc1.bias.data[drop] = 0.0
        old.fc2.weight.data[:, drop] = 0.0
    return out


def _index(values: torch.Tensor, v: torch.Tensor) -> int:
    """Where the copied value ``v`` came from (the copy is exact)."""
    (hits,) = torch.nonzero(values == v, as_tuple=True)
    assert len(hits) == 1
    return int(hits[0])


def _copy(net: Net) -> Net:
    dup = build(net.arch, num_classes=10)
    dup.load_state_dict(net.state_dict())
    return dup.eval()


def test_the_channels_pruned_first_are_those_the_network_does_not_use() -> None:
    net = _net("act_relu-stem_c16-mb_k3_e1_c16_s1-rb_k3_c24_s2-rb_k3_c24_s1-head_c32")
    dead = [0, 3, 5, 6, 9, 12, 13, 15]  # half of the stem group's 16 channels, silenced wherever they are written
    block = net.blocks[0]  # expansion 1: its depthwise convolution works on the group's own channels
    for bn in (net.stem[1], block.body[0][1], block.body[-1][1]):
        bn.weight.data[dead] = 0.0
        bn.bias.data[dead] = 0.0
    pruned = prune_net(net, {"stem": 8})
    x = torch.randn(2, 3, 16, 16)
    with torch.no_grad():
        torch.testing.assert_close(pruned(x), net(x), rtol=1e-4, atol=1e-5)


def test_width_groups_follow_the_identity_shortcuts() -> None:
    arch = resolve_arch("act_relu-stem_c16-mb_k3_e1_c16_s1-mb_k3_e4_c24_s2-mb_k3_e4_c24_s1-rb_k3_c32_s1-head_c64")
    groups, of_block = width_groups(arch)
    assert groups == {"stem": [-1, 0], "blocks.1": [1, 2], "blocks.3": [3], "head": []}
    assert of_block == ["stem", "blocks.1", "blocks.1", "blocks.3"]
    names = {u.name: u for u in prune_units(arch, 8)}
    assert names["expand.1"].size == 4 and names["expand.1"].minimum == 2 and "expand.0" not in names


def test_pruning_never_adds_a_shortcut_the_network_did_not_have() -> None:
    arch = small_input_variant(resolve_arch("mobilenetv2_100"))  # stem 32 -> block 0 (stride 1) 16: no shortcut
    narrow = pruned_arch(arch, {"stem": 16}, multiple=8)
    assert narrow.stem_chs == 16 and narrow.blocks[0].out_chs == 8  # moved one multiple away from the stem's width


def test_a_shortcut_clash_the_output_group_cannot_resolve_keeps_the_input_group_wider() -> None:
    # MobileNetV2 x0.35 in its 32x32 layout: stem 16 -> block 0 (stride 1) 8, already one multiple wide
    arch = resolve_arch("act_relu6-stem_c16-mb_k3_e1_c8_s1-mb_k3_e6_c16_s2-mb_k3_e6_c16_s1-head_c64")
    narrow = pruned_arch(arch, {"stem": 8, "blocks.1": 8}, multiple=8)
    assert narrow.stem_chs == 16 and narrow.blocks[0] == arch.blocks[0]  # block 0 gains no shortcut
    assert narrow.blocks[1].out_chs == 8  # the rest is pruned as asked


@pytest.mark.parametrize(
    ("widths_", "expand", "words"),
    [
        ({"blocks.99": 8}, None, "unknown width group"),
        ({"stem": 64}, None, "cannot keep 64"),
        ({"stem": 0}, None, "cannot keep 0"),
        ({}, {1: 1}, "cannot take expansion ratio 1"),
        ({}, {0: 2}, "cannot take expansion ratio 2"),
    ],
)
def test_impossible_pruning_is_refused_naming_the_unit(widths_: dict[str, int], expand: dict[int, int] | None,
                                                       words: str) -> None:
    arch = resolve_arch("act_relu-stem_c16-mb_k3_e1_c16_s1-mb_k3_e4_c24_s2-mb_k3_e4_c24_s1-head_c64")
    with pytest.raises(ArchError, match=words):
        pruned_arch(arch, widths_, expand)
