"""Which architectures to measure on the new device, most informative first (:func:`informative_order`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from latency_predictor.errors import ConfigError
from latency_predictor.prediction.features import FeatureExtractor
from latency_predictor.prediction.models import AdditiveModel
from latency_predictor.prediction.transfer.groups import GROUPS, PARAMETERS, group_contributions
from search_spaces import Arch


def informative_order(
    source: AdditiveModel, extractor: FeatureExtractor, candidates: Sequence[Arch], n: int,
    measured: Sequence[Arch] = (),
) -> list[int]:
    """The indices of the ``n`` candidates most worth measuring to adapt ``source``, best first.

    Greedy k-median on the networks' mixes (:func:`mix_rows`, over the candidates and
    ``measured``): each step takes the candidate that most reduces the summed distance from every
    candidate to its nearest chosen or measured network. Once as many networks are measured or
    chosen as the family fit has parameters (:data:`PARAMETERS`), every other step instead takes
    the candidate with the largest leverage on the family fit (:func:`_leverages`): the one whose
    mix the networks so far explain least (:mod:`latency_predictor.prediction.transfer`).

    Raises:
        ConfigError: ``n`` negative or larger than the number of candidates.
    """
    if not 0 <= n <= len(candidates):
        raise ConfigError(f"cannot choose {n} of {len(candidates)} candidate architectures")
    relative = _relative_design(source, extractor, [*candidates, *measured])
    rows = _standardised(relative)
    rms = np.sqrt(np.mean(relative * relative, axis=0))
    relative = relative / np.where(rms > 0, rms, 1.0)  # one scale per column, for _leverages
    a, design = rows[: len(candidates)], relative[: len(candidates)]
    dist = _distances(a, a)  # candidate i to candidate j
    nearest = _distances(rows[len(candidates):], a).min(axis=0, initial=np.inf)
    known = list(relative[len(candidates):])
    chosen: list[int] = []
    for _ in range(n):
        step = len(known)
        if step >= len(PARAMETERS) and (step - len(PARAMETERS)) % 2 == 0:
            score = -_leverages(design, np.array(known))
        else:
            score = np.minimum(nearest[None, :], dist).sum(axis=1)
        score[chosen] = np.inf
        i = int(np.argmin(score))
        chosen.append(i)
        known.append(design[i])
        nearest = np.minimum(nearest, dist[i])
    return chosen


def _relative_design(source: AdditiveModel, extractor: FeatureExtractor, archs: Sequence[Arch]) -> np.ndarray:
    """The family fit's design (:func:`group_contributions`), each row over the network's source
    prediction: the rows of the relative least squares the scales are fitted by."""
    z = group_contributions(source, extractor, archs)
    predicted = z[:, : len(GROUPS)].sum(axis=1) + source.intercept
    out: np.ndarray = z / np.where(predicted > 0, predicted, 1.0)[:, None]
    return out


def _leverages(design: np.ndarray, known: np.ndarray) -> np.ndarray:
    """Each row of ``design``'s leverage ``x (K'K)^-1 x'`` on a least-squares fit to the rows ``known``
    (``K``): how much measuring it would add to what they tell apart. Adding row ``x`` multiplies
    ``det(K'K)`` by ``1 + x (K'K)^-1 x'``, so the largest leverage is the D-optimal step. The columns
    should be of one scale (the small ridge that keeps ``K'K`` invertible is not scale-free)."""
    gram = known.T @ known + 1e-6 * np.eye(design.shape[1])  # solvable with fewer rows than columns
    out: np.ndarray = np.einsum("ij,ji->i", design, np.linalg.solve(gram, design.T))
    return out


def _distances(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Euclidean distances between the rows of ``a`` and of ``b`` (a ``len(a) x len(b)`` matrix)."""
    sq = (a * a).sum(axis=1)[:, None] + (b * b).sum(axis=1)[None, :] - 2.0 * a @ b.T
    out: np.ndarray = np.sqrt(np.maximum(sq, 0.0))
    return out


def mix_rows(source: AdditiveModel, extractor: FeatureExtractor, archs: Sequence[Arch]) -> np.ndarray:
    """Each network's mix: its design row (:func:`group_contributions`) over its source prediction,
    each column standardised over ``archs`` (a column that does not vary stays at zero)."""
    return _standardised(_relative_design(source, extractor, archs))


def _standardised(rows: np.ndarray) -> np.ndarray:
    """Each column of ``rows`` standardised (a column that does not vary stays at zero)."""
    spread = rows.std(axis=0)
    out: np.ndarray = (rows - rows.mean(axis=0)) / np.where(spread > 0, spread, 1.0)
    return out
