"""Malformed space definitions and YAML text: only typed errors, never a crash or a hang."""

from __future__ import annotations

import copy
import re
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from search_spaces import SearchSpace, SpaceConfigError, load_space
from search_spaces.space import SPACES_DIR

BASE: dict[str, Any] = yaml.safe_load((SPACES_DIR / "tiny.yaml").read_text())

junk = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 10**6) | st.floats(allow_nan=True) | st.text(max_size=8),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=6), children, max_size=3),
    max_leaves=8,
)

PATHS = [
    ("name",), ("activation",), ("stem_chs",), ("head_chs",), ("block",), ("stages",),
    ("block", "block_type"), ("block", "exp_ratio"), ("block", "kernel_size"), ("block", "se_ratio"),
    ("stages", 0), ("stages", 0, "depth"), ("stages", 1, "out_chs"), ("stages", 2, "stride"),
    ("stages", 1, "block"),
]


def _set(data: Any, path: tuple[Any, ...], value: Any) -> None:
    for key in path[:-1]:
        data = data[key]
    data[path[-1]] = value


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.sampled_from(PATHS), junk), min_size=1, max_size=3))
def test_mutated_space_definitions_raise_only_typed_errors(edits: list[tuple[tuple[Any, ...], Any]]) -> None:
    data = copy.deepcopy(BASE)
    try:
        for path, value in edits:
            _set(data, path, value)
    except (TypeError, KeyError, IndexError):
        return  # the edit itself could not be applied to the already-mutated structure
    try:
        space = SearchSpace.from_dict(data, source="fuzz.yaml")
    except SpaceConfigError as err:
        assert "fuzz.yaml" in str(err)
        return
    # whatever loads must be usable
    assert space.size() >= 1
    arch = space.sample(np.random.default_rng(0))
    assert space.contains(arch)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=200))
def test_arbitrary_yaml_text_raises_only_typed_errors(tmp_path_factory: Any, text: str) -> None:
    path = tmp_path_factory.mktemp("fuzz") / "space.yaml"
    path.write_text(text)
    try:
        load_space(path)
    except SpaceConfigError:
        return


def test_binary_and_missing_files_raise_typed_errors(tmp_path: Path) -> None:
    for path, words in ((tmp_path / "bin.yaml", "UTF-8"), (tmp_path / "missing.yaml", "cannot read")):
        if path.name == "bin.yaml":
            path.write_bytes(b"\xff\xfe\x00garbage")
        try:
            load_space(path)
        except SpaceConfigError as err:
            assert words in str(err) and str(path) in str(err)
        else:
            raise AssertionError(f"{path} loaded")


def _alias_bomb(levels: int = 12) -> str:
    """A few hundred bytes of YAML whose anchors refer to anchors: 9**levels leaves when expanded."""
    node = '&l0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]'
    for i in range(1, levels):
        node = f"&l{i} [{node}, " + ", ".join([f"*l{i - 1}"] * 8) + "]"
    return node


@pytest.mark.parametrize("key", ["name", "description", "activation", "stem_chs", "head_chs", "block",
                                 "block.kernel_size", "stages", "stages.depth", "stages.stride"])
def test_alias_bombs_raise_typed_errors_quickly(tmp_path: Path, key: str) -> None:
    lines = (SPACES_DIR / "tiny.yaml").read_text().splitlines()
    if key.startswith("stages."):
        i = next(n for n, line in enumerate(lines) if line.startswith("  - {"))
        field = key.split(".")[1]
        lines[i] = re.sub(rf"{field}: (\[[^]]*\]|\d+)", f"{field}: {_alias_bomb()}", lines[i])
    elif key == "block.kernel_size":
        lines = [f"  kernel_size: {_alias_bomb()}" if line.startswith("  kernel_size:") else line for line in lines]
    else:
        lines = [line for line in lines if not line.startswith(f"{key}:")]
        if key == "block":
            lines = [line for line in lines if not line.startswith("  ") or line.startswith("  -")]
        lines.append(f"{key}: {_alias_bomb()}")
    path = tmp_path / "bomb.yaml"
    path.write_text("\n".join(lines) + "\n")
    t0 = time.perf_counter()
    with pytest.raises(SpaceConfigError) as err:
        load_space(path)
    assert time.perf_counter() - t0 < 5.0 and len(str(err.value)) < 1000
