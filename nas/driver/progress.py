"""What the user sees while a search runs: status lines, the progress bar, and the search's log file."""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from tqdm import tqdm

from nas.core.record import FAILED, Candidate
from search_spaces import arch_id_of


@dataclass
class _Running:
    """A trial that started and has not ended: its candidate's arch_id and the last epoch it reported."""

    arch_id: str
    epoch: int = 0


class Progress:
    """Trials ended out of the total, the running trials' epochs, the best reward so far, elapsed and
    remaining time.

    On a terminal this is one bar, redrawn at each event (a trial starting, reporting an epoch,
    ending). On anything else (a file, a pipe) it writes one whole line per event instead, so that
    nothing is left half a line long for a later message to continue.

    The time left is estimated from the work done since the first trial started, in epochs (plus
    one per trial, for what a trial does besides training: a training-free score is all that):
    nothing is estimated before a trial has ended or every running trial has reported an epoch,
    so the estimate never rests on one trial of several that run side by side.

    Args:
        total: the number of trials planned.
        enabled: False shows nothing (e.g. in tests).
        stream: where the bar or the lines go (stderr by default).
        clock: seconds, for the elapsed and remaining time (monotonic by default).
    """

    def __init__(self, total: int, enabled: bool = True, stream: TextIO | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
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
            self._work_done += 1 + (run.epoch if run is not None else len(cand.history))
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
        running = sum(1 + r.epoch for r in self._running.values() if r.epoch)
        done = self._work_done + running
        per_trial = self._work_done / self._ended_here if self._ended_here else 1 + (self._epochs or 0)
        left = (self._total - self._ended - len(self._running)) * per_trial + sum(
            max(0.0, per_trial - 1 - r.epoch) for r in self._running.values())
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
