"""Fixed-length features of an architecture at its deployment input shape, computed with numpy.

Every convolution, squeeze-excitation gate, residual add and the classifier of the network
that :func:`search_spaces.build` would build is described analytically (no torch module is
built): its multiply-accumulates, a memory-traffic proxy (input + output activations + weights,
in elements), its trainable parameters and an operator count. Those quantities are summed per
*operator kind* (stem, pointwise expand/project, depthwise per kernel size, dense convolution
per kernel size, shortcut, SE, add, head, pooling + classifier), which is what an additive
latency model needs: each kind has its own cost per MAC, per element moved and per call.
Activation elements are counted per activation function, and totals and depth close the vector.

MACs follow :func:`search_spaces.count_macs` exactly (convolutions, SE convolutions and the
classifier; element-wise work is not counted), so ``total.macs`` equals the profiled count.

A block's contribution depends only on the block, its input channels and its input spatial
size, so :class:`FeatureExtractor` computes each distinct one once and caches it; a batch of
architectures then costs a few dictionary look-ups per block and one ``numpy`` reduction.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from scipy import sparse

from latency_predictor.errors import ConfigError
from search_spaces import ACTIVATIONS, Arch, Block

FEATURE_VERSION = 2
"""Bumped whenever the meaning of a feature changes; saved predictors record it."""

OP_KINDS: tuple[str, ...] = (
    "stem", "pw_expand", "dw_k3", "dw_k5", "dw_k7", "dw_kx", "pw_project",
    "conv_k3", "conv_k5", "conv_k7", "conv_kx", "shortcut", "se", "add", "head", "classifier",
)
"""Operator kinds; ``*_kx`` holds kernel sizes other than 3, 5 and 7."""

QUANTITIES: tuple[str, ...] = ("macs", "traffic", "params", "ops", "macs_u8", "traffic_u8", "macs_u16", "traffic_u16",
                               "macs_valid")
"""Per-kind quantities: MACs (millions), traffic (million elements), params (millions), calls,
the MACs and traffic of the convolutions whose channel counts are not multiples of 8
(``_u8``) or of 16 (``_u16``), and the MACs whose kernel tap falls inside the input rather than on
its zero padding (``macs_valid``).

A 7x7 kernel on a 4x4 map reads padding at two thirds of its taps, a 3x3 kernel on a 112x112 map at
under 2%: at small resolutions the counted MACs overstate the work of a runtime whose cost follows the
valid taps. ONNX Runtime's CPU build prices convolutions that way; on ``mobile_cifar`` at 32x32 a
predictor fitted on 70 of its networks priced 77% of the held-out ones within +-10% without this
quantity and 95% with it (``benchmarks/prediction/transfer_runtimes.md``).

SIMD-blocked convolution kernels work on blocks of channels: ONNX Runtime's NCHWc kernels use
blocks of 16 channels with AVX-512 and 8 with AVX2, and fall back to slower generic kernels
for other channel counts; tensor cores want multiples of 8. Which block matters depends on the
device, so both classes are features and the model learns their cost."""

_TOTALS: tuple[str, ...] = (
    "total.macs", "total.traffic", "total.params", "total.ops",
    "depth", "blocks.mbconv", "blocks.residual", "blocks.se",
)

FEATURE_NAMES: tuple[str, ...] = (
    *(f"{k}.{q}" for k in OP_KINDS for q in QUANTITIES),
    *(f"act.{a}" for a in ACTIVATIONS),
    *_TOTALS,
)
"""Names of the feature vector's entries, in order."""

_COL = {name: i for i, name in enumerate(FEATURE_NAMES)}
_N = len(FEATURE_NAMES)
_MEGA = 1e-6


def _kernel_kind(prefix: str, k: int) -> str:
    return f"{prefix}_k{k}" if k in (3, 5, 7) else f"{prefix}_kx"


def _conv_out(h: int, stride: int) -> int:
    # padding k // 2 with an odd kernel: out = floor((h - 1) / stride) + 1
    return (h - 1) // stride + 1


def _valid_taps(size: int, k: int, stride: int) -> int:
    """Over one axis of a convolution's output (padding ``k // 2``), the kernel taps that land inside the input."""
    pad = k // 2
    return sum(min(size, o * stride - pad + k) - max(0, o * stride - pad) for o in range(_conv_out(size, stride)))


