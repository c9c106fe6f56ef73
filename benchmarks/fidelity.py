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
