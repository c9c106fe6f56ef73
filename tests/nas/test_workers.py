"""A pool's workers, and the processes an OrphanReaper watches, end when the process that started
them is killed (Linux); :func:`nas.runtime.workers.in_workers`'s end when their caller stops."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

PARENT = """
import sys, time
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from nas.runtime.workers import die_with_parent

def task(_):
    import os
    print(os.getpid(), flush=True)
    time.sleep(120)

if __name__ == "__main__":
    with ProcessPoolExecutor(1, mp_context=get_context("spawn"), initializer=die_with_parent) as pool:
        pool.submit(task, 0)
        time.sleep(120)
"""

# A process that starts another, which outlives it unless someone ends it: as Ray's raylet starts
# its agents. The parent watches the first with an OrphanReaper and prints both pids.
REAPED = """
import subprocess, sys, time
from nas.runtime.workers import OrphanReaper

root = subprocess.Popen([sys.executable, "-c", "import subprocess, sys, time; "
                         "print(subprocess.Popen(['sleep', '300']).pid, flush=True); time.sleep(300)"],
                        stdout=subprocess.PIPE, text=True)
grandchild = int(root.stdout.readline())
OrphanReaper([root.pid])
print(root.pid, grandchild, flush=True)
time.sleep(300)
"""


# The same, with the watcher started before the process it is to end (as a search starts it before
# ray.init): the children its starter starts later are adopted.
ADOPTED = """
import subprocess, sys, time
from nas.runtime.workers import OrphanReaper, children
import os

OrphanReaper((), adopt_except=children(os.getpid()))
root = subprocess.Popen([sys.executable, "-c", "import subprocess, sys, time; "
                         "print(subprocess.Popen(['sleep', '300']).pid, flush=True); time.sleep(300)"],
                        stdout=subprocess.PIPE, text=True)
grandchild = int(root.stdout.readline())
time.sleep(2.5)  # the watcher scans every second
print(root.pid, grandchild, flush=True)
time.sleep(300)
"""


# A caller that stops after the first result and lives on: the two tasks still training print their
# workers' pids first.
STOPPED = """
import os, time
from nas.runtime.workers import in_workers

def task(i):
    if i == 0:  # the first result, once the two other tasks are under way (however slowly the workers start)
        deadline = time.monotonic() + 120
        while len([f for f in os.listdir(".") if f.startswith("started-")]) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        return i
    os.write(1, f"worker {os.getpid()}\\n".encode())  # one write: two workers' lines never interleave
    open(f"started-{i}", "w").close()
    time.sleep(120)

if __name__ == "__main__":
    for _ in in_workers(task, range(3), 3, ordered=False):
        break
    print("stopped", flush=True)
    time.sleep(120)
"""


# A caller whose workers are busy in Python code (where a worker that took Ctrl-C itself would raise
# KeyboardInterrupt at once) and which says one line when interrupted.
INTERRUPTED = """
import os, sys
from nas.runtime.workers import in_workers

def task(i):
    os.write(1, f"{os.getpid()}\\n".encode())  # one write: two workers' lines never interleave
    while True:
        sum(range(1000))

if __name__ == "__main__":
    try:
        for _ in in_workers(task, range(2), 2, ordered=False):
            pass
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr, flush=True)
        sys.exit(130)
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] if Path(f"/proc/{pid}").exists() else "X"
    return state != "Z"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the parent-death signal is Linux's")
def test_a_killed_parent_leaves_no_worker_behind(tmp_path: Path) -> None:
    script = tmp_path / "parent.py"
    script.write_text(PARENT)
    env = dict(os.environ, PYTHONPATH=str(REPO))
    parent = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True, env=env, cwd=tmp_path)
    assert parent.stdout is not None
    worker = int(parent.stdout.readline())  # the worker is running its task
    assert _alive(worker)
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    deadline = time.monotonic() + 30
    while _alive(worker) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _alive(worker), "the worker outlived its killed parent"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the reaper reads Linux's /proc")
