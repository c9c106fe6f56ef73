"""Search spaces: typed, loaded from YAML (the built-in ones in ``search_spaces/spaces/``), validated.

A space is a stem (its width, and its stride: 2, or 1 for a first stage at full resolution), a list
of stages and a head. Each stage has a depth choice, a width (``out_chs``) choice, a stride, and
per-block choices (block type, expansion ratio, kernel size, SE ratio). A stride-1 stage whose depth
choices include 0 is optional: a network may leave it out.

Stride-1 stages may offer the same widths, so that one space holds networks whose stages are cut
differently (the CIFAR ResNets' and MobileNetV2's, say). A network is then read the one canonical
way: each stage, first to last, takes as many of the blocks as it can while the rest still fits
(:meth:`SearchSpace.to_decisions`). The network, its string and its ``arch_id`` stay one; two
decision sets of a sampler may then give the same network, which the search counts once.
The flat list of decisions a sampler sees comes from :meth:`SearchSpace.choices`;
:meth:`SearchSpace.from_decisions` maps them back to an :class:`Arch`.
"""

from __future__ import annotations

import math
import reprlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from search_spaces.arch import ACTIVATIONS, BLOCK_TYPES, Arch, Block
from search_spaces.errors import OutOfSpaceError, SpaceConfigError

SPACES_DIR = Path(__file__).resolve().parent / "spaces"
"""The built-in spaces, shipped with the package (``search_spaces/spaces/<name>.yaml``)."""

Value = int | float | str


@dataclass(frozen=True)
class BlockChoices:
    """The choices every block of a stage draws from."""

    block_type: tuple[str, ...]
    exp_ratio: tuple[int, ...]
    kernel_size: tuple[int, ...]
    se_ratio: tuple[float, ...]

    def combos(self) -> int:
        """Distinct blocks these choices give (residual blocks ignore ``exp_ratio``)."""
        n = 0
        for bt in self.block_type:
            e = len(self.exp_ratio) if bt == "mbconv" else 1
            n += e * len(self.kernel_size) * len(self.se_ratio)
        return n


@dataclass(frozen=True)
class Stage:
    """A run of blocks with one width; only the first block strides."""

    depth: tuple[int, ...]
    out_chs: tuple[int, ...]
    stride: int
    block: BlockChoices


@dataclass(frozen=True)
class Decision:
    """One choice a sampler makes: a name such as ``s2.b0.kernel_size`` and its options."""

    name: str
    options: tuple[Value, ...]


