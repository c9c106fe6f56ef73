"""The canonical architecture: a frozen dataclass with one string encoding.

An architecture string is a ``-`` separated list of tokens in a fixed order::

    act_relu6-stem_c32-mb_k3_e1_c16_s1-mb_k5_e4_c24_s2_se0.25-rb_k3_c24_s1-head_c1280

* ``act_<name>``: the activation used everywhere (relu, relu6, hardswish, silu);
* ``stem_c<chs>[_s1]``: the 3x3 stem convolution, stride 2 (written ``stem_c<chs>``) or stride 1
  (``stem_c<chs>_s1``: the first stage runs at the input's full resolution, as the CIFAR ResNets'
  does);
* ``mb_k<kernel>_e<exp_ratio>_c<out_chs>_s<stride>[_se<ratio>]``: an MBConv block;
* ``rb_k<kernel>_c<out_chs>_s<stride>[_se<ratio>]``: a residual basic block (it has no
  expansion, so no ``e`` field);
* ``head_c<chs>``: the final 1x1 convolution, omitted when the network has none.

Fields appear in exactly that order, ``se`` only when the ratio is non-zero, numbers without
leading zeros. :meth:`Arch.decode` accepts only canonical strings, so one network has one
string: the Ray trial config value, the MLflow param, the latency cache key.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field

from search_spaces.errors import ArchDecodeError, ArchError

ACTIVATIONS: tuple[str, ...] = ("relu", "relu6", "hardswish", "silu")
BLOCK_TYPES: tuple[str, ...] = ("mbconv", "residual")
_BLOCK_PREFIX = {"mbconv": "mb", "residual": "rb"}
_PREFIX_BLOCK = {v: k for k, v in _BLOCK_PREFIX.items()}

_MB_RE = re.compile(r"mb_k(\d+)_e(\d+)_c(\d+)_s(\d+)(?:_se([0-9.]+))?")
_RB_RE = re.compile(r"rb_k(\d+)_c(\d+)_s(\d+)(?:_se([0-9.]+))?")
_STEM_RE = re.compile(r"stem_c(\d+)(?:_s(\d+))?")
STEM_STRIDES: tuple[int, ...] = (1, 2)
_HEAD_RE = re.compile(r"head_c(\d+)")


def _fmt_ratio(x: float) -> str:
    return f"{x:g}"


@dataclass(frozen=True)
class Block:
    """One block of the network body.

    Attributes:
        block_type: ``"mbconv"`` or ``"residual"``.
        kernel_size: odd depthwise (MBConv) or dense (residual) kernel size.
        exp_ratio: MBConv expansion ratio; always 1 for residual blocks, which have none.
        out_chs: output channels.
        stride: 1 or 2; only the first block of a stage strides.
        se_ratio: squeeze-excitation ratio relative to the block's input channels (0: no SE).
    """

    block_type: str
    kernel_size: int
    exp_ratio: int
    out_chs: int
    stride: int
    se_ratio: float = 0.0

    def __post_init__(self) -> None:
        if self.block_type not in BLOCK_TYPES:
            raise ArchError(f"block_type {self.block_type!r} unknown; allowed: {list(BLOCK_TYPES)}")
        if self.kernel_size < 1 or self.kernel_size % 2 == 0:
            raise ArchError(f"kernel_size must be a positive odd integer, got {self.kernel_size}")
        if self.exp_ratio < 1:
            raise ArchError(f"exp_ratio must be >= 1, got {self.exp_ratio}")
        if self.block_type == "residual" and self.exp_ratio != 1:
            raise ArchError("residual blocks have no expansion: exp_ratio must be 1")
        if self.out_chs < 1:
            raise ArchError(f"out_chs must be >= 1, got {self.out_chs}")
        if self.stride not in (1, 2):
            raise ArchError(f"stride must be 1 or 2, got {self.stride}")
        if not 0.0 <= self.se_ratio < 1.0:
            raise ArchError(f"se_ratio must be in [0, 1), got {self.se_ratio}")
        object.__setattr__(self, "se_ratio", float(self.se_ratio))

    def encode(self) -> str:
        """Return this block's canonical token."""
        se = f"_se{_fmt_ratio(self.se_ratio)}" if self.se_ratio > 0 else ""
        if self.block_type == "mbconv":
            return f"mb_k{self.kernel_size}_e{self.exp_ratio}_c{self.out_chs}_s{self.stride}{se}"
        return f"rb_k{self.kernel_size}_c{self.out_chs}_s{self.stride}{se}"

    @classmethod
    def decode(cls, token: str) -> Block:
        """Parse one canonical block token.

        Raises:
            ArchDecodeError: the token is malformed or not in canonical form.
        """
        m = _MB_RE.fullmatch(token)
        if m:
            k, e, c, s, se = m.groups()
            block_type, exp = "mbconv", int(e)
        else:
            m = _RB_RE.fullmatch(token)
            if not m:
                raise ArchDecodeError(
                    token,
                    "expected 'mb_k<k>_e<e>_c<chs>_s<stride>[_se<ratio>]' or "
                    "'rb_k<k>_c<chs>_s<stride>[_se<ratio>]'",
                )
            k, c, s, se = m.groups()
            block_type, exp = "residual", 1
        try:
            ratio = float(se) if se is not None else 0.0
            block = cls(block_type, int(k), exp, int(c), int(s), ratio)
        except (ArchError, ValueError) as err:
            raise ArchDecodeError(token, str(err)) from None
        if block.encode() != token:
            raise ArchDecodeError(token, f"not canonical; the canonical form is {block.encode()!r}")
        return block


