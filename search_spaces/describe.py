"""Print a search space: its choices, its size, and the spread of params and MACs.

Usage::

    python -m search_spaces.describe +space=mobile [samples=200] [resolution=224] [seed=0]
    python -m search_spaces.describe path/to/space.yaml

Arguments use the same ``key=value`` form as ``nas.search`` (a leading ``+`` is accepted).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

import numpy as np

from search_spaces.errors import SearchSpaceError
from search_spaces.profile import profile
from search_spaces.space import SearchSpace, available_spaces, load_space

_DEFAULTS = {"space": "", "samples": "200", "resolution": "224", "seed": "0"}


def _parse(argv: Sequence[str]) -> dict[str, str]:
    opts = dict(_DEFAULTS)
    for arg in argv:
        if arg in ("-h", "--help"):
            raise SystemExit(__doc__)
        key, sep, value = arg.lstrip("+").partition("=")
        if not sep:
            key, value = "space", arg
        if key not in opts:
            raise SearchSpaceError(f"unknown option {key!r}; known: {sorted(opts)}")
        opts[key] = value
    if not opts["space"]:
        raise SearchSpaceError(
            f"no space given: pick one with +space=NAME (available: {available_spaces()}) or a YAML path"
        )
    for key in ("samples", "resolution", "seed"):
        if not opts[key].isdigit():
            raise SearchSpaceError(f"{key} must be a non-negative integer, got {opts[key]!r}")
    return opts


def describe(space: SearchSpace, samples: int = 200, resolution: int = 224, seed: int = 0) -> str:
    """A human-readable description of ``space``."""
    lines = [f"space {space.name!r} ({space.source})"]
    if space.description:
        lines.append(f"  {space.description}")
    lines.append(f"  activation {list(space.activation)}, stem_chs {list(space.stem_chs)}, "
                 f"head_chs {list(space.head_chs)}")
    lines.append("  stage  stride  depth        out_chs            block_type / exp_ratio / kernel_size / se_ratio")
    for i, st in enumerate(space.stages):
        b = st.block
        lines.append(
            f"  s{i:<5} {st.stride:<7} {list(st.depth)!s:<12} {list(st.out_chs)!s:<18} "
            f"{list(b.block_type)} / {list(b.exp_ratio)} / {list(b.kernel_size)} / {list(b.se_ratio)}"
        )
    if any(0 in st.depth for st in space.stages):
        lines.append("  (depth 0: a network may leave the stage out)")
    lines.append(f"  decisions a sampler sees: {len(space.choices())}")
    lines.append(f"  distinct networks: {space.size():,} (~1e{len(str(space.size())) - 1})")
    if samples:
        rng = np.random.default_rng(seed)
        profs = [profile(space.sample(rng), resolution) for _ in range(samples)]
        params = np.array([p.params for p in profs], dtype=float)
        macs = np.array([p.macs for p in profs], dtype=float)
        lines.append(f"  over {samples} sampled networks at {resolution}x{resolution} (1000 classes):")
        for label, arr, unit in (("params", params, 1e6), ("MACs", macs, 1e6)):
            lo, med, hi = np.min(arr) / unit, np.median(arr) / unit, np.max(arr) / unit
            lines.append(f"    {label:<7} min {lo:9.2f} M   median {med:9.2f} M   max {hi:9.2f} M")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point."""
    try:
        opts = _parse(sys.argv[1:] if argv is None else argv)
        space = load_space(opts["space"])
        print(describe(space, int(opts["samples"]), int(opts["resolution"]), int(opts["seed"])))
    except SearchSpaceError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