@dataclass(frozen=True)
class SearchSpace:
    """A typed search space. Build one with :func:`load_space` or :meth:`from_dict`.

    ``features_only`` (YAML key ``features_only: true``): a candidate is a backbone, its stem, blocks
    and head conv, returning the feature map, without global pooling and classifier (for a task
    head of the user's own: detection, segmentation, ...; see :func:`search_spaces.builder.build`).
    """

    name: str
    activation: tuple[str, ...]
    stem_chs: tuple[int, ...]
    head_chs: tuple[int, ...]
    stages: tuple[Stage, ...]
    description: str = ""
    source: str = field(default="<dict>", compare=False)
    features_only: bool = False
    stem_stride: tuple[int, ...] = (2,)

    # ------------------------------------------------------------------ loading
    @classmethod
    def from_dict(cls, data: Mapping[str, Any], source: str = "<dict>") -> SearchSpace:
        """Validate and build a space from its YAML mapping.

        Raises:
            SpaceConfigError: naming ``source``, the key and the allowed values.
        """
        return _parse_space(data, source)

    # ------------------------------------------------------------------ decisions
    def choices(self) -> list[Decision]:
        """The flat list of decisions with more than one option, in a fixed order."""
        out: list[Decision] = []
        for key in ("activation", "stem_chs", "stem_stride", "head_chs"):
            opts = getattr(self, key)
            if len(opts) > 1:
                out.append(Decision(key, tuple(opts)))
        for i, st in enumerate(self.stages):
            if len(st.depth) > 1:
                out.append(Decision(f"s{i}.depth", st.depth))
            if len(st.out_chs) > 1:
                out.append(Decision(f"s{i}.out_chs", st.out_chs))
            for j in range(max(st.depth)):
                for key in ("block_type", "exp_ratio", "kernel_size", "se_ratio"):
                    opts = getattr(st.block, key)
                    if len(opts) > 1:
                        out.append(Decision(f"s{i}.b{j}.{key}", tuple(opts)))
        return out

    def from_decisions(self, decisions: Mapping[str, Any]) -> Arch:
        """Map a sampler's decisions back to an :class:`Arch`.

        Decisions for blocks beyond a stage's chosen depth, and ``exp_ratio`` of residual
        blocks, are inactive and ignored. Single-option decisions may be omitted.

        Raises:
            OutOfSpaceError: a required decision is missing or has a value not offered.
        """

        def get(name: str, options: Sequence[Value]) -> Any:
            if len(options) == 1 and name not in decisions:
                return options[0]
            if name not in decisions:
                raise OutOfSpaceError(self.name, name, "decision missing")
            value = decisions[name]
            if value not in options:
                raise OutOfSpaceError(self.name, name, f"value {value!r} not in {list(options)}")
            return value

        blocks: list[Block] = []
        for i, st in enumerate(self.stages):
            depth = get(f"s{i}.depth", st.depth)
            if depth == 0:  # an optional stage left out: its width and blocks are inactive
                continue
            width = get(f"s{i}.out_chs", st.out_chs)
            for j in range(depth):
                p = f"s{i}.b{j}."
                bt = get(p + "block_type", st.block.block_type)
                e = get(p + "exp_ratio", st.block.exp_ratio) if bt == "mbconv" else 1
                blocks.append(
                    Block(bt, get(p + "kernel_size", st.block.kernel_size), e, width,
                          st.stride if j == 0 else 1, get(p + "se_ratio", st.block.se_ratio))
                )
        return Arch(
            get("stem_chs", self.stem_chs), tuple(blocks), get("head_chs", self.head_chs),
            get("activation", self.activation), get("stem_stride", self.stem_stride),
        )

    def to_decisions(self, arch: Arch) -> dict[str, Value]:
        """The active decisions that give ``arch`` (inverse of :meth:`from_decisions`).

        Raises:
            OutOfSpaceError: ``arch`` is not in this space (naming the first bad token).
        """
        depths = self._partition(arch)
        names = {d.name for d in self.choices()}
        out: dict[str, Value] = {}

        def put(name: str, value: Value) -> None:
            if name in names:
                out[name] = value

        put("activation", arch.act)
        put("stem_chs", arch.stem_chs)
        put("stem_stride", arch.stem_stride)
        put("head_chs", arch.head_chs)
        k = 0
        for i, depth in enumerate(depths):
            put(f"s{i}.depth", depth)
            if depth == 0:
                continue
            put(f"s{i}.out_chs", arch.blocks[k].out_chs)
            for j in range(depth):
                b = arch.blocks[k + j]
                p = f"s{i}.b{j}."
                put(p + "block_type", b.block_type)
                if b.block_type == "mbconv":
                    put(p + "exp_ratio", b.exp_ratio)
                put(p + "kernel_size", b.kernel_size)
                put(p + "se_ratio", b.se_ratio)
            k += depth
        return out

    # ------------------------------------------------------------------ membership
    def contains(self, arch: Arch) -> bool:
        """Whether ``arch`` is a network of this space."""
        try:
            self._partition(arch)
        except OutOfSpaceError:
            return False
        return True

    def validate(self, arch: Arch) -> Arch:
        """Return ``arch`` if it is in this space, else raise :class:`OutOfSpaceError`."""
        self._partition(arch)
        return arch

    def decode(self, text: str) -> Arch:
        """Decode an architecture string and check it belongs to this space."""
        return self.validate(Arch.decode(text))

    def _partition(self, arch: Arch) -> list[int]:
        for key, value, token in (
            ("activation", arch.act, f"act_{arch.act}"),
            ("stem_chs", arch.stem_chs, arch.encode().split("-")[1]),
            ("stem_stride", arch.stem_stride, arch.encode().split("-")[1]),
            ("head_chs", arch.head_chs, f"head_c{arch.head_chs}" if arch.head_chs else "<no head>"),
        ):
            if value not in getattr(self, key):
                raise OutOfSpaceError(self.name, token, f"{key} {value!r} not in {list(getattr(self, key))}")
        blocks = arch.blocks
        furthest: list[Any] = [-1, -1, "", ""]  # block index, stage, token, problem

        def fail(idx: int, si: int, problem: str) -> None:
            # The furthest block any reading reached explains the failure; among readings that fail there,
            # the one in which it belongs to the latest stage (it starts a stage rather than extending one).
            if (idx, si) > (furthest[0], furthest[1]):
                tok = blocks[idx].encode() if idx < len(blocks) else "<end>"
                furthest[:] = [idx, si, tok, problem]

        memo: dict[tuple[int, int], list[int] | None] = {}

        def rec(si: int, bi: int) -> list[int] | None:
            if (si, bi) not in memo:
                memo[si, bi] = fit(si, bi)
            return memo[si, bi]

        def fit(si: int, bi: int) -> list[int] | None:
            if si == len(self.stages):
                if bi == len(blocks):
                    return []
                fail(bi, si, f"block {bi} is beyond the last stage (the space has {len(self.stages)} stages)")
                return None
            st = self.stages[si]
            for d in sorted(st.depth, reverse=True):  # the canonical reading: each stage as long as it can be
                if d == 0:
                    rest = rec(si + 1, bi)
                    if rest is not None:
                        return [0, *rest]
                    continue
                ok = True
                for j in range(d):
                    if bi + j >= len(blocks):
                        fail(bi + j, si, f"stage {si} needs {d} blocks but the network ends")
                        ok = False
                        break
                    problem = _block_problem(st, j, blocks[bi + j], blocks[bi].out_chs)
                    if problem:
                        fail(bi + j, si, f"stage {si} block {j}: {problem}")
                        ok = False
                        break
                if ok:
                    rest = rec(si + 1, bi + d)
                    if rest is not None:
                        return [d, *rest]
            return None

        depths = rec(0, 0)
        if depths is None:
            raise OutOfSpaceError(self.name, furthest[2], furthest[3])
        return depths

    # ------------------------------------------------------------------ sampling
    def sample(self, rng: np.random.Generator) -> Arch:
        """Draw one architecture, each decision uniformly."""
        return self.from_decisions(self._random_decisions(rng))

    def mutate(self, arch: Arch, rng: np.random.Generator) -> Arch:
        """Change one active decision of ``arch`` to another value; returns a different Arch."""
        current = self.to_decisions(arch)
        if not current:
            raise OutOfSpaceError(self.name, arch.encode(), "the space has a single network")
        base = {**self._random_decisions(rng), **current}
        names = sorted(current)
        options = {d.name: d.options for d in self.choices()}
        for _ in range(100):
            name = names[int(rng.integers(len(names)))]
            alts = [v for v in options[name] if v != current[name]]
            new = self.from_decisions({**base, name: alts[int(rng.integers(len(alts)))]})
            if new != arch:
                return new
        raise OutOfSpaceError(self.name, arch.encode(), "no mutation changes this network")

    def _random_decisions(self, rng: np.random.Generator) -> dict[str, Value]:
        return {d.name: d.options[int(rng.integers(len(d.options)))] for d in self.choices()}

    # ------------------------------------------------------------------ size
    def size(self) -> int:
        """Number of distinct networks in the space."""
        n = len(self.activation) * len(self.stem_chs) * len(self.stem_stride) * len(self.head_chs)
        for st in self.stages:
            c = st.block.combos()
            n *= sum(len(st.out_chs) * c**d if d else 1 for d in st.depth)
        return n

    def extremes(self) -> list[Arch]:
        """Corner networks: smallest and largest width, depth, kernel and expansion."""
        out: list[Arch] = []
        for pick in (min, max):
            for bt in {s.block.block_type[0] for s in self.stages} | {s.block.block_type[-1] for s in self.stages}:
                d: dict[str, Value] = {}
                for dec in self.choices():
                    if dec.name.endswith("block_type"):
                        d[dec.name] = bt if bt in dec.options else dec.options[0]
                    elif dec.name == "activation":
                        d[dec.name] = dec.options[0]
                    else:
                        d[dec.name] = pick(dec.options)
                out.append(self.from_decisions(d))
        return list(dict.fromkeys(out))


