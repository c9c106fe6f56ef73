"""What a search shows while it runs, where its stderr is not a terminal (a log file, a pipe).

The display is fed the events a search gives it (a trial starts, reports an epoch, ends) and a
scripted clock, so what it writes is the same on every machine."""

from __future__ import annotations

import io
import logging
import os
import sys
from pathlib import Path

import pytest

from nas.core.config import RungConfig
from nas.core.record import COMPLETED, FAILED, Candidate
from nas.driver.progress import Progress, RungPlan, search_log, status
from search_spaces import arch_id_of

A = "act_relu-stem_c8-mb_k3_e2_c16_s2_se0.25"
B = "act_relu-stem_c8-rb_k3_c16_s2"


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _ended(arch: str, trial_id: str, reward: float, status: str = COMPLETED) -> Candidate:
    return Candidate(arch=arch, arch_id=arch_id_of(arch), status=status, trial_id=trial_id,
                     metrics={"reward": reward} if status == COMPLETED else {})


def _epoch(epoch: int, loss: float, accuracy: float) -> dict[str, object]:
    return {"status": "RUNNING", "epoch": epoch, "epochs": 3, "train_loss": loss, "accuracy": accuracy}


def test_each_trial_event_is_one_whole_line_with_the_running_epochs() -> None:
    out, clock = io.StringIO(), Clock()
    progress = Progress(4, stream=out, clock=clock)
    progress.started("t1", A)
    progress.started("t2", B)
    clock.now += 10
    progress.reported("t1", _epoch(1, 1.25, 0.5))
    clock.now += 2
    progress.reported("t2", _epoch(1, 2.0, 0.25))
    clock.now += 12
    progress.reported("t1", _epoch(2, 0.75, 0.625))
    progress.update(_ended(A, "t1", 0.625))
    progress.update(_ended(B, "t2", 0.0, FAILED))
    progress.close()

    a, b = arch_id_of(A), arch_id_of(B)
    lines = out.getvalue().splitlines()
    assert out.getvalue().endswith("\n") and "\r" not in out.getvalue()  # nothing left half a line long
    assert [line.split(" | ")[0] for line in lines] == [
        f"search: {a} started",
        f"search: {b} started",
        f"search: {a} epoch 1/3: train loss 1.2500, accuracy 0.5000",
        f"search: {b} epoch 1/3: train loss 2.0000, accuracy 0.2500",
        f"search: {a} epoch 2/3: train loss 0.7500, accuracy 0.6250",
        f"search: {a} completed, reward 0.6250",
        f"search: {b} failed",
    ]
    assert lines[2].split(" | ")[1].startswith("0/4 trials ended, 2 running (epochs 1/3, 0/3), best reward -, 10 s "
                                               "elapsed")
    assert "1/4 trials ended, 1 running (epochs 1/3), best reward 0.6250" in lines[5]
    assert lines[6].split(" | ")[1].startswith("2/4 trials ended, best reward 0.6250, 1 failed, 24 s elapsed")


def test_no_time_left_is_guessed_before_every_running_trial_has_trained_an_epoch() -> None:
    out, clock = io.StringIO(), Clock()
    progress = Progress(6, stream=out, clock=clock)
    progress.started("t1", A)
    progress.started("t2", B)
    clock.now += 10
    progress.reported("t1", _epoch(1, 1.0, 0.5))  # one of the two: the other's epoch is not yet known
    clock.now += 1
    progress.reported("t2", _epoch(1, 1.0, 0.5))
    lines = out.getvalue().splitlines()
    assert all(line.endswith("time left: estimating") for line in lines[:3])
    # Both have done a quarter of their work (one epoch of three, plus what a trial does besides) in
    # 11 s, two at a time: 4 units in 11 s, 24 - 4 to go.
    assert lines[3].endswith("about 55 s left")


def test_a_training_free_search_estimates_once_a_trial_has_ended() -> None:
    out, clock = io.StringIO(), Clock()
    progress = Progress(10, stream=out, clock=clock)
    progress.started("t1", A)
    clock.now += 20
    progress.reported("t1", {"status": COMPLETED, "epoch": 0, "epochs": 3})  # a score: no epoch trained
    progress.update(_ended(A, "t1", 0.5))
    lines = out.getvalue().splitlines()
    assert lines[0].endswith("time left: estimating")
    assert len(lines) == 2 and lines[1].endswith("about 3 min left")  # 9 more trials of 20 s


def test_a_resumed_searchs_earlier_trials_count_but_not_towards_the_pace() -> None:
    out, clock = io.StringIO(), Clock()
    progress = Progress(3, stream=out, clock=clock)
    progress.update(_ended(A, "old", 0.75), earlier=True)
    assert out.getvalue() == ""  # said by the resume line, not again
    progress.started("t1", B)
    clock.now += 30
    progress.update(_ended(B, "t1", 0.5))
    assert out.getvalue().splitlines()[-1].endswith(
        "2/3 trials ended, best reward 0.7500, 30 s elapsed, about 30 s left")


# The README's CIFAR-10 rungs: 10,000 images x 3 epochs for every candidate, the best third on to
# 20,000 x 8 (an epoch there is two of the first rung's).
CIFAR_RUNGS = [RungConfig(10_000, 3), RungConfig(20_000, 8)]


