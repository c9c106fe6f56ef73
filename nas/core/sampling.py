"""What a search algorithm is to the driver: ask for an architecture, tell its outcome.

:class:`Sampler` is the protocol the Ray Tune searcher drives (:mod:`nas.adapters.ray_tune`);
:class:`~nas.adapters.optuna_sampler.ArchSampler` (TPE, random, NSGA-II) implements it. Every
implementation proposes each architecture at most once and can replay a recorded history, so a
resumed search never evaluates a recorded architecture again.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from nas.core.record import COMPLETED, PRUNED, Candidate


@dataclass(frozen=True)
class Outcome:
    """What the sampler is told about one architecture.

    Attributes:
        state: ``complete``, ``pruned`` (stopped early by the scheduler) or ``fail``.
        reward: the reward (single objective); None when failed.
        accuracy: the accuracy estimate (NSGA-II's first objective).
        latency_ms: the latency (NSGA-II's second objective).
        step: the last epoch reported (used for pruned trials).
    """

    state: str
    reward: float | None = None
    accuracy: float | None = None
    latency_ms: float | None = None
    step: int = 0

    @classmethod
    def of(cls, candidate: Candidate) -> Outcome:
        """What a recorded candidate tells the sampler (a resumed search's history)."""
        m = candidate.metrics
        step = int(m.get("epochs_completed", 0))
        if candidate.status not in (COMPLETED, PRUNED):
            return cls("fail")
        state = "complete" if candidate.status == COMPLETED else "pruned"
        return cls(state, reward=m.get("reward"), accuracy=m.get("accuracy"), latency_ms=m.get("latency_p50"),
                   step=step)


class Sampler(Protocol):
    """Proposes distinct architectures (canonical strings) and learns from their outcomes."""

    @property
    def duplicates(self) -> int:
        """Suggestions of already evaluated architectures (answered from the earlier result)."""
        ...

    @property
    def exhausted(self) -> bool:
        """True once no new architecture can be found."""
        ...

    def ask(self) -> str | None:
        """The next architecture to evaluate; None when the space is exhausted."""
        ...

    def tell(self, arch: str, outcome: Outcome) -> None:
        """Record the outcome of an architecture :meth:`ask` returned."""
        ...

    def replay(self, arch: str, outcome: Outcome) -> None:
        """Add an architecture evaluated by an earlier run of the search (never proposed again)."""
        ...

    def decisions(self, arch: str) -> dict[str, Any]:
        """The active decisions that give ``arch``."""
        ...

    def counts(self) -> dict[str, int]:
        """Trial states of the evaluated architectures (for the record's consistency check)."""
        ...


class StartFirst:
    """A :class:`Sampler` that proposes given architectures first (``search.start``), then ``inner``'s.

    The start architectures are proposed in order, each once; one already evaluated (a resumed
    search replays it) is skipped. When a start architecture's outcome comes back, ``inner`` learns
    it as history (:meth:`Sampler.replay`), as if it had been evaluated by an earlier run: its model
    (TPE) or population (evolution) starts from known designs, and it never proposes them again.

    Args:
        inner: the search algorithm that proposes everything after the start.
        start: canonical architecture strings, members of the space (checked by the caller).
    """

    def __init__(self, inner: Sampler, start: list[str]) -> None:
        self.inner = inner
        self._queue = list(dict.fromkeys(start))
        self._start = set(self._queue)
        self._seen: set[str] = set()

    @property
    def duplicates(self) -> int:
        """The inner sampler's repeated suggestions."""
        return self.inner.duplicates

    @property
    def exhausted(self) -> bool:
        """True once the start is used up and ``inner`` finds nothing new."""
        return not self._queue and self.inner.exhausted

    def ask(self) -> str | None:
        """The next unevaluated start architecture, or ``inner``'s proposal once the start is used up."""
        while self._queue:
            arch = self._queue.pop(0)
            if arch not in self._seen:
                self._seen.add(arch)
                return arch
        return self.inner.ask()

    def tell(self, arch: str, outcome: Outcome) -> None:
        """Tell ``inner`` (a start architecture becomes its history)."""
        self.inner.tell(arch, outcome)
        if arch in self._start:
            self.inner.replay(arch, outcome)

    def replay(self, arch: str, outcome: Outcome) -> None:
        """Add an architecture of an earlier run (a start architecture among them is not proposed again)."""
        self._seen.add(arch)
        self.inner.replay(arch, outcome)

    def decisions(self, arch: str) -> dict[str, Any]:
        """The active decisions that give ``arch``."""
        return self.inner.decisions(arch)

    def counts(self) -> dict[str, int]:
        """The inner sampler's trial states (start architectures included once told)."""
        return self.inner.counts()
