from __future__ import annotations

import dataclasses
import itertools
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from search_spaces import (
    Arch,
    Block,
    OutOfSpaceError,
    SearchSpace,
    SpaceConfigError,
    available_spaces,
    load_space,
    reference,
)
from search_spaces.references import scale_width, small_input_variant

MICRO: dict[str, Any] = {
    "name": "micro",
    "activation": ["relu"],
    "stem_chs": [8],
    "head_chs": [0, 32],
    "block": {"block_type": ["mbconv", "residual"], "exp_ratio": [1, 2], "kernel_size": [3], "se_ratio": [0.0]},
    "stages": [
        {"depth": [1, 2], "out_chs": [8], "stride": 2},
        {"depth": [1], "out_chs": [16, 24], "stride": 1},
    ],
}


def test_shipped_spaces_load() -> None:
    assert {"mobile", "efficient", "tiny"} <= set(available_spaces())
    for name in available_spaces():
        space = load_space(name)
        assert space.name == name and space.size() > 1 and space.choices()


def test_mobile_space_is_the_design_space() -> None:
    space = load_space("mobile")
    for st in space.stages:
        assert st.block.block_type == ("mbconv", "residual")
        assert st.block.exp_ratio == (1, 2, 4)
        assert st.block.kernel_size == (3, 5, 7)
        assert st.block.se_ratio == (0.0, 0.25)


def test_size_counts_distinct_networks_exactly() -> None:
    space = SearchSpace.from_dict(MICRO)
    decisions = space.choices()
    seen = set()
    for values in itertools.product(*(d.options for d in decisions)):
        arch = space.from_decisions(dict(zip([d.name for d in decisions], values, strict=True)))
        seen.add(arch.encode())
    assert len(seen) == space.size()


OPTIONAL: dict[str, Any] = {
    "name": "optional",
    "activation": ["relu"],
    "stem_chs": [8],
    "head_chs": [0],
    "block": {"block_type": ["mbconv"], "exp_ratio": [1, 2], "kernel_size": [3], "se_ratio": [0.0]},
    "stages": [
        {"depth": [1, 2], "out_chs": [8], "stride": 2},
        {"depth": [0, 1], "out_chs": [12, 16], "stride": 1},
        {"depth": [0, 1], "out_chs": [24], "stride": 1},
        {"depth": [1], "out_chs": [32], "stride": 2},
    ],
}


def test_an_optional_stage_is_left_out_and_every_network_still_has_one_decision_set() -> None:
    space = SearchSpace.from_dict(OPTIONAL)
    decisions = space.choices()
    seen: dict[str, dict[str, Any]] = {}
    for values in itertools.product(*(d.options for d in decisions)):
        arch = space.from_decisions(dict(zip([d.name for d in decisions], values, strict=True)))
        active = space.to_decisions(arch)
        assert seen.setdefault(arch.encode(), active) == active
        assert space.from_decisions(active) == arch
    assert len(seen) == space.size() == 6 * 5 * 3 * 2  # s0 2+2*2, s1 1+2*2, s2 1+2, s3 2
    # Both optional stages left out: the stride-2 stage follows the first directly.
    short = space.from_decisions({"s0.depth": 1, "s0.b0.exp_ratio": 2, "s1.depth": 0, "s2.depth": 0,
                                  "s3.b0.exp_ratio": 1})
    assert [b.out_chs for b in short.blocks] == [8, 32]
    assert space.to_decisions(short) == {"s0.depth": 1, "s0.b0.exp_ratio": 2, "s1.depth": 0, "s2.depth": 0,
                                         "s3.b0.exp_ratio": 1}
    assert space.decode(short.encode()) == short


def test_mnasnet_b1_x035_is_a_member_of_mobile_cifar_hr() -> None:
    """Its fourth stage keeps the third's width at stride 1: in mobile_cifar_hr that is the 24/32
    stage run to depth 5 with the 40/48 stage left out."""
    space = load_space("mobile_cifar_hr")
    mnas = dataclasses.replace(scale_width(small_input_variant(reference("mnasnet_b1")), 0.35), act="relu")
    decisions = space.to_decisions(mnas)
    assert decisions["s2.depth"] == 5 and decisions["s3.depth"] == 0 and "s3.out_chs" not in decisions
    assert space.from_decisions(decisions) == mnas


def test_mobile_cifar_res_holds_resnet_style_networks_and_mixes_block_types() -> None:
    """A ResNet-style network (basic blocks, no head conv) is a member; the references' MBConv
    shapes, 15-17 blocks deep, are not; random members mix both block types, with or without the
    head conv, and end on a 4x4 map at 32x32 like the references."""
    space = load_space("mobile_cifar_res")
    resnet_like = Arch.decode("act_relu-stem_c16-rb_k3_c32_s1-rb_k3_c64_s2-rb_k3_c64_s1-rb_k3_c128_s2")
    assert space.contains(resnet_like)
    mnas = dataclasses.replace(scale_width(small_input_variant(reference("mnasnet_b1")), 0.35), act="relu")
    assert load_space("mobile_cifar_hr").contains(mnas) and not space.contains(mnas)
    rng = np.random.default_rng(0)
    members = [space.sample(rng) for _ in range(40)]
    assert {b.block_type for a in members for b in a.blocks} == {"mbconv", "residual"}
    assert {a.head_chs for a in members} == {0, 1280}
    assert all(math.prod(b.stride for b in a.blocks) == 4 for a in members)


@pytest.mark.parametrize("name", ["mobile", "efficient", "tiny", "mobile_cifar_hr", "mobile_cifar_res"])
def test_decisions_round_trip_and_membership(name: str) -> None:
    space = load_space(name)
    rng = np.random.default_rng(0)
    for _ in range(50):
        arch = space.sample(rng)
        assert space.contains(arch)
        assert space.from_decisions(space.to_decisions(arch)) == arch
        assert space.decode(arch.encode()) == arch
        child = space.mutate(arch, rng)
        assert child != arch and space.contains(child)
    for arch in space.extremes():
        assert space.contains(arch)


