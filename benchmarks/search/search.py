"""Benchmark the search: the default quickstart's wall time and the framework's overhead per trial.

    python -m benchmarks.search.search                     # both (the quickstart takes minutes)
    python -m benchmarks.search.search --skip-quickstart   # only the overhead

1. **Quickstart**: runs ``python -m nas.search +space=mobile target_ms=50`` exactly as written,
   in a fresh folder (new MLflow store), and reports its wall time and what it recorded.
2. **Overhead per trial**: a real search (tiny space, digits, ONNX Runtime, one trial at a
   time so no trial waits for a core) whose trials take about ten seconds. Overhead is
   everything the framework adds to the trials' own work:

       overhead per trial = (Tuner.fit wall time - sum of the trials' own time) / n_trials
                            + writing and logging the artifacts / n_trials

   where a trial's own time is measured inside the trial (build, latency measurement,
   training, reports), so Ray's scheduling, actor start-up and reuse, the sampler, the result
   transport and the MLflow logging in the driver's callbacks all count as overhead.

Figures are printed and written as JSON (``--out``).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.common import header, record_path, write_record

QUICKSTART = ["-m", "nas.search", "+space=mobile", "target_ms=50"]


def bench_quickstart(workdir: Path) -> dict[str, Any]:
    """Run the quickstart command in ``workdir`` and time it."""
    from mlflow import MlflowClient

    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, *QUICKSTART], cwd=workdir, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"quickstart failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    client = MlflowClient(f"sqlite:///{workdir / 'mlflow.db'}")
    exp = client.get_experiment_by_name("latnas")
    if exp is None:
        raise SystemExit("quickstart left no MLflow experiment")
    parent = next(r for r in client.search_runs([exp.experiment_id]) if r.data.tags.get("latnas.role") == "search")
    m = parent.data.metrics
    return {
        "command": "python " + " ".join(QUICKSTART),
        "wall_seconds": round(wall, 1),
        "n_completed": int(m["n_completed"]), "n_failed": int(m["n_failed"]),
        "best_reward": m.get("best_reward"), "best_latency_ms": m.get("best_latency_ms"),
        "startup_seconds": round(m["startup_seconds"], 1), "tune_seconds": round(m["tune_seconds"], 1),
        "table": _table(proc.stdout),
    }


def _table(stdout: str) -> list[str]:
    # The printed summary up to the best candidate (the lines after it name local paths).
    lines = stdout.strip().splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith("Search ")), 0)
    end = next((i for i, line in enumerate(lines) if line.startswith("Results:")), len(lines))
    return [line.rstrip() for line in lines[start:end] if line.strip()]


def bench_overhead(workdir: Path, n_trials: int, epochs: int) -> dict[str, Any]:
    """A real search with ~10 s trials, one at a time; overhead as defined in the module doc."""
    from nas.cli import compose_search_config
    from nas.driver import run_search

    cfg = compose_search_config(
        "+space=tiny", "target_ms=5", f"search.n_trials={n_trials}", "search.max_concurrent=1",
        f"train.epochs={epochs}", f"tracking.uri=sqlite:///{workdir / 'mlflow.db'}",
        f"output_dir={workdir / 'out'}", "progress=false", "name=bench-overhead", "top_k=3",
    )
    result = run_search(cfg)
    t = result.timings
    n = len(result.candidates)
    own = sum(r.metrics["trial_seconds"] for r in result.candidates)
    in_fit = (t["tune_seconds"] - own) / n
    artifacts = t["artifacts_seconds"] / n
    overhead = in_fit + artifacts
    mean_trial = own / n
    return {
        "setup": f"tiny space, digits, train.epochs={epochs}, onnxruntime 1x3x224x224, 1 trial at a time, 1 CPU",
        "n_trials": n,
        "mean_trial_seconds": round(mean_trial, 2),
        "overhead_per_trial_seconds": round(overhead, 3),
        "of_which_in_fit_seconds": round(in_fit, 3),
        "of_which_mlflow_logging_seconds": round(t["mlflow_seconds"] / n, 3),
        "of_which_artifacts_seconds": round(artifacts, 3),
        "share_of_measured_trial": round(overhead / mean_trial, 4),
        "share_of_10s_trial": round(overhead / 10.0, 4),
        "target_share": 0.10,
        "startup_seconds_once": round(t["startup_seconds"], 2),
    }


def render(rec: dict[str, Any]) -> str:
    """The section of a record of this benchmark on its area's page (docs/benchmarks/<area>.md)."""
    from benchmarks.render import _f, _pct, table
    o = rec["overhead"]
    ov = table(["figure", "value"], [
        ["overhead per trial", f"{_f(o['overhead_per_trial_seconds'])} s"],
        ["of which MLflow logging (driver callback)", f"{_f(o['of_which_mlflow_logging_seconds'], 3)} s"],
        ["of which artifacts", f"{_f(o['of_which_artifacts_seconds'], 3)} s"],
        ["share of the measured trial", _pct(o["share_of_measured_trial"])],
        ["share of a 10 s trial", f"{_pct(o['share_of_10s_trial'])} (target <= {_pct(o['target_share'])})"],
    ])
    trial_s = _f(o["mean_trial_seconds"], 1)
    text = f"""**Framework overhead per trial**: a real search of {o['n_trials']} trials of {trial_s} s
each ({o['setup']}). Overhead is `Tuner.fit` wall time minus the trials' own time (measured inside each
trial), plus writing and logging the artifacts, per trial: Ray's scheduling, worker start-up (amortised),
the sampler, result transport and MLflow logging all count. `reuse_actors=True` and no per-trial result
files keep it low.

{ov}"""
    q = rec.get("quickstart")
    if q:
        text += f"""

**Quickstart**, `{q['command']}` exactly as written, in a fresh folder (new MLflow store):
**{_f(q['wall_seconds'], 0)} s** wall (limit 10 minutes), of which {_f(q['startup_seconds'], 0)} s start-up and
{_f(q['tune_seconds'], 0)} s of trials; {q['n_completed']} candidates completed, {q['n_failed']} failed; best reward
{_f(q['best_reward'], 3)} at {_f(q['best_latency_ms'], 1)} ms p50."""
    return text


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--skip-quickstart", action="store_true", help="only measure the overhead")
    ap.add_argument("--trials", type=int, default=12, help="trials of the overhead search (default 12)")
    ap.add_argument("--epochs", type=int, default=8, help="training epochs per trial: sets the trial length (~10 s)")
    ap.add_argument("--out", type=Path, default=record_path("search", "full"), help="JSON output")
    args = ap.parse_args()

    report: dict[str, Any] = {
        **header("search", "full", ["python", "-m", "benchmarks.search.search", *sys.argv[1:]]),
    }
    with tempfile.TemporaryDirectory(prefix="latnas-bench-") as tmp:
        work = Path(tmp)
        print(f"overhead: {args.trials} trials of ~10 s ...", flush=True)
        (work / "overhead").mkdir()
        report["overhead"] = o = bench_overhead(work / "overhead", args.trials, args.epochs)
        print(f"  mean trial {o['mean_trial_seconds']:.2f} s; overhead {o['overhead_per_trial_seconds']:.3f} s "
              f"per trial (Ray+sampler+callbacks {o['of_which_in_fit_seconds']:.3f} s, of which MLflow "
              f"{o['of_which_mlflow_logging_seconds']:.3f} s; artifacts {o['of_which_artifacts_seconds']:.3f} s)")
        print(f"  share: {100 * o['share_of_measured_trial']:.1f}% of the measured trial, "
              f"{100 * o['share_of_10s_trial']:.1f}% of a 10 s trial (target <= 10%)", flush=True)
        if not args.skip_quickstart:
            print(f"quickstart: python {' '.join(QUICKSTART)} ...", flush=True)
            (work / "quickstart").mkdir()
            report["quickstart"] = q = bench_quickstart(work / "quickstart")
            print(f"  wall {q['wall_seconds']:.0f} s ({q['n_completed']} completed, {q['n_failed']} failed; "
                  f"start-up {q['startup_seconds']:.0f} s, trials {q['tune_seconds']:.0f} s); "
                  f"best reward {q['best_reward']:.4f} at {q['best_latency_ms']:.1f} ms", flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_record(args.out, report)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
