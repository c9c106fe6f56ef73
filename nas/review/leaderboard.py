"""Review a search: the leaderboard (``python -m nas.leaderboard``).

Reads the search's candidates from MLflow (:mod:`nas.adapters.mlflow_reader`), ranks them
(:func:`nas.core.record.rank`) and renders the top ``top_k`` with arch_id, accuracy, latency
p50/p99 and whether it was measured or predicted (with an anchor network, ``x_anchor`` and the
anchor's ms), parameters, MACs, reward and whether the latency target is met. Options keep only
the candidates that meet the target or only the Pareto front (accuracy up, latency down), and
write CSV or JSON. A Pareto plot (:mod:`nas.review.plot`) is saved as PNG and logged on the
search's parent run, so the MLflow UI shows it.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from latency_predictor.estimators import predictor_measuring_backend
from latency_predictor.measurement.paired import anchor_figures, measure_paired
from nas.adapters.mlflow_reader import StoreReader
from nas.adapters.mlflow_writer import StoreWriter
from nas.core.config import LatencyConfig, LeaderboardConfig, validate_leaderboard
from nas.core.errors import LeaderboardError
from nas.core.paths import project_home
from nas.core.record import (
    LEADERBOARD_COLUMNS,
    STOP_REASON_TAG,
    Candidate,
    Ranked,
    SearchRecord,
    leaderboard_row,
    rank,
)
from nas.core.table import accuracy_label, format_table
from nas.review.plot import plot_pareto
from nas.trial.evaluate import latency_estimator
from search_spaces import REFERENCES, anchor_network, reference


def to_csv(rows: Sequence[Ranked]) -> str:
    """The leaderboard as CSV with :data:`LEADERBOARD_COLUMNS` (empty cells for missing figures)."""
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(LEADERBOARD_COLUMNS), lineterminator="\n")
    writer.writeheader()
    for r in rows:
        writer.writerow({k: ("" if v is None else v) for k, v in leaderboard_row(r).items()})
    return buf.getvalue()


def to_json(rows: Sequence[Ranked], search: SearchRecord) -> str:
    """The leaderboard as JSON: the search and one object per candidate (missing figures as null)."""
    info = {k: v for k, v in dataclasses.asdict(search).items() if k not in ("params", "tags")}
    return json.dumps({"search": info, "entries": [leaderboard_row(r) for r in rows]}, indent=2) + "\n"


@dataclass(frozen=True)
class MeasuredReferences:
    """Reference networks measured by :func:`measure_references`.

    Attributes:
        latency_ms: name -> p50 in ms.
        device: the device they ran on.
        x_anchor: name -> latency over the search's anchor network's (empty: the search had none).
    """

    latency_ms: dict[str, float]
    device: str
    x_anchor: dict[str, float] = field(default_factory=dict)


def measure_references(record: SearchRecord, names: Sequence[str] | None = None) -> MeasuredReferences:
    """Measure reference networks now with the search's latency settings, on this machine; with the
    search's anchor network, each back to back with the anchor in its ``latency.anchor_rounds``
    alternating rounds (:func:`latency_predictor.measurement.paired.measure_paired`).

    Raises:
        LeaderboardError: the search's latency settings are not recorded, or this machine is not
            the device the search measured on (the figures would not be comparable).
        LatencyError: the search's backend cannot run here.
    """
    if not record.latency.get("backend"):
        raise LeaderboardError(f"search {record.name!r} recorded no latency settings to measure references with")
    options = dict(record.latency.get("options") or {})
    cfg = LatencyConfig(
        backend=str(record.latency["backend"]), input_shape=list(record.latency.get("input_shape", [1, 3, 224, 224])),
        # searches recorded before latency.precision existed kept it among the options
        precision=str(record.latency.get("precision") or options.pop("precision", "fp32")),
        options=options, measure=dict(record.latency.get("measure") or {}),
    )
    if cfg.backend == "predictor":
        # The search predicted its latencies; the references are measured the way the predictor's
        # training data was, on the predictor's own device (refused elsewhere, every difference named).
        est = predictor_measuring_backend(cfg.input_shape, cfg.options, record.num_classes or 1000, cfg.measure,
                                          cfg.precision)
    else:
        est = latency_estimator(cfg, record.num_classes or 1000)
    here = est.environment().get("device_name", "")
    if record.device_name and here and here not in record.device_name:
        raise LeaderboardError(
            f"search {record.name!r} measured latency on {record.device_name!r} but this machine is {here!r}: "
            "reference latencies measured here would not be comparable; run the leaderboard there"
        )
    archs = {name: reference(name) for name in (names or sorted(REFERENCES))}
    device = here or record.device_name or "unknown"
    if record.anchor is None:
        return MeasuredReferences({name: est.measure(a).latency_ms for name, a in archs.items()}, device)
    anchor = anchor_network(record.anchor, max(cfg.input_shape[2:]))
    stat = str(record.latency.get("target_stat") or "p50")
    rounds = int(record.latency.get("anchor_rounds") or 3)
    paired = measure_paired(est.measure, anchor, list(archs.values()), rounds, stat, record.anchor)
    figures = {name: anchor_figures(paired[a]) for name, a in archs.items()}
    return MeasuredReferences({name: paired[a].latency_ms for name, a in archs.items()}, device,
                              {name: f.x_anchor for name, f in figures.items() if f is not None})


@dataclass
class LeaderboardResult:
    """What :func:`run_leaderboard` produced.

    Attributes:
        search: the search reviewed.
        rows: the ranked candidates shown.
        candidates: every candidate of the search.
        text: the rendered table, CSV or JSON.
        plot_path: the Pareto plot (None: not drawn).
        notes: lines for the user (counts, where files went).
    """

    search: SearchRecord
    rows: list[Ranked]
    candidates: list[Candidate]
    text: str
    plot_path: Path | None = None
    notes: list[str] = field(default_factory=list)


def unfinished_note(record: SearchRecord) -> str:
    """What the parent run's status says about a search that did not finish, and how it goes on."""
    resume = f"`python -m nas.search` with its settings and name={record.name} resume=true continues it"
    if record.status == "RUNNING":
        return (f"search {record.name!r} is RUNNING: still running, or its driver stopped without ending it (killed, "
                f"or the store refused the write that ends it); {resume}")
    reason = record.tags.get(STOP_REASON_TAG)
    return f"search {record.name!r} is {record.status}" + (f": {reason}" if reason else "") + f"; {resume}"