def test_the_rung_plan_counts_a_promoted_trials_rungs_to_come() -> None:
    plan = RungPlan.of(CIFAR_RUNGS, reduction_factor=3)
    assert plan.done(5, rung=1) == 3 + 2 * 2  # the first rung, then two epochs of the top one
    assert plan.left(5, rung=1) == 6 * 2  # six epochs of the top rung to go
    assert plan.left(3, rung=0) == pytest.approx(16 / 3)  # its first rung done: the top one, with a third's chance
    assert plan.left(2, rung=0) == pytest.approx(1 + 16 / 3)
    assert plan.trial() == pytest.approx(1 + 3 + 16 / 3)  # a trial not started, what it does besides training included
    # The supernet's estimate is a rung of its own, with nothing trained: the training rungs are above it.
    supernet = RungPlan.of(CIFAR_RUNGS, reduction_factor=3, supernet=True)
    assert supernet.trial() == pytest.approx(1 + 3 / 3 + 16 / 9)
    assert supernet.left(2, rung=1) == pytest.approx(1 + 16 / 3)


def test_the_time_left_counts_the_promoted_trials_top_rung() -> None:
    out, clock = io.StringIO(), Clock()
    progress = Progress(9, stream=out, clock=clock, rungs=RungPlan.of(CIFAR_RUNGS, reduction_factor=3))
    for i in range(7):  # six stopped at the first rung; the seventh was promoted and finished the top one
        progress.started(f"t{i}", A)
        progress.reported(f"t{i}", {**_epoch(3, 1.0, 0.5), "epochs": 11, "rung": 0})
        if i == 6:
            progress.reported(f"t{i}", {**_epoch(11, 1.0, 0.5), "epochs": 11, "rung": 1})
        progress.update(_ended(A, f"t{i}", 0.5))
    for i in (7, 8):  # the last two promoted, two epochs into the top rung's eight
        progress.started(f"t{i}", B)
        progress.reported(f"t{i}", {**_epoch(3, 1.0, 0.5), "epochs": 11, "rung": 0})
    clock.now += 590
    progress.reported("t7", {**_epoch(5, 1.0, 0.5), "epochs": 11, "rung": 1})
    clock.now += 10
    progress.reported("t8", {**_epoch(5, 1.0, 0.5), "epochs": 11, "rung": 1})
    # Done, in the first rung's epochs (+1 per trial): 6 x 4 stopped, 1 + 3 + 16 finished, 2 x (1 + 3 + 4)
    # running = 60 in 600 s; to go: six epochs of the top rung each, 2 x 12 = 24, at that pace 240 s.
    assert out.getvalue().splitlines()[-1].endswith("7/9 trials ended, 2 running (epochs 5/11, 5/11), best reward "
                                                     "0.5000, 10 min elapsed, about 4 min left")


def test_a_status_line_after_the_trials_starts_on_its_own_line(capsys: pytest.CaptureFixture[str]) -> None:
    progress = Progress(2, stream=sys.stderr, clock=Clock())
    progress.started("t1", A)
    progress.reported("t1", _epoch(1, 1.0, 0.5))
    status("search s: final latency pass: measuring 1 candidates again")
    progress.close()
    err = capsys.readouterr().err
    assert "search s: final latency pass: measuring 1 candidates again" in err.splitlines()
    assert err.index(f"{arch_id_of(A)} epoch 1/3") < err.index("final latency pass")


def test_a_warning_during_the_search_starts_on_its_own_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                                           ) -> None:
    with search_log(tmp_path / "search.log"):
        progress = Progress(2, stream=sys.stderr, clock=Clock())
        progress.started("t1", A)
        logging.getLogger("nas.test").warning("trial t1: its process died; starting it again")
        progress.close()
    err = capsys.readouterr().err.splitlines()
    assert err[-1] == "trial t1: its process died; starting it again"


def _screen(written: str) -> list[str]:
    """The lines a terminal shows for ``written`` (a carriage return goes back to the line's start)."""
    lines = []
    for raw in written.replace("\r\n", "\n").split("\n"):
        shown = ""
        for part in raw.split("\r"):
            shown = part + shown[len(part):]
        lines.append(shown.rstrip())
    return lines


@pytest.mark.skipif(not hasattr(os, "openpty"), reason="needs a pseudo-terminal")
def test_on_a_terminal_a_status_line_or_warning_clears_the_bar_and_the_bar_comes_back_below_it(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import fcntl
    import select
    import struct
    import termios

    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 160, 0, 0))
    with os.fdopen(slave, "w", buffering=1) as terminal:
        monkeypatch.setattr(sys, "stderr", terminal)  # the search's stderr is this terminal
        with search_log(tmp_path / "search.log"):
            progress = Progress(2, stream=terminal, clock=Clock())
            progress.started("t1", A)
            progress.reported("t1", _epoch(1, 1.0, 0.5))
            status("search s: a status line")
            logging.getLogger("nas.test").warning("a warning")
            progress.reported("t1", _epoch(2, 1.0, 0.5))
            progress.close()
    written = b""
    while select.select([master], [], [], 0.5)[0]:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # the terminal's other end is closed: all is read
            break
        if not chunk:
            break
        written += chunk
    os.close(master)
    screen = [line for line in _screen(written.decode()) if line]
    # the bar drawn before each was cleared, not run into
    assert screen[:2] == ["search s: a status line", "a warning"]
    assert screen[2].startswith("search: 0/2 trials |") and "1 running (epochs 2/3)" in screen[2]
    assert len(screen) == 3


def test_a_pickled_copy_shows_nothing_and_the_display_goes_on(capsys: pytest.CaptureFixture[str]) -> None:
    import pickle

    # Ray Tune pickles its callbacks, and so this display, into the experiment's state.
    progress = Progress(2, stream=sys.stderr, clock=Clock())  # pytest's stderr: a stream that does not pickle
    copy = pickle.loads(pickle.dumps(progress))
    copy.started("t1", A)
    progress.started("t1", A)
    assert capsys.readouterr().err.count("started") == 1
