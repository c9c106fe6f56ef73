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

import math
from collections import deque
from dataclasses import dataclass
from typing import Any

import numpy as np

from nas.core.errors import ConfigError
from nas.core.sampling import Outcome
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

    def mark_seen(self, arch: Arch) -> bool:
        """Record ``arch`` as proposed (e.g. evaluated by an earlier run); False when it already was."""
        if arch in self._seen:
            return False
        self._seen.add(arch)
        return True

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


class EvolutionSampler:
    """Regularised evolution as the search's sampler (a :class:`nas.core.sampling.Sampler`):
    ``search.sampler=evolution``.

    The fitness is the reward (a failed architecture gets minus infinity, so it never becomes a
    parent; a pruned one its last reported reward). Like the Optuna samplers, it proposes each
    architecture once and replays a recorded history on resume: the replayed architectures join
    the population in the order they were evaluated (the oldest leave first, as they would have)
    and are never proposed again.

    Args:
        space: the search space.
        population_size: members kept.
        tournament_size: members compared to pick a parent.
        seed: seed of sampling, tournaments and mutations.
        max_duplicates: proposals tried before the space is taken as exhausted.
    """

    def __init__(self, space: SearchSpace, population_size: int, tournament_size: int, seed: int,
                 max_duplicates: int) -> None:
        self.space = space
        self.evolution = RegularisedEvolution(space, population_size, tournament_size, seed, max_duplicates)
        self.duplicates = 0
        self.exhausted = False
        self._running: set[str] = set()
        self._states: dict[str, str] = {}

    def ask(self) -> str | None:
        """The next architecture to evaluate; None when no unseen one is found."""
        arch = self.evolution.ask()
        self.duplicates = self.evolution.duplicates
        if arch is None:
            self.exhausted = True
            return None
        text = arch.encode()
        self._running.add(text)
        return text

    def tell(self, arch: str, outcome: Outcome) -> None:
        """Add an evaluated architecture to the population."""
        if arch in self._running:
            self._running.discard(arch)
            self._add(arch, outcome)

    def replay(self, arch: str, outcome: Outcome) -> None:
        """Add an architecture evaluated by an earlier run of the search (never proposed again)."""
        if self.evolution.mark_seen(self.space.decode(arch)):
            self._add(arch, outcome)

    def _add(self, arch: str, outcome: Outcome) -> None:
        fitness = outcome.reward if outcome.state != "fail" and outcome.reward is not None else -math.inf
        self.evolution.tell(self.space.decode(arch), fitness)
        self._states[arch] = {"complete": "COMPLETE", "pruned": "PRUNED"}.get(outcome.state, "FAIL")

    def decisions(self, arch: str) -> dict[str, Any]:
        """The active decisions that give ``arch``."""
        return self.space.to_decisions(self.space.decode(arch))

    def counts(self) -> dict[str, int]:
        """States of the evaluated architectures (as the Optuna samplers name them)."""
        out: dict[str, int] = {}
        for state in self._states.values():
            out[state] = out.get(state, 0) + 1
        return out
