"""Regularised (aging) evolution over a search space (Real et al., "Regularized Evolution for
Image Classifier Architecture Search", AAAI 2019).

A population of the ``population_size`` most recently evaluated architectures is kept. Until it
is full, architectures are drawn uniformly (:meth:`SearchSpace.sample`). Then each new
candidate is a mutation (:meth:`SearchSpace.mutate`: one active decision changed) of the best of
``sample_size`` population members drawn at random (tournament selection); when its result comes,
it joins the population and the *oldest* member leaves, whatever its fitness (aging), which keeps
the search from clinging to one lucky early architecture.

Where most of a space misses the target, uniform draws are mostly refused by the screen (below), and a
population filled only by them may never fill. With ``fill_mutate_after=K`` (``search.fill_mutate_after``),
once the screen has refused ``K`` uniform draws in a row while the population is filling, the next proposals
of that request are mutations of its members so far (tournament among them), so the trials explore near the
networks that met the screen (a ``search.start`` among them) instead of ending; None (the default, as in
Real et al.) keeps filling by uniform draws.

Like :class:`nas.adapters.optuna_sampler.ArchSampler`, it proposes each architecture at most once, so a budget of
``n`` evaluations means ``n`` distinct architectures.

A *screen* (``search.latency_screen``: :class:`nas.driver.screen.LatencyScreen`) may judge each new
architecture before it is proposed; one it refuses is never proposed (nor evaluated, nor added to
the population), and the next is drawn in its place.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
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
        screen: judges each unseen architecture before it is proposed (True: propose it); None: none.
        max_screened: architectures the screen may refuse in a row before :meth:`ask` gives up.
        fill_mutate_after: uniform draws the screen may refuse in a row, while the population is filling,
            before the rest of that request mutates members instead (None: uniform draws only).

    Raises:
        ConfigError: ``population_size < 2``, ``sample_size`` outside ``1..population_size`` or
            ``fill_mutate_after < 1``.
    """

    def __init__(self, space: SearchSpace, population_size: int = 20, sample_size: int = 5, seed: int = 0,
                 max_retries: int = 200, screen: Callable[[Arch], bool] | None = None,
                 max_screened: int = 50, fill_mutate_after: int | None = None) -> None:
        if population_size < 2:
            raise ConfigError("evolution.population_size", f"must be >= 2, got {population_size}")
        if not 1 <= sample_size <= population_size:
            raise ConfigError("evolution.sample_size", f"must be in 1..{population_size}, got {sample_size}")
        if fill_mutate_after is not None and fill_mutate_after < 1:
            raise ConfigError("evolution.fill_mutate_after", f"must be >= 1, got {fill_mutate_after}")
        self.space = space
        self.population_size = population_size
        self.sample_size = sample_size
        self.max_retries = max_retries
        self.rng = np.random.default_rng(seed)
        self.population: deque[Member] = deque(maxlen=population_size)
        self.history: list[Member] = []
        self._seen: set[Arch] = set()
        self.duplicates = 0
        self.screen = screen
        self.max_screened = max_screened
        self.screened = 0
        """Architectures the screen refused (never proposed)."""
        self.screen_gave_up = False
        """Whether :meth:`ask` last gave up because the screen refused ``max_screened`` in a row."""
        self.fill_mutate_after = fill_mutate_after
        self.fill_mutations = 0
        """Proposals made by mutation while the population was filling (``fill_mutate_after``)."""

    def ask(self) -> Arch | None:
        """The next architecture to evaluate (never one proposed before, and passed by the screen); None
        when none is found (``max_retries`` repeats, or ``max_screened`` refused in a row)."""
        tries = refused = 0
        self.screen_gave_up = False
        while tries < self.max_retries:
            filling = len(self.population) < self.population_size
            by_fill = (filling and self.fill_mutate_after is not None and len(self.population) > 0
                       and refused >= self.fill_mutate_after)
            if filling and not by_fill:
                arch = self.space.sample(self.rng)
            else:
                arch = self.space.mutate(self._tournament().arch, self.rng)
            if arch in self._seen:
                self.duplicates += 1
                tries += 1
                continue
            self._seen.add(arch)  # refused or not, never proposed again
            if self.screen is None or self.screen(arch):
                self.fill_mutations += by_fill
                return arch
            self.screened += 1
            refused += 1
            if refused >= self.max_screened:
                self.screen_gave_up = True
                return None
        return None

    def __getstate__(self) -> dict[str, Any]:
        # A screen measures with this process's latency backend, which does not pickle; a search
        # resumes from its record and builds its screen again (nas.driver), so none is carried.
        state = self.__dict__.copy()
        if state["screen"] is not None:
            state["screen"] = _screen_not_rebuilt
        return state

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
        # while filling (fill_mutate_after) there may be fewer members than a tournament's size
        idx = self.rng.choice(len(self.population), size=min(self.sample_size, len(self.population)), replace=False)
        return max((self.population[int(i)] for i in idx), key=lambda m: m.fitness)

    def history_archs(self) -> set[Arch]:
        """Every architecture evaluated so far."""
        return {m.arch for m in self.history}

    @property
    def best(self) -> Member | None:
        """The fittest member ever evaluated (None before the first result)."""
        return max(self.history, key=lambda m: m.fitness, default=None)


def _screen_not_rebuilt(arch: Arch) -> bool:
    """The screen of an unpickled sampler: refuses to guess (see :meth:`RegularisedEvolution.__getstate__`)."""
    raise RuntimeError("a latency screen is not carried by a pickled sampler; a search builds it again when it "
                       "resumes from its record")


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
        screen: judges each new architecture before it is proposed (``search.latency_screen``); None: none.
        max_screened: architectures the screen may refuse in a row before the search ends.
        fill_mutate_after: uniform draws refused in a row, while the population fills, before mutations of
            its members are proposed instead (``search.fill_mutate_after``); None: uniform draws only.
    """

    def __init__(self, space: SearchSpace, population_size: int, tournament_size: int, seed: int,
                 max_duplicates: int, screen: Callable[[Arch], bool] | None = None, max_screened: int = 50,
                 fill_mutate_after: int | None = None) -> None:
        self.space = space
        self.evolution = RegularisedEvolution(space, population_size, tournament_size, seed, max_duplicates,
                                              screen, max_screened, fill_mutate_after)
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

    @property
    def fill_mutations(self) -> int:
        """Proposals made by mutation while the first population filled (``fill_mutate_after``)."""
        return self.evolution.fill_mutations

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
