"""How far the latencies of separate searches land from each other, with and without the final pass.

Usage::

    python -m benchmarks.latency.spread [--searches 3] [--trials 8] [--anchor mobilenetv2_100]
                                [--out benchmarks/latency/records/spread.json]

Runs the quickstart (``python -m nas.search +space=mobile target_ms=50``: digits, ONNX Runtime
on the CPU, one thread, 1x3x224x224, two trials at a time) ``--searches`` times, each in a fresh
process and project home, one after another, with the random sampler and one seed, so every
search evaluates the same ``--trials`` architectures; the final latency pass measures all of them
again (``latency.final_pass_top_k`` = ``--trials``). Each candidate's run then holds the p50 its
trial measured (``latency_in_search_p50``, while the other trial trained beside it) and the p50
of the final pass (``latency_p50``, none of the search's trials running).

Figures, per architecture evaluated by every search: the spread of its p50 across the searches
(largest / smallest), in-search and final; over the architectures: the median and largest
spread and the share within 1.10x. Goal: the leaderboard's figures (the final ones) repeat
across searches within 1.10x for every architecture.

The floor, side by side: right after each search, a fresh process with no search running
measures the same architectures with the same backend and protocol (``standalone``), the way
``python -m latency_predictor.measure`` does. Its spread across the rounds is the host's own
drift over the same minutes, which no measurement inside a search can go below.

The anchor, side by side with the milliseconds: every search runs with ``latency.anchor``
(``--anchor``, MobileNetV2 at width 1 by default), so each candidate's trial measures the anchor
right after it and the final pass measures each candidate and the anchor back to back in
``latency.anchor_rounds`` rounds; the standalone round pairs them the same way
(:func:`latency_predictor.measurement.paired.measure_paired`). Each figure then has its ratio to
the anchor (``x_anchor``), and the same architectures' ratios spread across the searches beside
their milliseconds. Goal for the ratio (:data:`ANCHOR_GOAL`): the final pass's ``x_anchor``
within 1.05x across the searches at the median and 1.10x for every architecture.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common import ROOT, header, write_record

GOAL = 1.10
ANCHOR_GOAL = {"median": 1.05, "max": 1.10}
"""The anchor's goal: the spread of the final ``x_anchor`` across searches, at the median over the
architectures and for every one."""
ANCHOR = "mobilenetv2_100"
ANCHOR_ROUNDS = 3


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--searches", type=int, default=3, help="searches, one after another (default 3)")
    p.add_argument("--trials", type=int, default=8, help="architectures per search (default 8)")
    p.add_argument("--seed", type=int, default=0, help="the sampler's seed, the same in every search (default 0)")
    p.add_argument("--anchor", default=ANCHOR,
                   help=f"the anchor network measured beside the candidates, <reference>[@<width>] (default {ANCHOR})")
    p.add_argument("--out", type=Path, default=Path("benchmarks/latency/records/spread.json"),
                   help="JSON record to write")
    p.add_argument("--measure-only", nargs="+", metavar="ARCH", help=argparse.SUPPRESS)  # the standalone round
    return p


def run_search(home: Path, k: int, trials: int, seed: int, anchor: str) -> float:
    """One quickstart search in a fresh process with its own project home; returns its wall time."""
    cmd = [sys.executable, "-m", "nas.search", "+space=mobile", "target_ms=50", "search.sampler=random",
           f"search.seed={seed}", f"search.n_trials={trials}", f"latency.final_pass_top_k={trials}",
           f"latency.anchor={anchor}", f"latency.anchor_rounds={ANCHOR_ROUNDS}", "progress=false", f"name=spread-{k}"]
    env = {**os.environ, "LATNAS_HOME": str(home), "PYTHONPATH": str(ROOT)}
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=home.parent, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"search {k} failed (exit {proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return time.perf_counter() - t0


def measure_only(archs: list[str], anchor: str) -> dict[str, dict[str, float]]:
    """arch string -> its p50 (ms) and ``x_anchor``, each network measured back to back with ``anchor`` in
    :data:`ANCHOR_ROUNDS` rounds with the quickstart's backend and protocol (as the final pass does)."""
    from latency_predictor.measurement.paired import anchor_figures, measure_paired
    from nas.cli import compose_search_config
    from nas.driver.final_pass import measuring_estimator
    from search_spaces import Arch, load_space
    from search_spaces.references import anchor_network

    cfg = compose_search_config("+space=mobile", "target_ms=50")
    est = measuring_estimator(cfg, 10, load_space("mobile"))  # the digits proxy: 10 classes
    if est is None:
        raise RuntimeError("the quickstart's latency backend measures nothing")
    paired = measure_paired(est.measure, anchor_network(anchor, 224), [Arch.decode(a) for a in archs],
                            ANCHOR_ROUNDS, "p50", anchor)
    out = {}
    for arch, result in paired.items():
        fig = anchor_figures(result)
        assert fig is not None  # measure_paired pairs every network
        out[arch.encode()] = {"ms": fig.latency_ms, "x_anchor": fig.x_anchor, "anchor_ms": fig.anchor_ms}
    return out


