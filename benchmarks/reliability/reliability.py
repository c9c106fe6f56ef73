"""Reliability under injected faults: a search that loses candidates, trial processes and its driver.

    python -m benchmarks.reliability.reliability                    # 24 trials (about 3-5 minutes on 2 cores)
    python -m benchmarks.reliability.reliability --n-trials 12      # shorter

One search of the tiny space (digits, one training epoch, ONNX Runtime at 1x3x32x32, two
trials at a time, ``search.max_retries=1``, ``search.trial_timeout_s``) runs as
``python -m nas.search`` with ``$LATNAS_FAULTS`` (:mod:`nas.faults`) set so that about
``--bad-rate`` of the architectures fail (export, engine build, measurement, out of memory, NaN
training, a stall past the time limit, in equal shares) and ``--kill-rate`` of them have their
trial process killed with SIGKILL on the first attempt. The driver itself is then

1. killed with SIGKILL once a third of the trials are recorded, and the search resumed with
   ``resume=true``;
2. interrupted with SIGINT (Ctrl-C, to its whole process group) once two thirds are recorded,
   and resumed again with the exact command it printed;

and the MLflow record is checked against the fault plan: every good candidate COMPLETED, every
bad one FAILED with the failure its fault causes, one run per architecture, the killed trials
retried, nothing recorded lost, the trials Ray Tune started in each run of the driver that closed
its record equal to the candidates recorded in it (after the Ctrl-C, plus the trials it stopped
unfinished, which the next run evaluates again), and Optuna's count equal to MLflow's. Figures
(completed / failed / retried / lost, and the rest) are printed and written as JSON (``--out``);
the exit status is 1 when a check fails.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.common import Headline, header, record_path, write_record
from nas.trial.faults import ENV_VAR, FaultPlan

NAME = "reliability"
MAX_CONCURRENT = 2
FAILING_KINDS = ("export", "engine", "measure", "oom", "nan", "hang")
SETTINGS = (
    "+space=tiny", "target_ms=1.0", "data.max_train_samples=128", "data.max_val_samples=64", "data.resolution=16",
    "train.epochs=1", "latency.input_shape=[1,3,32,32]", "latency.measure.min_runs=10",
    "latency.measure.min_time_s=0.05", "latency.measure.max_time_s=0.3", "latency.measure.max_repeats=1",
    f"search.max_concurrent={MAX_CONCURRENT}", "search.max_retries=1", "ray.num_cpus=2", "progress=false",
)


@dataclass(frozen=True)
class Proc:
    """A process, told apart from a later one with the same pid by its start time."""

    pid: int
    started: str


def _proc(pid: int) -> Proc | None:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return None if fields[0] == "Z" else Proc(pid, fields[19])


def descendants(root: int) -> set[Proc]:
    """The live processes under ``root`` (the search's Ray head processes and workers)."""
    parent: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, ValueError, IndexError):
                parent[int(entry.name)] = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
    found: set[int] = set()
    frontier = {root}
    while frontier:
        frontier = {p for p, pp in parent.items() if pp in frontier} - found
        found |= frontier
    return {p for p in map(_proc, found) if p is not None}


def kill_all(procs: set[Proc]) -> int:
    """SIGKILL the processes of ``procs`` still alive (by pid); how many there were."""
    alive = [p for p in procs if _proc(p.pid) == p]
    for p in alive:
        with contextlib.suppress(ProcessLookupError):
            os.kill(p.pid, signal.SIGKILL)
    return len(alive)


class Store:
    """Reads the search's MLflow record."""

    def __init__(self, db: Path) -> None:
        from mlflow import MlflowClient

        self.db = db
        self.client = MlflowClient(f"sqlite:///{db}")

    def runs(self, role: str) -> list[Any]:
        exp = self.client.get_experiment_by_name("latnas") if self.db.exists() else None
        if exp is None:
            return []
        return list(self.client.search_runs([exp.experiment_id], f"tags.`latnas.role` = '{role}'",
                                            max_results=5000))