@pytest.mark.parametrize("program", [REAPED, ADOPTED], ids=["roots", "adopted"])
def test_a_reaper_ends_the_processes_it_watches_once_their_starter_is_killed(tmp_path: Path, program: str) -> None:
    script = tmp_path / "parent.py"
    script.write_text(program)
    env = dict(os.environ, PYTHONPATH=str(REPO))
    parent = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True, env=env, cwd=tmp_path,
                              start_new_session=True)
    assert parent.stdout is not None
    watched = [int(pid) for pid in parent.stdout.readline().split()]
    try:
        assert len(watched) == 2 and all(map(_alive, watched))
        parent.send_signal(signal.SIGKILL)  # no clean-up of any kind
        parent.wait()
        deadline = time.monotonic() + 30
        while any(map(_alive, watched)) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not any(map(_alive, watched)), "a watched process outlived its killed starter"
    finally:
        for pid in filter(_alive, watched):
            os.kill(pid, signal.SIGKILL)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads Linux's /proc")
def test_a_caller_that_stops_early_leaves_no_worker_training(tmp_path: Path) -> None:
    script = tmp_path / "caller.py"
    script.write_text(STOPPED)
    env = dict(os.environ, PYTHONPATH=str(REPO))
    with (tmp_path / "stderr.txt").open("w") as err:  # the killed caller's resource tracker warns there
        caller = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=err, text=True,
                                  env=env, cwd=tmp_path)
    assert caller.stdout is not None
    try:
        lines: list[str] = []
        while "stopped" not in lines and (line := caller.stdout.readline()):
            lines.append(line.strip())
        assert lines[-1:] == ["stopped"], (lines, (tmp_path / "stderr.txt").read_text()[-2000:])
        workers = [int(line.split()[1]) for line in lines if line.startswith("worker ")]
        assert len(workers) == 2, lines
        deadline = time.monotonic() + 10
        while any(map(_alive, workers)) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not any(map(_alive, workers)), "a worker went on with its task after its caller stopped"
        assert caller.poll() is None  # the caller lives on: the workers were ended, not orphaned
    finally:
        caller.kill()
        caller.wait()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads Linux's /proc")
def test_ctrl_c_is_the_callers_to_report_and_ends_the_workers(tmp_path: Path) -> None:
    script = tmp_path / "caller.py"
    script.write_text(INTERRUPTED)
    caller = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env=dict(os.environ, PYTHONPATH=str(REPO)), cwd=tmp_path,
                              start_new_session=True)
    assert caller.stdout is not None
    try:
        workers = [int(caller.stdout.readline()) for _ in range(2)]
        os.killpg(caller.pid, signal.SIGINT)  # Ctrl-C: the terminal signals the whole foreground group
        _, err = caller.communicate(timeout=30)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(caller.pid, signal.SIGKILL)
    assert caller.returncode == 130 and err.strip() == "interrupted", err[-2000:]  # no worker's traceback
    assert not any(map(_alive, workers)), "a worker went on after Ctrl-C"


# A command started in the background (SIGINT ignored) or with a SIGINT handler of its own (Ray Tune's)
# stopped by a scheduler's SIGTERM inside sigterm_as_interrupt; it says what stopped it and what SIGTERM's
# handler is once the block has ended.
TERMINATED = """
import os, signal, sys, time
from nas.runtime.signals import sigterm_as_interrupt

if sys.argv[1] == "ignored":
    signal.signal(signal.SIGINT, signal.SIG_IGN)
else:
    def tune_like(signum, frame):
        print("SIGINT's handler ran", flush=True)
        raise KeyboardInterrupt
    signal.signal(signal.SIGINT, tune_like)
try:
    with sigterm_as_interrupt():
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(30)
    print("not stopped", flush=True)
except KeyboardInterrupt:
    print("interrupted", flush=True)
print("default" if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL else "not restored", flush=True)
"""


@pytest.mark.parametrize("sigint", ["ignored", "handled"])
def test_a_schedulers_sigterm_stops_the_block_as_ctrl_c_would(tmp_path: Path, sigint: str) -> None:
    script = tmp_path / "terminated.py"
    script.write_text(TERMINATED)
    done = subprocess.run([sys.executable, str(script), sigint], capture_output=True, text=True, timeout=25,
                          env=dict(os.environ, PYTHONPATH=str(REPO)), cwd=tmp_path)
    expected = (["SIGINT's handler ran"] if sigint == "handled" else []) + ["interrupted", "default"]
    assert done.returncode == 0 and done.stdout.split("\n")[:-1] == expected, (done.stdout, done.stderr[-2000:])
