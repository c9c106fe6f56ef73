"""Regularised (aging) evolution over a search space (Real et al., "Regularized Evolution for
Image Classifier Architecture Search", AAAI 2019).

A population of the ``population_size`` most recently evaluated architectures is kept. Until it
is full, architectures are drawn uniformly (:meth:`SearchSpace.sample`). Then each new
candidate is a mutation (:meth:`SearchSpace.mutate`: one active decision changed) of the best of
``sample_size`` population members drawn at random (tournament selection); when its result comes,
it joins the population and the *oldest* member leaves, whatever its fitness (aging), which keeps
the search from clinging to one lucky early architecture.

Like :class:`nas.adapters.optuna_sampler.ArchSampler`, it proposes each architecture at most once, so a budget of
``n`` evaluations means ``n`` distinct architectures.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np

from nas.core.errors import ConfigError
from search_spaces import Arch, SearchSpace


@dataclass(frozen=True)
class Member:
    """An evaluated architecture in the population."""

    arch: Arch
    fitness: float


class RegularisedEvolution:
    """Ask/tell regularised evolution on ``space``.

    Args:
        space: the search space; every proposal is inside it.
        population_size: members kept (the oldest leaves when a new one joins).
        sample_size: tournament size (members compared to pick a parent).
        seed: seed of sampling, tournament and mutation.
        max_retries: proposals tried before giving up on finding an unseen architecture.

    Raises:
        ConfigError: ``population_size < 2`` or ``sample_size`` outside ``1..population_size``.
    """

    def __init__(self, space: SearchSpace, population_size: int = 20, sample_size: int = 5, seed: int = 0,
                 max_retries: int = 200) -> None:
        if population_size < 2:
            raise ConfigError("evolution.population_size", f"must be >= 2, got {population_size}")
        if not 1 <= sample_size <= population_size:
            raise ConfigError("evolution.sample_size", f"must be in 1..{population_size}, got {sample_size}")
        self.space = space
        self.population_size = population_size
        self.sample_size = sample_size
        self.max_retries = max_retries
        self.rng = np.random.default_rng(seed)
        self.population: deque[Member] = deque(maxlen=population_size)
        self.history: list[Member] = []
        self._seen: set[Arch] = set()
        self.duplicates = 0

    def ask(self) -> Arch | None:
        """The next architecture to evaluate (never one proposed before); None when none is found."""
        for _ in range(self.max_retries):
            if len(self.population) < self.population_size:
                arch = self.space.sample(self.rng)
            else:
                arch = self.space.mutate(self._tournament().arch, self.rng)
            if arch not in self._seen:
                self._seen.add(arch)
                return arch
            self.duplicates += 1
        return None

    def tell(self, arch: Arch, fitness: float) -> None:
        """Add the evaluated ``arch`` to the population (the oldest member leaves when full)."""
        member = Member(arch, float(fitness))
        self.population.append(member)
        self.history.append(member)

    def _tournament(self) -> Member:
        idx = self.rng.choice(len(self.population), size=self.sample_size, replace=False)
        return max((self.population[int(i)] for i in idx), key=lambda m: m.fitness)

    def history_archs(self) -> set[Arch]:
        """Every architecture evaluated so far."""
        return {m.arch for m in self.history}

    @property
    def best(self) -> Member | None:
        """The fittest member ever evaluated (None before the first result)."""
        return max(self.history, key=lambda m: m.fitness, default=None)
