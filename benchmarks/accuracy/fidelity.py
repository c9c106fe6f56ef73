"""Proxy fidelity on CIFAR-10: the ``nas.fidelity`` study at a size that fits this 2-core machine.

The study (:mod:`nas.studies.fidelity`) runs on the ``mobile_cifar`` space and CIFAR-10's JPEG
training images (validation carved from them), with the budgets below; its folder
(``.latnas/bench/fidelity-<mode>``) keeps every estimate, so a stopped run continues where it
stopped. The CIFAR-10 archive is found with ``--cifar10 PATH``, else ``$LATNAS_CIFAR10_JPEG``.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from benchmarks.common import ROOT
from nas.core.config import DataConfig, FidelityConfig, ReferenceBudget, TrackingConfig, TrainConfig
from nas.studies.fidelity import run_fidelity, table
from search_spaces.space import SPACES_DIR

CIFAR10_ENV = "LATNAS_CIFAR10_JPEG"

FULL = {"k": 20, "reference": (10000, 5), "cheap_train_samples": 2500, "cheap_epochs": [1, 2, 3], "val": 2000}
QUICK = {"k": 6, "reference": (1000, 2), "cheap_train_samples": 500, "cheap_epochs": [1], "val": 500}


def cifar10_archive(given: str | None) -> Path:
    """The CIFAR-10 JPEG archive: ``given``, else ``$LATNAS_CIFAR10_JPEG``.

    Raises:
        SystemExit: neither is set, or the file is missing.
    """
    path = given or os.environ.get(CIFAR10_ENV)
    if not path:
        raise SystemExit(f"the CIFAR-10 benchmarks need the JPEG archive: pass --cifar10 PATH or set ${CIFAR10_ENV}")
    if not Path(path).is_file():
        raise SystemExit(f"--cifar10 / ${CIFAR10_ENV}: no file at {path}")
    return Path(path).resolve()


def config(archive: Path, quick: bool, workers: int, tracking_uri: str) -> FidelityConfig:
    """The study's configuration at benchmark size."""
    size = QUICK if quick else FULL
    mode = "quick" if quick else "full"
    return FidelityConfig(
        space=yaml.safe_load((SPACES_DIR / "mobile_cifar.yaml").read_text()),
        space_source="search_spaces/spaces/mobile_cifar.yaml", k=int(size["k"]),  # type: ignore[call-overload]
        reference=ReferenceBudget(*size["reference"]),  # type: ignore[misc]
        cheap_train_samples=int(size["cheap_train_samples"]),  # type: ignore[call-overload]
        cheap_epochs=list(size["cheap_epochs"]),  # type: ignore[call-overload]
        workers=workers, name=f"cifar10-{mode}", output_dir=str(ROOT / ".latnas" / "bench" / f"fidelity-{mode}"),
        data=DataConfig(name="image_folder", path=str(archive), resolution=32, val_fraction=0.1,
                        max_val_samples=int(size["val"])),  # type: ignore[call-overload]
        train=TrainConfig(device="cpu"), tracking=TrackingConfig(uri=tracking_uri),
    )


def run(archive: Path, quick: bool, workers: int = 2, log: Callable[[str], None] = print) -> dict[str, Any]:
    """Run (or resume) the study; its record, the command that reproduces it, and the table."""
    with tempfile.TemporaryDirectory(prefix="latnas-fidelity-") as tmp:
        cfg = config(archive, quick, workers, f"sqlite:///{Path(tmp) / 'mlflow.db'}")
        result = run_fidelity(cfg, log=log)
    for line in table(result, cfg).splitlines():
        log(f"  {line}")
    record = json.loads((result.folder / "fidelity.json").read_text())
    record["study_command"] = (
        "python -m nas.fidelity +space=mobile_cifar data=cifar10_jpeg data.path=CIFAR10_ARCHIVE "
        f"data.max_train_samples=null data.max_val_samples={cfg.data.max_val_samples} k={cfg.k} "
        f"reference.train_samples={cfg.reference.train_samples} reference.epochs={cfg.reference.epochs} "
        f"cheap_train_samples={cfg.cheap_train_samples} cheap_epochs=[{','.join(map(str, cfg.cheap_epochs))}] "
        f"workers={workers} train.device=cpu"
    )
    record["computed_in_this_run"] = result.computed
    return record


def render(rec: dict[str, Any]) -> str:
    """The section of a record of this benchmark on its area's page (docs/benchmarks/<area>.md)."""
    from benchmarks.render import _f, _pct, table
    f = rec["figures"]
    ests = sorted(f["estimators"], key=lambda e: -f["estimators"][e]["kendall_tau"])
    rows = []
    for e in ests:
        x = f["estimators"][e]
        rows.append([e, f"{x['kendall_tau']:.3f}", f"{x['kendall_ci'][0]:.2f} to {x['kendall_ci'][1]:.2f}",
                     f"{x['spearman']:.3f}", f"{x['spearman_ci'][0]:.2f} to {x['spearman_ci'][1]:.2f}",
                     f"{x['top_overlap']:.0%} of {x['top_n']}", _f(x["seconds_per_candidate"], 2),
                     f"{x['cost_share_of_reference']:.3f}"])
    rows.append(["reference", "1", "-", "1", "-", "-", _f(f["reference_seconds_per_candidate"], 1), "1"])
    ref = [a["reference"] for a in f["archs"]]
    d = f["data"]
    return f"""Does a cheap accuracy estimate rank architectures like real training does? {f['k']} architectures of
`{f['space']}` (seeded; the smallest and largest by MACs, the rest spread over the MACs range), each
trained as the **reference**: {f['reference']['train_samples']:,} CIFAR-10 training images for
{f['reference']['epochs']} epochs with the `train` recipe, validated on {d['val']:,} images carved from the
training split (the JPEG copy of CIFAR-10's training images; pixels differ slightly from the original
release, so accuracies are close to, not identical with, published CIFAR-10 figures). Reference
accuracies range {_pct(min(ref))} - {_pct(max(ref))}. The cheap estimators score the same networks:
`train_<e>ep` trains {f['cheap_train_samples']:,} images for e epochs with the same recipe; the
training-free scores look at one minibatch at initialisation; params and MACs are the trivial
baselines. Kendall's tau and Spearman's rho against the reference, with 95% bootstrap intervals over
the architectures; top-10% overlap; cost as median seconds per candidate (on this machine, all in one
run) and as a share of the reference's.

{table(["estimator", "Kendall tau", "95% CI", "Spearman", "95% CI", "top-10%", "s / candidate", "cost / reference"],
       rows)}

Reproduce the study itself (it resumes from its records): `{f.get('study_command', '')}`"""
