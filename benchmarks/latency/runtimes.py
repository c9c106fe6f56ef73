"""The same networks on three CPU runtimes: ONNX Runtime, OpenVINO and LiteRT, and how each ranks them.

Usage::

    python -m benchmarks.latency.runtimes [--n 100] [--space mobile_cifar] [--input-shape 1x3x32x32]
        [--threads 1] [--seed 0] [--passes 2] [--out benchmarks/latency/records/runtimes.json]

``--n`` distinct members of the space (seeded draws) are timed on each runtime with LatNAS's protocol
(warm-up, timed runs, the p50), in one process: network by network, the three runtimes one after another in
an order that rotates from network to network, so that load drifting on a shared host falls on all three
alike. ``--passes`` whole sweeps are made (default 2); a network's latency is the lowest of its passes' p50s
(a shared host's slow spells only add time), and the record says how far the second timing of each network
landed from the first.
Each runtime gets ``--threads`` threads, fp32: ONNX Runtime's CPU provider, OpenVINO's CPU plugin
(latency hint, one stream, f32) and the LiteRT interpreter with XNNPACK (converted by litert-torch). The
record holds every p50, each runtime's ranking of the networks, the Kendall tau between every pair of runtimes
(how often two runtimes order two networks the same way), and the load average before and after.

Why it matters: a search keeps the networks its runtime runs fastest. Where two runtimes rank networks
differently, a network searched on one is not the best on the other (issue: search for the runtime you ship).
"""

from __future__ import annotations

import argparse
import itertools
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from scipy.stats import kendalltau

from benchmarks.common import header, machine_and_load, write_record
from latency_predictor.measurement.backends import make_estimator
from latency_predictor.measurement.export import build_eval_net, parse_shape
from search_spaces import Arch, load_space

RUNTIMES = ("onnxruntime", "openvino", "litert")
MEASURE = {"min_time_s": 0.3, "max_time_s": 1.0, "min_runs": 50, "warmup_s": 0.2, "max_repeats": 1}
"""Each timing's protocol: long enough for a stable p50 of a sub-millisecond network, short enough that 300
timings take minutes."""


def networks(space_name: str, n: int, seed: int) -> list[str]:
    """``n`` distinct members of the space, drawn with ``seed``."""
    space = load_space(space_name)
    rng = np.random.default_rng(seed)
    out: dict[str, None] = {}
    while len(out) < n:
        out[space.sample(rng).encode()] = None
    return list(out)


def run(archs: list[str], input_shape: tuple[int, ...], threads: int, passes: int = 2,
        log: Any = print) -> dict[str, Any]:
    """Every network of ``archs`` on every runtime, ``passes`` sweeps over all of them, the runtimes' order rotating
    network by network (and shifted from one pass to the next); the figures are :func:`rank`'s."""
    ests = {r: make_estimator(r, input_shape=input_shape, num_classes=10, intra_op_threads=threads,
                              measure=dict(MEASURE), slot=False) for r in RUNTIMES}
    load_before = machine_and_load()["load_average"]
    t0 = time.perf_counter()
    decoded = [Arch.decode(text) for text in archs]
    timed: list[dict[str, list[float]]] = [{r: [] for r in RUNTIMES} for _ in archs]
    orders: list[list[list[str]]] = [[] for _ in archs]
    for k in range(passes):  # whole sweeps, so that a second timing of a network is minutes after its first
        for i, arch in enumerate(decoded):
            torch.manual_seed(0)
            net = build_eval_net(arch, num_classes=10, in_chans=input_shape[1])
            shift = (i + k) % 3
            order = RUNTIMES[shift:] + RUNTIMES[:shift]
            for r in order:
                timed[i][r].append(float(ests[r].measure(arch, net=net).stats.p50))
            orders[i].append(list(order))
            if (i + 1) % 10 == 0 or i + 1 == len(archs):
                log(f"  pass {k + 1}/{passes} [{i + 1}/{len(archs)}] {time.perf_counter() - t0:.0f} s; last: "
                    + ", ".join(f"{r} {timed[i][r][-1]:.3f} ms" for r in RUNTIMES))
    load_after = machine_and_load()["load_average"]
    rows = [{"arch": text, "arch_id": decoded[i].arch_id, "p50_ms_passes": timed[i], "orders": orders[i]}
            for i, text in enumerate(archs)]
    return {"runtimes": list(RUNTIMES), "input_shape": list(input_shape), "threads": threads, "measure": MEASURE,
            "passes": passes, **rank(rows), "seconds": time.perf_counter() - t0,
            "load_average_before": load_before, "load_average_after": load_after,
            "settings": {r: ests[r].environment() for r in RUNTIMES}}


