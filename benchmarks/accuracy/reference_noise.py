"""How well the proxy-fidelity study's reference ranks its own architectures: the reference trained
again with other seeds, and each estimator's Kendall tau against every run and their mean.

Usage::

    python -m benchmarks.accuracy.reference_noise --cifar10 ARCHIVE [--seeds 1,2]
        [--out benchmarks/accuracy/records/reference_noise.json]

The study's reference (``python scripts/bench.py fidelity``: each architecture trained stand-alone,
10,000 images x 5 epochs, validated on 2,000 images) is the yardstick of every estimator, the
supernet's included. Its architectures and estimates are read from the committed record
(``benchmarks/accuracy/records/fidelity.json``), the supernet's estimates from the supernet benchmark's
folder (``.latnas/bench/supernet-full/fidelity/records.jsonl``) when it is there. Each architecture
is trained again with the same recipe and budget for each seed of ``--seeds`` (its
initialisation, its 10,000 training images and their order). The record gives the Kendall tau of
each pair of references; with three or more, each reference against the mean of the others (an
estimator far less noisy than one training, yet costing several); and the noise ceiling
(:func:`nas.studies.stats.noise_ceiling`): the tau an error-free estimator is expected to reach
against one reference, given how well the references agree with each other.

The trainings are appended to ``.latnas/bench/reference-noise/records-seed<N>.jsonl`` as they
finish, so a stopped run continues where it stopped.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from benchmarks.accuracy import fidelity
from benchmarks.common import ROOT, header, record_path, write_record
from nas.data import load_dataset
from nas.studies.fidelity import REFERENCE, SUPERNET, Task, _Context, compute
from nas.studies.stats import agreement, noise_ceiling


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cifar10", help="the CIFAR-10 JPEG archive (default: $LATNAS_CIFAR10_JPEG)")
    p.add_argument("--seeds", default="1", help="the further references' seeds, comma separated (default 1; the "
                                                "study's is 0)")
    p.add_argument("--work-dir", type=Path, default=ROOT / ".latnas" / "bench" / "reference-noise")
    p.add_argument("--supernet-records", type=Path,
                   default=ROOT / ".latnas" / "bench" / "supernet-full" / "fidelity" / "records.jsonl")
    p.add_argument("--out", type=Path, default=record_path("reference_noise", "full"))
    return p


def _train(seed: int, archs: list[str], study: dict[str, Any], cfg: Any, work_dir: Path) -> dict[str, dict[str, Any]]:
    """The reference with ``seed`` for every architecture (trained now where its record is missing)."""
    train = dataclasses.replace(cfg.train, seed=seed)
    ctx = _Context(cfg.data, train, (cfg.reference.train_samples, cfg.reference.epochs), cfg.cheap_train_samples,
                   cfg.zero_cost_batch, study["data"]["classes"], os.cpu_count() or 1)
    torch.set_num_threads(ctx.threads)
    path = work_dir / f"records-seed{seed}.jsonl"
    rows = [json.loads(x) for x in path.read_text().splitlines() if x.strip()] if path.is_file() else []
    done = {r["arch"]: r for r in rows}
    todo = [a for a in archs if a not in done]
    print(f"reference again with seed {seed}: {len(archs)} architectures, {len(done)} done, {len(todo)} to "
          f"train ({cfg.reference.train_samples} images x {cfg.reference.epochs} epochs, {ctx.threads} threads)",
          flush=True)
    data = load_dataset(cfg.data) if todo else None
    with path.open("a") as out:
        for i, a in enumerate(todo, 1):
            (row,) = compute(Task(a, REFERENCE), ctx, data)
            out.write(json.dumps(row) + "\n")
            out.flush()
            done[a] = row
            print(f"  {i}/{len(todo)} {row['arch_id']}: {row['value']:.4f} (seed 0: "
                  f"{study['archs'][archs.index(a)]['reference']:.4f}), {row['seconds']:.0f} s", flush=True)
    return done


def _agree(y: np.ndarray, x: np.ndarray) -> dict[str, Any]:
    g = agreement(y, x, 1000, 0)
    return {"kendall_tau": g.kendall_tau, "kendall_ci": list(g.kendall_ci), "spearman": g.spearman}


def figures_of(study: dict[str, Any], runs: dict[int, np.ndarray], estimates: dict[str, np.ndarray],
               seconds: list[float]) -> dict[str, Any]:
    """The record's figures: each pair of references, each reference against the mean of the others,
    the noise ceiling, and each estimator against every reference and their mean."""
    seeds = sorted(runs)
    mean = np.mean([runs[s] for s in seeds], axis=0)
    pairs = []
    for a, b in itertools.combinations(seeds, 2):
        diff = np.abs(runs[a] - runs[b]) * 100
        pairs.append({"seeds": [a, b], **_agree(runs[a], runs[b]),
                      "abs_diff_points": {"median": float(np.median(diff)), "max": float(np.max(diff))}})
    between = float(np.mean([p["kendall_tau"] for p in pairs]))
    return {
        "k": len(mean), "reference": study["reference"], "seeds": seeds, "pairs": pairs,
        "mean_tau_between": between, "noise_ceiling": noise_ceiling(between) if between > 0 else None,
        "one_vs_rest": ({str(s): _agree(runs[s], np.mean([runs[o] for o in seeds if o != s], axis=0))
                         for s in seeds} if len(seeds) > 2 else {}),
        "span_points": {f"seed{s}": float((v.max() - v.min()) * 100) for s, v in runs.items()},
        "estimators": {e: {**{f"vs_seed{s}": _agree(runs[s], x) for s in seeds}, "vs_mean": _agree(mean, x)}
                       for e, x in estimates.items()},
        "seconds_per_training": float(np.median(seconds)),
        "archs": [{"arch_id": a["arch_id"], **{f"seed{s}": float(runs[s][i]) for s in seeds}}
                  for i, a in enumerate(study["archs"])],
    }


def render(rec: dict[str, Any]) -> str:
    """The section of a record of this benchmark on its area's page (docs/benchmarks/<area>.md)."""
    from benchmarks.render import _f, table
    f = rec["figures"]
    seeds, others = f["seeds"], f["seeds"][1:]
    pairs = table(["references", "Kendall tau", "95% CI", "Spearman", "median difference", "largest"],
                  [[f"seed {p['seeds'][0]} vs seed {p['seeds'][1]}", f"**{p['kendall_tau']:.3f}**",
                    f"{p['kendall_ci'][0]:.2f} to {p['kendall_ci'][1]:.2f}", _f(p["spearman"], 3),
                    f"{p['abs_diff_points']['median']:.1f} points", f"{p['abs_diff_points']['max']:.1f} points"]
                   for p in f["pairs"]])
    rest = ""
    if f.get("one_vs_rest"):
        rest = "\n\nEach reference against the mean of the others (an estimator far less noisy than one training, " \
               "and costing several): " + "; ".join(
                   f"seed {s} **{v['kendall_tau']:.3f}** ({v['kendall_ci'][0]:.2f} to {v['kendall_ci'][1]:.2f})"
                   for s, v in f["one_vs_rest"].items()) + "."
    ceiling = "" if f.get("noise_ceiling") is None else (
        f"\n\nNoise ceiling: an error-free estimator is expected to reach tau **{f['noise_ceiling']:.3f}** against one "
        f"reference, given that the references agree at {f['mean_tau_between']:.3f} on average "
        "(`nas.studies.stats.noise_ceiling`: each run the truth plus independent Gaussian noise; a model, not a "
        "measurement).")
    rows = [[f"**{e}**" if e == "supernet" else e, *(_f(v[f"vs_seed{s}"]["kendall_tau"], 3) for s in seeds),
             _f(v["vs_mean"]["kendall_tau"], 3),
             f"{v['vs_mean']['kendall_ci'][0]:.2f} to {v['vs_mean']['kendall_ci'][1]:.2f}"]
            for e, v in sorted(f["estimators"].items(), key=lambda kv: -kv[1]["vs_mean"]["kendall_tau"])]
    return f"""The proxy-fidelity study's reference ({f['reference']['train_samples']:,} images x
{f['reference']['epochs']} epochs per architecture, seed 0) trained again for its {f['k']} architectures with
seed{'s' if len(others) > 1 else ''} {', '.join(map(str, others))} (another initialisation, other training
images, another order):

{pairs}{rest}{ceiling}

Each estimator's tau against each reference and against their mean:

{table(["estimator", *(f"tau vs seed {s}" for s in seeds), "tau vs mean", "95% CI (mean)"], rows)}"""


