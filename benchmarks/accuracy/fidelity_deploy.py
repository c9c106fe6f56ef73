"""Rung fidelity at the deployment budget: how well each rung of a multi-fidelity search ranks
networks against training at the budget a network is deployed with.

Usage::

    python -m benchmarks.accuracy.fidelity_deploy --cifar10 ARCHIVE [--workers 2] [--quick]

The ``nas.fidelity`` study (:mod:`nas.studies.fidelity`) on ``mobile_cifar`` and CIFAR-10's JPEG
training images, validated on every image carved from them: :data:`DEPLOY` ``k`` networks spread
over the space's MACs range, each trained from scratch as the *reference* (30,000 images x 10
epochs, the ``train`` recipe) with two seeds, and the study's estimators against the mean of the
two: ``rung<k>`` for the rungs of ``data=cifar10_jpeg``'s first CPU default (one training through the
rungs, each rung continuing from the one below, as a search trains them), ``train_2ep`` on 5,000
images (a larger bottom rung), the training-free scores and MACs. The two seeds' agreement gives the
reference's own noise ceiling. Every estimate is appended to :data:`STUDY_DIR` ``/records.jsonl`` as it
is made, and that file is committed, so a stopped run continues where it stopped, on this machine or
on another one (the study takes several hours of a 2-core machine); the record goes to
``benchmarks/accuracy/records/fidelity_deploy.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from benchmarks.accuracy.fidelity import cifar10_archive
from benchmarks.common import ROOT, Headline, header, record_path, write_record
from nas.core.config import DataConfig, FidelityConfig, ReferenceBudget, RungConfig, TrackingConfig, TrainConfig
from nas.studies.fidelity import run_fidelity, table
from search_spaces.space import SPACES_DIR

DEPLOY = {"k": 10, "reference": (30000, 10), "extra_seeds": [1], "cheap_train_samples": 5000, "cheap_epochs": [2],
          "rungs": [(2500, 2), (10000, 3), (20000, 8)], "val": None}
"""The study: ``rungs`` are the first choice of ``conf/rungs/cifar10_cpu.yaml``, which this study replaced
(its rungs now start at 10,000 x 3: the cheaper rung ranked no better than chance); ``val`` None
validates on every carved image."""
STUDY_DIR = ROOT / "benchmarks" / "accuracy" / "records" / "fidelity_deploy"
"""The full study's folder: its ``records.jsonl`` is committed (the rest of the folder is written again)."""
QUICK = {"k": 4, "reference": (400, 1), "extra_seeds": [1], "cheap_train_samples": 200, "cheap_epochs": [1],
         "rungs": [(100, 1), (200, 1)], "val": 300}


def config(archive: Path, quick: bool, workers: int, tracking_uri: str) -> FidelityConfig:
    """The study's configuration (the same settings resume the same study)."""
    size: dict[str, Any] = QUICK if quick else DEPLOY
    mode = "quick" if quick else "deploy"
    return FidelityConfig(
        space=yaml.safe_load((SPACES_DIR / "mobile_cifar.yaml").read_text()),
        space_source="search_spaces/spaces/mobile_cifar.yaml", k=size["k"],
        reference=ReferenceBudget(train_samples=size["reference"][0], epochs=size["reference"][1],
                                  extra_seeds=list(size["extra_seeds"])),
        cheap_train_samples=size["cheap_train_samples"], cheap_epochs=list(size["cheap_epochs"]),
        rungs=[RungConfig(n, e) for n, e in size["rungs"]], workers=workers, name=f"cifar10-{mode}",
        output_dir=str((ROOT / ".latnas" / "bench" / "fidelity-quick") if quick else STUDY_DIR),
        data=DataConfig(name="image_folder", path=str(archive), resolution=32, val_fraction=0.1,
                        max_val_samples=size["val"]),
        train=TrainConfig(device="cpu"), tracking=TrackingConfig(uri=tracking_uri),
    )


def study_command(cfg: FidelityConfig) -> str:
    """The ``nas.fidelity`` command of the same study."""
    rungs = ",".join(f"{{train_images:{r.train_images},epochs:{r.epochs}}}" for r in cfg.rungs)
    val = "null" if cfg.data.max_val_samples is None else cfg.data.max_val_samples
    return ("python -m nas.fidelity +space=mobile_cifar data=cifar10_jpeg data.path=CIFAR10_ARCHIVE "
            f"data.max_train_samples=null data.max_val_samples={val} k={cfg.k} "
            f"reference.train_samples={cfg.reference.train_samples} reference.epochs={cfg.reference.epochs} "
            f"'reference.extra_seeds=[{','.join(map(str, cfg.reference.extra_seeds))}]' "
            f"cheap_train_samples={cfg.cheap_train_samples} 'cheap_epochs=[{','.join(map(str, cfg.cheap_epochs))}]' "
            f"'rungs=[{rungs}]' workers={cfg.workers} train.device=cpu")


def headline(rec: dict[str, Any]) -> Headline:
    """The record's row of the results table: the last rung's rank agreement with full training."""
    f = rec["figures"]
    rungs = sorted(k for k in f["estimators"] if k.startswith("rung"))
    top = f["estimators"][rungs[-1]]
    return Headline(
        "Accuracy fidelity: the search's rungs against full training",
        f"last rung's Kendall tau {top['kendall_tau']:.2f} over {top['n']} networks (95% CI "
        f"{top['kendall_ci'][0]:.2f} to {top['kendall_ci'][1]:.2f})",
        f"training at the deployment budget; its own seed-to-seed noise ceiling tau {f['noise_ceiling']:.2f}",
        "none set", None)


