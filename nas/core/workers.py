"""Worker processes that end with the process that started them.

A pool's workers (``concurrent.futures.ProcessPoolExecutor``) outlive a parent that is killed
(``kill``, a scheduler's SIGTERM, a closed terminal): each goes on with its task, minutes of
training, holding cores and memory no one will read. :func:`die_with_parent`, a pool's
``initializer``, asks Linux to send the worker SIGTERM when its parent dies; elsewhere it does
nothing (the workers then end when they next talk to the dead parent).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import signal
import sys

_PR_SET_PDEATHSIG = 1


def die_with_parent(*_: object) -> None:
    """In a worker process: receive SIGTERM when the parent process dies (Linux; no-op elsewhere)."""
    if not sys.platform.startswith("linux"):
        return
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
