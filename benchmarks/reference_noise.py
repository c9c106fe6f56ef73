"""How well the proxy-fidelity study's reference ranks its own architectures: the reference trained
again with another seed, and each estimator's Kendall tau against both.

Usage::

    python -m benchmarks.reference_noise --cifar10 ARCHIVE [--seed 1] [--out benchmarks/records/reference_noise.json]

The study's reference (``python scripts/bench.py fidelity``: each architecture trained stand-alone,
10,000 images x 5 epochs, validated on 2,000 images) is the yardstick of every estimator, the
supernet's included. Its architectures and estimates are read from the committed record
(``benchmarks/records/fidelity.json``), the supernet's estimates from the supernet benchmark's
folder (``.latnas/bench/supernet-full/fidelity/records.jsonl``) when it is there. Each architecture
is trained once more with the same recipe and budget and another seed (its initialisation, its
10,000 training images and their order); the Kendall tau between the two references is the
ceiling any estimator's tau can be expected to reach against one of them.

The trainings are appended to ``.latnas/bench/reference-noise/records.jsonl`` as they finish, so a
stopped run continues where it stopped.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from benchmarks import fidelity
from benchmarks.common import RECORDS_DIR, ROOT, write_record
from latency_predictor.environment import base_environment
from nas.data import load_dataset
from nas.studies.fidelity import REFERENCE, SUPERNET, Task, _Context, compute
from nas.studies.stats import agreement


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cifar10", help="the CIFAR-10 JPEG archive (default: $LATNAS_CIFAR10_JPEG)")
    p.add_argument("--seed", type=int, default=1, help="the second reference's seed (default 1; the study's is 0)")
    p.add_argument("--work-dir", type=Path, default=ROOT / ".latnas" / "bench" / "reference-noise")
    p.add_argument("--supernet-records", type=Path,
                   default=ROOT / ".latnas" / "bench" / "supernet-full" / "fidelity" / "records.jsonl")
    p.add_argument("--out", type=Path, default=RECORDS_DIR / "reference_noise.json")
    return p


def main() -> int:
    """Run (or continue) the second reference; write the record."""
    args = _parser().parse_args()
    archive = fidelity.cifar10_archive(args.cifar10)
    study = json.loads((RECORDS_DIR / "fidelity.json").read_text())["figures"]
    cfg = fidelity.config(archive, False, 1, "sqlite:///unused.db")
    if cfg.reference.train_samples != study["reference"]["train_samples"] or \
            cfg.reference.epochs != study["reference"]["epochs"]:
        print(f"error: the study's reference budget is now {cfg.reference}, its record's {study['reference']}",
              file=sys.stderr)
        return 2
    train = dataclasses.replace(cfg.train, seed=args.seed)
    ctx = _Context(cfg.data, train, (cfg.reference.train_samples, cfg.reference.epochs), cfg.cheap_train_samples,
                   cfg.zero_cost_batch, study["data"]["classes"], os.cpu_count() or 1)
    torch.set_num_threads(ctx.threads)
    args.work_dir.mkdir(parents=True, exist_ok=True)
    path = args.work_dir / f"records-seed{args.seed}.jsonl"
    done = {json.loads(x)["arch"]: json.loads(x) for x in path.read_text().splitlines() if x.strip()} \
        if path.is_file() else {}
    archs = [a["arch"] for a in study["archs"]]
    load_before = os.getloadavg()
    t0 = time.perf_counter()
    todo = [a for a in archs if a not in done]
    print(f"reference again with seed {args.seed}: {len(archs)} architectures, {len(done)} done, {len(todo)} to "
          f"train ({cfg.reference.train_samples} images x {cfg.reference.epochs} epochs, {ctx.threads} threads)",
          flush=True)
    data = load_dataset(cfg.data) if todo else None
    with path.open("a") as out:
        for i, a in enumerate(todo, 1):
            row = compute(Task(a, REFERENCE), ctx, data)
            out.write(json.dumps(row) + "\n")
            out.flush()
            done[a] = row
            print(f"  {i}/{len(todo)} {row['arch_id']}: {row['value']:.4f} (seed 0: "
                  f"{study['archs'][archs.index(a)]['reference']:.4f}), {row['seconds']:.0f} s", flush=True)
    second = np.array([done[a]["value"] for a in archs])
    first = np.array([a["reference"] for a in study["archs"]])
    estimates: dict[str, np.ndarray] = {e: np.array([a[e] for a in study["archs"]]) for e in study["estimators"]}
    if args.supernet_records.is_file():
        sn = {r["arch"]: r["value"] for r in map(json.loads, args.supernet_records.read_text().splitlines())
              if r.get("estimator") == SUPERNET}
        if all(a in sn for a in archs):
            estimates[SUPERNET] = np.array([sn[a] for a in archs])
    mean = (first + second) / 2

    def agree(y: np.ndarray, x: np.ndarray) -> dict[str, Any]:
        g = agreement(y, x, 1000, 0)
        return {"kendall_tau": g.kendall_tau, "kendall_ci": list(g.kendall_ci), "spearman": g.spearman}

    figures = {
        "k": len(archs), "reference": study["reference"], "seeds": [0, args.seed],
        "seed_vs_seed": agree(first, second),
        "abs_diff_points": {"median": float(np.median(np.abs(first - second)) * 100),
                            "max": float(np.max(np.abs(first - second)) * 100)},
        "span_points": {f"seed{s}": float((v.max() - v.min()) * 100) for s, v in ((0, first), (args.seed, second))},
        "estimators": {e: {"vs_seed0": agree(first, x), f"vs_seed{args.seed}": agree(second, x),
                           "vs_mean": agree(mean, x)} for e, x in estimates.items()},
        "seconds_per_training": float(np.median([done[a]["seconds"] for a in archs])),
        "archs": [{"arch_id": done[a]["arch_id"], "seed0": float(f), f"seed{args.seed}": float(s)}
                  for a, f, s in zip(archs, first, second, strict=True)],
    }
    record = {"command": ["python", "-m", "benchmarks.reference_noise", *sys.argv[1:]],
              "created": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"), "environment": base_environment(),
              "load_average_before": load_before[0], "load_average_after": os.getloadavg()[0],
              "wall_seconds": time.perf_counter() - t0, "figures": figures}
    write_record(args.out, record)
    s = figures["seed_vs_seed"]
    print(f"seed 0 vs seed {args.seed}: Kendall tau {s['kendall_tau']:.3f} ({s['kendall_ci'][0]:.2f} to "
          f"{s['kendall_ci'][1]:.2f}), Spearman {s['spearman']:.3f}; median |difference| "
          f"{figures['abs_diff_points']['median']:.1f} points")
    for e, v in sorted(figures["estimators"].items(), key=lambda kv: -kv[1]["vs_mean"]["kendall_tau"]):
        print(f"  {e}: tau vs seed 0 {v['vs_seed0']['kendall_tau']:.3f}, vs seed {args.seed} "
              f"{v[f'vs_seed{args.seed}']['kendall_tau']:.3f}, vs their mean {v['vs_mean']['kendall_tau']:.3f}")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
