"""What every benchmark record holds: machine, versions, date, command, mode; and small statistics."""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import shlex
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from latency_predictor.measurement.environment import machine, versions

ROOT = Path(__file__).resolve().parents[1]
"""The repository this benchmark suite belongs to (its records and BENCHMARKS.md are written there)."""
BENCH_DIR = ROOT / "benchmarks"
AREAS = ("latency", "prediction", "search", "accuracy", "deployment", "reliability")
"""The areas of the suite, one subpackage each, in the order the results are read."""
AREA = {
    "latency": "latency", "openvino_parity": "latency", "runtimes": "latency", "spread": "latency", "tail": "latency",
    "contention": "latency", "agent": "latency",
    "predictor": "prediction", "tail_predictor": "prediction", "transfer": "prediction", "transfer_many": "prediction",
    "transfer_runtimes": "prediction",
    "search": "search", "per_runtime": "search", "sampler": "search", "screening": "search", "references": "search",
    "references_cifar10": "search", "cifar10_deploy": "search", "cifar10_fronts": "search", "cifar10_int8": "search",
    "fidelity": "accuracy", "reference_noise": "accuracy", "fidelity_deploy": "accuracy", "supernet": "accuracy",
    "train_speed": "accuracy",
    "deployment": "deployment",
    "reliability": "reliability", "scale": "reliability",
}
"""Each benchmark's area (by record name): its module, notes and records live in ``benchmarks/<area>/``."""
VERSIONED = ("torch", "numpy", "onnxruntime", "onnx", "optuna", "ray", "mlflow", "scikit-learn")


@dataclass(frozen=True)
class Headline:
    """A benchmark's row of the results table at the top of ``BENCHMARKS.md``, from its record.

    Attributes:
        claim: what the row answers ("latency predictor accuracy").
        figure: the figure as measured, with its unit.
        against: what the figure is compared with: the anchor, a baseline, or a peer's published number.
        goal: the goal set for the figure ("none set" for a measurement without one).
        met: whether the figure meets the goal (None: no goal is set).
    """

    claim: str
    figure: str
    against: str
    goal: str
    met: bool | None


def machine_and_load() -> dict[str, Any]:
    """The machine a figure was measured on (:func:`~latency_predictor.measurement.environment.machine`),
    with its load average now."""
    return {**machine(), "load_average": [round(x, 2) for x in os.getloadavg()]}


def command_line(argv: Sequence[str] | None = None) -> str:
    """The command as a user types it (``python scripts/bench.py ...``)."""
    args = sys.argv[1:] if argv is None else list(argv)
    return " ".join(["python scripts/bench.py", *(shlex.quote(a) for a in args)])


def header(name: str, mode: str, command: str | Sequence[str], extra_versions: Sequence[str] = ()) -> dict[str, Any]:
    """The common fields of every record, one layout for all: benchmark name, mode (``full`` or
    ``quick``), the command as typed, date, machine (with its load average now) and versions
    (:data:`VERSIONED` and ``extra_versions``)."""
    return {
        "benchmark": name, "mode": mode, "command": command if isinstance(command, str) else shlex.join(command),
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "machine": machine_and_load(), "versions": versions(dict.fromkeys([*VERSIONED, *extra_versions])),
    }


def area(name: str) -> str:
    """The area of the benchmark whose record is called ``name`` (``predictor_seed1`` is ``predictor``'s).

    Raises:
        KeyError: no benchmark has that name.
    """
    return AREA[name] if name in AREA else AREA[name.rpartition("_")[0]]


def records_dir(area_name: str) -> Path:
    """An area's records folder, ``benchmarks/<area>/records/`` (quick records under ``records/quick/``)."""
    return BENCH_DIR / area_name / "records"


def record_path(name: str, mode: str, out_dir: Path | None = None) -> Path:
    """Where a benchmark's record goes: ``benchmarks/<area>/records/<name>.json``, quick ones under
    ``records/quick/`` (under ``out_dir`` instead when given)."""
    base = out_dir if out_dir is not None else records_dir(area(name))
    return (base / "quick" if mode == "quick" else base) / f"{name}.json"


def write_record(path: Path, record: dict[str, Any]) -> Path:
    """Write ``record`` as indented JSON (creating the folder), its paths made :func:`portable`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(portable(record), indent=2, default=_jsonable) + "\n")
    return path


_PATH = re.compile(r"(?<![\w.:/-])(?:/|(?:\.\./)+)(?:[^\s/\"']+/)*[^\s/\"']+")
"""An absolute path, or one that climbs out of the working folder (``../``), as a word of a string."""


def portable(x: Any) -> Any:
    """``x`` (a record, or any of its values) with its paths made machine-independent.

    An absolute path inside the repository becomes relative to its root; any other absolute path,
    or one starting with ``../``, becomes ``DIR/<name>``
    (the data archive, a scratch folder): a record names what was used, not where one machine
    keeps it.
    """
    if isinstance(x, dict):
        return {k: portable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [portable(v) for v in x]
    if isinstance(x, Path):
        x = str(x)
    if isinstance(x, str):
        return _PATH.sub(_relative, x)
    return x


def _relative(m: re.Match[str]) -> str:
    path = Path(m.group(0))
    if path.is_absolute() and path.is_relative_to(ROOT):
        return path.relative_to(ROOT).as_posix() or "."
    return f"DIR/{path.name}"


def _jsonable(x: object) -> object:
    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, np.ndarray):
        return x.tolist()
    if isinstance(x, Path):
        return x.name
    raise TypeError(f"not JSON serialisable: {type(x).__name__}")


def spread(values: Sequence[float]) -> dict[str, float]:
    """Median, quartiles, min and max of ``values`` (the spread reported everywhere)."""
    a = np.asarray(values, dtype=float)
    if a.size == 0:
        raise ValueError("spread of no values")
    q25, med, q75 = np.percentile(a, [25, 50, 75])
    return {"n": int(a.size), "median": float(med), "q25": float(q25), "q75": float(q75),
            "min": float(a.min()), "max": float(a.max())}