def main() -> int:
    """Run (or continue) the further references; write the record."""
    args = _parser().parse_args()
    seeds = sorted({int(x) for x in args.seeds.split(",") if x.strip()})
    if not seeds or 0 in seeds:
        print("error: --seeds names the further references' seeds, not 0 (the study's own)", file=sys.stderr)
        return 2
    archive = fidelity.cifar10_archive(args.cifar10)
    study = json.loads(record_path("fidelity", "full").read_text())["figures"]
    cfg = fidelity.config(archive, False, 1, "sqlite:///unused.db")
    if cfg.reference.train_samples != study["reference"]["train_samples"] or \
            cfg.reference.epochs != study["reference"]["epochs"]:
        print(f"error: the study's reference budget is now {cfg.reference}, its record's {study['reference']}",
              file=sys.stderr)
        return 2
    args.work_dir.mkdir(parents=True, exist_ok=True)
    archs = [a["arch"] for a in study["archs"]]
    load_before = os.getloadavg()
    t0 = time.perf_counter()
    runs = {0: np.array([a["reference"] for a in study["archs"]])}
    seconds = []
    for seed in seeds:
        done = _train(seed, archs, study, cfg, args.work_dir)
        runs[seed] = np.array([done[a]["value"] for a in archs])
        seconds += [done[a]["seconds"] for a in archs]
    estimates: dict[str, np.ndarray] = {e: np.array([a[e] for a in study["archs"]]) for e in study["estimators"]}
    if args.supernet_records.is_file():
        sn = {r["arch"]: r["value"] for r in map(json.loads, args.supernet_records.read_text().splitlines())
              if r.get("estimator") == SUPERNET}
        if all(a in sn for a in archs):
            estimates[SUPERNET] = np.array([sn[a] for a in archs])
    figures = figures_of(study, runs, estimates, seconds)
    command = ["python", "-m", "benchmarks.accuracy.reference_noise", *sys.argv[1:]]
    record = {**header("reference_noise", "full", command),
              "load_average_before": load_before[0], "load_average_after": os.getloadavg()[0],
              "wall_seconds": time.perf_counter() - t0, "figures": figures}
    write_record(args.out, record)
    for p in figures["pairs"]:
        print(f"seed {p['seeds'][0]} vs seed {p['seeds'][1]}: Kendall tau {p['kendall_tau']:.3f} "
              f"({p['kendall_ci'][0]:.2f} to {p['kendall_ci'][1]:.2f}); median |difference| "
              f"{p['abs_diff_points']['median']:.1f} points")
    for s, v in figures["one_vs_rest"].items():
        print(f"seed {s} vs the mean of the others: Kendall tau {v['kendall_tau']:.3f}")
    if figures["noise_ceiling"] is not None:
        print(f"noise ceiling against one reference: tau {figures['noise_ceiling']:.3f}")
    for e, v in sorted(figures["estimators"].items(), key=lambda kv: -kv[1]["vs_mean"]["kendall_tau"]):
        print(f"  {e}: tau vs the mean of the references {v['vs_mean']['kendall_tau']:.3f}")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
