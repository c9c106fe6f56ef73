"""Choosing a ridge strength by leave-one-out, one rule for the group scales and the refinement.

Both take the strongest penalty whose mean leave-one-out error is within a bar of the least (the
simpler model where the measurements do not tell the strengths apart); they differ in the bar.
The group scales take the least error itself, because their strengths run from no pull at all and
a pull stronger than the measurements ask for biases every scale where a device moves its
families apart (:data:`LAMBDAS`), while the
refinement, which may move every feature's cost and counts "no refinement" among its strengths,
takes the strongest within one standard error of the least, since the least of several noisy
leave-one-out errors is an optimistic one.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np


def strongest_within(errors: Mapping[float, np.ndarray], one_standard_error: bool = False) -> float:
    """The strongest penalty whose mean absolute leave-one-out error (rounded to 6 places) is the
    least, or, with ``one_standard_error``, at most the least plus one standard error of it.

    Args:
        errors: each strength tried, with its leave-one-out relative errors (signed or not).
        one_standard_error: widen the bar by one standard error of the least error.
    """
    mean = {s: round(float(np.mean(np.abs(e))), 6) for s, e in errors.items()}
    bar = min(mean.values())
    if one_standard_error:
        least = np.abs(errors[min(errors, key=lambda s: (mean[s], -s))])
        bar = round(float(np.mean(least)) + float(np.std(least, ddof=1)) / math.sqrt(len(least)), 6)
    return max(s for s in errors if mean[s] <= bar)
