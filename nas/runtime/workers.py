"""Worker processes that end with the process that started them.

A pool's workers outlive a parent that is killed (``kill``, a scheduler's SIGTERM, a closed
terminal): each goes on with its task, minutes of training, holding cores and memory no one will
read. :func:`die_with_parent`, a pool's ``initializer``, asks Linux to send the worker SIGTERM when
its parent dies; elsewhere it does nothing (the workers then end when they next talk to the dead
parent). A parent that is interrupted but lives on has the opposite problem with
``concurrent.futures.ProcessPoolExecutor``: leaving its ``with`` block waits for every task already
queued, hours of training after a Ctrl-C. :func:`in_workers` maps a function over spawned workers
and ends them at once when the caller stops, by Ctrl-C, an error or a ``break``. Its workers leave
Ctrl-C to the caller: a terminal signals the whole foreground group, and a worker that took it
itself would print its own traceback beside the caller's one-line message.

Processes that others start cannot be asked that way. A local Ray cluster's head processes share
its driver's fate (Ray starts them with a parent-death signal), but the agents its raylet starts
(``ray::DashboardAgent``, ``ray::RuntimeEnvAgent``) only notice that the raylet is gone after a
couple of seconds, and then spend a minute trying to tell the cluster's (dead) GCS before they
exit. :class:`OrphanReaper` is a small watcher process (standard library only, in its own
session so that a terminal's signals pass it by) that notes the processes under given roots
while their starter lives, and kills those still running once it has died (SIGKILL included).
Linux only (it reads ``/proc``).
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from multiprocessing import get_context
from pathlib import Path
from typing import Any, TypeVar

_PR_SET_PDEATHSIG = 1
_T = TypeVar("_T")
_R = TypeVar("_R")
_SCAN_PERIOD_S = 1.0
_POLL_S = 0.2


def die_with_parent(*_: object) -> None:
    """In a worker process: receive SIGTERM when the parent process dies (Linux; no-op elsewhere)."""
    if not sys.platform.startswith("linux"):
        return
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)


def _start_worker(initializer: Callable[..., None], *initargs: Any) -> None:
    """A pool worker's first step: Ctrl-C is the caller's to handle (it terminates the pool), then
    the caller's own ``initializer``."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    initializer(*initargs)


def in_workers(fn: Callable[[_T], _R], items: Iterable[_T], workers: int, *, ordered: bool = True,
               initializer: Callable[..., None] = die_with_parent, initargs: tuple[Any, ...] = ()) -> Iterator[_R]:
    """``fn`` over ``items`` in ``workers`` spawned processes, each result as it comes (in the order of
    ``items`` when ``ordered``, else in the order they finish). Spawned, not forked: a parent whose
    torch thread pools are up does not fork safely.

    ``fn`` and ``initializer`` (run once in each worker; by default :func:`die_with_parent`) must be
    importable, module-level functions. A worker's exception is raised here. When the caller stops
    early (Ctrl-C, an exception, closing the generator) the workers are terminated at once, the
    tasks under way and those queued with them.
    """
    pool = get_context("spawn").Pool(workers, initializer=_start_worker, initargs=(initializer, *initargs))
    try:
        yield from (pool.imap if ordered else pool.imap_unordered)(fn, items)
    except BaseException:
        pool.terminate()
        raise
    else:
        pool.close()
    finally:
        pool.join()


def _stat(pid: int) -> tuple[int, str] | None:
    """A live process's parent and start time (``/proc/<pid>/stat``); None when gone or a zombie.

    The start time tells a process from a later one that was given the same pid.
    """
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return None if fields[0] == "Z" else (int(fields[1]), fields[19])


def _processes() -> dict[int, tuple[int, str]]:
    """Every live process: pid -> (parent pid, start time)."""
    out = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (st := _stat(int(entry.name))) is not None:
            out[int(entry.name)] = st
    return out


def children(pid: int) -> set[int]:
    """The live processes whose parent is ``pid`` (Linux; empty elsewhere)."""
    if not sys.platform.startswith("linux"):
        return set()
    return {p for p, (parent, _) in _processes().items() if parent == pid}


def _under(roots: Iterable[int]) -> dict[int, str]:
    """``roots`` and every process below them, now: pid -> start time."""
    procs = _processes()
    found = {p for p in roots if p in procs}
    frontier = set(found)
    while frontier:
        frontier = {p for p, (parent, _) in procs.items() if parent in frontier} - found
        found |= frontier
    return {p: procs[p][1] for p in found}


def reap_when_orphaned(parent: int, roots: set[int], adopt_except: set[int] | None = None) -> None:
    """Note the processes under ``roots`` while ``parent`` (this process's parent) lives; once it
    has died, SIGKILL those still running (each the same process as noted, by its start time).

    With ``adopt_except``, every child ``parent`` starts later (any child not in that set, this
    watcher aside) becomes a root too, from the scan after it appears.
    """
    me = os.getpid()

    def adopted() -> set[int]:
        return children(parent) - adopt_except - {me} if adopt_except is not None else set()

    roots = roots | adopted()
    noted = _under(roots)
    print("noted", flush=True)  # the starter waits for this line: what runs now is noted
    sys.stdout.close()
    next_scan = time.monotonic() + _SCAN_PERIOD_S
    while os.getppid() == parent:
        if time.monotonic() >= next_scan:
            roots |= adopted()
            # Processes noted before stay noted while they run: an agent whose raylet died is no
            # longer under any root, but it is still the cluster's.
            noted = {p: s for p, s in noted.items() if (st := _stat(p)) is not None and st[1] == s}
            noted.update(_under(roots | set(noted)))
            next_scan = time.monotonic() + _SCAN_PERIOD_S
        time.sleep(_POLL_S)
    noted.pop(me, None)
    for pid, started in noted.items():
        st = _stat(pid)
        if st is not None and st[1] == started:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)


class OrphanReaper:
    """A watcher that kills the processes under ``roots`` (and the roots) once this process has died.

    Args:
        roots: the pids of processes this process started (e.g. a local Ray cluster's head
            processes); the processes under them are noted before this returns, and what they
            start later, every second.
        adopt_except: when given, every child this process starts from now on (any child not in
            this set) is a root as well, noted within a second of its start: a watcher started
            before a cluster is, whose processes are then covered while it starts up.
    """

    def __init__(self, roots: Iterable[int], adopt_except: Iterable[int] | None = None) -> None:
        # Run as a file with the standard library only (-I -S): no site-packages to load, and it
        # finds nothing of the project's environment to depend on.
        args = [sys.executable, "-I", "-S", str(Path(__file__).resolve()), str(os.getpid()), *map(str, sorted(roots))]
        if adopt_except is not None:
            args += ["--adopt-except", *map(str, sorted(adopt_except))]
        self._proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                      stderr=subprocess.DEVNULL, start_new_session=True)
        assert self._proc.stdout is not None
        with self._proc.stdout:  # once it has noted the roots' processes, as they are now
            self._proc.stdout.readline()

    @property
    def pid(self) -> int:
        """The watcher's pid."""
        return self._proc.pid

    def stop(self) -> None:
        """Stop watching (the processes ended the ordinary way): nothing is killed."""
        self._proc.terminate()
        try:
            self._proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()


if __name__ == "__main__":
    _given, _, _except = " ".join(sys.argv[2:]).partition("--adopt-except")
    reap_when_orphaned(int(sys.argv[1]), {int(a) for a in _given.split()},
                       {int(a) for a in _except.split()} if _ else None)