def run_standalone(archs: list[str], anchor: str) -> dict[str, dict[str, float]]:
    """:func:`measure_only` in a fresh process (nothing else of LatNAS running)."""
    cmd = [sys.executable, "-m", "benchmarks.latency.spread", "--anchor", anchor, "--measure-only", *archs]
    proc = subprocess.run(cmd, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"standalone measurement failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    return {k: {kk: float(vv) for kk, vv in v.items()}
            for k, v in json.loads(proc.stdout.strip().splitlines()[-1]).items()}


def read_latencies(home: Path, k: int) -> dict[str, dict[str, Any]]:
    """arch_id -> arch string, in-search and final p50 of search ``k``'s completed candidates, and their
    ``x_anchor`` in search and final (``in_search_x``, ``final_x``)."""
    from mlflow import MlflowClient

    client = MlflowClient(f"sqlite:///{home / 'mlflow.db'}")
    exp = client.get_experiment_by_name("latnas")
    if exp is None:
        raise RuntimeError(f"search {k} left no experiment in {home}")
    out: dict[str, dict[str, Any]] = {}
    for run in client.search_runs([exp.experiment_id], "tags.`latnas.role` = 'candidate'"):
        m = run.data.metrics
        if run.data.tags.get("status") != "COMPLETED" or "latency_in_search_p50" not in m:
            continue
        row = {"arch": run.data.params["arch"], "in_search": m["latency_in_search_p50"], "final": m["latency_p50"]}
        if "x_anchor" in m:
            row.update(in_search_x=m["x_anchor_in_search"], final_x=m["x_anchor"], anchor_ms=m["anchor_latency_ms"])
        out[run.data.params["arch_id"]] = row
    return out


KINDS = ("in_search", "final", "standalone")
X_KINDS = ("in_search_x", "final_x", "standalone_x")
"""The same figures as ratios to the anchor measured beside them."""


def summarise(per_search: list[dict[str, dict[str, Any]]]) -> dict[str, Any]:
    """Per architecture measured by every search, the spread across searches; and over them."""
    common = sorted(set.intersection(*(set(s) for s in per_search)))
    anchored = bool(common) and all("final_x" in s[a] for s in per_search for a in common)
    kinds = KINDS + X_KINDS if anchored else KINDS
    rows = []
    for arch_id in common:
        row: dict[str, Any] = {"arch_id": arch_id}
        for kind in kinds:
            values = [s[arch_id][kind] for s in per_search]
            row[kind] = values
            row[f"{kind}_spread"] = max(values) / min(values)
        rows.append(row)
    figures: dict[str, Any] = {"archs": rows, "n_common": len(common), "goal": GOAL}
    for kind in kinds:
        spreads = np.array([r[f"{kind}_spread"] for r in rows])
        figures[kind] = {"median_spread": float(np.median(spreads)) if len(rows) else None,
                         "max_spread": float(spreads.max()) if len(rows) else None,
                         "within_goal": float(np.mean(spreads <= GOAL)) if len(rows) else None}
    # within a search: how far the final pass moved each figure (in-search / final)
    ratios = [s[a]["in_search"] / s[a]["final"] for s in per_search for a in s]
    figures["in_search_over_final"] = {"median": float(np.median(ratios)), "min": float(min(ratios)),
                                       "max": float(max(ratios))}
    figures["met"] = bool(rows) and figures["final"]["max_spread"] <= GOAL
    figures["floor_met"] = bool(rows) and figures["standalone"]["max_spread"] <= GOAL
    if anchored:
        fx = figures["final_x"]
        figures["anchor_goal"] = ANCHOR_GOAL
        figures["anchor_met"] = fx["median_spread"] <= ANCHOR_GOAL["median"] and fx["max_spread"] <= ANCHOR_GOAL["max"]
    return figures


