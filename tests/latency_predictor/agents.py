"""Real measurement agents (``python -m latency_predictor.agent``) on 127.0.0.1 for the tests.

Each agent is its own process group (the server and its measuring process), started with this
process's environment (so ``PYTHONPATH`` reaches it) plus the token, on a free port. Its stderr
(one line per request) is collected by a thread so a test can wait for an event in it.
"""

from __future__ import annotations

import contextlib
import os
import queue
import re
import secrets
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

TOKEN = secrets.token_urlsafe(24)
_LISTENING = re.compile(r"listening on (http://\S+)")


class Agent:
    """A running agent: its URL, its process, its log lines so far."""

    def __init__(self, proc: subprocess.Popen[str], url: str) -> None:
        self.proc = proc
        self.url = url
        self.lines: list[str] = []
        self._new = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            with self._new:
                self.lines.append(line.rstrip("\n"))
                self._new.notify_all()

    def wait_for(self, pattern: str, count: int = 1, timeout: float = 300.0) -> list[str]:
        """Block until ``count`` log lines match ``pattern``; the matching lines."""
        rx = re.compile(pattern)
        deadline = time.monotonic() + timeout
        with self._new:
            while True:
                found = [line for line in self.lines if rx.search(line)]
                if len(found) >= count:
                    return found
                left = deadline - time.monotonic()
                if left <= 0 or self.proc.poll() is not None:
                    log = "\n".join(self.lines)
                    raise AssertionError(f"agent never logged {count} x {pattern!r}; its log:\n{log}")
                self._new.wait(min(left, 1.0))

    def kill(self) -> None:
        """SIGKILL the server process alone, as a crash or a lost machine would (its measuring
        process finds its pipe closed and exits)."""
        self.proc.kill()
        self.proc.wait(timeout=30)

    def stop(self) -> None:
        """End the agent's whole process group."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=30)
        with contextlib.suppress(ProcessLookupError):  # a measuring process left behind by kill()
            os.killpg(self.proc.pid, signal.SIGKILL)


def start_agent(slot_dir: Path, *args: str, token: str = TOKEN, timeout: float = 300.0) -> Agent:
    """Start an agent on 127.0.0.1 and a free port; returns once it serves."""
    env = {**os.environ, "LATNAS_AGENT_TOKEN": token}
    proc = subprocess.Popen(
        [sys.executable, "-m", "latency_predictor.agent", "--port", "0", "--slot-dir", str(slot_dir), *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, start_new_session=True,
    )
    lines: queue.Queue[str] = queue.Queue()

    def first_line() -> None:
        assert proc.stdout is not None
        lines.put(proc.stdout.readline())

    threading.Thread(target=first_line, daemon=True).start()
    try:
        line = lines.get(timeout=timeout)
    except queue.Empty:
        os.killpg(proc.pid, signal.SIGKILL)
        raise AssertionError("the agent did not start in time") from None
    match = _LISTENING.search(line)
    if match is None:
        proc.wait(timeout=30)
        err = proc.stderr.read() if proc.stderr else ""
        raise AssertionError(f"the agent did not start: {line!r}\n{err}")
    return Agent(proc, match.group(1))


@contextmanager
def running_agents(slot_dir: Path, n: int = 1, *args: str) -> Iterator[list[Agent]]:
    """``n`` agents, stopped (with their measuring processes) when the block ends."""
    agents: list[Agent] = []
    try:
        for _ in range(n):
            agents.append(start_agent(slot_dir, *args))
        yield agents
    finally:
        for a in agents:
            a.stop()


def free_port() -> int:
    """A port nothing listens on (bound, then released)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port
