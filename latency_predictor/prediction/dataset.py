"""A latency dataset on disk: one folder, a header and one JSON line per measurement.

Layout::

    DIR/dataset.json         what the measurements are for (PredictorTarget) and the format version
    DIR/measurements.jsonl   one record per measurement, appended as they are made

A record holds the architecture string, its feature vector, the full measured
:class:`~latency_predictor.LatencyResult` (``to_dict()``), the device fingerprint's digest,
where the architecture came from (``origin``: ``extreme``, ``axis``, ``uniform``,
``mutation``, ``retry``, ``repeat``, ``confirm``, ``informative``) and whether the measurement was disturbed.

Disturbed measurements: on a shared machine another process can take the CPU in the middle of
a measurement. The backends record ``cpu_per_wall`` (CPU seconds of the measuring process per
wall second while timing; about the runtime's thread count when undisturbed); a measurement on
the CPU whose ``cpu_per_wall`` is under ``min_cpu_share`` times the thread count, or one the
protocol flagged unstable, is *disturbed*. Such a record is kept (nothing is thrown away), and
the collector measures the architecture again later. An architecture's latency is the median
of its undisturbed records' p50; architectures with only disturbed records are left out of
training and evaluation unless asked for, and the report says how many.

Sessions: on a shared host, other work can slow a whole measurement session without taking the
measuring process's CPU (its neighbours' use of the caches and memory, or a runtime whose threads
spin while they wait), so the check above does not see it. Such interference only ever slows a
session. Where every architecture was measured in two or more sessions (``collect n=0
repeats=N`` measures N of them again), ``table(combine="min")`` takes the fastest session's figure
instead of the median, which discards a slowed session.

Another statistic: a predictor of the tail (``statistic="p99"``, see
:mod:`latency_predictor.measurement.statistic`) learns the median of the records' p99 instead. A record
whose p99 rests on fewer timed runs than :data:`~latency_predictor.measurement.statistic.MIN_RUNS` asks for
is no p99 and is not used for it (``collect --statistic p99`` times enough runs); the table
counts the architectures left out that way. Such a dataset still serves a p50 predictor.

The files are plain JSON: reading them never executes code.
"""

from __future__ import annotations

import datetime as dt
import itertools
import json
import math
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from statistics import NormalDist
from typing import Any

import numpy as np

from latency_predictor.errors import ConfigError, DatasetError, MeasurementError
from latency_predictor.measurement.fingerprint import DeviceFingerprint
from latency_predictor.measurement.protocol import LatencyResult
from latency_predictor.measurement.statistic import MIN_RUNS, check_stat, stat_value
from latency_predictor.prediction.features import FEATURE_VERSION
from latency_predictor.prediction.metrics import median_rel_se
from latency_predictor.prediction.target import PredictorTarget
from search_spaces import arch_id_of

DATASET_FORMAT = "latnas.latency_dataset"
DATASET_VERSION = 1
HEADER_FILE = "dataset.json"
RECORDS_FILE = "measurements.jsonl"
ORIGINS: tuple[str, ...] = ("extreme", "axis", "uniform", "mutation", "retry", "repeat", "confirm", "informative")
DEFAULT_MIN_CPU_SHARE = 0.9
COMBINE: tuple[str, ...] = ("median", "min")
"""How :meth:`Dataset.table` combines an architecture's records (module docstring)."""


def measurement_threads(result: LatencyResult) -> int | None:
    """CPU threads the runtime of ``result`` computes with, or None when it is not a CPU measurement."""
    if result.device != "cpu":
        return None
    env = result.environment
    raw = env.get("intra_op_threads", env.get("torch_threads", "1"))
    threads = int(raw) if str(raw).isdigit() else 1
    usable = env.get("cpus_usable", "")
    return min(threads, int(usable)) if usable.isdigit() and int(usable) > 0 else threads


def disturbance(result: LatencyResult, min_cpu_share: float = DEFAULT_MIN_CPU_SHARE) -> str | None:
    """Why ``result`` is not to be trusted as it stands, or None when it is undisturbed.

    Returns:
        ``"unstable"`` when the protocol never reached its stability threshold; a phrase with
        the CPU share when other work took the CPU while timing; else None.
    """
    if not result.stable:
        return "unstable"
    threads = measurement_threads(result)
    share = result.extra.get("cpu_per_wall")
    if threads is not None and isinstance(share, int | float) and share < min_cpu_share * threads:
        return f"cpu_per_wall {share:.2f} < {min_cpu_share:g} x {threads} thread(s): other work took the CPU"
    return None


