"""Rank-agreement statistics of the studies (nas.studies.stats)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from nas.studies.stats import noise_ceiling


def test_the_noise_ceiling_is_what_an_error_free_estimator_reaches_against_one_noisy_run() -> None:
    rng = np.random.default_rng(0)
    truth = rng.normal(size=4000)
    for noise in (0.3, 0.6, 1.0):
        a, b = (truth + rng.normal(size=len(truth)) * noise for _ in range(2))
        between = stats.kendalltau(a, b).statistic
        against_one = stats.kendalltau(truth, a).statistic
        assert noise_ceiling(between) == pytest.approx(against_one, abs=0.02)
        assert noise_ceiling(between) > between  # only one side is noisy
    assert noise_ceiling(1.0) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="agree positively"):
        noise_ceiling(0.0)