def render(rec: dict[str, Any]) -> str:
    """The section of a record of this benchmark on its area's page (docs/benchmarks/<area>.md)."""
    from benchmarks.render import _f, _pct, table
    f, st = rec["figures"], rec["settings"]
    n = st["searches"]
    alone = "standalone" in f  # records from before the floor was measured have no standalone round
    kinds = ("in_search", "final", "standalone") if alone else ("in_search", "final")
    rows = [[r["arch_id"], *(cell for k in kinds for cell in (" / ".join(_f(v, 2) for v in r[k]),
                                                             _f(r[f"{k}_spread"], 3)))] for r in f["archs"]]
    labels = {"in_search": "in the search (the trial's own measurement)",
              "final": "final latency pass (what the leaderboard shows)",
              "standalone": "measured alone after each search (the host's floor)"}
    summary = table(["figures", "median spread", "largest spread", f"within {f['goal']}x"], [
        [labels[k], _f(f[k]["median_spread"], 3), _f(f[k]["max_spread"], 3), _pct(f[k]["within_goal"])]
        for k in kinds])
    heads = {"in_search": "in-search p50 ms", "final": "final p50 ms", "standalone": "alone p50 ms"}
    io = f["in_search_over_final"]
    floor = "" if not alone else f"""
The floor: right after each search, a fresh process with nothing else running measured the same
architectures with the same backend and protocol (as `python -m latency_predictor.measure` does). Its
spread is the host's own drift over the same minutes, which no measurement inside a search can go under:
{'within' if f['floor_met'] else 'not within'} {f['goal']}x for every architecture."""
    anchor = "" if "final_x" not in f else _render_anchor(f, st)
    return f"""The quickstart (`python -m nas.search +space=mobile target_ms=50`: digits, ONNX Runtime on the CPU,
one thread, 1x3x224x224, two trials at a time) run {n} times, one after another, each in a fresh process and
project home, with the random sampler and seed {st['seed']} so that every search evaluates the same
{st['trials']} architectures, and the final latency pass measuring all of them again. For each architecture,
its p50 (ms) in search 1 / 2 / ..., and the spread across the searches (largest / smallest): as its trial
measured it, with the other trial training beside it, and as the final pass measured it, with nothing else
running.

{table(['arch_id', *(h for k in kinds for h in (heads[k], 'spread'))], rows)}

{summary}

Goal: the leaderboard's figures repeat across searches within {f['goal']}x for every architecture:
{'met' if f['met'] else 'missed'}. Within a search, in-search p50 over final p50: median {_f(io['median'], 3)},
range {_f(io['min'], 3)} - {_f(io['max'], 3)}.{floor}{anchor}"""


def _render_anchor(f: dict[str, Any], st: dict[str, Any]) -> str:
    """The anchor's part of the section: the same architectures' ``x_anchor`` across the searches."""
    from benchmarks.render import _f, _pct, table
    kinds = ("in_search_x", "final_x", "standalone_x")
    heads = {"in_search_x": "in-search x_anchor", "final_x": "final x_anchor", "standalone_x": "alone x_anchor"}
    rows = [[r["arch_id"], *(cell for k in kinds for cell in (" / ".join(_f(v, 3) for v in r[k]),
                                                             _f(r[f"{k}_spread"], 3))),
             _f(r["final_spread"], 3)] for r in f["archs"]]
    labels = {"in_search_x": "x_anchor in the search (one pair, in the trial)",
              "final_x": f"x_anchor of the final pass ({st.get('anchor_rounds', ANCHOR_ROUNDS)} rounds)",
              "standalone_x": "x_anchor measured alone after each search"}
    ms = {"in_search_x": "in_search", "final_x": "final", "standalone_x": "standalone"}
    summary = table(["figures", "median spread", "largest spread", f"within {f['goal']}x",
                     "the same runs' ms: median spread", "largest"], [
        [labels[k], _f(f[k]["median_spread"], 3), _f(f[k]["max_spread"], 3), _pct(f[k]["within_goal"]),
         _f(f[ms[k]]["median_spread"], 3), _f(f[ms[k]]["max_spread"], 3)] for k in kinds])
    g, fx = f["anchor_goal"], f["final_x"]
    verdict = (f"{'met' if f['anchor_met'] else 'missed'} (median {_f(fx['median_spread'], 3)}, "
               f"largest {_f(fx['max_spread'], 3)}")
    return f"""

**The anchor.** Every search ran with `latency.anchor={st.get('anchor', ANCHOR)}`: each trial measured the
anchor right after its candidate, and the final pass and the standalone round measured each candidate and
the anchor back to back in {st.get('anchor_rounds', ANCHOR_ROUNDS)} rounds. The same architectures'
`x_anchor` (their p50 over the anchor's measured beside it) in search 1 / 2 / ..., and its spread across
the searches, beside the spread of the final pass's milliseconds:

{table(['arch_id', *(h for k in kinds for h in (heads[k], 'spread')), 'final ms spread'], rows)}

{summary}

Goal: the final pass's `x_anchor` repeats across searches within {g['median']}x at the median and
{g['max']}x for every architecture: {verdict}; the milliseconds of
the same measurements: median {_f(f['final']['median_spread'], 3)}, largest {_f(f['final']['max_spread'], 3)})."""