def run_until(args: list[str], cwd: Path, env: dict[str, str], store: Store, n: int, sig: int,
              timeout: float) -> tuple[int, str, float, int]:
    """Start the search; once ``n`` candidates are recorded send it ``sig``; wait for it to end.

    SIGINT goes to its process group, as Ctrl-C in a terminal does; SIGKILL to the driver only,
    after which every process it started is killed too (nothing else would stop them).

    Returns:
        Its exit status, its output, the seconds it ran, and processes left over after it ended.
    """
    t0 = time.perf_counter()
    log = cwd / f"phase-{int(t0)}.log"
    with log.open("w") as f:
        proc = subprocess.Popen(args, cwd=cwd, stdout=f, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    seen: set[Proc] = set()
    try:
        deadline = time.monotonic() + timeout
        while proc.poll() is None and len(store.runs("candidate")) < n:
            seen |= descendants(proc.pid)
            if time.monotonic() > deadline:
                raise SystemExit(f"fewer than {n} candidates after {timeout:.0f} s; see {log}")
            time.sleep(0.3)
        seen |= descendants(proc.pid)
        if proc.poll() is None:
            if sig == signal.SIGINT:
                os.killpg(proc.pid, signal.SIGINT)
            else:
                proc.send_signal(sig)
        rc = proc.wait(timeout=180)
        time.sleep(2)
        leftover = kill_all(seen)  # after SIGINT the search stops its own; after SIGKILL nobody does
    finally:
        if proc.poll() is None:
            proc.kill()
        kill_all(seen | descendants(proc.pid))
    return rc, log.read_text(), time.perf_counter() - t0, leftover


def run_to_end(args: list[str], cwd: Path, env: dict[str, str], timeout: float) -> tuple[int, str, float]:
    t0 = time.perf_counter()
    proc = subprocess.run(args, cwd=cwd, capture_output=True, text=True, env=env, timeout=timeout)
    return proc.returncode, proc.stdout + proc.stderr, time.perf_counter() - t0


def fault_spec(bad_rate: float, kill_rate: float, hang_s: float, seed: int) -> str:
    share = bad_rate / len(FAILING_KINDS)
    parts = [f"{k}:{hang_s:g}@{share:g}" if k == "hang" else f"{k}@{share:g}" for k in FAILING_KINDS]
    return ",".join([*parts, f"kill@{kill_rate:g}", f"seed={seed}"])


def _retry_expected(run: Any, markers: Path, phases: list[dict[str, Any]]) -> bool:
    """Whether a candidate hit by ``kill`` must show a retry: its process was killed in the same
    run of the driver that recorded it (not in an earlier one that was itself stopped)."""
    marker = markers / f"kill-{run.data.params['arch_id']}"
    if not marker.exists():
        return True
    started = run.info.start_time / 1000
    phase_start = max((p["started_at"] for p in phases if p["started_at"] <= started), default=0.0)
    return marker.stat().st_mtime >= phase_start


def check(store: Store, plan: FaultPlan, n_trials: int, timeout_s: float, phases: list[dict[str, Any]],
          recorded_before: dict[str, str], markers: Path) -> dict[str, Any]:
    """The figures and checks of the finished search's record."""
    parents = store.runs("search")
    children = store.runs("candidate")
    live = [c for c in children if c.data.tags.get("status") != "KILLED"]
    archs = Counter(c.data.params["arch"] for c in live)
    wrong: list[str] = []
    failure_types: Counter[str] = Counter()
    for c in live:
        arch_id, tags = c.data.params["arch_id"], c.data.tags
        expected = plan.expected_failure(arch_id, timeout_s)
        if expected is None and tags["status"] != "COMPLETED":
            wrong.append(f"{arch_id}: {tags['status']} ({tags.get('failure_reason')}), expected COMPLETED")
        if expected is not None:
            failure_types[tags.get("failure_type", "?")] += 1
            if tags["status"] != "FAILED" or tags.get("failure_type") != expected or not tags.get("failure_reason"):
                wrong.append(f"{arch_id}: {tags['status']} {tags.get('failure_type')}, expected FAILED {expected}")
    by_id = {c.info.run_id: c for c in children}
    lost = [r for r, arch in recorded_before.items() if r not in by_id or by_id[r].data.params["arch"] != arch]
    killed_hit = [c for c in live if plan.hits("kill", c.data.params["arch_id"])]
    retried = sum(int(c.data.metrics.get("retries", 0)) for c in live)
    parent = parents[0] if parents else None
    history = ([m.value for m in store.client.get_metric_history(parent.info.run_id, "n_ray_trials")]
               if parent else [])
    # Ray Tune's count of each run that closed its record: equal to the candidates recorded in it,
    # plus, after a Ctrl-C, the trials it stopped unfinished (at most the concurrent ones).
    clean = [p for p in phases if p["signal"] != "SIGKILL"]
    ray_agrees = len(history) == len(clean) and all(
        p["recorded_in_phase"] <= int(h) <= p["recorded_in_phase"] + (MAX_CONCURRENT if p["signal"] == "SIGINT" else 0)
        for h, p in zip(history, clean, strict=True))
    n_optuna = parent.data.metrics.get("n_optuna_trials") if parent else None
    checks = {
        "one_parent_run": len(parents) == 1,
        "parent_finished": parent is not None and parent.info.status == "FINISHED",
        "reached_n_trials": len(live) == n_trials,
        "one_run_per_architecture": all(v == 1 for v in archs.values()),
        "none_left_running": all(c.info.status != "RUNNING" for c in children),
        "good_completed_bad_failed_with_reason": not wrong,
        "killed_trials_retried": all(c.data.metrics.get("retries", 0) >= 1 for c in killed_hit
                                     if c.data.tags["status"] == "COMPLETED" and _retry_expected(c, markers, phases)),
        "nothing_recorded_lost": not lost,
        "optuna_count_equals_mlflow": n_optuna == len(live),
        "ray_count_agrees_with_mlflow": ray_agrees,
        "no_process_left": all(p["processes_left"] == 0 for p in clean),
    }
    figures = {
        "trials": len(live),
        "completed": sum(c.data.tags["status"] == "COMPLETED" for c in live),
        "failed": sum(c.data.tags["status"] == "FAILED" for c in live),
        "failed_by_type": dict(sorted(failure_types.items())),
        "bad_by_plan": sum(plan.expected_failure(c.data.params["arch_id"], timeout_s) is not None for c in live),
        "trial_processes_killed": len(killed_hit),
        "retried": retried,
        "lost": len(lost),
        "duplicates": sum(v - 1 for v in archs.values()),
        "stale_runs_marked_killed": len(children) - len(live),
        "driver_interruptions": len(phases) - 1,
        "optuna_trials": n_optuna,
        "ray_trials_per_phase_closed": history,
    }
    return {"figures": figures, "checks": checks, "wrong": wrong}


def headline(rec: dict[str, Any]) -> Headline:
    """The record's row of the results table: the record checked against the fault plan."""
    f, checks = rec["figures"], rec["checks"]
    passed = sum(bool(v) for v in checks.values())
    return Headline(
        "Reliability under injected faults",
        f"{f['trials']} trials: {f['failed']} failed with a reason, {f['retried']} killed and retried, "
        f"{f['lost']} lost, {f['duplicates']} duplicated; the driver killed and interrupted "
        f"{f['driver_interruptions']} times",
        f"the fault plan ({rec['settings']['bad_rate']:.0%} bad, {rec['settings']['kill_rate']:.0%} killed)",
        f"every check passes ({passed} of {len(checks)})", passed == len(checks))


def render(rec: dict[str, Any]) -> str:
    """The section of a record of this benchmark on its area's page (docs/benchmarks/<area>.md)."""
    from benchmarks.render import _f, _pct, table
    st, f, checks = rec["settings"], rec["figures"], rec["checks"]
    how = {"SIGKILL": "driver SIGKILLed", "SIGINT": "Ctrl-C (SIGINT to its process group)", "none": "ran to the end"}
    starts = ["`python -m nas.search ...`", "the same with `resume=true`", "the resume command it printed"]
    phases = [[str(i + 1), starts[i] if i < len(starts) else "-", how.get(ph["signal"], ph["signal"]),
               str(ph["exit"]), _f(ph["seconds"], 0), str(ph["recorded"]), str(ph["processes_left"])]
              for i, ph in enumerate(rec["phases"])]
    failed = ", ".join(f"{k} {v}" for k, v in f["failed_by_type"].items()) or "none"
    figures = [
        ["architectures evaluated", str(f["trials"])], ["completed", str(f["completed"])],
        ["failed, with their reason", f"{f['failed']} ({failed})"],
        ["made to fail by the fault plan", str(f["bad_by_plan"])],
        ["trial processes killed / retried", f"{f['trial_processes_killed']} / {f['retried']}"],
        ["recorded candidates lost", str(f["lost"])], ["architectures recorded twice", str(f["duplicates"])],
        ["half-written runs marked KILLED", str(f["stale_runs_marked_killed"])],
        ["Optuna trials (evaluated architectures)", _f(f["optuna_trials"], 0)],
        ["Ray Tune trials of each run that closed its record",
         " / ".join(_f(x, 0) for x in f["ray_trials_per_phase_closed"])],
    ]
    bad = [k for k, ok in checks.items() if not ok]
    verdict = (f"All {len(checks)} checks passed" if not bad else f"FAILED checks: {', '.join(bad)}")
    verdict += ": " + ", ".join(k.replace("_", " ") for k in checks) + "."
    return f"""Does a search survive failing candidates, dying trial processes and a killed driver, and lose nothing?
One search of {st['n_trials']} architectures of the tiny space (digits, one epoch, ONNX Runtime at 1x3x32x32, two
trials at a time, `search.max_retries=1`, `search.trial_timeout_s={_f(st['trial_timeout_s'], 0)}`) with
`LATNAS_FAULTS={st['faults']}`: about {_pct(st.get('bad_rate'))} of the architectures fail (export, engine
build, measurement, out of memory, NaN training, a stall past the time limit, in equal shares) and
{_pct(st.get('kill_rate'))} have their trial process killed with SIGKILL once. The driver is SIGKILLed at a
third of the trials and resumed, then interrupted with Ctrl-C at two thirds and resumed again with the command
it printed. The record is then checked against the fault plan.

{table(['run', 'started as', 'ended', 'exit', 'seconds', 'candidates recorded', 'processes left'], phases)}

{table(['figure', 'value'], figures)}

{verdict} After the SIGKILL, the processes left are Ray's that the dead driver could not stop (the script ends
them); after Ctrl-C the search stops its own. After the Ctrl-C, Ray Tune's count includes the trials it stopped
unfinished, which are not recorded and run again on resume."""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n-trials", type=int, default=24, help="architectures to evaluate (default 24)")
    ap.add_argument("--bad-rate", type=float, default=0.2, help="share of architectures made to fail (default 0.2)")
    ap.add_argument("--kill-rate", type=float, default=0.1, help="share whose trial process is killed once")
    ap.add_argument("--timeout", type=float, default=20.0, help="search.trial_timeout_s (a stall lasts 3x that)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the fault plan and of the sampler")
    ap.add_argument("--out", type=Path, default=record_path("reliability", "full"),
                    help="JSON output")
    args = ap.parse_args()

    spec = fault_spec(args.bad_rate, args.kill_rate, 3 * args.timeout, args.seed)
    plan = FaultPlan.parse(spec)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HYDRA_", "RAY_ADDRESS"))}
    env[ENV_VAR] = spec
    report: dict[str, Any] = {
        **header("reliability", "full", ["python", "-m", "benchmarks.reliability.reliability", *sys.argv[1:]]),
        "settings": {"n_trials": args.n_trials, "bad_rate": args.bad_rate, "kill_rate": args.kill_rate,
                     "faults": spec, "trial_timeout_s": args.timeout, "search": list(SETTINGS)},
    }
    t_start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="latnas-reliability-") as tmp:
        work = Path(tmp)
        store = Store(work / "mlflow.db")
        cmd = [sys.executable, "-m", "nas.search", *SETTINGS, f"search.n_trials={args.n_trials}",
               f"search.seed={args.seed}", f"search.trial_timeout_s={args.timeout:g}",
               f"tracking.uri=sqlite:///{work / 'mlflow.db'}", f"output_dir={work / 'out'}", f"name={NAME}"]
        phases: list[dict[str, Any]] = []

        print(f"1/3 search with {ENV_VAR}={spec}; SIGKILL the driver at {args.n_trials // 3} candidates", flush=True)
        started_at = time.time()
        rc, out, secs, left = run_until(cmd, work, env, store, args.n_trials // 3, signal.SIGKILL, timeout=900)
        recorded = {c.info.run_id: c.data.params["arch"] for c in store.runs("candidate") if c.info.status != "RUNNING"}
        phases.append({"signal": "SIGKILL", "started_at": started_at, "exit": rc, "seconds": round(secs, 1),
                       "recorded": len(recorded),
                       "processes_left": left})
        print(f"    killed ({rc}) after {secs:.0f} s with {len(recorded)} candidates recorded", flush=True)

        print(f"2/3 resume=true; SIGINT at {2 * args.n_trials // 3} candidates", flush=True)
        before, started_at = len(recorded), time.time()
        rc, out, secs, left = run_until([*cmd, "resume=true"], work, env, store, 2 * args.n_trials // 3,
                                        signal.SIGINT, timeout=900)
        now = [c for c in store.runs("candidate") if c.data.tags.get("status") != "KILLED"]
        phases.append({"signal": "SIGINT", "started_at": started_at, "exit": rc, "seconds": round(secs, 1),
                       "recorded": len(now),
                       "recorded_in_phase": len(now) - before, "processes_left": left})
        resume = next((line.split("To resume it: ", 1)[1] for line in out.splitlines() if "To resume it: " in line), "")
        print(f"    interrupted ({rc}) after {secs:.0f} s with {len(now)} recorded; printed: {resume}", flush=True)
        recorded.update({c.info.run_id: c.data.params["arch"] for c in now})

        print("3/3 the printed resume command, to the end", flush=True)
        before, started_at = len(now), time.time()
        resume_args = shlex.split(resume)
        if resume_args[:1] == ["python"]:
            resume_args[0] = sys.executable
        rc, out, secs = run_to_end(resume_args, work, env, timeout=1800)
        done = [c for c in store.runs("candidate") if c.data.tags.get("status") != "KILLED"]
        phases.append({"signal": "none", "started_at": started_at, "exit": rc, "seconds": round(secs, 1),
                       "recorded": len(done),
                       "recorded_in_phase": len(done) - before, "processes_left": 0})
        print(f"    finished ({rc}) after {secs:.0f} s with {len(done)} recorded", flush=True)

        result = check(store, plan, args.n_trials, args.timeout, phases, recorded, work / "out" / "faults")
        result["checks"]["exit_statuses"] = [p["exit"] for p in phases] == [-signal.SIGKILL, 130, 0]
        if not resume:
            result["checks"]["resume_command_printed"] = False

    report["machine"]["load_average"] = [round(x, 2) for x in os.getloadavg()]
    report.update(phases=phases, wall_seconds=round(time.perf_counter() - t_start, 1), **result)
    f = result["figures"]
    print(f"\ntrials {f['trials']}: completed {f['completed']}, failed {f['failed']} {f['failed_by_type']} "
          f"({f['bad_by_plan']} made to fail), retried {f['retried']} (of {f['trial_processes_killed']} killed), "
          f"lost {f['lost']}, duplicates {f['duplicates']}, driver interruptions {f['driver_interruptions']}")
    for name, ok in result["checks"].items():
        print(f"  {'ok  ' if ok else 'FAIL'} {name}")
    for line in result["wrong"]:
        print(f"       {line}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_record(args.out, report)
    print(f"wrote {args.out}")
    if not all(result["checks"].values()):
        sys.exit(1)


if __name__ == "__main__":
    main()
