"""Training steps (device_work) and measurements (measurement_slot) of one device never overlap."""

from __future__ import annotations

import multiprocessing as mp
import time
from pathlib import Path

from latency_predictor.slot import device_work, measurement_slot

Span = tuple[str, float, float]


def _train(slot_dir: str, name: str, steps: int, out: mp.Queue) -> None:  # type: ignore[type-arg]
    spans = []
    for _ in range(steps):
        with device_work("cpu", slot_dir):
            start = time.time()
            time.sleep(0.02)
            spans.append((name, start, time.time()))
    out.put(spans)


def _measure(slot_dir: str, times: int, out: mp.Queue) -> None:  # type: ignore[type-arg]
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


def test_measurements_never_overlap_training_steps_but_steps_run_together(tmp_path: Path) -> None:
    ctx = mp.get_context("fork")  # children only lock and sleep
    out: mp.Queue = ctx.Queue()  # type: ignore[type-arg]
    procs = [
        ctx.Process(target=_train, args=(str(tmp_path), "train-a", 40, out)),
        ctx.Process(target=_train, args=(str(tmp_path), "train-b", 40, out)),
        ctx.Process(target=_measure, args=(str(tmp_path), 4, out)),
    ]
    for p in procs:
        p.start()
    spans: list[Span] = [s for _ in procs for s in out.get(timeout=60)]
    for p in procs:
        p.join(timeout=30)
        assert p.exitcode == 0
    measures = [s for s in spans if s[0] == "measure"]
    steps = [s for s in spans if s[0] != "measure"]
    assert len(measures) == 4 and len(steps) == 80
    clashes = [(m, s) for m in measures for s in steps if _overlap(m, s)]
    assert not clashes, f"a measurement overlapped a training step: {clashes[:2]}"
    # shared: the two trainers' steps do run at the same time
    a = [s for s in steps if s[0] == "train-a"]
    b = [s for s in steps if s[0] == "train-b"]
    assert any(_overlap(x, y) for x in a for y in b)


def test_device_work_inside_own_measurement_slot_does_not_deadlock(tmp_path: Path) -> None:
    with measurement_slot("cpu", tmp_path), device_work("cpu", tmp_path):
        pass