@dataclass(frozen=True)
class Arch:
    """A complete network: stem, body blocks, optional head conv, activation.

    Frozen and hashable; equal networks are equal objects and have equal strings.

    Attributes:
        stem_chs: the stem convolution's output channels.
        blocks: the body, in order.
        head_chs: the final 1x1 convolution's channels (0: none).
        act: the activation used everywhere.
        stem_stride: the stem's stride: 2 (the default: the body starts at half the input's
            resolution) or 1 (it starts at full resolution).
    """

    stem_chs: int
    blocks: tuple[Block, ...]
    head_chs: int = 0
    act: str = "relu"
    stem_stride: int = 2
    _encoded: str = field(default="", init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.blocks, tuple):
            object.__setattr__(self, "blocks", tuple(self.blocks))
        if self.act not in ACTIVATIONS:
            raise ArchError(f"activation {self.act!r} unknown; allowed: {list(ACTIVATIONS)}")
        if self.stem_chs < 1:
            raise ArchError(f"stem_chs must be >= 1, got {self.stem_chs}")
        if self.head_chs < 0:
            raise ArchError(f"head_chs must be >= 0 (0: no head conv), got {self.head_chs}")
        if self.stem_stride not in STEM_STRIDES:
            raise ArchError(f"stem_stride must be one of {list(STEM_STRIDES)}, got {self.stem_stride}")
        if not self.blocks:
            raise ArchError("an architecture needs at least one block")
        stem = f"stem_c{self.stem_chs}" + ("" if self.stem_stride == 2 else f"_s{self.stem_stride}")
        tokens = [f"act_{self.act}", stem]
        tokens += [b.encode() for b in self.blocks]
        if self.head_chs:
            tokens.append(f"head_c{self.head_chs}")
        object.__setattr__(self, "_encoded", "-".join(tokens))

    def encode(self) -> str:
        """Return the canonical architecture string."""
        return self._encoded

    def __str__(self) -> str:
        return self._encoded

    @property
    def arch_id(self) -> str:
        """A short stable hash of the canonical string (12 hex digits)."""
        return arch_id_of(self._encoded)

    @property
    def depth(self) -> int:
        """Number of body blocks."""
        return len(self.blocks)

    @classmethod
    def decode(cls, text: str) -> Arch:
        """Parse a canonical architecture string.

        Raises:
            ArchDecodeError: naming the first malformed token.
        """
        if not isinstance(text, str):
            raise ArchDecodeError(repr(text), "an architecture string must be a str")
        tokens = text.strip().split("-")
        if len(tokens) < 3:
            raise ArchDecodeError(text, "expected at least 'act_<name>-stem_c<chs>-<block>'")
        act_tok, stem_tok, *rest = tokens
        if not act_tok.startswith("act_") or act_tok[4:] not in ACTIVATIONS:
            raise ArchDecodeError(
                act_tok, f"expected 'act_<name>' with name in {list(ACTIVATIONS)}"
            )
        m = _STEM_RE.fullmatch(stem_tok)
        if not m or str(int(m.group(1))) != m.group(1) or int(m.group(1)) < 1:
            raise ArchDecodeError(stem_tok, "expected 'stem_c<chs>' (stride 2) or 'stem_c<chs>_s1' with chs >= 1")
        stem_stride = 2 if m.group(2) is None else int(m.group(2))
        if m.group(2) is not None and m.group(2) != "1":
            canonical = f"stem_c{int(m.group(1))}" if m.group(2) == "2" else None
            raise ArchDecodeError(stem_tok, f"not canonical; the canonical form is {canonical!r}" if canonical
                                  else f"stem stride must be one of {list(STEM_STRIDES)} (written 'stem_c<chs>' "
                                       "for 2, 'stem_c<chs>_s1' for 1)")
        head = 0
        if rest and rest[-1].startswith("head"):
            head_tok = rest.pop()
            hm = _HEAD_RE.fullmatch(head_tok)
            if not hm or str(int(hm.group(1))) != hm.group(1) or int(hm.group(1)) < 1:
                raise ArchDecodeError(head_tok, "expected 'head_c<chs>' with chs >= 1")
            head = int(hm.group(1))
        if not rest:
            raise ArchDecodeError(text, "no blocks between the stem and the head")
        blocks = tuple(Block.decode(t) for t in rest)
        return cls(int(m.group(1)), blocks, head, act_tok[4:], stem_stride)


def arch_id_of(encoded: str) -> str:
    """Short hash of an architecture string (the same as ``Arch.decode(s).arch_id``)."""
    return hashlib.sha1(encoded.encode()).hexdigest()[:12]
