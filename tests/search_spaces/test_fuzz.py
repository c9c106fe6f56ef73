"""Malformed space definitions and YAML text: only typed errors, never a crash or a hang."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from search_spaces import SearchSpace, SpaceConfigError, load_space

BASE: dict[str, Any] = yaml.safe_load((Path(__file__).parents[2] / "conf" / "space" / "tiny.yaml").read_text())

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