def _block_problem(st: Stage, j: int, b: Block, stage_width: int) -> str:
    if b.out_chs not in st.out_chs:
        return f"out_chs {b.out_chs} not in {list(st.out_chs)}"
    if b.out_chs != stage_width:
        return f"out_chs {b.out_chs} differs from the stage's first block ({stage_width})"
    stride = st.stride if j == 0 else 1
    if b.stride != stride:
        return f"stride {b.stride}, expected {stride}"
    if b.block_type not in st.block.block_type:
        return f"block_type {b.block_type!r} not in {list(st.block.block_type)}"
    if b.block_type == "mbconv" and b.exp_ratio not in st.block.exp_ratio:
        return f"exp_ratio {b.exp_ratio} not in {list(st.block.exp_ratio)}"
    if b.kernel_size not in st.block.kernel_size:
        return f"kernel_size {b.kernel_size} not in {list(st.block.kernel_size)}"
    if b.se_ratio not in st.block.se_ratio:
        return f"se_ratio {b.se_ratio:g} not in {list(st.block.se_ratio)}"
    return ""


# ---------------------------------------------------------------------- YAML parsing

_TOP_KEYS = {"name", "description", "activation", "stem_chs", "stem_stride", "head_chs", "block", "stages",
             "features_only"}
_STAGE_KEYS = {"depth", "out_chs", "stride", "block"}
_BLOCK_KEYS = ("block_type", "exp_ratio", "kernel_size", "se_ratio")


