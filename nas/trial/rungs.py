"""Multi-fidelity training of one candidate: rung after rung, each continuing from the weights of the rung below.

A rung (:class:`~nas.core.config.RungConfig`) is a training budget: ``train_images`` images (nested
subsets, drawn with the recipe's seed) for ``epochs`` epochs, under a fresh warm-up and cosine
schedule that starts from the weights the candidate ended the rung below with (warm restarts, as
in SGDR). After each rung the trial reports the candidate's accuracy and reward *at that rung*;
Ray Tune's ASHA scheduler (:mod:`nas.adapters.ray_tune`) then stops it or lets it go on.

The scheduler reads :data:`RUNG_STEP`: :func:`milestone` of the rung just finished in a rung's
last report, and of the rung below in the reports of the epochs inside a rung, so ASHA's
milestones (``1, eta, eta**2, ...`` for ``reduction_factor`` eta) fall exactly on the rungs' ends.

Every finished rung is saved (:class:`RungCheckpoints`): the weights and the rung reports so
far, under the search's folder. A trial of the same candidate that starts again (its process
died, or the search was resumed) loads the highest saved rung, reports the saved figures again
(so the scheduler decides on them as before) and trains on from there instead of from the start.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from nas.core.config import RungConfig, TrainConfig

log = logging.getLogger(__name__)

RUNG_STEP = "rung_step"
"""The report field ASHA promotes on (its ``time_attr``)."""


def milestone(rung: int, reduction_factor: int) -> int:
    """ASHA's milestone at the end of ``rung`` (0-based): ``reduction_factor ** rung``."""
    return int(reduction_factor**rung)


def fingerprint(arch: str, rungs: tuple[RungConfig, ...], train: TrainConfig, data: dict[str, Any]) -> str:
    """What a saved rung is valid for: the architecture, the rungs, the recipe and the data."""
    text = json.dumps([arch, [asdict(r) for r in rungs], asdict(train), data], sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class SavedRung:
    """The highest rung saved for a candidate: its index, weights and the rung reports up to it."""

    rung: int
    state: dict[str, torch.Tensor]
    reports: list[dict[str, Any]]


@dataclass(frozen=True)
class RungCheckpoints:
    """Saved rungs of the candidates of one search, one file per candidate (the highest rung only).

    Attributes:
        folder: where they are kept (absolute; on a cluster, a folder every node shares, or each
            node keeps its own and a candidate restarted elsewhere trains from its first rung).
    """

    folder: Path

    def _path(self, arch_id: str, key: str) -> Path:
        return self.folder / f"{arch_id}-{key}.pt"

    def load(self, arch_id: str, key: str) -> SavedRung | None:
        """The highest rung saved for ``arch_id`` under ``key`` (None: none)."""
        path = self._path(arch_id, key)
        if not path.is_file():
            return None
        blob = torch.load(path, map_location="cpu", weights_only=True)
        return SavedRung(int(blob["rung"]), blob["state"], list(blob["reports"]))

    def save(self, arch_id: str, key: str, rung: int, model: nn.Module, reports: list[dict[str, Any]]) -> None:
        """Save ``model``'s weights after ``rung`` with the rung reports so far (atomically)."""
        path = self._path(arch_id, key)
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        state = {k: v.detach().to("cpu") for k, v in model.state_dict().items()}
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            torch.save({"rung": rung, "state": state, "reports": [_plain(r) for r in reports]}, tmp)
            os.replace(tmp, path)
        except OSError as err:
            # A checkpoint only saves time on a restart; the trial's figures do not depend on it.
            tmp.unlink(missing_ok=True)
            log.warning("could not save rung %d of %s in %s (%s); a restarted trial of it trains from its first rung",
                        rung, arch_id, self.folder, err)


def _plain(report: dict[str, Any]) -> dict[str, Any]:
    # weights_only loading takes plain containers and scalars only
    return {k: v for k, v in report.items() if isinstance(v, str | int | float | bool) or v is None}
