"""Reliability: failing candidates, killed trial processes, a killed or interrupted driver, resume.

The trial boundary is tested in-process with real builds, ONNX Runtime measurements and
training. The searches run on the session's real Ray cluster with a real SQLite MLflow store;
failures are injected with :mod:`nas.faults` (``$LATNAS_FAULTS``), which makes the chosen
candidates fail in real ways (a real failed allocation, real NaN weights, a real SIGKILL of the
trial's process) or raise the typed error a backend raises. The driver-kill and Ctrl-C tests run
``python -m nas.search`` in a subprocess and signal it.
"""

from __future__ import annotations

import contextlib
import csv
import json
import math
import os
import pickle
import re
import shlex
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from mlflow import MlflowClient
from mlflow.entities import Run

from nas.core.config import (
    AccuracyConfig,
    DataConfig,
    LatencyConfig,
    LeaderboardConfig,
    SearchConfig,
    TrackingConfig,
    TrainConfig,
)
from nas.core.errors import SearchError
from nas.core.record import COMPLETED, FAILED, RUNNING
from nas.data import Dataset, load_dataset
from nas.driver import run_search
from nas.review.leaderboard import run_leaderboard
from nas.trial.evaluate import TrialContext, evaluate_candidate
from nas.trial.faults import ENV_VAR, FaultPlan
from search_spaces import load_space
from tests.nas.configs import compose_config, stored_config

FAST_MEASURE = {"warmup_runs": 2, "warmup_s": 0.0, "min_runs": 10, "min_time_s": 0.0, "max_time_s": 1.0,
                "max_repeats": 1}


# ---------------------------------------------------------------------- the trial boundary


@pytest.fixture(scope="module")
def data() -> Dataset:
    return load_dataset(DataConfig(resolution=16, max_train_samples=256, max_val_samples=128))


def _ctx(data: Dataset, timeout: float | None = None, faults: str | None = None, **train: Any) -> TrialContext:
    return TrialContext(
        space=load_space("tiny"), data=data, train=TrainConfig(**{"epochs": 2, "batch_size": 64, **train}),
        accuracy=AccuracyConfig(), target_ms=0.5, reward="squared", threads=1,
        latency=LatencyConfig(input_shape=[1, 3, 32, 32], options={"intra_op_threads": 1}, measure=FAST_MEASURE),
        trial_timeout_s=timeout, faults=FaultPlan.parse(faults) if faults else None,
    )


def _arch(seed: int = 0) -> str:
    return load_space("tiny").sample(np.random.default_rng(seed)).encode()


def _run(arch: str, ctx: TrialContext) -> list[dict[str, Any]]:
    reports: list[dict[str, Any]] = []
    evaluate_candidate(arch, ctx, reports.append)
    return reports


def _failed(reports: list[dict[str, Any]], failure_type: str) -> dict[str, Any]:
    last = reports[-1]
    assert last["status"] == FAILED, last
    assert last["failure_type"] == failure_type, last["failure_reason"]
    assert math.isnan(last["reward"]) and last["failure_reason"]
    return last


def test_a_trial_past_its_time_limit_fails_between_training_steps(data: Dataset) -> None:
    # The limit is set from a whole one-epoch trial of the same candidate (first build, export,
    # session and measurement included), so the measurement ends before it however loaded the
    # machine is; the training then runs far past it.
    warm = _run(_arch(), _ctx(data, epochs=1))[-1]
    assert warm["status"] == COMPLETED, warm
    limit = round(max(2.0, 3 * warm["trial_seconds"]), 1)
    epochs = 100_000
    reports = _run(_arch(), _ctx(data, timeout=limit, epochs=epochs))
    last = _failed(reports, "TrialTimeoutError")
    assert f"search.trial_timeout_s={limit:g}" in last["failure_reason"]
    assert "a training step" in last["failure_reason"]
    assert all(r["status"] == RUNNING for r in reports[:-1])  # the epochs before the limit were reported
    assert len(reports) - 1 < epochs  # stopped at a training step, long before the last epoch
    assert last["trial_seconds"] > limit  # not before the limit
    assert "latency_ms" in last  # measured before training: kept in the record


def test_a_stalled_trial_fails_at_its_time_limit(data: Dataset) -> None:
    last = _failed(_run(_arch(), _ctx(data, timeout=0.5, faults="hang:30@1")), "TrialTimeoutError")
    assert "stall" in last["failure_reason"]
    assert last["trial_seconds"] < 30.0  # it did not sit out the 30 s stall
    assert "latency_ms" not in last  # it ended in the stall, before the measurement


