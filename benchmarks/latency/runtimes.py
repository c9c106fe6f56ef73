"""The same networks on three CPU runtimes: ONNX Runtime, OpenVINO and LiteRT, and how each ranks them.

Usage::

    python -m benchmarks.latency.runtimes [--n 100] [--space mobile_cifar] [--input-shape 1x3x32x32]
        [--threads 1] [--seed 0] [--out benchmarks/latency/records/runtimes.json]

``--n`` distinct members of the space (seeded draws) are timed on each runtime with LatNAS's protocol
(warm-up, timed runs, the p50), in one process: network by network, the three runtimes one after another in
an order that rotates from network to network, so that load drifting on a shared host falls on all three
alike. Each runtime gets ``--threads`` threads, fp32: ONNX Runtime's CPU provider, OpenVINO's CPU plugin
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


def run(archs: list[str], input_shape: tuple[int, ...], threads: int, log: Any = print) -> dict[str, Any]:
    """Every network of ``archs`` on every runtime, the runtimes' order rotating network by network."""
    ests = {r: make_estimator(r, input_shape=input_shape, num_classes=10, intra_op_threads=threads,
                              measure=dict(MEASURE), slot=False) for r in RUNTIMES}
    load_before = machine_and_load()["load_average"]
    t0 = time.perf_counter()
    rows: list[dict[str, Any]] = []
    for i, text in enumerate(archs):
        arch = Arch.decode(text)
        torch.manual_seed(0)
        net = build_eval_net(arch, num_classes=10, in_chans=input_shape[1])
        order = RUNTIMES[i % 3:] + RUNTIMES[:i % 3]
        p50 = {r: float(ests[r].measure(arch, net=net).stats.p50) for r in order}
        rows.append({"arch": text, "arch_id": arch.arch_id, "p50_ms": p50, "order": list(order)})
        if (i + 1) % 10 == 0 or i + 1 == len(archs):
            log(f"  [{i + 1}/{len(archs)}] {time.perf_counter() - t0:.0f} s; last: "
                + ", ".join(f"{r} {p50[r]:.3f} ms" for r in RUNTIMES))
    load_after = machine_and_load()["load_average"]
    taus = {}
    for a, b in itertools.combinations(RUNTIMES, 2):
        tau = kendalltau([r["p50_ms"][a] for r in rows], [r["p50_ms"][b] for r in rows])
        taus[f"{a}-{b}"] = {"tau": float(tau.statistic), "p_value": float(tau.pvalue)}
    ranks = {r: [int(x) for x in np.argsort(np.argsort([row["p50_ms"][r] for row in rows])) + 1] for r in RUNTIMES}
    for k, row in enumerate(rows):
        row["rank"] = {r: ranks[r][k] for r in RUNTIMES}
    return {"runtimes": list(RUNTIMES), "input_shape": list(input_shape), "threads": threads, "measure": MEASURE,
            "networks": rows, "kendall_tau": taus, "seconds": time.perf_counter() - t0,
            "load_average_before": load_before, "load_average_after": load_after,
            "settings": {r: ests[r].environment() for r in RUNTIMES}}


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
    p.add_argument("--out", type=Path, default=Path("benchmarks/latency/records/runtimes.json"))
    argv = sys.argv[1:] if argv is None else argv
    args = p.parse_args(argv)
    if args.n < 3:
        p.error(f"--n {args.n}: at least 3 networks to rank")
    mode = "quick" if "quick" in args.out.parts else "full"
    record = header("runtimes", mode, ["python", "-m", "benchmarks.latency.runtimes", *argv],
                    extra_versions=("openvino", "ai-edge-litert", "litert-torch"))
    record["space"] = args.space
    record["figures"] = run(networks(args.space, args.n, args.seed), parse_shape(args.input_shape), args.threads)
    print(f"wrote {write_record(args.out, record)}")


if __name__ == "__main__":
    main()
