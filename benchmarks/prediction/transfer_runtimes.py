"""Benchmark of a predictor for a new runtime from 10 measurements: ONNX Runtime, OpenVINO and LiteRT as devices.

Usage::

    python -m benchmarks.prediction.transfer_runtimes [--runtimes-record benchmarks/latency/records/runtimes.json]
        [--n-test 30] [--shots 10,20] [--splits 5] [--reps 5]
        [--out benchmarks/prediction/records/transfer_runtimes.json]

The runtimes benchmark (``python -m benchmarks.latency.runtimes``) timed the same networks of
``mobile_cifar`` on ONNX Runtime, OpenVINO and LiteRT (one thread, 1x3x32x32, in one process, the runtimes'
order rotating network by network). Its p50s are the three runtimes' latency tables here; nothing is timed
again, so this benchmark takes seconds and can run on a loaded machine.

Every ordered pair of runtimes is a source -> target pair of :mod:`benchmarks.prediction.transfer` (its
``evaluate_tables``): for each of ``--splits`` random splits, ``--n-test`` networks are held out; the source
runtime's predictor is fitted on the source's other networks; the target's n measurements are chosen from
its other networks by ``collect --adapt-from``'s informative order (and, ``--reps`` times, at random); the
source's predictor is adapted with them (``train --adapt-from``), beside a predictor fitted from scratch on
the same n and one fitted on all the target's other networks.

Goal (the issue's, HELP's anchor of 10 samples): from 10 measurements of the new runtime, +-10% on at least
90% of the held-out networks and Spearman >= 0.95, on every pair of runtimes.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common import Headline, header, write_record
from benchmarks.prediction.transfer import (
    GOAL,
    evaluate_tables,
    padding_section,
    pair_line,
    pairs_table,
    transfer_headline,
)
from latency_predictor.prediction.dataset import LatencyTable
from latency_predictor.prediction.features import FeatureExtractor

LABELS = {"onnxruntime": "ONNX Runtime (CPU provider)", "openvino": "OpenVINO (CPU plugin, latency hint)",
          "litert": "LiteRT (XNNPACK)"}


def tables(runtimes_record: dict[str, Any]) -> dict[str, LatencyTable]:
    """Each runtime's latency table from a record of ``benchmarks.latency.runtimes`` (one p50 per network)."""
    f = runtimes_record["figures"]
    rows = f["networks"]
    archs = tuple(r["arch"] for r in rows)
    n = len(rows)
    return {rt: LatencyTable(archs, np.array([r["p50_ms"][rt] for r in rows], dtype=np.float64), np.zeros(n),
                             np.ones(n, dtype=np.int64), np.zeros(n, dtype=bool))
            for rt in f["runtimes"]}


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runtimes-record", type=Path, default=Path("benchmarks/latency/records/runtimes.json"),
                   help="a record of benchmarks.latency.runtimes (default: the committed one)")
    p.add_argument("--n-test", type=int, default=30, help="held-out networks per split (default 30)")
    p.add_argument("--shots", default="10,20", help="n, comma separated (default 10,20)")
    p.add_argument("--splits", type=int, default=5, help="random held-out splits (default 5)")
    p.add_argument("--reps", type=int, default=5, help="random choices of the n per split (default 5)")
    p.add_argument("--out", type=Path, default=Path("benchmarks/prediction/records/transfer_runtimes.json"),
                   help="JSON record to write")
    return p


def headline(rec: dict[str, Any]) -> Headline:
    """The record's row of the results table: pairs of runtimes where the adapted predictor meets the goal."""
    return transfer_headline(rec, "Predictor transfer to a new runtime (ONNX Runtime, OpenVINO, LiteRT)", "runtime",
                             f"the target runtime's other {rec['settings']['n_full']} networks")


