"""Training steps (device_work) and measurements (measurement_slot) of one device never overlap."""

from __future__ import annotations

import multiprocessing as mp
import time
from pathlib import Path
from typing import Any

from latency_predictor.measurement.slot import device_work, measurement_slot
from tests.latency_predictor.conftest import run_forked

Span = tuple[str, float, float]


def _train(slot_dir: str, name: str, steps: int, out: mp.Queue) -> None:
    spans = []
    for _ in range(steps):
        with device_work("cpu", slot_dir):
            start = time.time()
            time.sleep(0.02)
            spans.append((name, start, time.time()))
    out.put(spans)


def _step_together(slot_dir: str, mine: Any, other: Any, out: mp.Queue) -> None:
    # Inside a training step, say so and wait for the other trainer to be inside one too.
    with device_work("cpu", slot_dir):
        mine.set()
        out.put(other.wait(timeout=20))


def _measure(slot_dir: str, times: int, out: mp.Queue) -> None:
    spans = []
    for _ in range(times):
        time.sleep(0.05)
        with measurement_slot("cpu", slot_dir):
            start = time.time()
            time.sleep(0.1)
            spans.append(("measure", start, time.time()))
    out.put(spans)


def _overlap(a: Span, b: Span) -> bool:
    return a[1] < b[2] and b[1] < a[2]


def test_measurements_never_overlap_training_steps(tmp_path: Path) -> None:
    jobs = [(_train, (str(tmp_path), "train-a", 40)), (_train, (str(tmp_path), "train-b", 40)),
            (_measure, (str(tmp_path), 4))]
    spans: list[Span] = [s for spans in run_forked(jobs) for s in spans]
    measures = [s for s in spans if s[0] == "measure"]
    steps = [s for s in spans if s[0] != "measure"]
    assert len(measures) == 4 and len(steps) == 80
    clashes = [(m, s) for m in measures for s in steps if _overlap(m, s)]
    assert not clashes, f"a measurement overlapped a training step: {clashes[:2]}"


def test_training_steps_of_two_trials_run_at_the_same_time(tmp_path: Path) -> None:
    met = run_forked([(_step_together, (str(tmp_path),)), (_step_together, (str(tmp_path),))], rendezvous=True)
    assert met == [True, True], "two training steps of one device could not be inside device_work together"


def _work_inside_own_slot(slot_dir: str, out: mp.Queue) -> None:
    with measurement_slot("cpu", slot_dir) as ticket, device_work("cpu", slot_dir):
        out.put(("inside both", ticket.path.name))
    out.put("left both")


def test_device_work_inside_own_measurement_slot_does_not_deadlock(tmp_path: Path) -> None:
    # In a process of its own, so that a deadlock (a flock that never returns) fails the test at
    # the bound below and the process can be killed.
    ctx = mp.get_context("fork")
    out: mp.Queue = ctx.Queue()
    proc = ctx.Process(target=_work_inside_own_slot, args=(str(tmp_path), out))
    proc.start()
    proc.join(timeout=30)
    if proc.is_alive():
        proc.kill()
        proc.join()
        raise AssertionError("device_work inside the process's own measurement slot was still waiting after 30 s")
    assert proc.exitcode == 0
    assert [out.get(timeout=5), out.get(timeout=5)] == [("inside both", "cpu.lock"), "left both"]