def test_out_of_memory_is_a_typed_failure(data: Dataset) -> None:
    last = _failed(_run(_arch(), _ctx(data, faults="oom@1")), "TrialOutOfMemoryError")
    assert "out of host memory" in last["failure_reason"] and "can't allocate memory" in last["failure_reason"]
    assert "latency_ms" in last


def test_nan_weights_fail_the_training_check(data: Dataset) -> None:
    last = _failed(_run(_arch(), _ctx(data, faults="nan@1")), "TrainingError")
    assert "training loss became nan" in last["failure_reason"]


@pytest.mark.parametrize(("kind", "failure_type"),
                         [("export", "ExportError"), ("engine", "EngineBuildError"), ("measure", "MeasurementError")])
def test_latency_failures_are_typed(data: Dataset, kind: str, failure_type: str) -> None:
    reports = _run(_arch(), _ctx(data, faults=f"{kind}@1"))
    last = _failed(reports, failure_type)
    assert len(reports) == 1 and "latency_ms" not in last and last["params"] > 0


def test_faults_hit_only_their_architectures(data: Dataset) -> None:
    plan = FaultPlan.parse("measure@0.5,seed=3")
    space = load_space("tiny")
    archs = [_arch(s) for s in range(12)]
    hit = [a for a in archs if plan.hits("measure", space.decode(a).arch_id)]
    assert 0 < len(hit) < len(archs)
    for arch in archs:
        status = _run(arch, _ctx(data, faults="measure@0.5,seed=3", epochs=1))[-1]["status"]
        assert status == (FAILED if arch in hit else COMPLETED)


# ---------------------------------------------------------------------- searches with injected faults

CHEAP = (
    "+space=tiny", "target_ms=1.0", "data.max_train_samples=128", "data.max_val_samples=64", "data.resolution=16",
    "train.epochs=1", "latency.input_shape=[1,3,32,32]", "latency.measure.min_runs=10",
    "latency.measure.min_time_s=0.05", "latency.measure.max_time_s=0.3", "latency.measure.max_repeats=1",
    "progress=false",
)


def _config(tmp_path: Path, *overrides: str) -> SearchConfig:
    return stored_config(tmp_path, *CHEAP, *overrides)


def _runs(db: Path) -> tuple[list[Run], list[Run]]:
    """The parent runs and the candidate runs in the store."""
    client = MlflowClient(f"sqlite:///{db}")
    exp = client.get_experiment_by_name("latnas")
    assert exp is not None
    runs = client.search_runs([exp.experiment_id], max_results=1000)
    return ([r for r in runs if r.data.tags.get("latnas.role") == "search"],
            [r for r in runs if r.data.tags.get("latnas.role") == "candidate"])


def _check_candidates(children: list[Run], plan: FaultPlan, timeout: float | None = None) -> Counter[str]:
    """Every good candidate COMPLETED, every bad one FAILED with the failure its fault causes; one run per arch."""
    archs = [c.data.params["arch"] for c in children]
    assert len(set(archs)) == len(archs)
    statuses: Counter[str] = Counter()
    for child in children:
        tags, arch_id = child.data.tags, child.data.params["arch_id"]
        expected = plan.expected_failure(arch_id, timeout)
        statuses[tags["status"]] += 1
        if expected is None:
            assert tags["status"] == "COMPLETED", (arch_id, tags.get("failure_reason"))
            assert child.info.status == "FINISHED" and "reward" in child.data.metrics
        else:
            assert tags["status"] == "FAILED" and child.info.status == "FAILED", arch_id
            assert tags["failure_type"] == expected and tags["failure_reason"], (arch_id, tags)
            assert "reward" not in child.data.metrics
    return statuses


