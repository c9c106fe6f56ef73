"""Search throughput on this machine with 1 and 2 concurrent workers, and a projection to a cluster.

Two real searches (:func:`nas.driver.run_search`: Ray Tune + Optuna TPE, MLflow in a temporary
SQLite store) of the ``tiny`` space with the same trials, seeds and settings, one with one trial at
a time and one with two. A trial builds the candidate, measures it with ONNX Runtime on the CPU
(1 thread, 1x3x224x224) and trains it briefly on digits.

Candidates per hour count completed candidates over ``Tuner.fit``'s wall time (start-up is
reported apart: it is paid once per search).

Projection to ``nodes x gpus_per_node`` workers, from the per-trial costs measured at one worker:

    per-worker rate  = 1 / (trial_seconds + parallel overhead per trial)
    driver limit     = 1 / (serial driver cost per trial: MLflow logging + artifacts)
    projected rate   = min(workers * per-worker rate, driver limit)

Assumptions (stated in the record): a trial costs on a GPU worker what it cost here (no training
speed-up is assumed, so the projection is conservative for training and exact only if latency is
measured on a CPU-like target); workers do not share devices; the Ray scheduling and result
transport overhead per trial (measured here) stays per-worker, i.e. parallel; the driver's
MLflow logging and the sampler are serial; the network and the MLflow store are not bottlenecks.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.common import Headline
from nas.core.config import SearchConfig
from nas.core.record import COMPLETED
from nas.driver import run_search

NODES, GPUS_PER_NODE = 3, 8


def _config(work: Path, n_trials: int, concurrent: int, epochs: int) -> SearchConfig:
    from nas.cli import compose_search_config

    return compose_search_config(
        "+space=tiny", "target_ms=5", f"search.n_trials={n_trials}", f"search.max_concurrent={concurrent}",
        f"train.epochs={epochs}", "ray.num_cpus=2", f"tracking.uri=sqlite:///{work / 'mlflow.db'}",
        f"output_dir={work / 'out'}", "progress=false", f"name=bench-scale-{concurrent}", "top_k=3",
    )


def one_search(n_trials: int, concurrent: int, epochs: int) -> dict[str, Any]:
    """Run one search; its throughput and per-trial costs."""
    with tempfile.TemporaryDirectory(prefix="latnas-scale-") as tmp:
        result = run_search(_config(Path(tmp), n_trials, concurrent, epochs))
    t = result.timings
    done = [c for c in result.candidates if c.status == COMPLETED]
    n = len(result.candidates)
    own = sum(float(c.metrics.get("trial_seconds", 0.0)) for c in result.candidates)
    return {
        "workers": concurrent, "n_trials": n, "n_completed": len(done),
        "tune_seconds": t["tune_seconds"], "startup_seconds": t["startup_seconds"],
        "candidates_per_hour": len(done) / t["tune_seconds"] * 3600,
        "candidates_per_hour_with_startup": len(done) / (t["tune_seconds"] + t["startup_seconds"]) * 3600,
        "mean_trial_seconds": own / max(1, n),
        "parallel_overhead_per_trial_seconds": (t["tune_seconds"] * concurrent - own) / max(1, n),
        "driver_serial_per_trial_seconds": (t["mlflow_seconds"] + t.get("artifacts_seconds", 0.0)) / max(1, n),
    }


def project(one: dict[str, Any], nodes: int = NODES, gpus_per_node: int = GPUS_PER_NODE) -> dict[str, Any]:
    """Candidates per hour on ``nodes x gpus_per_node`` workers from a one-worker search's costs."""
    workers = nodes * gpus_per_node
    per_worker = 3600 / (one["mean_trial_seconds"] + max(0.0, one["parallel_overhead_per_trial_seconds"]))
    driver_limit = 3600 / max(one["driver_serial_per_trial_seconds"], 1e-9)
    rate = min(workers * per_worker, driver_limit)
    return {
        "nodes": nodes, "gpus_per_node": gpus_per_node, "workers": workers,
        "per_worker_candidates_per_hour": per_worker, "driver_limit_candidates_per_hour": driver_limit,
        "candidates_per_hour": rate, "bound": "driver" if driver_limit < workers * per_worker else "workers",
        "assumptions": [
            "a trial costs on a GPU worker what it cost on one CPU core here (no training speed-up assumed)",
            "one trial per GPU, workers do not share devices; linear scaling over workers",
            "Ray scheduling and result transport per trial (measured here) are paid per worker, in parallel",
            "the driver's MLflow logging and artifacts per trial are serial (the driver limit)",
            "network, object store and MLflow store are not bottlenecks",
        ],
    }