_REPR = reprlib.Repr()
_REPR.maxlevel, _REPR.maxlist, _REPR.maxdict, _REPR.maxstring, _REPR.maxother = 2, 6, 6, 80, 80


def _short(value: Any) -> str:
    """``repr`` bounded in depth and length: a YAML alias bomb (anchors referring to anchors) is a
    small file whose full repr would take exponential time and memory."""
    return _REPR.repr(value)


def _choice_list(src: str, key: str, raw: Any, check: Any, allowed: str) -> tuple[Any, ...]:
    items = raw if isinstance(raw, list) else [raw]
    if not items:
        raise SpaceConfigError(src, key, f"empty choice list; allowed: {allowed}")
    out = []
    for v in items:
        ok, value = check(v)
        if not ok:
            raise SpaceConfigError(src, key, f"value {_short(v)} is not allowed; allowed: {allowed}")
        out.append(value)
    if len(set(out)) != len(out):
        raise SpaceConfigError(src, key, f"duplicate choices in {_short(items)}")
    return tuple(out)


# Upper bounds keep a typo (depth 1000, 100000 channels) from hanging sampling or building.
MAX_CHS, MAX_DEPTH, MAX_KERNEL, MAX_EXP = 8192, 32, 15, 16


def _int_in(lo: int, hi: int) -> Any:
    return lambda v: (isinstance(v, int) and not isinstance(v, bool) and lo <= v <= hi, v)


_chs = _int_in(1, MAX_CHS)
_head_chs = _int_in(0, MAX_CHS)
_depth = _int_in(0, MAX_DEPTH)
_exp = _int_in(1, MAX_EXP)


def _odd_kernel(v: Any) -> tuple[bool, Any]:
    return (isinstance(v, int) and not isinstance(v, bool) and 1 <= v <= MAX_KERNEL and v % 2 == 1, v)


def _ratio(v: Any) -> tuple[bool, Any]:
    ok = isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) and 0 <= v < 1
    return (ok, float(v) if ok else v)


def _member(options: tuple[Any, ...]) -> Any:
    return lambda v: (v in options, v)


_BLOCK_CHECKS = {
    "block_type": (_member(BLOCK_TYPES), f"{list(BLOCK_TYPES)}"),
    "exp_ratio": (_exp, f"integers 1..{MAX_EXP}"),
    "kernel_size": (_odd_kernel, f"odd integers 1..{MAX_KERNEL}"),
    "se_ratio": (_ratio, "numbers in [0, 1)"),
}


def _parse_block(src: str, prefix: str, raw: Any, base: BlockChoices | None) -> BlockChoices:
    if not isinstance(raw, Mapping):
        raise SpaceConfigError(src, prefix, f"expected a mapping with keys {list(_BLOCK_KEYS)}")
    unknown = set(raw) - set(_BLOCK_KEYS)
    if unknown:
        raise SpaceConfigError(src, f"{prefix}.{sorted(unknown)[0]}", f"unknown key; allowed: {list(_BLOCK_KEYS)}")
    values: dict[str, tuple[Any, ...]] = {}
    for key in _BLOCK_KEYS:
        if key not in raw:
            if base is None:
                raise SpaceConfigError(src, f"{prefix}.{key}", "missing")
            values[key] = getattr(base, key)
            continue
        check, allowed = _BLOCK_CHECKS[key]
        values[key] = _choice_list(src, f"{prefix}.{key}", raw[key], check, allowed)
    return BlockChoices(**values)