def test_sampling_is_seeded() -> None:
    space = load_space("mobile")
    a = [space.sample(np.random.default_rng(7)) for _ in range(2)]
    assert a[0] == a[1]


def test_out_of_space_names_the_token() -> None:
    space = load_space("mobile")
    arch = space.sample(np.random.default_rng(1))
    bad = Block("mbconv", 9, 2, arch.blocks[1].out_chs, arch.blocks[1].stride)
    wrong = Arch(arch.stem_chs, (arch.blocks[0], bad, *arch.blocks[2:]), arch.head_chs, arch.act)
    assert not space.contains(wrong)
    with pytest.raises(OutOfSpaceError) as info:
        space.validate(wrong)
    assert info.value.token == bad.encode()
    assert "kernel_size 9" in str(info.value)
    assert not space.contains(reference("mobilenetv2_100"))


def test_from_decisions_rejects_values_not_offered() -> None:
    space = load_space("tiny")
    d = space.to_decisions(space.sample(np.random.default_rng(0)))
    with pytest.raises(OutOfSpaceError, match=r"s0\.out_chs"):
        space.from_decisions({**d, "s0.out_chs": 13})
    missing = dict(d)
    missing.pop("s0.depth")
    with pytest.raises(OutOfSpaceError, match="decision missing"):
        space.from_decisions(missing)


def _write(tmp_path: Path, data: dict[str, Any]) -> Path:
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_stride_1_stages_sharing_a_width_read_each_network_one_canonical_way() -> None:
    # The second stage continues the first at the same width: a network of three blocks at width 8 could be
    # cut 2+1 or 1+2 (or 3+0: the second stage may be left out). The earliest stage takes as many as it can.
    data = {**MICRO, "stem_stride": [1, 2], "stages": [
        {"depth": [1, 2], "out_chs": [8], "stride": 1},
        {"depth": [0, 1, 2], "out_chs": [8, 16], "stride": 1},
        {"depth": [1], "out_chs": [24], "stride": 2}]}
    space = SearchSpace.from_dict(data)
    three = space.from_decisions({"stem_stride": 1, "head_chs": 0, "s0.depth": 1, "s0.b0.block_type": "residual",
                                  "s1.depth": 2, "s1.out_chs": 8, "s1.b0.block_type": "residual",
                                  "s1.b1.block_type": "residual", "s2.b0.block_type": "residual"})
    assert three.encode() == "act_relu-stem_c8_s1-rb_k3_c8_s1-rb_k3_c8_s1-rb_k3_c8_s1-rb_k3_c24_s2"
    canonical = space.to_decisions(three)
    assert (canonical["s0.depth"], canonical["s1.depth"]) == (2, 1)
    assert space.from_decisions(canonical) == three and space.size() > 0
    assert canonical["stem_stride"] == 1
    assert space.to_decisions(dataclasses.replace(three, stem_stride=2))["stem_stride"] == 2


@pytest.mark.parametrize(
    ("mutate", "key", "words"),
    [
        (lambda d: d["block"].update(kernel_size=[3, 4]), "block.kernel_size", "odd"),
        (lambda d: d["block"].update(exp_ratio=[-1, 2]), "block.exp_ratio", "integers 1..16"),
        (lambda d: d["block"].update(block_type=["mbconv", "transformer"]), "block.block_type", "residual"),
        (lambda d: d["stages"][0].update(out_chs=[]), "stages[0].out_chs", "empty"),
        (lambda d: d["stages"][1].pop("stride"), "stages[1].stride", "missing"),
        (lambda d: d.pop("stem_chs"), "stem_chs", "missing"),
        (lambda d: d.update(stemchs=[8]), "stemchs", "unknown key"),
        (lambda d: d["block"].update(se_ratio=[0.0, 1.5]), "block.se_ratio", "[0, 1)"),
        (lambda d: d.update(activation=["gelu"]), "activation", "silu"),
        (lambda d: d.update(stem_stride=[1, 3]), "stem_stride", "1 (the first stage at full resolution) or 2"),
        (lambda d: d["stages"][0].update(depth=[0, 1]), "stages[0].depth", "stride-1 stages only"),
        (lambda d: d["stages"][1].update(depth=[0]), "stages[1].depth", "never built"),
        (lambda d: d["stages"][1].update(depth=[-1, 1]), "stages[1].depth", "integers 0..32"),
    ],
)
def test_bad_space_yaml_names_file_key_and_allowed(tmp_path: Path, mutate: Any, key: str, words: str) -> None:
    data = yaml.safe_load(yaml.safe_dump(MICRO))
    mutate(data)
    path = _write(tmp_path, data)
    with pytest.raises(SpaceConfigError) as info:
        load_space(path)
    msg = str(info.value)
    assert str(path) in msg and repr(key) in msg and words in msg


def test_unknown_space_name_lists_available() -> None:
    with pytest.raises(SpaceConfigError, match="available"):
        load_space("nonexistent")


@pytest.mark.slow
@pytest.mark.ci
def test_describe_command_prints_space() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "search_spaces.describe", "+space=tiny", "samples=5"],
        capture_output=True, text=True, check=True,
    ).stdout
    assert "space 'tiny'" in out and "distinct networks: 30,371,328" in out and "MACs" in out
    bad = subprocess.run(
        [sys.executable, "-m", "search_spaces.describe", "+space=nope"], capture_output=True, text=True
    )
    assert bad.returncode == 2 and "available" in bad.stderr and "Traceback" not in bad.stderr
