from __future__ import annotations

import pytest

from search_spaces import (
    REFERENCES,
    Arch,
    SearchSpaceError,
    anchor_network,
    build,
    count_params,
    profile,
    reference,
    resolve_arch,
)
from search_spaces.references import (
    PUBLISHED,
    SMALL_INPUT_MAX,
    parse_anchor,
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
    assert parse_anchor("mnasnet_b1@1.4") == ("mnasnet_b1", 1.4)
    assert parse_anchor("mnasnet_b1@0.25") == ("mnasnet_b1", 0.25)
    assert anchor_network("mobilenetv2_100@0.35", 32).arch_id == small.arch_id  # one network per spec


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ("resnet50@0.5", "unknown anchor network 'resnet50'.*'mobilenetv2_100'"),
        ("mobilenetv2@0.35", "unknown anchor network 'mobilenetv2'.*efficientnet_b0"),
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