@pytest.mark.slow
@pytest.mark.usefixtures("ray_cluster")
def test_bad_candidates_fail_with_their_reason_and_the_search_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = "export@0.1,measure@0.05,engine@0.05,oom@0.05,nan@0.05,seed=4"
    monkeypatch.setenv(ENV_VAR, spec)
    result = run_search(_config(tmp_path, "search.n_trials=10", "name=faults"))
    parents, children = _runs(tmp_path / "mlflow.db")
    assert result.status == "FINISHED" and parents[0].info.status == "FINISHED"
    assert parents[0].data.tags["fault_injection"] == spec
    statuses = _check_candidates(children, FaultPlan.parse(spec))
    assert statuses["FAILED"] >= 2 and statuses["COMPLETED"] >= 2 and sum(statuses.values()) == 10
    # Ray Tune, Optuna and MLflow count the same trials; Optuna was told each failure.
    assert result.ray_trials == 10 == len(children)
    assert result.optuna_states == {"COMPLETE": statuses["COMPLETED"], "FAIL": statuses["FAILED"]}
    assert parents[0].data.metrics["n_failed"] == statuses["FAILED"]
    # The leaderboard has the reason of every failed candidate.
    with (tmp_path / "out" / "leaderboard.csv").open() as f:
        rows = list(csv.DictReader(f))
    failed = [r for r in rows if r["status"] == "FAILED"]
    assert len(failed) == statuses["FAILED"] and all(r["failure_reason"] for r in failed)


@pytest.mark.slow
@pytest.mark.usefixtures("ray_cluster")
@pytest.mark.ci
def test_killed_trial_processes_are_retried_and_counted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # kill: the process dies on the first attempt only; die: on every attempt.
    spec = "die@0.25,kill@0.25,seed=1"
    monkeypatch.setenv(ENV_VAR, spec)
    result = run_search(_config(tmp_path, "search.n_trials=4", "search.max_retries=1", "name=retry"))
    parents, children = _runs(tmp_path / "mlflow.db")
    plan = FaultPlan.parse(spec)
    ids = [c.data.params["arch_id"] for c in children]
    died = {a for a in ids if plan.hits("die", a)}
    killed = {a for a in ids if plan.hits("kill", a)} - died
    assert died and killed and len(children) == 4 and result.ray_trials == 4 and result.status == "FINISHED"
    _check_candidates(children, plan)
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    for child in children:
        arch_id = child.data.params["arch_id"]
        assert child.data.metrics["retries"] == (1.0 if arch_id in killed | died else 0.0)
        if arch_id in died:
            assert "died 2 time(s), search.max_retries=1" in child.data.tags["failure_reason"]
        else:  # one attempt recorded, not the lost one too
            assert [h.step for h in client.get_metric_history(child.info.run_id, "accuracy")] == [1]
    assert result.retries == len(killed | died) == parents[0].data.metrics["n_retries"]
    assert result.optuna_states == {"COMPLETE": 4 - len(died), "FAIL": len(died)}
    assert {p.name for p in (tmp_path / "out" / "faults").iterdir()} == {f"kill-{a}" for a in killed}


@pytest.mark.slow
@pytest.mark.usefixtures("ray_cluster")
def test_a_bug_stops_the_search_without_retries(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_VAR, "bug@1")
    with pytest.raises(SearchError, match=r"bug injected by LATNAS_FAULTS") as err:
        run_search(_config(tmp_path, "search.n_trials=4", "search.max_concurrent=1", "name=bug"))
    assert "Traceback" in str(err.value)
    parents, children = _runs(tmp_path / "mlflow.db")
    assert parents[0].info.status == "FAILED"
    assert len(children) == 1 and children[0].data.tags["failure_type"] == "TrialCrashed"
    assert children[0].data.metrics["retries"] == 0.0