def rank(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """From each network's passes (``p50_ms_passes``): its latency on each runtime, the lowest of its passes' p50s
    (``p50_ms``; a shared host's slow spells only add time, and the lowest pass is the one they missed), each
    runtime's ranking of the networks, the Kendall tau between every pair of runtimes and, with two passes or more,
    the passes' :func:`repeatability`."""
    runtimes = list(rows[0]["p50_ms_passes"])
    for row in rows:
        row["p50_ms"] = {r: float(min(row["p50_ms_passes"][r])) for r in runtimes}
    taus = {}
    for a, b in itertools.combinations(runtimes, 2):
        tau = kendalltau([r["p50_ms"][a] for r in rows], [r["p50_ms"][b] for r in rows])
        taus[f"{a}-{b}"] = {"tau": float(tau.statistic), "p_value": float(tau.pvalue)}
    ranks = {r: [int(x) for x in np.argsort(np.argsort([row["p50_ms"][r] for row in rows])) + 1] for r in runtimes}
    for k, row in enumerate(rows):
        row["rank"] = {r: ranks[r][k] for r in runtimes}
    passes = len(rows[0]["p50_ms_passes"][runtimes[0]])
    return {"networks": rows, "kendall_tau": taus, "repeatability": repeatability(rows) if passes > 1 else None}


def repeatability(rows: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Per runtime, how the second pass's p50 of each network compares with the first's: the median and 90th
    percentile of ``|second / first - 1|``, and the share of networks within +-5% and +-10% of their first timing:
    how much of a runtime's spread between networks one timing's noise can explain."""
    out = {}
    for r in rows[0]["p50_ms_passes"]:
        dev = np.array([abs(row["p50_ms_passes"][r][1] / row["p50_ms_passes"][r][0] - 1) for row in rows])
        out[r] = {"median_rel": float(np.median(dev)), "p90_rel": float(np.quantile(dev, 0.9)),
                  "within_5": float(np.mean(dev <= 0.05)), "within_10": float(np.mean(dev <= 0.10))}
    return out


def render(rec: dict[str, Any]) -> str:
    """The record's section: the pairs' Kendall tau, each runtime's fastest networks and the widest disagreements."""
    f = rec["figures"]
    rows = f["networks"]
    rts = f["runtimes"]
    lines = [f"{len(rows)} members of `{rec.get('space', 'mobile_cifar')}` timed on {', '.join(rts)} in one process "
             f"({'x'.join(map(str, f['input_shape']))}, {f['threads']} thread(s), fp32, the runtimes' order rotating "
             f"network by network; {f['seconds'] / 60:.0f} minutes; load average {f['load_average_before']} before, "
             f"{f['load_average_after']} after).", "",
             "| runtimes | Kendall tau of their p50s | p |", "|---|---|---|"]
    lines += [f"| {pair} | {v['tau']:.3f} | {v['p_value']:.1e} |" for pair, v in f["kendall_tau"].items()]
    med = {r: float(np.median([row["p50_ms"][r] for row in rows])) for r in rts}
    lines += ["", "Median p50 over the networks: " + ", ".join(f"{r} {med[r]:.3f} ms" for r in rts) + "."]
    if f.get("repeatability"):
        lines += ["", f"Each network was timed in {f['passes']} whole passes, minutes apart; its p50 above is the "
                  "lowest of its passes'. How far the second pass landed from the first, network by network:", "",
                  "| runtime | median distance, 2nd from 1st | 90th percentile | within +-5% | within +-10% |",
                  "|---|---|---|---|---|"]
        lines += [f"| {r} | {100 * v['median_rel']:.1f}% | {100 * v['p90_rel']:.1f}% | {100 * v['within_5']:.0f}% | "
                  f"{100 * v['within_10']:.0f}% |" for r, v in f["repeatability"].items()]
    lines += ["", "Each runtime's five fastest networks, with their rank on the others:", "",
              "| runtime | arch_id | " + " | ".join(f"{r} ms (rank)" for r in rts) + " |",
              "|---|---|" + "---|" * len(rts)]
    for r in rts:
        for row in sorted(rows, key=lambda x: x["rank"][r])[:5]:
            lines.append(f"| {r} | {row['arch_id']} | "
                         + " | ".join(f"{row['p50_ms'][q]:.3f} ({row['rank'][q]})" for q in rts) + " |")
    spread = sorted(rows, key=lambda x: max(x["rank"].values()) - min(x["rank"].values()), reverse=True)[:5]
    lines += ["", "The five networks the runtimes rank furthest apart:", "",
              "| arch_id | " + " | ".join(f"{r} ms (rank)" for r in rts) + " | architecture |",
              "|---|" + "---|" * len(rts) + "---|"]
    for row in spread:
        lines.append(f"| {row['arch_id']} | " + " | ".join(f"{row['p50_ms'][q]:.3f} ({row['rank'][q]})" for q in rts)
                     + f" | `{row['arch']}` |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=100, help="networks to time")
    p.add_argument("--space", default="mobile_cifar")
    p.add_argument("--input-shape", default="1x3x32x32")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--passes", type=int, default=2,
                   help="whole sweeps over the networks; each network's p50 is the lowest of its passes'")
    p.add_argument("--out", type=Path, default=Path("benchmarks/latency/records/runtimes.json"))
    argv = sys.argv[1:] if argv is None else argv
    args = p.parse_args(argv)
    if args.n < 3:
        p.error(f"--n {args.n}: at least 3 networks to rank")
    if args.passes < 1:
        p.error(f"--passes {args.passes}: at least 1")
    mode = "quick" if "quick" in args.out.parts else "full"
    record = header("runtimes", mode, ["python", "-m", "benchmarks.latency.runtimes", *argv],
                    extra_versions=("openvino", "ai-edge-litert", "litert-torch"))
    record["space"] = args.space
    record["figures"] = run(networks(args.space, args.n, args.seed), parse_shape(args.input_shape), args.threads,
                              args.passes)
    print(f"wrote {write_record(args.out, record)}")


if __name__ == "__main__":
    main()
