from __future__ import annotations

import pytest

from search_spaces import (
    REFERENCES,
    Arch,
    SearchSpaceError,
    anchor_network,
    build,
    count_params,
    load_space,
    profile,
    reference,
    resolve_arch,
)
from search_spaces.references import (
    FAMILIES,
    PUBLISHED,
    SMALL_INPUT_MAX,
    Member,
    cifar_resnet,
    member,
    parse_member,
    round8,
    scale_width,
    small_input_variant,
)


@pytest.mark.parametrize("name", sorted(REFERENCES))
def test_reference_params_match_published_exactly(name: str) -> None:
    arch = reference(name)
    assert profile(arch).params == PUBLISHED[name]["params"]
    # the same count from a real (CPU) build, not only the meta-device profile
    assert count_params(build(arch)) == PUBLISHED[name]["params"]


@pytest.mark.parametrize("name", sorted(REFERENCES))
def test_reference_macs_within_two_percent_of_published(name: str) -> None:
    macs = profile(reference(name)).macs
    assert macs == pytest.approx(PUBLISHED[name]["macs"], rel=0.02)


def test_references_resolve_by_name_and_string() -> None:
    arch = reference("mobilenetv2_100")
    assert resolve_arch("mobilenetv2_100") == arch
    assert resolve_arch(arch.encode()) == arch
    assert arch.depth == 17 and arch.act == "relu6"


def test_unknown_reference_lists_known_names() -> None:
    with pytest.raises(SearchSpaceError, match="mnasnet_b1"):
        reference("resnet50")


def test_scale_width_rounds_channels_to_8() -> None:
    base = reference("mobilenetv2_100")
    assert scale_width(base, 1.0) == base
    half = scale_width(base, 0.5)
    assert all(b.out_chs % 8 == 0 and b.out_chs >= 8 for b in half.blocks)
    assert half.stem_chs == 16 and half.head_chs == 1280 and half.blocks[-1].out_chs == 160
    assert Arch.decode(half.encode()) == half
    assert [round8(x) for x in (3.0, 12.0, 20.0, 27.0)] == [8, 16, 24, 32]


def test_an_anchor_is_a_width_scaled_reference_in_the_layout_of_its_input_size() -> None:
    mnv2 = reference("mobilenetv2_100")
    small = anchor_network("mobilenetv2_100@0.35", 32)
    assert small == scale_width(small_input_variant(mnv2), 0.35)
    assert anchor_network("mobilenetv2_100@0.35", 224) == scale_width(mnv2, 0.35)
    assert anchor_network("mobilenetv2_100@0.35", SMALL_INPUT_MAX) == small  # 64 px still small
    assert anchor_network("efficientnet_b0", 224) == reference("efficientnet_b0")  # no width: 1
    assert parse_member("mnasnet_b1@1.4") == Member("mnasnet_b1", 1.4)
    assert parse_member("mnasnet_b1@0.25:d0.5") == Member("mnasnet_b1", 0.25, 0.5)
    assert anchor_network("mobilenetv2_100@0.35", 32).arch_id == small.arch_id  # one network per spec


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ("resnet50@0.5", "unknown reference network 'resnet50'.*'mobilenetv2_100'.*resnet<depth>.*110"),
        ("mobilenetv2@0.35", "unknown reference network 'mobilenetv2'.*efficientnet_b0"),
        ("mobilenetv2_100@0.2", "from 0.25 to 1.4"),
        ("mobilenetv2_100@1.5", "from 0.25 to 1.4"),
        ("mobilenetv2_100@wide", "must be a number from 0.25 to 1.4"),
        ("mobilenetv2_100@nan", "must be a number"),
        ("mobilenetv2_100@", "must be a number"),
    ],
)
def test_a_bad_anchor_names_the_references_or_the_widths(spec: str, says: str) -> None:
    with pytest.raises(SearchSpaceError, match=says):
        anchor_network(spec, 32)


# The published sizes of the CIFAR ResNets (10 classes): He et al. 2016, Table 6 (0.27 M, 0.85 M and 1.7 M for
# 20, 56 and 110 layers; the projection shortcuts add under 1%), and MLPerf Tiny's ResNet-8 (78 k).
@pytest.mark.parametrize(("name", "params"), [("resnet8", 78_000), ("resnet20", 270_000), ("resnet56", 850_000),
                                              ("resnet110", 1_700_000)])
def test_cifar_resnets_have_the_published_sizes(name: str, params: int) -> None:
    arch = reference(name)
    assert count_params(build(arch, num_classes=10)) == pytest.approx(params, rel=0.02)
    assert arch.stem_stride == 1 and arch.head_chs == 0 and {b.block_type for b in arch.blocks} == {"residual"}


def test_resnet8_is_mlperf_tinys_layer_for_layer() -> None:
    # a 3x3 stem of 16 at full resolution, one basic block per stage at 16, 32 and 64, the last two striding
    assert reference("resnet8").encode() == "act_relu-stem_c16_s1-rb_k3_c16_s1-rb_k3_c32_s2-rb_k3_c64_s2"
    net = build(reference("resnet8"), num_classes=10)
    shortcuts = [m.shortcut for m in net.blocks]
    assert [type(s).__name__ for s in shortcuts] == ["Identity", "Sequential", "Sequential"]  # 1x1 conv + BN


def test_a_member_scales_width_and_depth_and_a_resnet_keeps_its_layout_at_32_pixels() -> None:
    assert member("resnet14@1.5") == cifar_resnet(14, 24)
    assert small_input_variant(cifar_resnet(20)) == cifar_resnet(20)  # already laid out for small inputs
    shallow = member("mnasnet_b1@0.5:d0.5")
    assert shallow.depth < member("mnasnet_b1@0.5").depth and shallow == member("mnasnet_b1@0.5:d0.5", 32)
    assert str(parse_member("mnasnet_b1@0.5:d0.75")) == "mnasnet_b1@0.5:d0.75"
    assert anchor_network("resnet8", 32) == reference("resnet8")


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ("resnet21", r"unknown reference network 'resnet21'.*depth of \[8, 14, 20, 26, 32, 44, 56, 110\]"),
        ("resnet8@1.3", r"must be one of \['0.5', '1', '1.5', '2', '2.5', '3', '3.5', '4'\] \(widths \[8, 16"),
        ("resnet8:d0.5", "depth is in its name"),
        ("mnasnet_b1@0.5:d3", "the depth after ':' must be 'd' and a multiplier from 0.25 to 2"),
        ("mnasnet_b1@0.5:0.5", "the depth after ':' must be 'd'"),
    ],
)
def test_a_member_the_family_cannot_build_is_one_line_naming_the_allowed_values(spec: str, says: str) -> None:
    with pytest.raises(SearchSpaceError, match=says) as info:
        member(spec)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("spec", [s for specs in FAMILIES.values() for s in specs])
def test_every_reference_member_is_a_network_of_the_comparisons_space(spec: str) -> None:
    arch = member(spec, 32)
    space = load_space("cifar")
    assert space.contains(arch)
    assert space.from_decisions(space.to_decisions(arch)) == arch