def within_rel_se(result: LatencyResult, statistic: str = "p50") -> float:
    """Relative standard error of ``result``'s ``statistic`` from its within-run spread.

    The p50's is ``sqrt(pi/2) * cv / sqrt(runs)`` (:func:`~latency_predictor.prediction.metrics.median_rel_se`).
    A higher percentile's comes from its distribution-free 95% interval (``stats.ci95``: half its
    width over 1.96), or, for a record without one, from the normal approximation
    ``sqrt(q (1 - q) / runs) / phi(z_q) * cv``.
    """
    s = result.stats
    n = max(s.n, 1)
    if check_stat(statistic) == "p50":
        return median_rel_se(s.cv, n)
    value = stat_value(result, statistic)
    ci = s.ci95.get(statistic)
    if ci and len(ci) == 2 and value > 0:
        return max(float(ci[1]) - float(ci[0]), 0.0) / (2 * 1.96 * value)
    q = int(statistic[1:]) / 100
    normal = NormalDist()
    return math.sqrt(q * (1 - q)) / normal.pdf(normal.inv_cdf(q)) * max(s.cv, 0.0) / math.sqrt(n)


@dataclass(frozen=True)
class Record:
    """One measurement of one architecture.

    Attributes:
        arch: canonical architecture string.
        result: the measured latency record.
        origin: why it was measured (see :data:`ORIGINS`).
        disturbed: the reason it is not trusted (see :func:`disturbance`), or None.
        time: when it was recorded (UTC, ISO 8601).
        features: its feature vector at the dataset's input shape.
    """

    arch: str
    result: LatencyResult
    origin: str
    disturbed: str | None
    time: str
    features: tuple[float, ...] = field(default=(), repr=False)

    def to_json(self) -> dict[str, Any]:
        """The JSON line's object."""
        return {
            "arch": self.arch, "arch_id": arch_id_of(self.arch), "origin": self.origin,
            "disturbed": self.disturbed, "time": self.time,
            "fingerprint": DeviceFingerprint.of_result(self.result).digest,
            "feature_version": FEATURE_VERSION, "features": list(self.features),
            "result": self.result.to_dict(),
        }


@dataclass(frozen=True)
class LatencyTable:
    """One row per architecture: what training and evaluation use.

    Attributes:
        archs: architecture strings.
        latency_ms: median (or, asked for, lowest) ``statistic`` (p50 by default) over the
            architecture's undisturbed records (all its records for an architecture that has no
            undisturbed one, when those are included).
        within_rel_se: relative standard error of that number from the within-run spread
            (:func:`within_rel_se` per record, root mean square, divided by ``sqrt(records)``).
        records: records the number is the median of.
        disturbed: True where every record of the architecture was disturbed.
        statistic: the statistic of each record the table holds the median of.
        too_few_runs: architectures left out because none of their records has the timed runs
            ``statistic`` needs (:data:`~latency_predictor.measurement.statistic.MIN_RUNS`; always 0 for the p50).
    """

    archs: tuple[str, ...]
    latency_ms: np.ndarray
    within_rel_se: np.ndarray
    records: np.ndarray
    disturbed: np.ndarray
    statistic: str = "p50"
    too_few_runs: int = 0

    def __len__(self) -> int:
        return len(self.archs)

    def subset(self, idx: Sequence[int] | np.ndarray) -> LatencyTable:
        """The rows ``idx``, in that order."""
        i = np.asarray(idx, dtype=np.int64)
        return LatencyTable(tuple(self.archs[k] for k in i), self.latency_ms[i], self.within_rel_se[i],
                            self.records[i], self.disturbed[i], self.statistic, self.too_few_runs)


