"""Conv+BN fusion: the fused network computes what the unfused one does, without BatchNorm."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from nas.deploy.fuse import count_batchnorms, fuse_conv_bn
from search_spaces import build, resolve_arch

NETS = [
    "act_relu-stem_c8-mb_k3_e2_c16_s2_se0.25-rb_k3_c16_s1-rb_k5_c24_s2-mb_k5_e1_c24_s1-head_c32",
    "act_hardswish-stem_c16-mb_k5_e4_c24_s2_se0.25-mb_k3_e4_c24_s1-rb_k3_c32_s2_se0.25-head_c64",
]


def _with_real_statistics(net: nn.Module) -> nn.Module:
    """Give every BatchNorm non-trivial running statistics and affine terms, as after training."""
    g = torch.Generator().manual_seed(0)
    for m in net.modules():
        if isinstance(m, nn.BatchNorm2d):
            n = m.num_features
            m.running_mean.copy_(torch.rand(n, generator=g) - 0.5)
            m.running_var.copy_(torch.rand(n, generator=g) + 0.5)
            m.weight.data.copy_(torch.rand(n, generator=g) + 0.5)
            m.bias.data.copy_(torch.rand(n, generator=g) - 0.5)
    return net.eval()


@pytest.mark.parametrize("text", NETS)
def test_fused_outputs_equal_unfused(text: str) -> None:
    torch.manual_seed(0)
    net = _with_real_statistics(build(resolve_arch(text), num_classes=10))
    fused = fuse_conv_bn(net)
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        want, got = net(x), fused(x)
    assert count_batchnorms(net) > 0
    assert count_batchnorms(fused) == 0
    assert torch.allclose(got, want, atol=1e-5, rtol=1e-4), (got - want).abs().max()


def test_fusion_leaves_the_original_untouched_and_keeps_the_class() -> None:
    net = _with_real_statistics(build(resolve_arch(NETS[0]), num_classes=10))
    before = count_batchnorms(net)
    fused = fuse_conv_bn(net)
    assert count_batchnorms(net) == before
    assert type(fused) is type(net)
    assert not fused.training
    convs = [m for m in fused.modules() if isinstance(m, nn.Conv2d)]
    assert all(c.bias is not None for c in convs)