def _parse_space(data: Mapping[str, Any], src: str) -> SearchSpace:
    if not isinstance(data, Mapping):
        raise SpaceConfigError(src, "<root>", "expected a mapping")
    unknown = set(data) - _TOP_KEYS
    if unknown:
        raise SpaceConfigError(src, sorted(unknown)[0], f"unknown key; allowed: {sorted(_TOP_KEYS)}")
    for key in ("name", "stem_chs", "block", "stages"):
        if key not in data:
            raise SpaceConfigError(src, key, "missing")
    name = data["name"]
    if not isinstance(name, str) or not name:
        raise SpaceConfigError(src, "name", "must be a non-empty string")
    activation = _choice_list(
        src, "activation", data.get("activation", "relu"), _member(ACTIVATIONS), f"{list(ACTIVATIONS)}"
    )
    stem = _choice_list(src, "stem_chs", data["stem_chs"], _chs, f"integers 1..{MAX_CHS}")
    stem_stride = _choice_list(src, "stem_stride", data.get("stem_stride", 2), _member((1, 2)),
                               "1 (the first stage at full resolution) or 2")
    head = _choice_list(
        src, "head_chs", data.get("head_chs", 0), _head_chs, f"integers 0..{MAX_CHS} (0: no head conv)"
    )
    block = _parse_block(src, "block", data["block"], None)
    raw_stages = data["stages"]
    if not isinstance(raw_stages, list) or not raw_stages:
        raise SpaceConfigError(src, "stages", "expected a non-empty list of stages")
    stages: list[Stage] = []
    for i, rs in enumerate(raw_stages):
        p = f"stages[{i}]"
        if not isinstance(rs, Mapping):
            raise SpaceConfigError(src, p, f"expected a mapping with keys {sorted(_STAGE_KEYS)}")
        unknown = set(rs) - _STAGE_KEYS
        if unknown:
            raise SpaceConfigError(src, f"{p}.{sorted(unknown)[0]}", f"unknown key; allowed: {sorted(_STAGE_KEYS)}")
        for key in ("depth", "out_chs", "stride"):
            if key not in rs:
                raise SpaceConfigError(src, f"{p}.{key}", "missing")
        if not isinstance(rs["stride"], int) or isinstance(rs["stride"], bool) or rs["stride"] not in (1, 2):
            raise SpaceConfigError(src, f"{p}.stride", f"value {_short(rs['stride'])} is not allowed; allowed: 1 or 2")
        st = Stage(
            depth=_choice_list(src, f"{p}.depth", rs["depth"], _depth,
                               f"integers 0..{MAX_DEPTH} (0: a stride-1 stage that may be left out)"),
            out_chs=_choice_list(src, f"{p}.out_chs", rs["out_chs"], _chs, f"integers 1..{MAX_CHS}"),
            stride=int(rs["stride"]),
            block=_parse_block(src, f"{p}.block", rs["block"], block) if "block" in rs else block,
        )
        if 0 in st.depth and st.stride != 1:
            raise SpaceConfigError(
                src, f"{p}.depth",
                "depth 0 (leaving the stage out) is allowed for stride-1 stages only: leaving out a "
                "stride-2 stage would change the network's resolution",
            )
        if st.depth == (0,):
            raise SpaceConfigError(src, f"{p}.depth", "[0] alone: the stage is never built; remove it")
        stages.append(st)
    desc = data.get("description", "")
    if not isinstance(desc, str):
        raise SpaceConfigError(src, "description", f"must be a string, got {type(desc).__name__}")
    features_only = data.get("features_only", False)
    if not isinstance(features_only, bool):
        raise SpaceConfigError(src, "features_only", f"must be true or false, got {_short(features_only)}")
    return SearchSpace(name, activation, stem, head, tuple(stages), desc, src, features_only, stem_stride)


def available_spaces() -> list[str]:
    """Names of the built-in spaces (``search_spaces/spaces/``)."""
    return sorted(p.stem for p in SPACES_DIR.glob("*.yaml"))


def load_space(name_or_path: str | Path) -> SearchSpace:
    """Load a shipped space by name (``"mobile"``) or any space YAML by path.

    Raises:
        SpaceConfigError: unknown name (listing the available ones), unreadable or invalid file.
    """
    path = Path(name_or_path)
    if not path.suffix:
        path = SPACES_DIR / f"{name_or_path}.yaml"
        if not path.exists():
            raise SpaceConfigError(
                str(path), "space", f"no space named {str(name_or_path)!r}; available: {available_spaces()}"
            )
    try:
        text = path.read_text()
    except OSError as err:
        raise SpaceConfigError(str(path), "<file>", f"cannot read: {err.strerror}") from None
    except UnicodeDecodeError:
        raise SpaceConfigError(str(path), "<file>", "not a UTF-8 text file") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise SpaceConfigError(str(path), "<file>", f"not valid YAML: {err}") from None
    return _parse_space(data, str(path))

