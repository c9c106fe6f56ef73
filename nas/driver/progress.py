"""What the user sees while a search runs: status lines, the progress bar, and the search's log file."""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TextIO

from tqdm import tqdm

from nas.core.record import FAILED, Candidate


class Progress:
    """Trials done out of the total, best reward so far, elapsed and remaining time.

    Args:
        total: the number of trials planned.
        enabled: False shows nothing (e.g. in tests).
        stream: where the bar is drawn (stderr by default).
    """

    def __init__(self, total: int, enabled: bool = True, stream: TextIO | None = None) -> None:
        self._bar = tqdm(
            total=total, unit="trial", desc="search", disable=not enabled, file=stream or sys.stderr,
            dynamic_ncols=True, bar_format="{desc}: {n_fmt}/{total_fmt} trials |{bar}| {elapsed}<{remaining}{postfix}",
        )
        self._best: float | None = None
        self._failed = 0

    def update(self, cand: Candidate) -> None:
        """Count one finished trial."""
        if cand.status == FAILED:
            self._failed += 1
        elif cand.completed and (self._best is None or cand.reward > self._best):
            self._best = cand.reward
        best = "-" if self._best is None else f"{self._best:.4f}"
        self._bar.set_postfix_str(f"best reward {best}" + (f", {self._failed} failed" if self._failed else ""))
        self._bar.update(1)

    def close(self) -> None:
        """Finish the bar."""
        self._bar.close()


log = logging.getLogger("nas.search")


def status(message: str) -> None:
    """One status line on stderr, at once (what the search is doing before its progress bar appears),
    and in the search's log."""
    print(message, file=sys.stderr, flush=True)
    log.info("%s", message)


@contextmanager
def search_log(path: Path) -> Iterator[None]:
    """While the search runs, its log goes to ``path`` (INFO and up), and warnings also to stderr."""
    root = logging.getLogger()
    to_file = logging.FileHandler(path, encoding="utf-8")
    to_file.setLevel(logging.INFO)
    to_file.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    to_console = logging.StreamHandler(sys.stderr)
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
