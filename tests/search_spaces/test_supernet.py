"""The supernet: every subnet extracted from it is the builder's network for that architecture, with
the supernet's weights, and computes what the supernet computes for it; for every shipped space."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from search_spaces import Arch, OutOfSpaceError, available_spaces, build, count_params, load_space
from search_spaces.supernet import Supernet, sandwich_ends

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # small networks: one torch thread


def _perturbed(space_name: str, seed: int = 0) -> tuple[Supernet, list[Arch]]:
    """A supernet whose every weight (kernel transformations and BatchNorm included) is moved off
    its initial value, so that a slice taken from the wrong place cannot go unnoticed, and some
    sampled architectures plus the sandwich's ends."""
    space = load_space(space_name)
    torch.manual_seed(seed)
    net = Supernet(space, num_classes=10)
    with torch.no_grad():
        for p in net.parameters():
            p.add_(0.1 * torch.randn_like(p))
    rng = np.random.default_rng(seed)
    smallest, largest = sandwich_ends(space, 32)
    archs = [space.sample(rng) for _ in range(2)] + [smallest, *largest]
    net.train()
    with torch.no_grad():  # running statistics away from their initial values too
        for arch in archs:
            net(torch.randn(4, 3, 32, 32), arch)
    return net, archs


@pytest.mark.parametrize("space_name", available_spaces())
def test_extracted_subnets_equal_the_builders_networks_and_the_supernets_outputs(space_name: str) -> None:
    supernet, archs = _perturbed(space_name)
    x = torch.randn(2, 3, 32, 32)
    for arch in archs:
        sub = supernet.extract(arch)
        reference = build(arch, num_classes=10, dropout=0.0)
        assert str(sub) == str(reference), arch.encode()  # the same modules, in the same order
        assert count_params(sub) == count_params(reference)
        assert {k: v.shape for k, v in sub.state_dict().items()} == {
            k: v.shape for k, v in reference.state_dict().items()}
        for training in (False, True):  # running statistics, then batch statistics
            supernet.train(training)
            sub.train(training)
            with torch.no_grad():
                want, got = supernet(x, arch), sub(x)
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5, msg=lambda m, a=arch: f"{a}: {m}")


def test_the_sandwich_has_the_smallest_network_and_the_largest_of_each_block_type() -> None:
    space = load_space("mobile_cifar")
    smallest, largest = sandwich_ends(space, 32)
    assert {b.block_type for b in largest[0].blocks} == {"residual"}  # the teacher: the most MACs
    assert {b.block_type for b in largest[1].blocks} == {"mbconv"}
    assert all(b.kernel_size == 3 and b.exp_ratio == 1 and b.se_ratio == 0 for b in smallest.blocks)
    assert len(sandwich_ends(load_space("efficient"), 32)[1]) == 1  # MBConv only


def test_a_smaller_kernel_is_the_learned_transformation_of_the_larger_kernels_centre() -> None:
    net = Supernet(load_space("mobile_cifar"), num_classes=10)
    dw = net.stages[0][0]["mbconv"].dw.conv  # kernels 3, 5, 7
    w7 = dw.kernel(0, 16, 7)
    assert torch.equal(dw.kernel(0, 16, 5), w7[:, :, 1:6, 1:6])  # identity at initialisation
    with torch.no_grad():
        dw.kernel_transform["5"].mul_(2.0)
    assert torch.allclose(dw.kernel(0, 16, 5), 2 * w7[:, :, 1:6, 1:6])
    assert torch.allclose(dw.kernel(0, 16, 3), 2 * w7[:, :, 2:5, 2:5])  # 3x3: from the transformed 5x5


def test_subnets_share_weights_and_an_extracted_copy_is_independent() -> None:
    space = load_space("tiny")
    supernet = Supernet(space, num_classes=10).eval()
    smallest, (largest, *_) = sandwich_ends(space, 32)
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        before = supernet(x, largest).clone()
    # Fine-tuning an extracted subnet leaves the supernet as it was...
    sub = supernet.extract(smallest).train()
    opt = torch.optim.SGD(sub.parameters(), lr=1.0)
    sub(x).sum().backward()
    opt.step()
    with torch.no_grad():
        assert torch.equal(supernet(x, largest), before)
    # ...while a step on the smallest subnet inside the supernet moves the largest one's outputs.
    opt = torch.optim.SGD(supernet.parameters(), lr=1.0)
    supernet.train()
    supernet(x, smallest).sum().backward()
    opt.step()
    supernet.eval()
    with torch.no_grad():
        assert not torch.allclose(supernet(x, largest), before)


def test_a_network_outside_the_space_is_refused_by_name() -> None:
    supernet = Supernet(load_space("tiny"), num_classes=10)
    outside = Arch.decode("act_relu-stem_c8-mb_k7_e1_c8_s2-mb_k3_e1_c16_s2-mb_k3_e1_c32_s2")
    with pytest.raises(OutOfSpaceError, match="kernel_size 7"):
        supernet(torch.randn(1, 3, 32, 32), outside)
    with pytest.raises(OutOfSpaceError, match="kernel_size 7"):
        supernet.extract(outside)