def run(n_trials: int, epochs: int, log: Callable[[str], None] = print) -> dict[str, Any]:
    """Searches with 1 and 2 workers, their ratio, and the cluster projection."""
    rows = []
    for workers in (1, 2):
        r = one_search(n_trials, workers, epochs)
        rows.append(r)
        log(f"  {workers} worker(s): {r['n_completed']}/{r['n_trials']} completed in {r['tune_seconds']:.0f} s "
            f"(+{r['startup_seconds']:.0f} s start-up): {r['candidates_per_hour']:.0f} candidates/h; "
            f"mean trial {r['mean_trial_seconds']:.1f} s")
    speedup = rows[1]["candidates_per_hour"] / rows[0]["candidates_per_hour"]
    proj = project(rows[0])
    log(f"  2 workers / 1 worker: {speedup:.2f}x; projected {proj['workers']} workers: "
        f"{proj['candidates_per_hour']:,.0f} candidates/h (bound by the {proj['bound']})")
    return {"space": "tiny", "epochs": epochs, "runs": rows, "speedup_2_over_1": speedup, "projection": proj,
            "trial": "build, ONNX Runtime CPU measurement (1 thread, 1x3x224x224), brief SGD training on digits"}


def headline(rec: dict[str, Any]) -> Headline:
    """The record's row of the results table: search throughput, and its projection."""
    f = rec["figures"]
    one = f["runs"][0]["candidates_per_hour"]
    p = f["projection"]
    return Headline(
        "Search throughput",
        f"{one:,.0f} candidates/h with 1 worker, {f['speedup_2_over_1']:.2f}x with 2 (projected "
        f"{p['candidates_per_hour']:,.0f}/h on {p['workers']} workers)",
        "one worker on the same machine",
        "none set", None)


def render(rec: dict[str, Any]) -> str:
    """The section of a record of this benchmark on its area's page (docs/benchmarks/<area>.md)."""
    from benchmarks.render import _f, table
    f = rec["figures"]
    p = f["projection"]
    rows = [[str(r["workers"]), f"{r['n_completed']}/{r['n_trials']}", _f(r["tune_seconds"], 0),
             _f(r["startup_seconds"], 0), _f(r["mean_trial_seconds"], 1), _f(r["candidates_per_hour"], 0)]
            for r in f["runs"]]
    assumptions = "\n".join(f"- {a}" for a in p["assumptions"])
    return f"""Search throughput on this machine: two real searches (`{f['space']}` space, Ray Tune + Optuna TPE, MLflow
in a temporary store; a trial: {f['trial']}, {f['epochs']} epoch(s)) with one and two trials at a time.
Candidates per hour count completed candidates over `Tuner.fit` time; start-up is paid once per search.

{table(['workers', 'completed', 'trials s', 'start-up s', 'mean trial s', 'candidates/h'], rows)}

Two workers against one: **{_f(f['speedup_2_over_1'])}x** (on two cores the second worker competes with
the driver, Ray's own processes and anything else running).

**Projection** to {p['nodes']} nodes x {p['gpus_per_node']} GPUs ({p['workers']} workers) from the one-worker
per-trial costs: {_f(p['per_worker_candidates_per_hour'], 0)} candidates/h per worker, driver limit
{_f(p['driver_limit_candidates_per_hour'], 0)}/h, so **{_f(p['candidates_per_hour'], 0)} candidates/h** (bound by
the {p['bound']}). Assumptions:

{assumptions}"""
