from __future__ import annotations

import pytest

from search_spaces import REFERENCES, SearchSpaceError, build, count_params, profile, reference, resolve_arch
from search_spaces.references import PUBLISHED


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