class Dataset:
    """A latency dataset folder. Open one with :meth:`open` or :meth:`open_or_create`."""

    def __init__(self, path: Path, target: PredictorTarget, records: list[Record], created: str) -> None:
        self.path = path
        self.target = target
        self.records = records
        self.created = created

    # ------------------------------------------------------------------ opening
    @classmethod
    def open(cls, path: str | Path, expected: PredictorTarget | None = None) -> Dataset:
        """Read a dataset folder.

        Args:
            path: the folder.
            expected: when given, the dataset must have been measured for it.

        Raises:
            DatasetError: no dataset there, or a malformed header or record (naming the line).
            PredictorMismatchError: the dataset is for another space, device, backend or shape.
        """
        p = Path(path)
        header_path = p / HEADER_FILE
        if not header_path.is_file():
            raise DatasetError(f"no latency dataset in {str(p)!r} (missing {HEADER_FILE})")
        try:
            header = json.loads(header_path.read_text())
        except (OSError, json.JSONDecodeError) as err:
            raise DatasetError(f"{header_path}: unreadable header: {err}") from None
        if not isinstance(header, dict) or header.get("format") != DATASET_FORMAT:
            raise DatasetError(f"{header_path}: not a latency dataset (format must be {DATASET_FORMAT!r})")
        if header.get("version") != DATASET_VERSION:
            raise DatasetError(
                f"{header_path}: dataset version {header.get('version')!r}; this version reads {DATASET_VERSION}"
            )
        try:
            target = PredictorTarget.from_dict(header["target"])
        except (KeyError, TypeError, ValueError) as err:
            raise DatasetError(f"{header_path}: invalid target: {err}") from None
        if expected is not None:
            target.check(expected, what="dataset")
        records = list(_read_records(p / RECORDS_FILE))
        return cls(p, target, records, str(header.get("created", "")))

    @classmethod
    def open_or_create(cls, path: str | Path, target: PredictorTarget) -> Dataset:
        """Open the dataset at ``path`` (it must be for ``target``) or start an empty one there.

        Raises:
            DatasetError: ``path`` exists and is a file, or holds a malformed dataset.
            PredictorMismatchError: the existing dataset is for another setting.
        """
        p = Path(path)
        if (p / HEADER_FILE).exists():
            return cls.open(p, expected=target)
        if p.exists() and not p.is_dir():
            raise DatasetError(f"{str(p)!r} is a file, not a dataset folder")
        p.mkdir(parents=True, exist_ok=True)
        created = _now()
        header = {"format": DATASET_FORMAT, "version": DATASET_VERSION, "created": created,
                  "feature_version": FEATURE_VERSION, "target": target.to_dict()}
        (p / HEADER_FILE).write_text(json.dumps(header, indent=2) + "\n")
        (p / RECORDS_FILE).touch()
        return cls(p, target, [], created)

    # ------------------------------------------------------------------ writing
    def add(self, result: LatencyResult, origin: str, features: Iterable[float] = (),
            min_cpu_share: float = DEFAULT_MIN_CPU_SHARE) -> Record:
        """Append one measurement (written and flushed at once, so an interrupted run keeps it).

        Raises:
            DatasetError: an unknown origin or a predicted (not measured) result.
            PredictorMismatchError: the result comes from another device, backend or input shape.
        """
        if origin not in ORIGINS:
            raise DatasetError(f"unknown origin {origin!r}; known: {list(ORIGINS)}")
        if result.source != "measured":
            raise DatasetError(f"only measured latencies go into a dataset, got source={result.source!r}")
        here = PredictorTarget(self.target.space, self.target.space_digest, DeviceFingerprint.of_result(result),
                               tuple(result.input_shape), self.target.num_classes)
        here.check(self.target, what="measurement")
        rec = Record(result.arch, result, origin, disturbance(result, min_cpu_share), _now(), tuple(features))
        line = json.dumps(rec.to_json(), separators=(",", ":")) + "\n"
        with open(self.path / RECORDS_FILE, "a") as f:
            f.write(line)
            f.flush()
            os.fsync(f.fileno())
        self.records.append(rec)
        return rec

    # ------------------------------------------------------------------ reading
    def measured_archs(self) -> set[str]:
        """Architecture strings with at least one record."""
        return {r.arch for r in self.records}

    def undisturbed_archs(self) -> set[str]:
        """Architecture strings with at least one undisturbed record."""
        return {r.arch for r in self.records if r.disturbed is None}

    def table(self, include_disturbed: bool = False, statistic: str = "p50",
              combine: str = "median") -> LatencyTable:
        """Per-architecture latencies at ``statistic`` (see :class:`LatencyTable`), in first-measured order.

        Records with fewer timed runs than ``statistic`` needs are not used; an architecture
        with no other record is left out and counted in ``too_few_runs``. ``combine``: the
        median of an architecture's records, or the lowest (``"min"``: the fastest session,
        module docstring).

        Raises:
            ConfigError: ``statistic`` is not one of :data:`~latency_predictor.measurement.statistic.TARGET_STATS`,
                or ``combine`` is not one of :data:`COMBINE`.
        """
        need = MIN_RUNS[check_stat(statistic)]
        if combine not in COMBINE:
            raise ConfigError(f"combine must be one of {list(COMBINE)}, got {combine!r}")
        reduce = np.median if combine == "median" else np.min
        groups: dict[str, list[Record]] = {}
        for r in self.records:
            groups.setdefault(r.arch, []).append(r)
        archs, lat, se, n, dist = [], [], [], [], []
        too_few = 0
        for arch, recs in groups.items():
            enough = [r for r in recs if r.result.stats.n >= need]
            if not enough:
                too_few += 1
                continue
            good = [r for r in enough if r.disturbed is None]
            if not good and not include_disturbed:
                continue
            use = good or enough
            archs.append(arch)
            lat.append(float(reduce([stat_value(r.result, statistic) for r in use])))
            per = [within_rel_se(r.result, statistic) for r in use]
            se.append(float(np.sqrt(np.mean(np.square(per))) / math.sqrt(len(use))))
            n.append(len(use))
            dist.append(not good)
        return LatencyTable(tuple(archs), np.array(lat), np.array(se), np.array(n, dtype=np.int64),
                            np.array(dist, dtype=bool), statistic, too_few)

    def repeat_log_ratios(self, statistic: str = "p50") -> np.ndarray:
        """``log(s_a / s_b)`` for consecutive undisturbed records of the same architecture, ``s`` its ``statistic``.

        Each pair is two independent measurements (separate sessions) of one network: their
        spread is the measurement noise that a single record's run-to-run spread cannot show.
        Records with too few timed runs for ``statistic`` are not used.
        """
        need = MIN_RUNS[check_stat(statistic)]
        groups: dict[str, list[float]] = {}
        for r in self.records:
            if r.disturbed is None and r.result.stats.n >= need:
                groups.setdefault(r.arch, []).append(stat_value(r.result, statistic))
        out = [math.log(a / b) for v in groups.values() for a, b in itertools.pairwise(v)]
        return np.array(out)

    def files(self) -> list[Path]:
        """The dataset's files (header first)."""
        return [self.path / HEADER_FILE, self.path / RECORDS_FILE]

    def summary(self) -> dict[str, Any]:
        """Counts and identity of the dataset, as flat JSON-serialisable values."""
        t = self.target
        return {
            "space": t.space, "space_digest": t.space_digest, "backend": t.backend,
            "device": t.fingerprint.device, "precision": t.fingerprint.precision,
            "fingerprint": t.fingerprint.digest, "input_shape": "x".join(map(str, t.input_shape)),
            "records": len(self.records), "archs": len(self.measured_archs()),
            "undisturbed_archs": len(self.undisturbed_archs()),
            "disturbed_records": sum(r.disturbed is not None for r in self.records),
        }


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


def _read_records(path: Path) -> Iterable[Record]:
    if not path.exists():
        return
    with open(path) as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                d = json.loads(line)
                result = LatencyResult.from_dict(d["result"])
                rec = Record(str(d["arch"]), result, str(d["origin"]),
                             None if d["disturbed"] is None else str(d["disturbed"]), str(d["time"]),
                             tuple(float(x) for x in d.get("features", ())))
            except (json.JSONDecodeError, KeyError, TypeError, ValueError, MeasurementError) as err:
                raise DatasetError(f"{path}:{lineno}: malformed record: {err!r}") from None
            if rec.arch != result.arch:
                raise DatasetError(f"{path}:{lineno}: record arch differs from its result's arch")
            yield rec


def dataset_tracking_record(path: str | Path) -> tuple[list[Path], dict[str, Any]]:
    """The files and flat metadata of the dataset at ``path``, for an experiment tracker.

    Returns:
        ``(files, params)``: the header and records files, and :meth:`Dataset.summary`.

    Raises:
        DatasetError: no readable dataset there.
    """
    ds = Dataset.open(path)
    return ds.files(), ds.summary()
