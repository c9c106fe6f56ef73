"""Elastic layers: one weight tensor at the largest size serves every smaller size of a layer.

The building blocks of :mod:`search_spaces.supernet`. Each layer holds its weights at the largest
channel counts and kernel size the space offers at its position, and runs (or hands out, for
extraction) the slice a given subnet uses:

* **width**: the leading output (and input) channels of a convolution, a BatchNorm or a
  squeeze-excitation gate;
* **kernel**: the centre of the largest kernel, passed through a learned square matrix per
  smaller size (identity at initialisation, shared by every channel of the layer), in the
  manner of Once-for-All's kernel transformation: 7x7 -> centre 5x5 -> matrix -> centre 3x3 ->
  matrix. The matrices let a 3x3 kernel differ from the centre of the 7x7 it shares weights with;
* **BatchNorm**: the leading entries of the affine weights and running statistics; in training
  mode the batch statistics of the active channels are used (the running statistics of a shared
  BatchNorm mean little for any one subnet: they are recalibrated per subnet before evaluation).

Every layer has a ``forward`` that takes the active sizes and a ``state`` that returns the same
tensors keyed as :func:`search_spaces.build` names them, so an extracted subnet computes exactly
what the supernet computes for it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from search_spaces.errors import ArchError

Activation = Callable[[torch.Tensor], torch.Tensor]

_ACTS: dict[str, Activation] = {
    "relu": F.relu,
    "relu6": F.relu6,
    "hardswish": F.hardswish,
    "silu": F.silu,
}


def activation(name: str) -> Activation:
    """The functional form of the builder's activation ``name``."""
    return _ACTS[name]


class ElasticBatchNorm(nn.BatchNorm2d):
    """A BatchNorm whose leading ``chs`` channels serve a narrower layer."""

    def run(self, x: torch.Tensor, chs: int) -> torch.Tensor:
        """Normalise ``x`` (``chs`` channels); in training mode the running statistics of those
        channels are updated in place, as :class:`torch.nn.BatchNorm2d` updates its own."""
        assert self.running_mean is not None and self.running_var is not None  # track_running_stats is on
        if self.training and self.num_batches_tracked is not None:
            self.num_batches_tracked.add_(1)
        return F.batch_norm(
            x, self.running_mean[:chs], self.running_var[:chs], self.weight[:chs], self.bias[:chs],
            self.training, self.momentum if self.momentum is not None else 0.1, self.eps,
        )

    def state(self, chs: int) -> dict[str, torch.Tensor]:
        """The ``chs``-channel BatchNorm's state, keyed as :class:`torch.nn.BatchNorm2d` keys it."""
        assert self.running_mean is not None and self.running_var is not None
        assert self.num_batches_tracked is not None
        return {"weight": self.weight[:chs], "bias": self.bias[:chs], "running_mean": self.running_mean[:chs],
                "running_var": self.running_var[:chs], "num_batches_tracked": self.num_batches_tracked}


