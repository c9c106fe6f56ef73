"""What the user sees while a search runs: status lines, the progress bar, and the search's log file."""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from tqdm import tqdm

from nas.core.config import RungConfig
from nas.core.record import FAILED, Candidate
from search_spaces import arch_id_of


@dataclass
class _Running:
    """A trial that started and has not ended: its candidate's arch_id, the last epoch it reported
    (counted from its first rung's first) and that epoch's rung (None: not said)."""

    arch_id: str
    epoch: int = 0
    rung: int | None = None


@dataclass(frozen=True)
class RungPlan:
    """The training a multi-fidelity search's trial has ahead, for the estimate of the time left.

    Work is counted in epochs of the first training rung, an epoch of a rung weighing its images
    over the first one's (a rung of twice the images takes about twice as long an epoch), plus one
    per trial for what it does besides training. A trial reaches each rung above the first with
    ``go_on`` times the chance of the rung below (ASHA promotes ``1/reduction_factor``), so the
    promoted trials' rungs to come are counted, not only the first rung every trial trains.

    Attributes:
        epochs: each rung's epochs (0: the supernet's estimate, a rung with nothing trained).
        weights: the work of one epoch of each rung.
        go_on: the share of a rung's trials that go on to the next.
    """

    epochs: tuple[int, ...]
    weights: tuple[float, ...]
    go_on: float

    @classmethod
    def of(cls, rungs: Sequence[RungConfig], reduction_factor: int, supernet: bool = False) -> RungPlan:
        """The plan of ``search.rungs`` under ASHA's ``reduction_factor`` (``supernet``: the supernet's
        estimate is the rung below them)."""
        base = rungs[0].train_images
        epochs = tuple(r.epochs for r in rungs)
        weights = tuple(r.train_images / base for r in rungs)
        if supernet:
            epochs, weights = (0, *epochs), (0.0, *weights)
        return cls(epochs, weights, 1 / reduction_factor)

    def _rung_of(self, epoch: int) -> int:
        """The rung of the ``epoch``-th epoch (counted over the rungs); the top one past the last."""
        end = 0
        for k, n in enumerate(self.epochs):
            end += n
            if n and epoch <= end:
                return k
        return len(self.epochs) - 1

    def _cost(self, k: int) -> float:
        return self.epochs[k] * self.weights[k]

    def done(self, epoch: int, rung: int | None = None) -> float:
        """The work of a trial's first ``epoch`` epochs, the last of them at ``rung`` (None: from ``epoch``)."""
        if epoch <= 0:
            return 0.0
        k = self._rung_of(epoch) if rung is None else min(rung, len(self.epochs) - 1)
        below = sum(self.epochs[:k])
        return sum(self._cost(j) for j in range(k)) + min(max(epoch - below, 0), self.epochs[k]) * self.weights[k]

    def left(self, epoch: int, rung: int | None = None) -> float:
        """The training a running trial has ahead, expected, after its ``epoch``-th epoch at ``rung``:
        the rest of that rung, then each rung above with the chance of reaching it."""
        if epoch <= 0:
            return sum(self._cost(j) * self.go_on**j for j in range(len(self.epochs)))
        k = self._rung_of(epoch) if rung is None else min(rung, len(self.epochs) - 1)
        rest = sum(self._cost(j) for j in range(k + 1)) - self.done(epoch, k)
        return rest + sum(self._cost(j) * self.go_on ** (j - k) for j in range(k + 1, len(self.epochs)))

    def trial(self) -> float:
        """The work of a trial not started yet, expected (what it does besides training included)."""
        return 1 + self.left(0)


