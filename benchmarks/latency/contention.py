"""Benchmark: latency of one network measured alone and during a busy multi-trial search.

    python -m benchmarks.latency.contention                  # writes benchmarks/latency/records/contention.json

1. **Alone**: the network (ONNX Runtime, CPU, one thread, 1x3x224x224) is measured ``--rounds``
   times with no search running.
2. **Busy**: a real search (``python -m nas.search``, mobile space, ``--concurrent`` trials at
   once with one CPU each, so every core trains or measures) runs in a subprocess that shares
   this process's measurement slot directory. Once its trials run, ``--rounds`` rounds each
   measure the network twice, in alternating order:

   * **busy, slot**: as trials measure: the measurement waits for the search's own measurements
     and for the training steps already running, and no new training step starts until it is
     done (:func:`latency_predictor.measurement.slot.device_work`);
   * **busy, no slot** (``slot=False``): on top of whatever the search is doing.
3. **Alone after**: measured again once the search is stopped (Ctrl-C, as a user would).

Beside each measurement the script reads how many cores the search's processes used while it
ran (from ``/proc``): the direct evidence of whether the search's work overlapped it. The pair
of busy measurements of a round see the same load from other work on the machine, so their
ratio is compared round by round. Each measurement is one attempt of the protocol
(``max_repeats=1``), so a disturbed attempt is reported as measured (and flagged
``stable=False``) instead of being repeated. Printed side by side; written as JSON with every
measurement, the load averages and the command.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.common import ROOT, header, record_path, write_record
from latency_predictor.measurement.backends import make_estimator
from latency_predictor.measurement.environment import usable_cpus
from latency_predictor.measurement.slot import SLOT_DIR_ENV, measurement_slot
from search_spaces import Arch, resolve_arch

SEARCH_NAME = "contention-load"
ALONE, BUSY_SLOT, BUSY_NO_SLOT, ALONE_AFTER = "alone", "busy, slot", "busy, no slot", "alone after"
MEASURE = {"max_repeats": 1}  # the protocol's defaults otherwise: >= 100 runs and >= 1 s per attempt


def _cpu_times() -> tuple[int, int]:
    """(busy, total) jiffies of all CPUs, from /proc/stat."""
    fields = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    return sum(fields) - idle, sum(fields)


def _tree_cpu_seconds(root: int) -> float:
    """CPU seconds used so far by process ``root`` and its descendants (the search: driver, Ray, trials)."""
    parent: dict[int, int] = {}
    used: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:  # the process ended while we looked
            continue
        fields = text[text.rindex(")") + 2:].split()
        pid = int(stat.parent.name)
        parent[pid], used[pid] = int(fields[1]), int(fields[11]) + int(fields[12])
    tree, frontier = {root}, [root]
    while frontier:
        kids = [pid for pid, ppid in parent.items() if ppid in frontier and pid not in tree]
        tree.update(kids)
        frontier = kids
    return sum(used.get(pid, 0) for pid in tree) / os.sysconf("SC_CLK_TCK")


def measure_once(arch: Arch, slot: bool, slot_dir: Path, condition: str, search_pid: int | None) -> dict[str, Any]:
    """One measurement of ``arch`` (ONNX Runtime, CPU, one thread, 1x3x224x224) and the load beside it.

    With the slot, the slot is taken here first (the backend's own take is then re-entrant), so the
    search's CPU use is read over exactly the span the measurement held it (export included).
    """
    est = make_estimator("onnxruntime", intra_op_threads=1, measure=MEASURE, slot=slot, slot_dir=slot_dir)
    with measurement_slot("cpu", slot_dir) if slot else contextlib.nullcontext() as ticket:
        busy0, total0 = _cpu_times()
        search0 = _tree_cpu_seconds(search_pid) if search_pid else 0.0
        t0 = time.perf_counter()
        r = est.measure(arch)
        wall = time.perf_counter() - t0
        search1 = _tree_cpu_seconds(search_pid) if search_pid else 0.0
        busy1, total1 = _cpu_times()
    return {
        "condition": condition, "slot": slot, "p50_ms": r.stats.p50, "p90_ms": r.stats.p90, "min_ms": r.stats.min,
        "stable": r.stable, "cpu_per_wall": r.extra["cpu_per_wall"],
        "slot_wait_s": ticket.waited_s if ticket is not None else None,
        "measure_seconds": wall, "timed_seconds": r.extra["measure_s"],
        # While it measured: cores busy on the node (ours and anyone else's), and used by the search.
        "node_busy_cores": usable_cpus() * (busy1 - busy0) / max(1, total1 - total0),
        "search_cores": (search1 - search0) / wall,
    }


def start_search(work: Path, slot_dir: Path, concurrent: int, trials: int) -> subprocess.Popen[str]:
    """The load: a real search in a subprocess, measuring through the same slot directory."""
    cmd = [
        sys.executable, "-m", "nas.search", "+space=mobile", "target_ms=50", f"search.n_trials={trials}",
        f"search.max_concurrent={concurrent}", f"ray.num_cpus={concurrent}", "ray.cpus_per_trial=1",
        f"tracking.uri=sqlite:///{work / 'mlflow.db'}", f"output_dir={work / 'out'}", "progress=false",
        f"name={SEARCH_NAME}",
    ]
    env = {**os.environ, SLOT_DIR_ENV: str(slot_dir), "PYTHONPATH": str(ROOT)}
    with (work / "search.log").open("w") as log:  # a file, not a pipe: a full pipe would stall the search
        return subprocess.Popen(cmd, cwd=work, env=env, stdout=log, stderr=subprocess.STDOUT, text=True)


def wait_until_trials_run(proc: subprocess.Popen[str], work: Path, settle_s: float, timeout_s: float) -> None:
    """Wait until the search's first trial has started (Ray Tune made its folder), then ``settle_s``."""
    deadline = time.monotonic() + timeout_s
    while not any((work / "out" / "ray" / SEARCH_NAME).glob("trial_*")):
        if proc.poll() is not None:
            raise SystemExit(f"the search ended before its trials started:\n{(work / 'search.log').read_text()}")
        if time.monotonic() > deadline:
            raise SystemExit(f"the search's trials did not start within {timeout_s:.0f} s")
        time.sleep(0.5)
    time.sleep(settle_s)


def stop_search(proc: subprocess.Popen[str], work: Path, timeout_s: float = 120.0) -> str:
    """Stop the search as a user would (Ctrl-C) and return its output."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    return (work / "search.log").read_text(errors="replace")


def summarise(rows: list[dict[str, Any]], alone_p50: float) -> dict[str, Any]:
    """Median figures of one condition's measurements, and the ratio of its median p50 to *alone*'s."""
    waits = [r["slot_wait_s"] for r in rows if r["slot_wait_s"] is not None]
    p50 = statistics.median(r["p50_ms"] for r in rows)
    return {
        "n": len(rows), "p50_ms": p50, "p50_min_ms": min(r["p50_ms"] for r in rows),
        "p50_max_ms": max(r["p50_ms"] for r in rows), "ratio_to_alone": p50 / alone_p50,
        "min_ms": statistics.median(r["min_ms"] for r in rows),
        "stable": sum(bool(r["stable"]) for r in rows),
        "cpu_per_wall": statistics.median(r["cpu_per_wall"] for r in rows),
        "slot_wait_s": statistics.median(waits) if waits else None,
        "node_busy_cores": statistics.median(r["node_busy_cores"] for r in rows),
        "search_cores": statistics.median(r["search_cores"] for r in rows),
    }


def render(rec: dict[str, Any]) -> str:
    """The section of a record of this benchmark on its area's page (docs/benchmarks/<area>.md)."""
    from benchmarks.render import _f, table
    rows = [[cond, _f(x["p50_ms"]), f"{_f(x['p50_min_ms'])} - {_f(x['p50_max_ms'])}", _f(x["min_ms"]),
             _f(x.get("ratio_to_alone")), f"{x['stable']}/{x['n']}", _f(x["cpu_per_wall"]), _f(x["slot_wait_s"]),
             _f(x.get("search_cores"))]
            for cond, x in rec["summary"].items()]
    load = rec.get("search_load", {})
    net = rec.get("arch_name", rec.get("arch"))
    paired = rec.get("slot_over_no_slot_paired")
    return f"""Does a measurement stay trustworthy while a search trains other candidates on the same machine? The
same network (`{net}`, ONNX Runtime CPU, one thread, 1x3x224x224, one attempt of the protocol each) is
measured {rec['rounds']} times alone; then, while a real search runs in another process
({load.get('concurrent_trials', '?')} concurrent trials of the `{load.get('space', '?')}` space, one CPU
each), in {rec['rounds']} rounds of two measurements in alternating order: with the measurement slot (as
trials measure: it waits for the search's measurements and running training steps, and holds new steps
back) and without it; then alone again. *Search cores* is how many cores the search's processes used
while the measurement ran. Paired by round, the p50 with the slot was **{_f(paired)}x** the p50 without it.

{table(['condition', 'median p50 ms', 'p50 range', 'min ms', 'x alone', 'stable', 'CPU share',
        'slot wait s', 'search cores'], rows)}"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--arch", default="mobilenetv2_100", help="reference name or architecture string")
    ap.add_argument("--rounds", type=int, default=8, help="measurements per condition (default 8)")
    ap.add_argument("--concurrent", type=int, default=usable_cpus(), help="trials at once (default: usable CPUs)")
    ap.add_argument("--settle", type=float, default=20.0, help="seconds after the first trial starts (default 20)")
    ap.add_argument("--out", type=Path, default=record_path("contention", "full"), help="JSON output")
    args = ap.parse_args()
    arch = resolve_arch(args.arch)
    load_start = list(os.getloadavg())

    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="latnas-contention-") as tmp:
        work, slot_dir = Path(tmp), Path(tmp) / "slots"
        measure_once(arch, True, slot_dir, "warm-up", None)  # first-call costs (imports, export) out of the figures
        print(f"alone: {args.rounds} measurements of {args.arch} ...", flush=True)
        rows += [measure_once(arch, True, slot_dir, ALONE, None) for _ in range(args.rounds)]
        print(f"busy: a search with {args.concurrent} trials at once in a subprocess, {args.rounds} rounds ...",
              flush=True)
        t_search = time.perf_counter()
        proc = start_search(work, slot_dir, args.concurrent, trials=200)
        try:
            wait_until_trials_run(proc, work, args.settle, timeout_s=300)
            for i in range(args.rounds):
                got = {}
                for c in ((BUSY_SLOT, BUSY_NO_SLOT) if i % 2 == 0 else (BUSY_NO_SLOT, BUSY_SLOT)):
                    got[c] = measure_once(arch, c == BUSY_SLOT, slot_dir, c, proc.pid)
                    if proc.poll() is not None:
                        raise SystemExit("the search ended while measuring; its load is gone")
                got[BUSY_SLOT]["slot_over_no_slot"] = got[BUSY_SLOT]["p50_ms"] / got[BUSY_NO_SLOT]["p50_ms"]
                rows += [dict(got[c], round=i) for c in (BUSY_SLOT, BUSY_NO_SLOT)]
        finally:
            out = stop_search(proc, work)
        search_s = time.perf_counter() - t_search
        done = next((line for line in out.splitlines() if line.startswith(("Interrupted", "Search "))), "")
        print(f"  search stopped after {search_s:.0f} s: {done.strip()}", flush=True)
        print("alone again ...", flush=True)
        rows += [measure_once(arch, True, slot_dir, ALONE_AFTER, None) for _ in range(args.rounds)]

    alone_p50 = statistics.median(r["p50_ms"] for r in rows if r["condition"] == ALONE)
    summary = {c: summarise([r for r in rows if r["condition"] == c], alone_p50)
               for c in (ALONE, BUSY_SLOT, BUSY_NO_SLOT, ALONE_AFTER)}
    paired = statistics.median(r["slot_over_no_slot"] for r in rows if "slot_over_no_slot" in r)
    print(f"\n{args.arch}, ONNX Runtime CPU, 1 thread, 1x3x224x224; search load: {args.concurrent} trials at once "
          f"on {usable_cpus()} usable CPUs; load average {load_start[0]:.1f} at the start")
    print(f"{'condition':<15}{'p50 ms':>8}{'range':>16}{'x alone':>9}{'min ms':>8}{'stable':>8}{'cpu/wall':>10}"
          f"{'slot wait s':>13}{'node cores':>12}{'search cores':>14}")
    for c, sm in summary.items():
        wait = f"{sm['slot_wait_s']:.2f}" if sm["slot_wait_s"] is not None else "-"
        span = f"{sm['p50_min_ms']:.2f}-{sm['p50_max_ms']:.2f}"
        stable = f"{sm['stable']}/{sm['n']}"
        print(f"{c:<15}{sm['p50_ms']:>8.2f}{span:>16}{sm['ratio_to_alone']:>9.2f}{sm['min_ms']:>8.2f}{stable:>8}"
              f"{sm['cpu_per_wall']:>10.2f}{wait:>13}{sm['node_busy_cores']:>12.2f}{sm['search_cores']:>14.2f}")
    print(f"busy, slot / busy, no slot in the same round: median {paired:.2f}")
    print("(medians; min ms: fastest run; cpu/wall: the measuring process's CPU share; node cores / search cores: "
          "cores busy on the machine / used by the search's processes while the measurement ran)")

    report = {
        **header("contention", "full", ["python", "-m", "benchmarks.latency.contention", *sys.argv[1:]]),
        "load_average_start": load_start,
        "arch": arch.encode(), "arch_name": args.arch, "measure": MEASURE,
        "rounds": args.rounds,
        "search_load": {"concurrent_trials": args.concurrent, "cpus_per_trial": 1, "space": "mobile",
                        "seconds": round(search_s, 1), "summary_line": done.strip()},
        "summary": summary, "slot_over_no_slot_paired": paired, "measurements": rows,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_record(args.out, report)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