class _Row:
    """Accumulates one unit's (stem, block or head) contribution to the feature vector."""

    def __init__(self) -> None:
        self.v = np.zeros(_N, dtype=np.float64)

    def op(self, kind: str, macs: float, traffic: float, params: float, ops: int = 1) -> None:
        v = self.v
        v[_COL[f"{kind}.macs"]] += macs * _MEGA
        v[_COL[f"{kind}.traffic"]] += traffic * _MEGA
        v[_COL[f"{kind}.params"]] += params * _MEGA
        v[_COL[f"{kind}.ops"]] += ops
        v[_COL["total.macs"]] += macs * _MEGA
        v[_COL["total.traffic"]] += traffic * _MEGA
        v[_COL["total.params"]] += params * _MEGA
        v[_COL["total.ops"]] += ops

    def conv(self, kind: str, cin: int, cout: int, k: int, h: int, w: int, ho: int, wo: int,
             groups: int = 1, stem: bool = False, stride: int = 1) -> None:
        """A bias-free convolution followed by BatchNorm (folded at inference, counted as params).

        ``stem``: the input is the image, whose few channels take a dedicated kernel path, so
        only the output channels decide the alignment class. ``stride``: the convolution's stride, which
        decides which kernel taps land on the padding (``macs_valid``).
        """
        weights = cout * (cin // groups) * k * k
        macs = ho * wo * weights
        traffic = cin * h * w + cout * ho * wo + weights
        self.op(kind, macs, traffic, weights + 2 * cout)
        v = self.v
        if k > 1:  # a 1x1 convolution reads no padding: its valid MACs would repeat its MACs column
            v[_COL[f"{kind}.macs_valid"]] += (cout * (cin // groups) * _valid_taps(h, k, stride)
                                              * _valid_taps(w, k, stride) * _MEGA)
        for block in (8, 16):
            if cout % block or (not stem and cin % block):
                v[_COL[f"{kind}.macs_u{block}"]] += macs * _MEGA
                v[_COL[f"{kind}.traffic_u{block}"]] += traffic * _MEGA

    def act(self, name: str, elements: int) -> None:
        self.v[_COL[f"act.{name}"]] += elements * _MEGA

    def se(self, chs: int, squeeze: int, h: int, w: int, act: str) -> None:
        """Pool, 1x1 conv + act, 1x1 conv + sigmoid, channel-wise multiply (biased convs)."""
        macs = 2 * chs * squeeze
        params = chs * squeeze + squeeze + squeeze * chs + chs
        # pooling reads the map once, the multiply reads and writes it once
        self.op("se", macs, 3 * chs * h * w + 2 * macs, params, ops=6)
        self.act(act, squeeze)


def _squeeze_chs(in_chs: int, se_ratio: float) -> int:
    # as search_spaces.builder: relative to the block's input channels
    return max(1, int(in_chs * se_ratio))


def _block_row(block: Block, cin: int, h: int, w: int, act: str) -> np.ndarray:
    r = _Row()
    ho, wo = _conv_out(h, block.stride), _conv_out(w, block.stride)
    cout = block.out_chs
    if block.block_type == "mbconv":
        mid = cin * block.exp_ratio
        if block.exp_ratio != 1:
            r.conv("pw_expand", cin, mid, 1, h, w, h, w)
            r.act(act, mid * h * w)
        r.conv(_kernel_kind("dw", block.kernel_size), mid, mid, block.kernel_size, h, w, ho, wo, groups=mid,
               stride=block.stride)
        r.act(act, mid * ho * wo)
        if block.se_ratio > 0:
            r.se(mid, _squeeze_chs(cin, block.se_ratio), ho, wo, act)
        r.conv("pw_project", mid, cout, 1, ho, wo, ho, wo)
        if block.stride == 1 and cin == cout:
            r.op("add", 0, 3 * cout * ho * wo, 0)
        r.v[_COL["blocks.mbconv"]] += 1
    else:
        kind = _kernel_kind("conv", block.kernel_size)
        r.conv(kind, cin, cout, block.kernel_size, h, w, ho, wo, stride=block.stride)
        r.act(act, cout * ho * wo)
        r.conv(kind, cout, cout, block.kernel_size, ho, wo, ho, wo)
        if block.se_ratio > 0:
            r.se(cout, _squeeze_chs(cin, block.se_ratio), ho, wo, act)
        if not (block.stride == 1 and cin == cout):
            r.conv("shortcut", cin, cout, 1, h, w, ho, wo, stride=block.stride)
        r.op("add", 0, 3 * cout * ho * wo, 0)
        r.act(act, cout * ho * wo)
        r.v[_COL["blocks.residual"]] += 1
    r.v[_COL["depth"]] += 1
    if block.se_ratio > 0:
        r.v[_COL["blocks.se"]] += 1
    return r.v


class FeatureExtractor:
    """Feature vectors of architectures at one input shape (batch first, NCHW).

    Args:
        input_shape: the deployment shape, e.g. ``(1, 3, 224, 224)``; per-sample features are
            multiplied by the batch size.
        num_classes: classifier outputs of the built network (as :func:`search_spaces.build`).

    Raises:
        ConfigError: the shape is not four positive integers or ``num_classes`` is not positive.
    """

    def __init__(self, input_shape: Sequence[int], num_classes: int = 1000) -> None:
        shape = tuple(input_shape)
        if len(shape) != 4 or not all(isinstance(d, int | np.integer) and d >= 1 for d in shape):
            raise ConfigError(f"input_shape must be four positive integers (N, C, H, W), got {shape!r}")
        if not isinstance(num_classes, int) or num_classes < 1:
            raise ConfigError(f"num_classes must be a positive integer, got {num_classes!r}")
        n, c, h, w = (int(d) for d in shape)
        self.input_shape = (n, c, h, w)
        self.num_classes = num_classes
        # Each distinct unit (stem, block at an input size, head) is computed once; a unit's
        # row in self._rows holds its per-sample contribution.
        self._stems: dict[tuple[int, str, int], int] = {}
        self._blocks: dict[tuple[Block, int, int, int, str], int] = {}
        self._heads: dict[tuple[int, int, int, int, str], int] = {}
        self._rows: list[np.ndarray] = []
        self._table = np.zeros((0, _N))

    @property
    def names(self) -> tuple[str, ...]:
        """The feature names (:data:`FEATURE_NAMES`)."""
        return FEATURE_NAMES

    @property
    def cached_units(self) -> int:
        """Distinct stems, blocks (at an input size) and heads computed so far."""
        return len(self._rows)

    def _add(self, row: np.ndarray) -> int:
        self._rows.append(row)
        return len(self._rows) - 1

    def _stem(self, stem_chs: int, act: str, stride: int) -> int:
        key = (stem_chs, act, stride)
        idx = self._stems.get(key)
        if idx is None:
            _, cin, h, w = self.input_shape
            r = _Row()
            ho, wo = _conv_out(h, stride), _conv_out(w, stride)
            r.conv("stem", cin, stem_chs, 3, h, w, ho, wo, stem=True, stride=stride)
            r.act(act, stem_chs * ho * wo)
            idx = self._stems[key] = self._add(r.v)
        return idx

    def _head(self, chs: int, head_chs: int, h: int, w: int, act: str) -> int:
        key = (chs, head_chs, h, w, act)
        idx = self._heads.get(key)
        if idx is None:
            r = _Row()
            feat = chs
            if head_chs:
                r.conv("head", chs, head_chs, 1, h, w, h, w)
                r.act(act, head_chs * h * w)
                feat = head_chs
            fc = feat * self.num_classes
            # global pooling reads the map; the linear layer reads its weights
            r.op("classifier", fc, feat * h * w + feat + self.num_classes + fc, fc + self.num_classes, ops=2)
            idx = self._heads[key] = self._add(r.v)
        return idx

    def _units(self, arch: Arch) -> list[int]:
        _, _, h, w = self.input_shape
        h, w = _conv_out(h, arch.stem_stride), _conv_out(w, arch.stem_stride)
        act = arch.act
        units = [self._stem(arch.stem_chs, act, arch.stem_stride)]
        chs = arch.stem_chs
        for b in arch.blocks:
            key = (b, chs, h, w, act)
            idx = self._blocks.get(key)
            if idx is None:
                idx = self._blocks[key] = self._add(_block_row(b, chs, h, w, act))
            units.append(idx)
            if b.stride == 2:
                h, w = _conv_out(h, 2), _conv_out(w, 2)
            chs = b.out_chs
        units.append(self._head(chs, arch.head_chs, h, w, act))
        return units

    def _counts(self, archs: Sequence[Arch]) -> tuple[sparse.csr_matrix, np.ndarray]:
        """``(C, T)``: how often each architecture holds each unit, and the units' rows (batch 1)."""
        flat: list[int] = []
        indptr = [0]
        for a in archs:
            flat.extend(self._units(a))
            indptr.append(len(flat))
        if len(self._rows) != len(self._table):
            self._table = np.vstack(self._rows)
        counts = sparse.csr_matrix((np.ones(len(flat)), flat, indptr), shape=(len(archs), len(self._table)))
        return counts, self._table

    def transform(self, archs: Sequence[Arch]) -> np.ndarray:
        """Feature matrix of ``archs``: shape ``(len(archs), len(FEATURE_NAMES))``, float64."""
        if not archs:
            return np.zeros((0, _N))
        counts, table = self._counts(archs)
        out: np.ndarray = counts @ table
        return out * self.input_shape[0] if self.input_shape[0] != 1 else out

    def project(self, archs: Sequence[Arch], weights: np.ndarray) -> np.ndarray:
        """``transform(archs) @ weights`` without building the feature matrix (the fast path).

        A linear model's prediction is a sum over the network's units, so each distinct unit is
        projected once and the architectures sum their units' projections.

        Args:
            archs: the architectures.
            weights: shape ``(len(FEATURE_NAMES),)`` or ``(len(FEATURE_NAMES), k)``.
        """
        w = np.asarray(weights, dtype=np.float64)
        if not archs:
            return np.zeros((0, *w.shape[1:]))
        counts, table = self._counts(archs)
        # project the distinct units when they are fewer than the batch's rows, else the rows
        out: np.ndarray = counts @ (table @ w) if len(archs) > len(table) else (counts @ table) @ w
        return out * self.input_shape[0] if self.input_shape[0] != 1 else out

    def __call__(self, arch: Arch) -> np.ndarray:
        """Feature vector of one architecture."""
        return self.transform([arch])[0]


def block_features(block: Block, in_chs: int, height: int, width: int, act: str = "relu") -> dict[str, float]:
    """Non-zero features of one block with input ``(in_chs, height, width)``, by name (batch 1).

    Useful to inspect what the model sees, and to check a block against
    :func:`search_spaces.count_macs` (``total.macs`` is in millions).
    """
    v = _block_row(block, in_chs, height, width, act)
    return {n: float(x) for n, x in zip(FEATURE_NAMES, v, strict=True) if x}