class Progress:
    """Trials ended out of the total, the running trials' epochs, the best reward so far, elapsed and
    remaining time.

    On a terminal this is one bar, redrawn at each event (a trial starting, reporting an epoch,
    ending). On anything else (a file, a pipe) it writes one whole line per event instead, so that
    nothing is left half a line long for a later message to continue.

    The time left is estimated from the work done since the first trial started, in epochs (plus
    one per trial, for what a trial does besides training: a training-free score is all that):
    nothing is estimated before a trial has ended or every running trial has reported an epoch,
    so the estimate never rests on one trial of several that run side by side. Without rungs, a
    trial to come is expected to do what the ended ones did on average; with rungs, what the
    :class:`RungPlan` says, since the first trials to end are the ones stopped at the first rung.

    Args:
        total: the number of trials planned.
        enabled: False shows nothing (e.g. in tests).
        stream: where the bar or the lines go (stderr by default).
        clock: seconds, for the elapsed and remaining time (monotonic by default).
        rungs: a multi-fidelity search's plan (None: no rungs).
    """

    def __init__(self, total: int, enabled: bool = True, stream: TextIO | None = None,
                 clock: Callable[[], float] = time.monotonic, rungs: RungPlan | None = None) -> None:
        self._stream = stream or sys.stderr
        self._clock = clock
        terminal = _is_terminal(self._stream)
        self._lines = enabled and not terminal
        self._bar = tqdm(
            total=total, unit="trial", desc="search", disable=not (enabled and terminal), file=self._stream,
            dynamic_ncols=True, bar_format="{desc}: {n_fmt}/{total_fmt} trials |{bar}| {elapsed}{postfix}",
        )
        self._total = total
        self._ended = 0  # trials ended, earlier runs of the search included
        self._best: float | None = None
        self._failed = 0
        self._running: dict[str, _Running] = {}
        self._epochs: int | None = None  # epochs a trial trains for (from its reports)
        self._t_first: float | None = None  # the first trial's start (this run)
        self._work_done = 0.0  # in epochs (+1 per trial), this run's trials that ended
        self._ended_here = 0
        self._plan = rungs

    def started(self, trial_id: str, arch: str) -> None:
        """A trial started evaluating ``arch``."""
        if self._t_first is None:
            self._t_first = self._clock()
        self._running[trial_id] = _Running(arch_id_of(arch) if arch else trial_id)
        self._show(f"{self._running[trial_id].arch_id} started")

    def reported(self, trial_id: str, report: dict[str, Any]) -> None:
        """A running trial reported (one report per epoch when it trains)."""
        epoch = int(report.get("epoch") or 0)
        if epoch < 1:
            return
        if "epochs" in report:
            self._epochs = int(report["epochs"])
        run = self._running.setdefault(trial_id, _Running(str(report.get("arch_id") or trial_id)))
        run.epoch = epoch
        if isinstance(report.get("rung"), int):
            run.rung = report["rung"]
        figures = [f"{name} {report[k]:.4f}" for k, name in (("train_loss", "train loss"), ("accuracy", "accuracy"))
                   if isinstance(report.get(k), float)]
        self._show(f"{run.arch_id} epoch {self._of(epoch)}" + (f": {', '.join(figures)}" if figures else ""))

    def update(self, cand: Candidate, earlier: bool = False) -> None:
        """Count one ended trial (``earlier``: recorded by an earlier run of the search, before this one)."""
        if cand.status == FAILED:
            self._failed += 1
        elif cand.completed and (self._best is None or cand.reward > self._best):
            self._best = cand.reward
        self._ended += 1
        run = self._running.pop(cand.trial_id, None)
        if not earlier:
            self._ended_here += 1
            epoch = run.epoch if run is not None else len(cand.history)
            self._work_done += 1 + self._done(epoch, run.rung if run is not None else None)
        self._bar.update(1)
        if earlier:
            self._bar.set_postfix_str(self._postfix(), refresh=False)
            return
        reward = "" if cand.status == FAILED else f", reward {cand.reward:.4f}"
        self._show(f"{cand.arch_id} {cand.status.lower()}{reward}")

    def close(self) -> None:
        """Finish the bar."""
        self._bar.close()

    def __reduce__(self) -> tuple[type[Progress], tuple[int, bool]]:
        # Ray Tune pickles its callbacks, and what they hold, into the experiment's state; the
        # stream drawn on is this process's (it may not pickle), so a copy is one that shows nothing.
        return Progress, (self._total, False)

    def _done(self, epoch: int, rung: int | None) -> float:
        """A trial's training so far, in work (its epochs without a plan)."""
        return float(epoch) if self._plan is None else self._plan.done(epoch, rung)

    # ------------------------------------------------------------------ what is shown

    def _show(self, event: str) -> None:
        if self._lines:
            print(f"search: {event} | {self._postfix()}", file=self._stream, flush=True)
        else:
            self._bar.set_postfix_str(self._postfix())

    def _postfix(self) -> str:
        parts = [f"{self._ended}/{self._total} trials ended"] if self._lines else []
        if self._running:
            epochs = [self._of(r.epoch) for r in self._running.values()]
            shown = ", ".join(epochs[:4]) + (f", +{len(epochs) - 4}" if len(epochs) > 4 else "")
            parts.append(f"{len(self._running)} running (epochs {shown})")
        parts.append("best reward " + ("-" if self._best is None else f"{self._best:.4f}"))
        if self._failed:
            parts.append(f"{self._failed} failed")
        if self._lines and self._t_first is not None:
            parts.append(f"{_duration(self._clock() - self._t_first)} elapsed")
        parts.append(self._time_left())
        return ", ".join(parts)

    def _of(self, epoch: int) -> str:
        return f"{epoch}/{self._epochs}" if self._epochs else str(epoch)

    def _time_left(self) -> str:
        if self._t_first is None or (self._ended_here == 0 and (
                not self._running or any(r.epoch == 0 for r in self._running.values()))):
            return "time left: estimating"
        running = sum(1 + self._done(r.epoch, r.rung) for r in self._running.values() if r.epoch)
        done = self._work_done + running
        to_start = self._total - self._ended - len(self._running)
        if self._plan is not None:
            plan = self._plan
            left = to_start * plan.trial() + sum(plan.left(r.epoch, r.rung) for r in self._running.values())
        else:
            per_trial = self._work_done / self._ended_here if self._ended_here else 1 + (self._epochs or 0)
            left = to_start * per_trial + sum(max(0.0, per_trial - 1 - r.epoch) for r in self._running.values())
        elapsed = self._clock() - self._t_first
        if done <= 0 or elapsed <= 0:
            return "time left: estimating"
        return f"about {_duration(left * elapsed / done)} left"