def render(rec: dict[str, Any]) -> str:
    """The section of a record of this benchmark on its area's page (docs/benchmarks/<area>.md)."""
    from benchmarks.render import _f, _pct
    from benchmarks.render import table as md_table

    f = rec["figures"]
    ests = sorted(f["estimators"], key=lambda e: -f["estimators"][e]["kendall_tau"])
    rungs = {f"rung{i}": r for i, r in enumerate(f["rungs"])}

    def label(e: str) -> str:
        if e in rungs:
            below = ", ".join(f"{x['train_images']:,} x {x['epochs']}" for x in f["rungs"][: int(e[4:]) + 1])
            return f"{e} ({below})"
        if e.startswith("train_"):
            return f"{e} ({f['cheap_train_samples']:,} images)"
        return e

    rows = [[label(e), f"**{x['kendall_tau']:.3f}**" if e in rungs else f"{x['kendall_tau']:.3f}",
             f"{x['kendall_ci'][0]:.2f} to {x['kendall_ci'][1]:.2f}", f"{x['spearman']:.3f}",
             f"{x['top_overlap']:.0%} of {x['top_n']}", _f(x["seconds_per_candidate"], 1),
             f"{x['cost_share_of_reference']:.3f}"] for e in ests for x in [f["estimators"][e]]]
    runs = "; ".join(f"{r.replace('reference_seed', 'seed ')} against seed 0: tau {a['kendall_tau']:.3f} "
                     f"({a['kendall_ci'][0]:.2f} to {a['kendall_ci'][1]:.2f})" for r, a in f["reference_runs"].items())
    ceiling = "" if f.get("noise_ceiling") is None else (
        f" Noise ceiling: an error-free estimator is expected to reach tau **{f['noise_ceiling']:.3f}** against one "
        "reference run (`nas.studies.stats.noise_ceiling`, a Gaussian model of the runs' agreement).")
    runs_of = ["reference", *(f"reference_seed{s}" for s in f["reference"]["extra_seeds"])]
    mean = [sum(a[r] for r in runs_of) / len(runs_of) for a in f["archs"]]
    ref = f["reference"]
    return f"""How well does each rung of a multi-fidelity search rank networks against the budget they are
deployed with? {f['k']} networks of `{f['space']}` (seeded, spread over the MACs range), each trained
from scratch as the **reference**: {ref['train_samples']:,} CIFAR-10 training images x {ref['epochs']}
epochs with the `train` recipe, seeds 0 and {', '.join(map(str, ref['extra_seeds']))}, validated on
{f['data']['val']:,} images carved from the training split; the estimators are ranked
against the mean of the seeds (accuracies {_pct(min(mean))} - {_pct(max(mean))}). `rung<k>` is a
search's figure at the end of rung k of the rungs studied, the first choice of
`conf/rungs/cifar10_cpu.yaml` (one training through the rungs, each continuing from the one below, so
rung 1 has had rung 0 before it; its cost is the seconds to the end of rung k).
Kendall's tau and Spearman's rho with 95% bootstrap intervals; cost as median seconds per network
on this machine and as a share of one reference training.

{md_table(["estimator", "Kendall tau", "95% CI", "Spearman", "top-10%", "s / network", "cost / reference"], rows)}

The reference's own repeatability: {runs}.{ceiling}

Reproduce the study itself (it resumes from its records): `{f.get('study_command', '')}`"""


def main(argv: list[str] | None = None) -> int:
    """Run (or continue) the study; write the record."""
    p = argparse.ArgumentParser(prog="python -m benchmarks.accuracy.fidelity_deploy",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--cifar10", help="the CIFAR-10 JPEG archive (default: $LATNAS_CIFAR10_JPEG)")
    p.add_argument("--workers", type=int, default=2, help="estimates at once, each in its own process")
    p.add_argument("--quick", action="store_true",
                   help="a tiny study, its record under benchmarks/accuracy/records/quick/")
    args = p.parse_args(argv)
    if args.workers < 1:
        p.error(f"--workers {args.workers}: must be at least 1")
    archive = cifar10_archive(args.cifar10)
    load_before = os.getloadavg()
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="latnas-fidelity-deploy-") as tmp:
        cfg = config(archive, args.quick, args.workers, f"sqlite:///{Path(tmp) / 'mlflow.db'}")
        try:
            result = run_fidelity(cfg, log=lambda line: print(line, flush=True))
        except KeyboardInterrupt:  # run_fidelity said how many estimates are recorded; the same command goes on
            return 130
    print(table(result, cfg), flush=True)
    figures = json.loads((result.folder / "fidelity.json").read_text())
    figures["study_command"] = study_command(cfg)
    figures["computed_in_this_run"] = result.computed
    mode = "quick" if args.quick else "full"
    command = ["python", "-m", "benchmarks.accuracy.fidelity_deploy", "--cifar10", "DIR/cifar10-train-jpeg.tar.gz",
               *(["--quick"] if args.quick else [])]
    record = {**header("fidelity_deploy", mode, command), "load_average_before": load_before[0],
              "load_average_after": os.getloadavg()[0], "wall_seconds": time.perf_counter() - t0, "figures": figures}
    path = write_record(record_path("fidelity_deploy", mode), record)
    print(f"wrote {path}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