class _CodeOnLoad:
    """A pickle that writes ``marker`` when it is loaded: what a planted error file could run."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (Path.write_text, (self.marker, "ran"))


@pytest.mark.slow
@pytest.mark.usefixtures("ray_cluster")
@pytest.mark.ci
def test_a_planted_error_pickle_in_the_output_folder_is_never_loaded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Whoever can write the trial folders replaces the error pickle Ray Tune writes for a dead
    # trial, in its staging folder (which the driver used to load) and in the search's output
    # folder (which Ray Tune's ResultGrid loads at the end of Tuner.fit): the death must still be
    # told from the exception itself, and neither planted file ever loaded.
    from ray.tune.experiment import Trial

    marker = tmp_path / "planted-code-ran"
    planted: list[Path] = []
    ray_handle_error = Trial.handle_error

    def handle_error_then_plant(trial: Trial, exc: BaseException | None = None) -> None:
        ray_handle_error(trial, exc)
        assert trial.pickled_error_file is not None  # Ray Tune pickled the error: plant over it
        for path in (Path(trial.pickled_error_file),
                     Path(trial.storage.trial_fs_path) / Path(trial.pickled_error_file).name):
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(pickle.dumps(_CodeOnLoad(marker)))
            planted.append(path)

    monkeypatch.setattr(Trial, "handle_error", handle_error_then_plant)
    monkeypatch.setenv(ENV_VAR, "die@1")
    result = run_search(_config(tmp_path, "search.n_trials=1", "search.max_retries=0", "name=planted"))
    assert len(planted) == 2 and planted[1].is_relative_to(tmp_path / "out")
    assert planted[1].is_file()  # still there, never loaded
    assert not marker.exists()
    _, children = _runs(tmp_path / "mlflow.db")
    assert result.status == "FINISHED" and len(children) == 1
    assert children[0].data.tags["failure_type"] == "TrialProcessDied"
    assert "died 1 time(s), search.max_retries=0" in children[0].data.tags["failure_reason"]


# ---------------------------------------------------------------------- the driver killed, interrupted


@dataclass(frozen=True)
class _Proc:
    pid: int
    started: str  # /proc/<pid>/stat field 22: tells a process from a later one with the same pid


def _proc(pid: int) -> _Proc | None:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return _Proc(pid, fields[19])


def _descendants(root: int) -> set[_Proc]:
    """The processes under ``root`` now (Ray's head processes and workers the search started)."""
    parent: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parent[int(entry.name)] = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
    found, frontier = set(), {root}
    while frontier:
        frontier = {p for p, pp in parent.items() if pp in frontier} - found
        found |= frontier
    return {p for p in map(_proc, found) if p is not None}


def _running(p: _Proc) -> bool:
    try:
        fields = Path(f"/proc/{p.pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:  # gone (perhaps between two reads)
        return False
    return fields[19] == p.started and fields[0] != "Z"


def _alive(procs: set[_Proc]) -> set[_Proc]:
    return {p for p in procs if _running(p)}


def _wait_until_gone(procs: set[_Proc], timeout: float) -> set[_Proc]:
    """Wait until every one of ``procs`` has exited (at most ``timeout`` seconds); those still running."""
    deadline = time.monotonic() + timeout
    while (alive := _alive(procs)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return alive


def _kill(procs: set[_Proc]) -> None:
    for p in _alive(procs):
        with contextlib.suppress(ProcessLookupError):
            os.kill(p.pid, signal.SIGKILL)


def _cli(tmp_path: Path, name: str, *extra: str) -> list[str]:
    return [
        sys.executable, "-m", "nas.search", *CHEAP, "ray.num_cpus=2",
        f"tracking.uri=sqlite:///{tmp_path / 'mlflow.db'}", f"output_dir={tmp_path / 'out'}", f"name={name}", *extra,
    ]


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(("HYDRA_", "RAY_ADDRESS", ENV_VAR))}


@contextlib.contextmanager
def _driver(args: list[str], cwd: Path, log_name: str = "driver.log"
            ) -> Iterator[tuple[subprocess.Popen[str], set[_Proc]]]:
    """``args`` started in its own session (its own process group, as a shell job); every process
    it started is killed on the way out, by pid, whatever the test did to the driver."""
    with (cwd / log_name).open("w") as log:
        proc = subprocess.Popen(args, cwd=cwd, stdout=log, stderr=subprocess.STDOUT, text=True, env=_env(),
                                start_new_session=True)
    seen: set[_Proc] = set()
    try:
        yield proc, seen
    finally:
        seen |= _descendants(proc.pid)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        _kill(seen)


_CANDIDATES = """SELECT COUNT(*) FROM runs JOIN experiments USING (experiment_id) JOIN tags USING (run_uuid)
                 WHERE experiments.name = 'latnas' AND tags.key = 'latnas.role' AND tags.value = 'candidate'"""


def _candidates_recorded(db: Path) -> int:
    """How many candidate runs the store holds so far, read while a search writes it.

    Read with sqlite3, read-only: an MLflow client opened on the store while the driver is still
    creating it would run the schema migrations too, and the two migrations would collide."""
    if not db.exists():
        return 0
    try:
        with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=1.0)) as con:
            return int(con.execute(_CANDIDATES).fetchone()[0])
    except sqlite3.OperationalError:  # tables not created yet, or the database locked
        return 0