def run_leaderboard(cfg: LeaderboardConfig) -> LeaderboardResult:
    """Rank a search's candidates, render them, and save and log the Pareto plot.

    Raises:
        ConfigError: a bad option.
        LeaderboardError: nothing to plot, or references measured on another device.
        TrackingError: the store, experiment or search does not exist.
        LatencyError: ``references=measure`` with a backend that cannot run here.
    """
    validate_leaderboard(cfg)
    reader = StoreReader(cfg.tracking.uri, cfg.tracking.experiment)
    record = reader.find_search(cfg.search)
    candidates = reader.candidates(record.run_id)
    rows = rank(candidates, cfg.sort, cfg.top_k, cfg.feasible, cfg.pareto, cfg.failed)
    label = accuracy_label(record.accuracy_estimator)
    if cfg.format == "csv":
        text = to_csv(rows)
    elif cfg.format == "json":
        text = to_json(rows, record)
    else:
        text = format_table(rows, accuracy_label=label)
    result = LeaderboardResult(record, rows, candidates, text)
    done = sum(c.completed for c in candidates)
    result.notes.append(
        f"search {record.name!r} ({record.run_id}): {len(candidates)} candidates, {done} completed"
        + ("" if cfg.failed or done == len(candidates)
           else f", {len(candidates) - done} failed or pruned (failed=true)")
    )
    if record.status != "FINISHED":
        result.notes.append(unfinished_note(record))
    if cfg.plot and not any(c.completed and math.isfinite(c.latency_p50) for c in candidates):
        result.notes.append("no Pareto plot: no candidate of this search completed")
    elif cfg.plot:
        writer = StoreWriter(reader.uri, cfg.tracking.experiment, create=False)
        refs: dict[str, float] = {}
        note = ""
        if cfg.references == "measure":
            measured = measure_references(record)
            refs, device = measured.latency_ms, measured.device
            writer.log_reference_latencies(record.run_id, refs, device, measured.x_anchor)
            note = f"reference latencies measured with {record.latency.get('backend')} on {device}"
            if measured.x_anchor:
                result.notes.append(f"references beside the anchor {record.anchor}: " + ", ".join(
                    f"{name} x{x:.2f}" for name, x in measured.x_anchor.items()))
        elif cfg.references == "logged" and record.references:
            refs = record.references
            note = f"reference latencies logged on the search's run ({record.latency.get('backend')})"
        path = (Path(cfg.plot_path).expanduser().resolve() if cfg.plot_path
                else project_home() / "plots" / f"pareto-{record.name}.png")
        plot_pareto(candidates, record, path, refs, note, label)
        writer.log_artifacts(record.run_id, [path])
        result.plot_path = path
        result.notes.append(f"Pareto plot: {path} (logged on run {record.run_id})")
    if cfg.output:
        out = Path(cfg.output).expanduser().resolve()
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text if text.endswith("\n") else text + "\n")
        result.notes.append(f"{cfg.format} written to {out}")
    return result
