"""Parameter and multiply-accumulate counts, computed from the real module graph.

MACs are counted by forward hooks on every convolution and linear layer of the built network
(SE convolutions and the classifier included), on the ``meta`` device so no memory or compute
is spent. Element-wise work (BatchNorm, activations, the SE gate, residual adds, pooling) is
not counted, as in the papers' tables and torchvision's docs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

from search_spaces.arch import Arch

if TYPE_CHECKING:
    import torch
    from torch import nn

# torch is imported where it is used: ``search_spaces`` exports these names, and reading a space,
# an Arch or an error (a command's --help, its config checks) should not wait for torch.


@dataclass(frozen=True)
class Profile:
    """Size of a network at one input resolution."""

    params: int
    macs: int
    resolution: int


def count_params(model: nn.Module) -> int:
    """Number of trainable parameters (BatchNorm running statistics are buffers, not counted)."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def count_macs(model: nn.Module, input_shape: tuple[int, ...]) -> int:
    """Multiply-accumulates of one forward pass over an input of ``input_shape`` (batch included)."""
    import torch
    from torch import nn

    total = 0

    def conv_hook(m: nn.Module, _inp: tuple[torch.Tensor, ...], out: torch.Tensor) -> None:
        nonlocal total
        m = cast(nn.Conv2d, m)
        k = m.kernel_size[0] * m.kernel_size[1]
        total += out.numel() * (m.in_channels // m.groups) * k

    def linear_hook(m: nn.Module, _inp: tuple[torch.Tensor, ...], out: torch.Tensor) -> None:
        nonlocal total
        m = cast(nn.Linear, m)
        total += out.numel() * m.in_features

    handles = []
    for mod in model.modules():
        if isinstance(mod, nn.Conv2d):
            handles.append(mod.register_forward_hook(conv_hook))
        elif isinstance(mod, nn.Linear):
            handles.append(mod.register_forward_hook(linear_hook))
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            model(torch.zeros(input_shape, device=device))
    finally:
        model.train(was_training)
        for h in handles:
            h.remove()
    return int(total)


def profile(arch: Arch, resolution: int = 224, num_classes: int = 1000, in_chans: int = 3) -> Profile:
    """Parameters and MACs of ``arch`` at ``resolution`` x ``resolution`` (batch 1).

    Built on the meta device: profiling a large network takes milliseconds.
    """
    import torch

    from search_spaces.builder import build

    with torch.device("meta"):
        model = build(arch, num_classes=num_classes, in_chans=in_chans)
    return Profile(count_params(model), count_macs(model, (1, in_chans, resolution, resolution)), resolution)