def _wait_for_candidates(db: Path, n: int, proc: subprocess.Popen[str], seen: set[_Proc], timeout: float) -> int:
    """Wait until ``n`` candidate runs are recorded (noting the driver's processes meanwhile)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        seen |= _descendants(proc.pid)
        if proc.poll() is not None:
            raise AssertionError(f"the search ended early ({proc.returncode})")
        found = _candidates_recorded(db)
        if found >= n:
            return found
        time.sleep(0.3)
    raise AssertionError(f"fewer than {n} candidates recorded after {timeout} s")


@pytest.mark.slow
def test_a_killed_driver_resumes_without_losing_or_repeating_candidates(tmp_path: Path) -> None:
    args, db = _cli(tmp_path, "killed", "search.n_trials=5"), tmp_path / "mlflow.db"
    with _driver(args, tmp_path) as (proc, seen):
        _wait_for_candidates(db, 2, proc, seen, timeout=240)
        seen |= _descendants(proc.pid)
        proc.send_signal(signal.SIGKILL)  # no clean-up of any kind: a power cut, the OOM killer
        proc.wait()
    parents, before = _runs(db)
    assert [p.info.status for p in parents] == ["RUNNING"]  # left open by the dead driver
    recorded = {c.info.run_id: c.data.params["arch"] for c in before if c.info.status != "RUNNING"}

    resumed = subprocess.run([*args, "resume=true"], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                             env=_env())
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    assert f"Resuming search killed: {len(recorded)} of 5 candidates recorded" in resumed.stdout
    # The wall time printed is this part's, and says so; the trials' time covers every part.
    assert f"Search killed: 5 trials, {5 - len(recorded)} of them in this part" in resumed.stdout
    assert re.search(r"The recorded trials took \d+ s in all", resumed.stdout), resumed.stdout[-2000:]

    parents_after, children = _runs(db)
    assert [p.info.run_id for p in parents_after] == [parents[0].info.run_id]  # the same parent run, continued
    parent = parents_after[0]
    assert parent.info.status == "FINISHED" and parent.data.tags["resume_count"] == "1"
    assert all(c.info.status != "RUNNING" for c in children)
    live = [c for c in children if c.data.tags["status"] != "KILLED"]
    assert len(live) == 5 and len({c.data.params["arch"] for c in live}) == 5  # one run per architecture
    by_id = {c.info.run_id: c for c in children}
    for run_id, arch in recorded.items():  # nothing recorded before the kill is lost or replaced
        assert by_id[run_id].data.params["arch"] == arch and by_id[run_id].data.tags["status"] != "KILLED"
    m = parent.data.metrics
    assert m["n_completed"] + m["n_failed"] + m["n_pruned"] == 5 == m["n_optuna_trials"]
    assert m["n_ray_trials"] == 5 - len(recorded)  # Ray Tune ran only the missing ones
    trial_times = [c.data.metrics["trial_seconds"] for c in live]
    assert m["trials_seconds"] == pytest.approx(sum(trial_times), rel=1e-3)  # earlier parts' trials included
    assert (tmp_path / "out" / "ray" / "killed").is_dir() and (tmp_path / "out" / "ray" / "killed-resume1").is_dir()


def _title(p: _Proc) -> str:
    try:
        return Path(f"/proc/{p.pid}/cmdline").read_bytes().split(b"\0")[0].decode().strip()
    except OSError:
        return ""


@pytest.mark.slow
def test_a_killed_drivers_ray_processes_are_gone_before_its_resume_records_anything(tmp_path: Path) -> None:
    """The local Ray cluster a driver started ends with it, SIGKILL included: Ray's agents
    (``ray::DashboardAgent``, ``ray::RuntimeEnvAgent``), which Ray itself leaves running for about
    a minute after their raylet died, are gone before a resume started at once records a candidate."""
    args, db = _cli(tmp_path, "reaped", "search.n_trials=3", "accuracy=naswot"), tmp_path / "mlflow.db"
    with _driver(args, tmp_path) as (proc, seen):
        _wait_for_candidates(db, 1, proc, seen, timeout=240)
        seen |= _descendants(proc.pid)
        agents = {_title(p) for p in seen if _title(p).startswith(("ray::DashboardAgent", "ray::RuntimeEnvAgent"))}
        assert agents == {"ray::DashboardAgent", "ray::RuntimeEnvAgent"}, sorted(map(_title, seen))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        recorded = _candidates_recorded(db)
        with _driver([*args, "resume=true"], tmp_path, "resume.log") as (resume, _):
            deadline = time.monotonic() + 240
            while _candidates_recorded(db) <= recorded:
                assert resume.poll() is None, (tmp_path / "resume.log").read_text()[-3000:]
                assert time.monotonic() < deadline, "the resume recorded nothing"
                time.sleep(0.2)
            left = sorted(f"{p.pid} {_title(p)}" for p in _alive(seen))
            assert not left, f"the killed driver's processes still run: {left}"
            assert resume.wait(timeout=300) == 0, (tmp_path / "resume.log").read_text()[-3000:]
    parents, children = _runs(db)
    assert [p.info.status for p in parents] == ["FINISHED"]
    assert len({c.data.params["arch"] for c in children if c.data.tags["status"] != "KILLED"}) == 3


@pytest.mark.slow
@pytest.mark.parametrize("stop", ["ctrl-c", "sigterm"])
def test_ctrl_c_stops_cleanly_and_says_how_to_resume(tmp_path: Path, stop: str) -> None:
    """Ctrl-C, and a scheduler's SIGTERM to the driver (``kill``, Slurm, Kubernetes) the same way: what
    ended is recorded, the parent run is KILLED, Ray's processes end and the resume command is printed."""
    args, db = _cli(tmp_path, "interrupted", "search.n_trials=40"), tmp_path / "mlflow.db"
    with _driver(args, tmp_path) as (proc, seen):
        _wait_for_candidates(db, 1, proc, seen, timeout=240)
        seen |= _descendants(proc.pid)
        if stop == "ctrl-c":
            os.killpg(proc.pid, signal.SIGINT)  # the terminal signals the whole foreground group
        else:
            proc.send_signal(signal.SIGTERM)  # the driver alone, where Ray's own handler would abort it
        assert proc.wait(timeout=120) == 130
        left = _wait_until_gone(seen, timeout=60)  # Ray's processes end as the driver shuts Ray down
        assert not left, f"the search left processes running: {sorted(p.pid for p in left)}"
    out = (tmp_path / "driver.log").read_text()
    assert "Interrupted:" in out and "the parent run is KILLED" in out
    given = [a for a in args[3:] if not a.startswith("name=")]
    expected = shlex.join(["python", "-m", "nas.search", *given, "name=interrupted", "resume=true"])
    assert f"To resume it: {expected}" in out
    parents, children = _runs(db)
    assert [p.info.status for p in parents] == ["KILLED"]
    assert children and all(c.info.status in ("FINISHED", "FAILED") for c in children)
    assert parents[0].data.metrics["n_completed"] + parents[0].data.metrics["n_failed"] == len(children)


