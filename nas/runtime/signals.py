"""A scheduler's stop taken as a Ctrl-C.

Batch schedulers and container runtimes stop a job with SIGTERM (Slurm's ``scancel`` and time limit,
``kill``, Kubernetes), then SIGKILL a grace period later. A search driver that dies on SIGTERM
leaves its parent run RUNNING and says nothing about how to go on; inside a Ray driver it is worse:
``ray.init`` installs a handler that prints a stack dump and aborts the process. Ctrl-C already stops a
search the right way (the trials under way stop, what ended is recorded, the parent run is KILLED and
the command that resumes it is printed), so :func:`sigterm_as_interrupt` sends SIGTERM down that path.
"""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator
from types import FrameType


def _as_interrupt(signum: int, frame: FrameType | None) -> None:
    """SIGTERM's handler: whatever SIGINT's handler is now (Ray Tune's while trials run, Python's
    otherwise), or a KeyboardInterrupt where SIGINT is ignored or left to the system (a command started
    in the background inherits SIGINT ignored, but a scheduler's stop must still stop it)."""
    handler = signal.getsignal(signal.SIGINT)
    if callable(handler):
        handler(signal.SIGINT, frame)
    else:
        raise KeyboardInterrupt


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """While the block runs (in the main thread), SIGTERM stops the process as Ctrl-C would; the
    handler that was there before is put back after (the system's default where it was one Python
    cannot reinstall, as Ray's is). Elsewhere than the main thread nothing is installed."""
    try:
        before = signal.signal(signal.SIGTERM, _as_interrupt)
    except ValueError:  # not the main thread: signals are the main thread's to handle
        yield
        return
    try:
        yield
    finally:
        # None: the handler before was not Python's (Ray's, installed from C), and Python cannot put it back
        signal.signal(signal.SIGTERM, before if before is not None else signal.SIG_DFL)