def render(rec: dict[str, Any]) -> str:
    """The record's section on its area's page."""
    from benchmarks.render import _f, _pct
    st, goal = rec["settings"], rec["goal"]
    gn = str(goal["n"])
    worst = min(rec["pairs"], key=lambda p: p["by_n"][gn]["adapted_informative"]["within_10_min"])
    w = worst["by_n"][gn]["adapted_informative"]
    met = sum(bool(p.get("goal_met")) for p in rec["pairs"])
    runtimes = ", ".join(f"`{k}` ({v})" for k, v in rec["runtimes"].items())
    link = "latency.md#the-same-networks-on-three-cpu-runtimes-onnx-runtime-openvino-and-litert"
    return f"""A predictor for a new inference runtime from n measurements there, adapted from another runtime's
predictor (`python -m latency_predictor.train --adapt-from`), as for a new device. The runtimes are
{runtimes}; their latencies are the p50s of [the runtimes benchmark]({link})
({st['networks']} members of `{st['space']}`, 1x3x32x32, one thread, timed in one process; recorded
{st['measured']}), so nothing is timed again.

Each cell is the share of {st['n_test']} held-out networks predicted within +-10%, then the Spearman rank
correlation, averaged over {st['splits']} random held-out splits. The source runtime's predictor is fitted on its
other {st['n_full']} networks. "adapted, n" measures the n networks `collect --adapt-from` chooses; "random n": n
chosen at random ({st['reps']} draws per split); "scratch": a predictor fitted on the same n alone; "full": one
fitted on the target runtime's other {st['n_full']} networks (the ceiling); "source as is": the source runtime's
predictor unchanged.

{pairs_table(rec)}

Goal at n = {gn} (adapted): +-10% >= {_pct(goal['within_10'])} and Spearman >= {goal['spearman']}: met by {met} of
{len(rec['pairs'])} pairs. The worst split of any pair: {worst['source']} -> {worst['target']},
{_pct(w['within_10_min'])} within +-10%, Spearman {_f(w['spearman_min'], 3)}.{padding_section(rec, "runtime")}"""


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; returns 0 (goals missed are reported, not turned into a failure)."""
    argv = sys.argv[1:] if argv is None else argv
    p = _parser()
    args = p.parse_args(argv)
    if not args.runtimes_record.is_file():
        p.error(f"--runtimes-record {args.runtimes_record}: no such file (python -m benchmarks.latency.runtimes "
                "writes it)")
    shots = [int(x) for x in args.shots.split(",") if x]
    src = json.loads(args.runtimes_record.read_text())
    tabs = tables(src)
    n_networks = len(next(iter(tabs.values())))
    if not 0 < args.n_test < n_networks - max(shots):
        p.error(f"--n-test {args.n_test}: leave more than {max(shots)} of the record's {n_networks} networks "
                "to adapt from")
    f = src["figures"]
    extractor = FeatureExtractor(tuple(f["input_shape"]), 10)
    load_before = os.getloadavg()[0]
    t0 = time.perf_counter()
    n_full = n_networks - args.n_test
    pairs = []
    for s, t in itertools.permutations(tabs, 2):
        fig = evaluate_tables(tabs[s], tabs[t], extractor, extractor, shots, n_full, args.n_test, args.splits,
                              args.reps, goal=GOAL, padding=True)
        pairs.append({"source": s, "target": t, **fig})
        print(pair_line(s, t, fig), flush=True)
    settings = {"space": src.get("space", "mobile_cifar"), "networks": n_networks, "n_full": n_full,
                "n_test": args.n_test, "shots": shots, "splits": args.splits, "reps": args.reps,
                "input_shape": f["input_shape"], "threads": f["threads"], "measured": src["date"][:10],
                "runtimes_record": str(args.runtimes_record)}
    rec = {**header("transfer_runtimes", "full",
                    ["python", "-m", "benchmarks.prediction.transfer_runtimes", *argv], ("scipy",)),
           "settings": settings, "runtimes": {rt: LABELS.get(rt, rt) for rt in tabs}, "goal": GOAL,
           "load_average_before": load_before, "load_average_after": os.getloadavg()[0],
           "wall_seconds": time.perf_counter() - t0, "pairs": pairs}
    print(f"wrote {write_record(args.out, rec)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