# ---------------------------------------------------------------------- a full disk


@contextlib.contextmanager
def _small_disk(folder: Path, size: str) -> Iterator[Path]:
    """A tmpfs of ``size`` mounted at ``folder``: a real file system that fills up. Mounting needs
    root or passwordless sudo; the test is skipped where neither can."""
    folder.mkdir()
    options = f"size={size},uid={os.getuid()},gid={os.getgid()}"
    for prefix in ([], ["sudo", "-n"]):
        if prefix and shutil.which("sudo") is None:
            continue
        if subprocess.run([*prefix, "mount", "-t", "tmpfs", "-o", options, "tmpfs", str(folder)],
                          capture_output=True).returncode == 0:
            break
    else:
        pytest.skip("mounting a small tmpfs needs root or passwordless sudo")
    try:
        yield folder
    finally:
        subprocess.run([*prefix, "umount", "-l", str(folder)], capture_output=True, check=False)


def _fill(disk: Path, leave_kib: int) -> Path:
    """A file that leaves ``leave_kib`` KiB free on ``disk``."""
    st = os.statvfs(disk)
    filler = disk / "filler"
    filler.write_bytes(bytes(max(0, st.f_bavail * st.f_frsize - leave_kib * 1024)))
    return filler


def _search_rows(db: Path, name: str) -> list[str]:
    """Every row the store holds for the runs of search ``name`` (parent and candidates), read-only."""
    with contextlib.closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as con:
        ids = [r[0] for r in con.execute("SELECT run_uuid FROM tags WHERE key = 'latnas.search_name' AND value = ?",
                                         (name,))]
        marks = ",".join("?" * len(ids))
        return sorted(repr((table, row)) for table in ("runs", "params", "tags", "metrics", "latest_metrics")
                      for row in con.execute(f"SELECT * FROM {table} WHERE run_uuid IN ({marks})", ids))


