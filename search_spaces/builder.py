"""Turn an :class:`Arch` into a ``torch.nn.Module``.

The blocks follow torchvision's MobileNetV2 / EfficientNet / MnasNet definitions exactly
(bias-free convolutions followed by BatchNorm, SE with biased 1x1 convolutions), so the
reference networks built here have the published parameter counts.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from search_spaces.arch import Arch, Block

_ACT: dict[str, type[nn.Module]] = {
    "relu": nn.ReLU,
    "relu6": nn.ReLU6,
    "hardswish": nn.Hardswish,
    "silu": nn.SiLU,
}


def _act(name: str) -> nn.Module:
    cls = _ACT[name]
    return cls(inplace=True) if cls is not nn.Hardswish else cls()


def conv_bn(
    in_chs: int, out_chs: int, kernel_size: int, stride: int = 1, groups: int = 1,
    act: str | None = None,
) -> nn.Sequential:
    """Conv (no bias) + BatchNorm (+ activation)."""
    layers: list[nn.Module] = [
        nn.Conv2d(in_chs, out_chs, kernel_size, stride, kernel_size // 2, groups=groups, bias=False),
        nn.BatchNorm2d(out_chs),
    ]
    if act is not None:
        layers.append(_act(act))
    return nn.Sequential(*layers)


class SqueezeExcite(nn.Module):
    """Squeeze-and-excitation gate (EfficientNet form: biased 1x1 convs, sigmoid gate)."""

    def __init__(self, chs: int, squeeze_chs: int, act: str) -> None:
        super().__init__()
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc1 = nn.Conv2d(chs, squeeze_chs, 1)
        self.act = _act(act)
        self.fc2 = nn.Conv2d(squeeze_chs, chs, 1)
        self.gate = nn.Sigmoid()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = self.gate(self.fc2(self.act(self.fc1(self.pool(x)))))
        return x * s


def squeeze_chs(in_chs: int, se_ratio: float) -> int:
    return max(1, int(in_chs * se_ratio))


class MBConv(nn.Module):
    """Inverted residual: 1x1 expand (skipped when exp_ratio is 1), depthwise kxk, optional SE,
    1x1 linear projection; identity shortcut when stride is 1 and channels match."""

    def __init__(self, in_chs: int, block: Block, act: str) -> None:
        super().__init__()
        mid = in_chs * block.exp_ratio
        layers: list[nn.Module] = []
        if block.exp_ratio != 1:
            layers.append(conv_bn(in_chs, mid, 1, act=act))
        layers.append(conv_bn(mid, mid, block.kernel_size, block.stride, groups=mid, act=act))
        if block.se_ratio > 0:
            layers.append(SqueezeExcite(mid, squeeze_chs(in_chs, block.se_ratio), act))
        layers.append(conv_bn(mid, block.out_chs, 1))
        self.body = nn.Sequential(*layers)
        self.use_residual = block.stride == 1 and in_chs == block.out_chs

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.body(x)
        return x + y if self.use_residual else y


class ResidualBlock(nn.Module):
    """ResNet basic block: two kxk convs, optional SE, identity or 1x1 projection shortcut."""

    def __init__(self, in_chs: int, block: Block, act: str) -> None:
        super().__init__()
        out = block.out_chs
        layers: list[nn.Module] = [
            conv_bn(in_chs, out, block.kernel_size, block.stride, act=act),
            conv_bn(out, out, block.kernel_size),
        ]
        if block.se_ratio > 0:
            layers.append(SqueezeExcite(out, squeeze_chs(in_chs, block.se_ratio), act))
        self.body = nn.Sequential(*layers)
        self.shortcut: nn.Module = (
            nn.Identity() if block.stride == 1 and in_chs == out else conv_bn(in_chs, out, 1, block.stride)
        )
        self.act = _act(act)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.body(x) + self.shortcut(x))


class Net(nn.Module):
    """Stem, body blocks, optional 1x1 head conv, global pooling, dropout, linear classifier.

    With ``features_only``, the backbone alone: stem, blocks and head conv, returning the feature
    map ``(N, feature_chs, H / reduction, W / reduction)``; no pooling, dropout or classifier.

    Attributes:
        feature_chs: channels of the feature map (the head conv's, else the last block's).
        reduction: how much smaller than the input the feature map is on each side (the strides' product).
        features_only: whether the network ends at the feature map.
    """

    def __init__(self, arch: Arch, num_classes: int, in_chans: int, dropout: float,
                 features_only: bool = False) -> None:
        super().__init__()
        self.arch = arch
        self.features_only = features_only
        self.stem = conv_bn(in_chans, arch.stem_chs, 3, arch.stem_stride, act=arch.act)
        blocks: list[nn.Module] = []
        chs = arch.stem_chs
        for b in arch.blocks:
            blocks.append(MBConv(chs, b, arch.act) if b.block_type == "mbconv" else ResidualBlock(chs, b, arch.act))
            chs = b.out_chs
        self.blocks = nn.Sequential(*blocks)
        self.head: nn.Module = conv_bn(chs, arch.head_chs, 1, act=arch.act) if arch.head_chs else nn.Identity()
        self.feature_chs = arch.head_chs or chs
        self.reduction = arch.stem_stride * math.prod(b.stride for b in arch.blocks)
        if not features_only:
            self.pool = nn.AdaptiveAvgPool2d(1)
            self.dropout = nn.Dropout(dropout)
            self.classifier = nn.Linear(self.feature_chs, num_classes)

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.blocks(self.stem(x)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.features_only:
            return self.forward_features(x)
        x = torch.flatten(self.pool(self.forward_features(x)), 1)
        return self.classifier(self.dropout(x))


def build(arch: Arch, num_classes: int = 1000, in_chans: int = 3, dropout: float = 0.2,
          features_only: bool = False) -> Net:
    """Build the PyTorch network of ``arch`` (``features_only``: the backbone alone, see :class:`Net`).

    Weights use torchvision's initialisation scheme (Kaiming-normal convs, zeroed biases,
    unit BatchNorm, small-uniform classifier).
    """
    net = Net(arch, num_classes, in_chans, dropout, features_only)
    for m in net.modules():
        if isinstance(m, nn.Conv2d):
            if m.weight.device.type != "meta":
                nn.init.kaiming_normal_(m.weight, mode="fan_out")
                if m.bias is not None:
                    nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Linear) and m.weight.device.type != "meta":
            nn.init.normal_(m.weight, 0, 0.01)
            nn.init.zeros_(m.bias)
    return net
