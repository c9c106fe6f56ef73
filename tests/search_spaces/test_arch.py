from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from search_spaces import ACTIVATIONS, Arch, ArchDecodeError, ArchError, Block, SearchSpaceError

blocks = st.builds(
    lambda bt, k, e, c, s, se: Block(bt, k, e if bt == "mbconv" else 1, c, s, se),
    st.sampled_from(["mbconv", "residual"]),
    st.sampled_from([1, 3, 5, 7, 9]),
    st.integers(1, 8),
    st.integers(1, 2048),
    st.sampled_from([1, 2]),
    st.sampled_from([0.0, 0.125, 0.25, 0.5, 0.3]),
)
archs = st.builds(
    Arch,
    st.integers(1, 256),
    st.lists(blocks, min_size=1, max_size=12).map(tuple),
    st.sampled_from([0, 1280, 512]),
    st.sampled_from(ACTIVATIONS),
    st.sampled_from([1, 2]),
)


@given(archs)
def test_decode_encode_round_trip(arch: Arch) -> None:
    text = arch.encode()
    assert Arch.decode(text) == arch
    assert Arch.decode(text).encode() == text
    assert Arch.decode(text).arch_id == arch.arch_id


@given(archs, archs)
def test_equal_strings_iff_equal_networks(a: Arch, b: Arch) -> None:
    assert (a == b) == (a.encode() == b.encode())
    if a == b:
        assert hash(a) == hash(b)


def test_a_full_resolution_stem_is_written_s1_and_builds_at_stride_1() -> None:
    from search_spaces import build

    arch = Arch(16, (Block("residual", 3, 1, 16, 1), Block("residual", 3, 1, 32, 2)), stem_stride=1)
    assert arch.encode() == "act_relu-stem_c16_s1-rb_k3_c16_s1-rb_k3_c32_s2"
    assert Arch.decode(arch.encode()) == arch != Arch(16, arch.blocks)  # stride 2 is another network
    import torch

    net = build(arch, num_classes=10, features_only=True)
    assert net.reduction == 2 and net(torch.zeros(1, 3, 32, 32)).shape == (1, 32, 16, 16)
    assert build(Arch(16, arch.blocks), features_only=True)(torch.zeros(1, 3, 32, 32)).shape == (1, 32, 8, 8)


def test_example_string_and_id() -> None:
    arch = Arch(32, (Block("mbconv", 3, 1, 16, 1), Block("residual", 5, 1, 24, 2, 0.25)), 1280, "relu6")
    assert arch.encode() == "act_relu6-stem_c32-mb_k3_e1_c16_s1-rb_k5_c24_s2_se0.25-head_c1280"
    assert len(arch.arch_id) == 12 and int(arch.arch_id, 16) >= 0


@pytest.mark.parametrize(
    ("text", "bad"),
    [
        ("act_relu-stem_c32-mb_k4_e1_c16_s1", "mb_k4_e1_c16_s1"),  # even kernel
        ("act_relu-stem_c32-mb_k3_e0_c16_s1", "mb_k3_e0_c16_s1"),  # expansion 0
        ("act_relu-stem_c32-xx_k3_c16_s1", "xx_k3_c16_s1"),  # unknown block kind
        ("act_relu-stem_c32-mb_k3_e1_c16_s1_se0.250", "mb_k3_e1_c16_s1_se0.250"),  # non-canonical
        ("act_relu-stem_c32-mb_k3_e1_c16_s1_se0", "mb_k3_e1_c16_s1_se0"),  # non-canonical zero SE
        ("act_relu-stem_c32-mb_k03_e1_c16_s1", "mb_k03_e1_c16_s1"),  # leading zero
        ("act_relu-stem_c32-mb_e1_k3_c16_s1", "mb_e1_k3_c16_s1"),  # field order
        ("act_relu-stem_c32-mb_k3_e1_c16_s3", "mb_k3_e1_c16_s3"),  # stride 3
        ("act_gelu-stem_c32-mb_k3_e1_c16_s1", "act_gelu"),  # unknown activation
        ("act_relu-stem_c032-mb_k3_e1_c16_s1", "stem_c032"),
        ("act_relu-stem_c32-mb_k3_e1_c16_s1-head_c0", "head_c0"),
        ("act_relu-stem_c32_s2-mb_k3_e1_c16_s1", "stem_c32_s2"),  # non-canonical: stride 2 is written stem_c32
        ("act_relu-stem_c32_s3-mb_k3_e1_c16_s1", "stem_c32_s3"),  # stem stride 3
        ("act_relu-stem_c32_s01-mb_k3_e1_c16_s1", "stem_c32_s01"),
    ],
)
def test_malformed_tokens_raise_typed_error_naming_token(text: str, bad: str) -> None:
    with pytest.raises(ArchDecodeError) as info:
        Arch.decode(text)
    assert info.value.token == bad
    assert bad in str(info.value)


@settings(max_examples=300)
@given(st.text(alphabet="abcdeikmrsth_-0123456789.", max_size=80))
def test_fuzzed_strings_only_raise_typed_errors(text: str) -> None:
    try:
        arch = Arch.decode(text)
    except SearchSpaceError:
        return
    assert arch.encode() == text.strip()


def test_invalid_values_raise_arch_error_not_assert() -> None:
    with pytest.raises(ArchError, match="kernel_size"):
        Block("mbconv", 4, 1, 16, 1)
    with pytest.raises(ArchError, match="residual"):
        Block("residual", 3, 2, 16, 1)
    with pytest.raises(ArchError, match="at least one block"):
        Arch(16, ())