def _is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False


def _duration(seconds: float) -> str:
    """``45 s``, ``12 min``, ``1 h 20 min``."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    minutes = round(seconds / 60)
    return f"{minutes} min" if minutes < 60 else f"{minutes // 60} h {minutes % 60} min"


log = logging.getLogger("nas.search")


def status(message: str) -> None:
    """One status line on stderr, at once (what the search is doing before its progress bar appears),
    and in the search's log."""
    tqdm.write(message, file=sys.stderr)  # a bar on the terminal is cleared first and drawn again after
    sys.stderr.flush()
    log.info("%s", message)


class _AroundTheBar:
    """A text stream that writes through tqdm: a bar on the terminal is cleared before and drawn again after."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def write(self, text: str) -> None:
        tqdm.write(text, file=self._stream, end="")

    def flush(self) -> None:
        self._stream.flush()


@contextmanager
def search_log(path: Path) -> Iterator[None]:
    """While the search runs, its log goes to ``path`` (INFO and up), and warnings also to stderr."""
    root = logging.getLogger()
    to_file = logging.FileHandler(path, encoding="utf-8")
    to_file.setLevel(logging.INFO)
    to_file.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    to_console = logging.StreamHandler(_AroundTheBar(sys.stderr))
    to_console.setLevel(logging.WARNING)
    level = root.level
    root.setLevel(logging.INFO)
    root.addHandler(to_file)
    root.addHandler(to_console)
    log.info("search log: %s", path)
    try:
        yield
    finally:
        root.removeHandler(to_file)
        root.removeHandler(to_console)
        root.setLevel(level)
        to_file.close()