@pytest.mark.slow  # not in CI's set: it mounts a tmpfs and fills it, and how much space is left decides its path
def test_a_full_store_stops_the_search_at_its_first_failed_write(tmp_path: Path) -> None:
    """The MLflow store on a small tmpfs that fills up while a search writes it (the search's own
    folder elsewhere): SQLite refuses a write with "database or disk is full"."""
    with _small_disk(tmp_path / "disk", "4m") as disk:
        db = disk / "mlflow.db"
        common = (*CHEAP, "accuracy=naswot", "ray.num_cpus=2", f"tracking.uri=sqlite:///{db}")
        before = subprocess.run([sys.executable, "-m", "nas.search", *common, f"output_dir={tmp_path / 'before'}",
                                 "search.n_trials=2", "name=before"],
                                cwd=tmp_path, capture_output=True, text=True, timeout=300, env=_env())
        assert before.returncode == 0, before.stderr[-3000:]
        recorded_before = _search_rows(db, "before")
        filler = _fill(disk, leave_kib=100)

        args = [sys.executable, "-m", "nas.search", *common, f"output_dir={tmp_path / 'out'}", "search.n_trials=6",
                "name=full"]
        full = subprocess.run(args, cwd=tmp_path, capture_output=True, text=True, timeout=300, env=_env())
        assert full.returncode == 2, full.stdout[-3000:] + full.stderr[-3000:]
        # One line says what failed, what became of the search and how to go on; no traceback, no retry.
        errors = [line for line in full.stderr.splitlines() if line.startswith("error:")]
        assert len(errors) == 1 and full.stderr.rstrip().endswith(errors[0]), full.stderr[-3000:]
        line = errors[0]
        assert "Traceback" not in full.stderr and "starting it again" not in full.stderr
        assert "database or disk is full (SQLITE_FULL)" in line and "free space on the store's disk" in line
        assert line.endswith(shlex.join(["python", "-m", "nas.search", *args[3:], "resume=true"]))
        stopped = re.search(r"stopped with (\d+) of 6 candidates recorded \(intact\) and its parent run "
                            r"(is FAILED|stays RUNNING)( \(tag stop_reason\))?", line)
        assert stopped is not None, line
        assert _search_rows(db, "before") == recorded_before  # what the store held is intact

        filler.unlink()  # space again
        parents, children = _runs(db)
        parent = next(p for p in parents if p.info.run_name == "full")
        # The store says what the line said: ended FAILED with the reason, or (the store refused
        # that write too) still RUNNING; either way the leaderboard says so and how to resume.
        assert parent.info.status == stopped[2].split()[-1]
        if stopped[3]:
            assert line.startswith(f"error: {parent.data.tags['stop_reason']}; the search stopped")
        notes = run_leaderboard(LeaderboardConfig(search="full", plot=False, tracking=TrackingConfig(
            uri=f"sqlite:///{db}"))).notes
        assert any(n.startswith(f"search 'full' is {parent.info.status}") and "name=full resume=true" in n
                   for n in notes), notes
        mine = [c for c in children if c.data.tags["mlflow.parentRunId"] == parent.info.run_id]
        recorded = {c.info.run_id: c.data.params["arch"] for c in mine if c.info.status != "RUNNING"}
        assert len(recorded) == int(stopped[1]) < 6  # the search stopped at the failed write

        resumed = subprocess.run([*args, "resume=true"], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                                 env=_env())
        assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
        assert f"Resuming search full: {len(recorded)} of 6 candidates recorded" in resumed.stdout
        parents, children = _runs(db)
        parent = next(p for p in parents if p.info.run_name == "full")
        assert parent.info.status == "FINISHED" and "stop_reason" not in parent.data.tags
        mine = [c for c in children if c.data.tags["mlflow.parentRunId"] == parent.info.run_id]
        live = [c for c in mine if c.data.tags["status"] != "KILLED"]
        assert len(live) == 6 == len({c.data.params["arch"] for c in live})
        by_id = {c.info.run_id: c for c in mine}
        for run_id, arch in recorded.items():  # recorded before the disk filled: kept, not replaced
            assert by_id[run_id].data.params["arch"] == arch and by_id[run_id].data.tags["status"] != "KILLED"
        assert _search_rows(db, "before") == recorded_before


# ---------------------------------------------------------------------- a store moved before a resume