def main() -> int:
    """Run the benchmark; returns 0 (a goal missed is reported, not turned into a failure)."""
    args = _parser().parse_args()
    if args.measure_only:
        print(json.dumps(measure_only(args.measure_only, args.anchor)), flush=True)
        return 0
    if args.searches < 2 or args.trials < 1:
        print("error: --searches must be >= 2 and --trials >= 1", file=sys.stderr)
        return 2
    load_before = os.getloadavg()
    t0 = time.perf_counter()
    per_search, walls = [], []
    with tempfile.TemporaryDirectory(prefix="latnas-spread-") as tmp:
        for k in range(args.searches):
            home = Path(tmp) / f"search-{k}" / ".latnas"
            home.parent.mkdir(parents=True)
            walls.append(run_search(home, k, args.trials, args.seed, args.anchor))
            found = read_latencies(home, k)
            alone = run_standalone([v["arch"] for v in found.values()], args.anchor)
            for v in found.values():
                v["standalone"], v["standalone_x"] = alone[v["arch"]]["ms"], alone[v["arch"]]["x_anchor"]
            per_search.append(found)
            print(f"search {k + 1}/{args.searches}: {len(found)} candidates in {walls[-1]:.0f} s, then measured "
                  f"alone", flush=True)
    figures = summarise(per_search)
    wall = time.perf_counter() - t0
    labels = (("in_search", "in the search"), ("final", "final pass"), ("standalone", "alone"))
    anchored = "final_x" in figures
    for kind, label in labels + (tuple((f"{k}_x", f"{lb} (x_anchor)") for k, lb in labels) if anchored else ()):
        f = figures[kind]
        print(f"{label:>24}: spread across {args.searches} searches over {figures['n_common']} architectures: "
              f"median {f['median_spread']:.3f}, largest {f['max_spread']:.3f}, within {GOAL}x: {f['within_goal']:.0%}")
    print(f"goal (final figures within {GOAL}x for every architecture): {'met' if figures['met'] else 'MISSED'}; "
          f"{wall:.0f} s in all")
    print(f"the floor (the same networks measured alone, in a fresh process, after each search) within {GOAL}x: "
          f"{'yes' if figures['floor_met'] else 'NO: the host drifts more than the goal allows'}")
    if anchored:
        print(f"anchor goal (final x_anchor within {ANCHOR_GOAL['median']}x at the median, {ANCHOR_GOAL['max']}x for "
              f"every architecture): {'met' if figures['anchor_met'] else 'MISSED'}")
    record = {
        **header("spread", "full", ["python", "-m", "benchmarks.latency.spread", *sys.argv[1:]]),
        "settings": {"searches": args.searches, "trials": args.trials, "seed": args.seed, "sampler": "random",
                     "command": "python -m nas.search +space=mobile target_ms=50 (the quickstart's defaults)",
                     "final_pass_top_k": args.trials, "anchor": args.anchor, "anchor_rounds": ANCHOR_ROUNDS},
        "load_average_before": load_before[0], "load_average_after": os.getloadavg()[0], "wall_seconds": wall,
        "search_wall_seconds": walls, "figures": figures,
    }
    print(f"wrote {write_record(args.out, record)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
