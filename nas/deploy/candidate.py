"""An exported candidate read back from its folder (what ``python -m nas.export`` wrote)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from nas.core.errors import ConfigError, OptimizeError
from nas.core.paths import project_home
from search_spaces import Arch, SearchSpaceError, build
from search_spaces.builder import Net

REQUIRED_FILES = ("arch.json", "model.pt", "model.onnx", "report.json")


@dataclass(frozen=True)
class ExportedCandidate:
    """An export folder: the network, its deployment shape and how it was made.

    Attributes:
        folder: ``<exports>/<arch_id>/``.
        arch: the architecture.
        input_shape: the deployment shape ``(N, C, H, W)`` its ONNX model takes.
        num_classes: classifier width.
        info: ``arch.json``.
        report: ``report.json`` (latency settings, training, MLflow run).
    """

    folder: Path
    arch: Arch
    input_shape: tuple[int, int, int, int]
    num_classes: int
    info: dict[str, Any]
    report: dict[str, Any]

    @property
    def onnx_path(self) -> Path:
        """The Conv+BN-fused FP32 ONNX model of the export (already checked against PyTorch by the export)."""
        return self.folder / "model.onnx"

    @property
    def preprocessing(self) -> dict[str, Any] | None:
        """Mean and standard deviation the network was trained with (None: untrained)."""
        pre = self.info.get("preprocessing")
        return dict(pre) if isinstance(pre, dict) else None

    @property
    def export_run_id(self) -> str | None:
        """The MLflow run of the export (None when it was not logged)."""
        m = self.report.get("mlflow")
        return str(m["run_id"]) if isinstance(m, dict) and m.get("run_id") else None

    @property
    def tracking_uri(self) -> str | None:
        """The MLflow store the export was logged to."""
        m = self.report.get("mlflow")
        return str(m["tracking_uri"]) if isinstance(m, dict) and m.get("tracking_uri") else None

    @property
    def data_config(self) -> dict[str, Any] | None:
        """The dataset settings the export was trained on (None: untrained, or an older export)."""
        training = self.report.get("training")
        d = training.get("data_config") if isinstance(training, dict) else None
        return dict(d) if isinstance(d, dict) else None

    def network(self) -> Net:
        """The FP32 network with the exported weights, in inference mode (BatchNorm not folded)."""
        net = build(self.arch, num_classes=self.num_classes, in_chans=self.input_shape[1])
        try:
            state = torch.load(self.folder / "model.pt", map_location="cpu", weights_only=True)
            net.load_state_dict(state)
        except (RuntimeError, OSError, KeyError) as err:
            raise OptimizeError(f"{self.folder / 'model.pt'} holds no weights of {self.arch.encode()}: {err}") from None
        return net.eval()


def find_export(candidate: str, exports_dir: str | None) -> Path:
    """The export folder ``candidate`` names: a folder path, or an arch_id under ``exports_dir``
    (None: ``<home>/exports``, where ``nas.export`` writes by default).

    Raises:
        ConfigError: no such folder.
    """
    path = Path(candidate).expanduser()
    if not path.is_dir():
        path = (Path(exports_dir).expanduser() if exports_dir else project_home() / "exports") / candidate
    if not path.is_dir():
        raise ConfigError(
            "candidate", f"no export folder {candidate!r} (nor {str(path)!r}); export the candidate first with "
            f"`python -m nas.export candidate={candidate}`"
        )
    return path.resolve()


def read_export(folder: Path) -> ExportedCandidate:
    """Read and check an export folder.

    Raises:
        OptimizeError: a file is missing or does not describe the network.
    """
    missing = [f for f in REQUIRED_FILES if not (folder / f).is_file()]
    if missing:
        raise OptimizeError(f"{folder} is not a complete export: {', '.join(missing)} missing; run nas.export again")
    try:
        info = json.loads((folder / "arch.json").read_text())
        report = json.loads((folder / "report.json").read_text())
        arch = Arch.decode(info["arch"])
        shape = tuple(int(d) for d in info["input_shape"])
        num_classes = int(info["num_classes"])
    except (json.JSONDecodeError, KeyError, TypeError, ValueError, SearchSpaceError) as err:
        raise OptimizeError(f"{folder / 'arch.json'} cannot be read: {err}") from None
    if len(shape) != 4:
        raise OptimizeError(f"{folder / 'arch.json'}: input_shape {list(shape)} is not (N, C, H, W)")
    return ExportedCandidate(folder, arch, (shape[0], shape[1], shape[2], shape[3]), num_classes, info, report)
