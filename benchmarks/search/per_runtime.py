"""Hardware-aware, shown: one search per runtime (ONNX Runtime, OpenVINO, LiteRT), each winner timed on all three.

Usage::

    python -m benchmarks.search.per_runtime --cifar10 DIR/cifar10-train-jpeg.tar.gz [--trials 30] [--seed 0]
        [--anchor mobilenetv2_100@0.35] [--target-x 0.5] [--rounds 5]
        [--out benchmarks/search/records/per_runtime.json]

Each runtime gets the same search: ``mobile_cifar`` at 1x3x32x32, one thread, the target relative to the
anchor (``target_anchor=<anchor> target_x=<x>``: each candidate timed beside the anchor on that runtime),
TPE with the same seed and the same accuracy estimate (NASWOT on CIFAR-10, training-free and deterministic
for a given network), one trial at a time. Only the runtime that times the candidates differs, so where the
winners differ, the runtime chose them. The winners and the anchor are then timed on every runtime in
``--rounds`` rounds, the runtimes' order rotating network by network (:func:`benchmarks.latency.runtimes.run`),
and each winner's latency is reported as a ratio to the anchor on each runtime.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common import header, write_record

RUNTIMES = ("onnxruntime", "openvino", "litert")


def search_on(runtime: str, archive: Path, workdir: Path, trials: int, seed: int, anchor: str,
              target_x: float) -> dict[str, Any]:
    """One search whose candidates ``runtime`` times; its winner and figures."""
    from nas.cli import compose_search_config
    from nas.driver import run_search

    cfg = compose_search_config(
        "+space=mobile_cifar", f"latency={runtime}", "latency.input_shape=[1,3,32,32]",
        "latency.options.intra_op_threads=1", f"target_anchor={anchor}", f"target_x={target_x:g}",
        "accuracy=naswot", "data=cifar10_jpeg", f"data.path={archive}", "~data_rungs", "search.sampler=tpe",
        f"search.seed={seed}", f"search.n_trials={trials}", "search.max_concurrent=1",
        f"tracking.uri=sqlite:///{workdir / 'mlflow.db'}", f"output_dir={workdir / runtime}", "progress=false",
        f"name=per-runtime-{runtime}")
    t0 = time.perf_counter()
    result = run_search(cfg)
    if result.best is None:
        raise RuntimeError(f"the search on {runtime} completed no candidate")
    best = result.best
    done = [c for c in result.candidates if c.status == "COMPLETED"]
    return {"runtime": runtime, "arch": best.arch, "arch_id": best.arch_id, "naswot": best.accuracy,
            "reward": best.reward, "x_anchor_in_search": best.metric("x_anchor"),
            "meets": bool(best.meets_target), "completed": len(done),
            "meeting": sum(bool(c.meets_target) for c in done),
            "wall_seconds": time.perf_counter() - t0}


def cross_time(archs: list[str], anchor_arch: str, rounds: int) -> dict[str, Any]:
    """The median p50 of every network and the anchor on every runtime over ``rounds`` rounds, each network's
    ratio to the anchor per runtime, and the load averages (1, 5, 15 minutes) before and after each round."""
    from benchmarks.latency.runtimes import run

    nets = [anchor_arch, *dict.fromkeys(archs)]
    p50: dict[str, dict[str, list[float]]] = {a: {r: [] for r in RUNTIMES} for a in nets}
    load = []
    for k in range(rounds):
        got = run(nets[k % len(nets):] + nets[:k % len(nets)], (1, 3, 32, 32), 1, log=lambda _: None)
        load += [got["load_average_before"], got["load_average_after"]]
        for row in got["networks"]:
            for r in RUNTIMES:
                p50[row["arch"]][r].append(row["p50_ms"][r])
    med = {a: {r: float(np.median(v)) for r, v in rt.items()} for a, rt in p50.items()}
    return {"p50_ms": med, "x_anchor": {a: {r: med[a][r] / med[anchor_arch][r] for r in RUNTIMES} for a in nets},
            "load_average": load}


def render(rec: dict[str, Any]) -> str:
    """The record's section: each runtime's winner, timed on every runtime against the anchor."""
    from benchmarks.render import meta

    f, st = rec["figures"], rec["settings"]
    one = [load[0] for load in f["cross"]["load_average"]]  # the 1-minute load average before and after each round
    lines = [meta(rec), "",
             f"One search per runtime, the same in everything else: `{st['space']}`, 1x3x32x32, one thread, "
             f"target x{st['target_x']:g} `{st['anchor']}` timed beside each candidate on the search's runtime, "
             f"TPE seed {st['seed']}, {st['trials']} candidates, NASWOT on CIFAR-10 as the accuracy estimate "
             "(training-free: the same network scores the same in every search). Then every winner and the "
             f"anchor timed on all three runtimes, {st['rounds']} rounds, the runtimes' order rotating "
             f"(load average {min(one):.1f}-{max(one):.1f}).", "",
             "| searched on | winner | NASWOT | meets in its search | "
             + " | ".join(f"x anchor on {r}" for r in RUNTIMES) + " | search minutes |",
             "|---|---|---|---|" + "---|" * len(RUNTIMES) + "---|"]
    for w in f["winners"]:
        x = f["cross"]["x_anchor"][w["arch"]]
        cells = [f"**{x[r]:.2f}**" if r == w["runtime"] else f"{x[r]:.2f}" for r in RUNTIMES]
        lines.append(f"| {w['runtime']} | {w['arch_id']} | {w['naswot']:.1f} | "
                     f"{'yes' if w['meets'] else 'no'} ({w['meeting']} of {w['completed']} did) | "
                     + " | ".join(cells) + f" | {w['wall_seconds'] / 60:.1f} |")
    ids = {w["arch_id"] for w in f["winners"]}
    lines += ["", f"{len(ids)} different winner(s) from {len(f['winners'])} runtimes. The anchor's p50: "
              + ", ".join(f"{r} {f['cross']['p50_ms'][f['anchor_arch']][r]:.3f} ms" for r in RUNTIMES) + ".", ""]
    lines += ["| winner | architecture |", "|---|---|"]
    lines += [f"| {w['arch_id']} | `{w['arch']}` |" for w in f["winners"]]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cifar10", type=Path, required=True, help="the CIFAR-10 training-image archive")
    p.add_argument("--trials", type=int, default=30)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--anchor", default="mobilenetv2_100@0.35")
    p.add_argument("--target-x", type=float, default=0.5)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--out", type=Path, default=Path("benchmarks/search/records/per_runtime.json"))
    args = p.parse_args(argv)
    if not args.cifar10.is_file():
        p.error(f"--cifar10 {args.cifar10}: no such file")
    if args.trials < 2 or args.rounds < 1:
        p.error("--trials: at least 2; --rounds: at least 1")
    from search_spaces.references import anchor_network

    anchor_arch = anchor_network(args.anchor, 32).encode()
    t0 = time.perf_counter()
    winners = []
    with tempfile.TemporaryDirectory(prefix="latnas-per-runtime-") as tmp:
        for rt in RUNTIMES:
            w = search_on(rt, args.cifar10.resolve(), Path(tmp), args.trials, args.seed, args.anchor, args.target_x)
            print(f"{rt}: winner {w['arch_id']} NASWOT {w['naswot']:.1f} x{w['x_anchor_in_search']:.2f} "
                  f"({w['wall_seconds']:.0f} s)", flush=True)
            winners.append(w)
    cross = cross_time([w["arch"] for w in winners], anchor_arch, args.rounds)
    for w in winners:
        print(f"{w['arch_id']} (searched on {w['runtime']}): "
              + ", ".join(f"{r} x{cross['x_anchor'][w['arch']][r]:.2f}" for r in RUNTIMES), flush=True)
    mode = "quick" if "quick" in args.out.parts else "full"
    shown = ["DIR/cifar10-train-jpeg.tar.gz" if a == str(args.cifar10) else a for a in argv]  # no machine path
    rec = header("per_runtime", mode, ["python", "-m", "benchmarks.search.per_runtime", *shown],
                 extra_versions=("openvino", "ai-edge-litert", "litert-torch"))
    rec["settings"] = {"space": "mobile_cifar", "trials": args.trials, "seed": args.seed, "anchor": args.anchor,
                       "target_x": args.target_x, "rounds": args.rounds}
    rec["figures"] = {"winners": winners, "cross": cross, "anchor_arch": anchor_arch}
    rec["wall_seconds"] = time.perf_counter() - t0
    print(f"wrote {write_record(args.out, rec)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
