"""Fold BatchNorm into the convolution before it, as inference engines do.

The builder writes every convolution as ``conv_bn``: a ``Sequential(Conv2d(bias=False),
BatchNorm2d[, activation])``. In eval mode the BatchNorm is an affine map per channel, so it
folds into the convolution's weight and a new bias (``torch.nn.utils.fusion.fuse_conv_bn_eval``).
The fuser below replaces each such pair in a copy of the network, keeping the module tree (and
so the builder's ``Net`` class, its ``arch`` attribute and TorchScript-ability) intact;
``torch.fx.experimental.optimization.fuse`` gives the same numbers on these networks but
returns a ``GraphModule`` in place of the builder's ``Net``.
"""

from __future__ import annotations

import copy

from torch import nn
from torch.nn.utils.fusion import fuse_conv_bn_eval


def fuse_conv_bn(model: nn.Module) -> nn.Module:
    """Return an eval-mode copy of ``model`` with every Conv2d+BatchNorm2d pair folded.

    Only pairs that are consecutive children of an ``nn.Sequential`` are folded (every
    convolution the builder writes is one); the BatchNorm is replaced by ``nn.Identity`` so
    the indices of the other children do not move. ``model`` itself is left untouched.

    Args:
        model: a network whose BatchNorm layers hold their final running statistics.

    Returns:
        The fused copy, in eval mode.
    """
    fused = copy.deepcopy(model).eval()
    sequentials = [m for m in fused.modules() if isinstance(m, nn.Sequential)]
    for seq in sequentials:
        for i in range(len(seq) - 1):
            conv, bn = seq[i], seq[i + 1]
            if isinstance(conv, nn.Conv2d) and isinstance(bn, nn.BatchNorm2d) and bn.track_running_stats:
                seq[i] = fuse_conv_bn_eval(conv, bn)
                seq[i + 1] = nn.Identity()
    return fused


def count_batchnorms(model: nn.Module) -> int:
    """Number of ``BatchNorm2d`` layers in ``model`` (0 once fully fused)."""
    return sum(isinstance(m, nn.BatchNorm2d) for m in model.modules())
