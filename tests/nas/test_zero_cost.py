"""Training-free scores: each is defined for the networks of every space, repeatable, and used by
the search in place of accuracy when chosen."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from nas.accuracy.zero_cost import ZERO_COST, zero_cost_score
from nas.core.config import ZERO_COST_ESTIMATORS, DataConfig
from nas.core.errors import ProxyError
from nas.data import Dataset, load_dataset
from search_spaces import build, count_params, load_space


@pytest.fixture(scope="module")
def data() -> Dataset:
    d = load_dataset(DataConfig(resolution=32, max_train_samples=256, max_val_samples=64))
    assert isinstance(d, Dataset)
    return d


def test_the_registry_is_the_configs_list_of_estimators() -> None:
    assert set(ZERO_COST) == set(ZERO_COST_ESTIMATORS)
    with pytest.raises(ProxyError, match="unknown training-free score 'zen'"):
        zero_cost_score("zen", torch.nn.Identity(), None, 8, torch.device("cpu"))  # type: ignore[arg-type]


@pytest.mark.parametrize("name", sorted(ZERO_COST))
def test_each_score_is_finite_and_repeatable(name: str, data: Dataset) -> None:
    arch = load_space("tiny").sample(np.random.default_rng(3))
    scores = []
    for _ in range(2):
        torch.manual_seed(0)
        scores.append(zero_cost_score(name, build(arch, num_classes=10), data, 32, torch.device("cpu"), seed=1))
    assert math.isfinite(scores[0]) and scores[0] == pytest.approx(scores[1], rel=1e-9)


def test_synflow_grows_with_the_network() -> None:
    # SynFlow sums |theta * dR/dtheta| over all weights: the space's largest corner network scores
    # higher than its smallest (a property the score is known for; it is why params is its baseline).
    def params(a: object) -> int:
        with torch.device("meta"):
            return count_params(build(a, num_classes=10))  # type: ignore[arg-type]

    corners = sorted(load_space("mobile").extremes(), key=params)
    small, large = corners[0], corners[-1]
    d = load_dataset(DataConfig(resolution=32, max_train_samples=16, max_val_samples=16))
    torch.manual_seed(0)
    s_small = zero_cost_score("synflow", build(small, num_classes=10), d, 8, torch.device("cpu"))
    torch.manual_seed(0)
    s_large = zero_cost_score("synflow", build(large, num_classes=10), d, 8, torch.device("cpu"))
    assert s_large > s_small