class ElasticConv(nn.Module):
    """A bias-free convolution with elastic input and output channels and an elastic kernel.

    Args:
        max_in: the most input channels (ignored when ``depthwise``).
        max_out: the most output channels (for a depthwise convolution: its channels).
        kernel_sizes: the kernel sizes offered; the largest is stored, the smaller ones are
            transformed centres of it.
        depthwise: one filter per channel (``groups`` = channels).
    """

    def __init__(self, max_in: int, max_out: int, kernel_sizes: Sequence[int], depthwise: bool = False) -> None:
        super().__init__()
        self.kernel_sizes = tuple(sorted(set(kernel_sizes), reverse=True))
        k = self.kernel_sizes[0]
        self.depthwise = depthwise
        self.weight = nn.Parameter(torch.empty(max_out, 1 if depthwise else max_in, k, k))
        # One matrix per smaller kernel, keyed by its size; a ParameterDict key cannot be an int.
        self.kernel_transform = nn.ParameterDict(
            {str(s): nn.Parameter(torch.eye(s * s)) for s in self.kernel_sizes[1:]}
        )

    def kernel(self, in_chs: int, out_chs: int, kernel_size: int) -> torch.Tensor:
        """The weights of the ``in_chs`` -> ``out_chs`` convolution with a ``kernel_size`` kernel.

        Raises:
            ArchError: a kernel size this layer does not offer.
        """
        if kernel_size not in self.kernel_sizes:
            raise ArchError(f"kernel_size {kernel_size} not offered here; offered: {list(self.kernel_sizes)}")
        w = self.weight[:out_chs] if self.depthwise else self.weight[:out_chs, :in_chs]
        size = self.kernel_sizes[0]
        for s in self.kernel_sizes[1:]:
            if s < kernel_size:
                break
            start = (size - s) // 2
            centre = w[:, :, start : start + s, start : start + s]
            w = F.linear(centre.reshape(-1, s * s), self.kernel_transform[str(s)]).reshape(centre.shape)
            size = s
        return w

    def run(self, x: torch.Tensor, in_chs: int, out_chs: int, kernel_size: int, stride: int) -> torch.Tensor:
        """Convolve ``x`` as the ``in_chs`` -> ``out_chs``, ``kernel_size`` convolution (padding ``k // 2``)."""
        groups = out_chs if self.depthwise else 1
        return F.conv2d(x, self.kernel(in_chs, out_chs, kernel_size), None, stride, kernel_size // 2, 1, groups)


class ElasticConvBN(nn.Module):
    """Convolution + BatchNorm (+ activation), the builder's ``conv_bn``, with elastic sizes."""

    def __init__(self, max_in: int, max_out: int, kernel_sizes: Sequence[int], depthwise: bool = False) -> None:
        super().__init__()
        self.conv = ElasticConv(max_in, max_out, kernel_sizes, depthwise)
        self.bn = ElasticBatchNorm(max_out)

    def run(self, x: torch.Tensor, in_chs: int, out_chs: int, kernel_size: int, stride: int,
            act: Activation | None = None) -> torch.Tensor:
        """The ``in_chs`` -> ``out_chs`` layer on ``x``."""
        y = self.bn.run(self.conv.run(x, in_chs, out_chs, kernel_size, stride), out_chs)
        return act(y) if act is not None else y

    def state(self, in_chs: int, out_chs: int, kernel_size: int) -> dict[str, torch.Tensor]:
        """The layer's state keyed as the builder's ``conv_bn`` (``0.weight``, ``1.running_mean``, ...)."""
        out = {"0.weight": self.conv.kernel(in_chs, out_chs, kernel_size)}
        out.update({f"1.{k}": v for k, v in self.bn.state(out_chs).items()})
        return out


class ElasticSqueezeExcite(nn.Module):
    """The builder's squeeze-and-excitation gate with elastic channels and squeeze width."""

    def __init__(self, max_chs: int, max_squeeze: int) -> None:
        super().__init__()
        self.fc1 = nn.Conv2d(max_chs, max_squeeze, 1)
        self.fc2 = nn.Conv2d(max_squeeze, max_chs, 1)

    def run(self, x: torch.Tensor, chs: int, squeeze: int, act: Activation) -> torch.Tensor:
        """Gate the ``chs`` channels of ``x`` through ``squeeze`` channels."""
        s = F.adaptive_avg_pool2d(x, 1)
        s = act(F.conv2d(s, self.fc1.weight[:squeeze, :chs], self.fc1.bias[:squeeze]))  # type: ignore[index]
        s = torch.sigmoid(F.conv2d(s, self.fc2.weight[:chs, :squeeze], self.fc2.bias[:chs]))  # type: ignore[index]
        return x * s

    def state(self, chs: int, squeeze: int) -> dict[str, torch.Tensor]:
        """The gate's state keyed as the builder's ``SqueezeExcite``."""
        assert self.fc1.bias is not None and self.fc2.bias is not None
        return {"fc1.weight": self.fc1.weight[:squeeze, :chs], "fc1.bias": self.fc1.bias[:squeeze],
                "fc2.weight": self.fc2.weight[:chs, :squeeze], "fc2.bias": self.fc2.bias[:chs]}