@pytest.mark.slow
@pytest.mark.usefixtures("ray_cluster")
def test_a_search_resumed_after_its_project_folder_moved_writes_where_the_store_now_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The project's folder (the store, the search's folder, the artifacts) moved to a bigger disk,
    ``$LATNAS_HOME`` naming the new place: the resume writes nothing to the old one."""
    monkeypatch.chdir(tmp_path)
    old, new = tmp_path.resolve() / "small" / ".latnas", tmp_path.resolve() / "big" / ".latnas"
    common = (*CHEAP, "accuracy=naswot", "name=moved")
    monkeypatch.setenv("LATNAS_HOME", str(old))
    first = run_search(compose_config(*common, "search.n_trials=1"))
    assert first.output_dir == old / "searches" / "moved" and (old / "mlflow.db").is_file()

    new.parent.mkdir()
    shutil.move(old, new)
    monkeypatch.setenv("LATNAS_HOME", str(new))
    again = run_search(compose_config(*common, "search.n_trials=2", "resume=true"))
    assert again.resumed == 1 and again.parent_run_id == first.parent_run_id
    assert again.output_dir == new / "searches" / "moved"
    # no search folder, Ray Tune state or artifact written at the old place
    assert not old.exists(), sorted(str(f.relative_to(old)) for f in old.rglob("*"))
    assert any((new / "searches" / "moved" / "ray").glob("moved-resume1*"))  # the resume's Ray Tune experiment
    client = MlflowClient(f"sqlite:///{new / 'mlflow.db'}")
    parent = client.get_run(again.parent_run_id)
    assert parent.info.artifact_uri.startswith((new / "mlartifacts").as_uri())
    assert "leaderboard.csv" in {f.path for f in client.list_artifacts(parent.info.run_id)}  # as the UI lists them


# ---------------------------------------------------------------------- the full suite


@pytest.mark.slow
def test_full_fault_injection_suite(tmp_path: Path) -> None:
    """About 20% bad candidates, killed trial processes, a SIGKILLed driver, a Ctrl-C, two resumes
    (``python -m benchmarks.reliability.reliability``, which checks the record against the fault plan).

    Half the trial processes are killed once, so that with 12 trials some are (at the default 10%,
    none is with a probability of 0.9**12 = 28%, and the retry check would have nothing to check)."""
    out = tmp_path / "reliability.json"
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.reliability.reliability", "--n-trials", "12", "--kill-rate", "0.5",
         "--out", str(out)],
        cwd=Path(__file__).resolve().parents[2], capture_output=True, text=True, timeout=1500, env=_env(),
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    record = json.loads(out.read_text())
    assert all(record["checks"].values()), record["checks"]
    f = record["figures"]
    assert f["trials"] == 12 and f["lost"] == 0 and f["duplicates"] == 0 and f["failed"] == f["bad_by_plan"]
    assert f["retried"] >= 1 and f["driver_interruptions"] == 2


@pytest.mark.slow
def test_a_worker_node_lost_mid_search_has_its_trials_run_elsewhere(tmp_path: Path) -> None:
    """Three Ray nodes on this machine (``ray.cluster_utils.Cluster``, one CPU each); a worker node
    is removed, without warning, while trials run on it: they are started again on the others."""
    import threading

    import ray
    from ray.cluster_utils import Cluster

    was_up = ray.is_initialized()
    if was_up:  # the session's local cluster would be reused instead of joining this one
        ray.shutdown()
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    removed: list[str] = []
    try:
        workers = [cluster.add_node(num_cpus=1) for _ in range(2)]
        cluster.wait_for_nodes()
        doomed = workers[0]
        db = tmp_path / "mlflow.db"

        def remove_when_busy() -> None:
            deadline = time.monotonic() + 300
            while time.monotonic() < deadline:
                if _candidates_recorded(db) >= 2:
                    cluster.remove_node(doomed, allow_graceful=False)
                    removed.append(doomed.node_id)
                    return
                time.sleep(0.2)

        watcher = threading.Thread(target=remove_when_busy, daemon=True)
        watcher.start()
        result = run_search(_config(
            tmp_path, f"ray.address={cluster.address}", "ray.gpus_per_trial=0", "search.n_trials=8",
            "search.max_concurrent=3", "search.max_retries=2", "train.epochs=3", "name=lost-node",
        ))
        watcher.join(timeout=10)
    finally:
        if ray.is_initialized():
            ray.shutdown()
        cluster.shutdown()
        if was_up:
            ray.init(num_cpus=2, include_dashboard=False, logging_level="WARNING")
    assert removed, "the node was never removed"
    _, children = _runs(tmp_path / "mlflow.db")
    assert result.status == "FINISHED" and len(children) == 8
    assert all(c.data.tags["status"] == "COMPLETED" for c in children), [c.data.tags for c in children]
    assert len({c.data.params["arch"] for c in children}) == 8
    retried = [c for c in children if c.data.metrics["retries"] >= 1]
    assert retried and result.retries >= 1  # the trials running on the lost node were started again
    assert all(c.data.tags["ray_node_id"] != removed[0] for c in retried)  # ... and finished elsewhere
