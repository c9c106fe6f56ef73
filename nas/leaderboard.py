"""Review a search: ``python -m nas.leaderboard``.

Reads the search's candidate runs from MLflow (through :mod:`nas.tracking`), ranks them and
prints the top ``top_k`` with arch_id, accuracy, latency p50/p99 and whether it was measured or
predicted, parameters, MACs, reward and whether the latency target is met. Options keep only the
candidates that meet the target or only the Pareto front (accuracy up, latency down), and write
CSV or JSON. A Pareto plot (accuracy against latency, the target as a line, the reference
networks where their latency is known on the search's device) is saved as PNG and logged on the
search's parent run, so the MLflow UI shows it.
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure

from latency_predictor import LatencyError
from nas.config import GROUP_SCHEMAS, LatencyConfig, TrackingConfig
from nas.errors import NASError
from nas.tracking import RunInfo, SearchStore, parse_param
from nas.trial import make_latency_estimator
from search_spaces import REFERENCES, SearchSpaceError, reference

COMPLETED = "COMPLETED"
SORT_KEYS: dict[str, bool] = {
    # key -> descending
    "reward": True, "accuracy": True, "latency_p50": False, "latency_p99": False, "params": False, "macs": False,
}
FORMATS = ("table", "csv", "json")
COLUMNS = (
    "rank", "arch_id", "accuracy", "latency_p50", "latency_p99", "latency_source", "params", "macs", "reward",
    "meets_target", "status", "failure_reason",
)


class LeaderboardError(NASError):
    """The leaderboard was asked for something it cannot give (bad option, nothing to show)."""


@dataclass(frozen=True)
class Entry:
    """One candidate of a search as MLflow recorded it.

    Numbers missing from the record (a failed trial has no reward) are NaN.
    """

    run_id: str
    arch_id: str
    arch: str
    status: str
    accuracy: float = math.nan
    val_loss: float = math.nan
    latency_p50: float = math.nan
    latency_p90: float = math.nan
    latency_p99: float = math.nan
    latency_source: str = ""
    params: float = math.nan
    macs: float = math.nan
    reward: float = math.nan
    meets_target: bool | None = None
    failure_reason: str = ""
    rank: int = 0

    @property
    def completed(self) -> bool:
        """Whether the trial finished with figures (not failed, pruned or running)."""
        return self.status == COMPLETED and math.isfinite(self.reward)


@dataclass(frozen=True)
class SearchRecord:
    """The search a leaderboard is about: its parent run and settings.

    Attributes:
        parent_run_id: the search's parent MLflow run.
        name: the search's name.
        experiment_id: its MLflow experiment.
        target_ms: the latency target.
        latency: the latency settings the search used (``backend``, ``input_shape``, ``options``,
            ``measure``), as logged.
        num_classes: classifier width of the candidates.
        device_name: what the candidates' latency was measured on (from their records).
        references: reference network name -> latency p50 (ms) logged on the parent run.
    """

    parent_run_id: str
    name: str
    experiment_id: str
    target_ms: float | None = None
    latency: dict[str, Any] = field(default_factory=dict)
    num_classes: int | None = None
    device_name: str | None = None
    references: dict[str, float] = field(default_factory=dict)


# ---------------------------------------------------------------------- ranking


def pareto_front(entries: Iterable[Entry]) -> list[Entry]:
    """Completed entries no other completed entry beats on both accuracy (higher) and latency p50 (lower).

    Returned fastest first.
    """
    done = sorted((e for e in entries if e.completed and math.isfinite(e.latency_p50)),
                  key=lambda e: (e.latency_p50, -e.accuracy))
    front: list[Entry] = []
    best = -math.inf
    for e in done:
        if e.accuracy > best:
            front.append(e)
            best = e.accuracy
    return front


def rank(
    entries: Sequence[Entry],
    sort: str = "reward",
    top_k: int | None = 10,
    feasible_only: bool = False,
    pareto_only: bool = False,
    include_failed: bool = False,
) -> list[Entry]:
    """The leaderboard: completed entries ordered by ``sort``, numbered, cut to ``top_k``.

    The sort is stable, so ties keep the order ``entries`` came in (MLflow's order).

    Args:
        entries: the search's candidates.
        sort: one of :data:`SORT_KEYS` (latency, params and MACs ascending, the rest descending).
        top_k: how many to keep (None: all).
        feasible_only: keep only entries that meet the latency target.
        pareto_only: keep only the Pareto front (accuracy vs latency p50).
        include_failed: append the failed, pruned or unfinished entries (after ``top_k``), with
            their status and failure reason.

    Raises:
        LeaderboardError: an unknown sort key or a ``top_k`` below 1.
    """
    if sort not in SORT_KEYS:
        raise LeaderboardError(f"sort={sort!r} is not one of {list(SORT_KEYS)}")
    if top_k is not None and top_k < 1:
        raise LeaderboardError(f"top_k must be >= 1, got {top_k}")
    pool = [e for e in entries if e.completed]
    if feasible_only:
        pool = [e for e in pool if e.meets_target]
    if pareto_only:
        keep = {e.run_id for e in pareto_front(pool)}
        pool = [e for e in pool if e.run_id in keep]
    desc = SORT_KEYS[sort]

    def key(e: Entry) -> float:
        v = float(getattr(e, sort))
        if not math.isfinite(v):
            return math.inf
        return -v if desc else v

    ranked = sorted(pool, key=key)[:top_k]
    out = [replace(e, rank=i + 1) for i, e in enumerate(ranked)]
    if include_failed:
        out += [e for e in entries if not e.completed]
    return out


# ---------------------------------------------------------------------- output


def _cell(e: Entry, col: str) -> str:
    v = getattr(e, col)
    if col == "rank":
        return str(v) if v else "-"
    if isinstance(v, bool) or v is None:
        return {True: "yes", False: "no", None: "-"}[v]
    if isinstance(v, float):
        if not math.isfinite(v):
            return "-"
        if col in ("params", "macs"):
            return f"{v / 1e6:.2f}M" if col == "macs" else f"{int(v):,}"
        return f"{v:.4f}" if col in ("accuracy", "reward") else f"{v:.3f}"
    return str(v) or "-"


def format_table(entries: Sequence[Entry], columns: Sequence[str] | None = None) -> str:
    """A fixed-width text table; the failure columns appear only when some entry failed."""
    cols = list(columns or COLUMNS)
    if columns is None and all(e.completed for e in entries):
        cols = [c for c in cols if c not in ("status", "failure_reason")]
    headers = {"latency_p50": "p50_ms", "latency_p99": "p99_ms", "latency_source": "latency", "meets_target": "meets"}
    rows = [[headers.get(c, c) for c in cols]] + [[_cell(e, c) for c in cols] for e in entries]
    widths = [max(len(r[i]) for r in rows) for i in range(len(cols))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _record(e: Entry) -> dict[str, Any]:
    d = asdict(e)
    return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in d.items()}


def to_json(entries: Sequence[Entry], search: SearchRecord) -> str:
    """The leaderboard as JSON: the search and one object per entry (NaN written as null)."""
    return json.dumps({"search": asdict(search), "entries": [_record(e) for e in entries]}, indent=2) + "\n"


def to_csv(entries: Sequence[Entry]) -> str:
    """The leaderboard as CSV with every field of :class:`Entry` (empty cells for missing numbers)."""
    buf = io.StringIO()
    names = list(asdict(entries[0]).keys()) if entries else [f for f in Entry.__dataclass_fields__]
    writer = csv.DictWriter(buf, fieldnames=names, lineterminator="\n")
    writer.writeheader()
    for e in entries:
        writer.writerow({k: ("" if v is None else v) for k, v in _record(e).items()})
    return buf.getvalue()


# ---------------------------------------------------------------------- Pareto plot


def plot_pareto(
    entries: Sequence[Entry],
    search: SearchRecord,
    path: Path,
    references: dict[str, float] | None = None,
    reference_note: str = "",
) -> Path:
    """Save accuracy against latency p50 of the completed candidates as a PNG.

    The Pareto front is drawn as a step line, the latency target as a vertical dashed line, and
    each reference network (name -> p50 ms measured on the search's device) as a labelled
    marker on the latency axis: their accuracy on the search's task is not known.

    Args:
        entries: the search's candidates (failed ones are left out).
        search: the search (name and target).
        path: where to write the PNG.
        references: reference latencies to mark; None or empty: none.
        reference_note: a line under the title saying where reference latencies come from.

    Returns:
        ``path``.

    Raises:
        LeaderboardError: no completed candidate with a latency to plot.
    """
    done = [e for e in entries if e.completed and math.isfinite(e.latency_p50)]
    if not done:
        raise LeaderboardError(f"search {search.name!r} has no completed candidate to plot")
    front = pareto_front(done)
    # A bare Figure renders with Agg and leaves pyplot's global state (and any GUI) alone.
    fig = Figure(figsize=(9.5, 5), dpi=120)
    ax = fig.subplots()
    sources = sorted({e.latency_source or "unknown" for e in done})
    markers = {"measured": "o", "predicted": "^"}
    for src in sources:
        pts = [e for e in done if (e.latency_source or "unknown") == src]
        colors = ["tab:green" if e.meets_target else "tab:red" for e in pts]
        ax.scatter([e.latency_p50 for e in pts], [e.accuracy for e in pts], c=colors, alpha=0.6, s=28,
                   marker=markers.get(src, "s"), label=f"candidates, {src} latency (green: meets target)")
    ax.step([e.latency_p50 for e in front], [e.accuracy for e in front], where="post", color="black", lw=1.2,
            label="Pareto front")
    for e in front:
        ax.annotate(e.arch_id[:8], (e.latency_p50, e.accuracy), fontsize=7, xytext=(3, 3),
                    textcoords="offset points")
    if search.target_ms is not None:
        ax.axvline(search.target_ms, color="tab:blue", ls="--", lw=1, label=f"target {search.target_ms:g} ms")
    if references:
        for name, ms in sorted(references.items(), key=lambda kv: kv[1]):
            ax.axvline(ms, color="tab:purple", ls=":", lw=1)
            ax.annotate(name, (ms, 1.0), xycoords=("data", "axes fraction"), rotation=90, fontsize=7,
                        xytext=(-3, -4), textcoords="offset points", ha="right", va="top", color="tab:purple")
        ax.plot([], [], color="tab:purple", ls=":", label="reference networks (latency; accuracy not known)")
    lats = [e.latency_p50 for e in done] + list((references or {}).values())
    if max(lats) / min(lats) > 20:
        ax.set_xscale("log")
    ax.set_xlabel("latency p50 (ms)")
    ax.set_ylabel("accuracy")
    title = f"{search.name}: accuracy vs latency"
    if search.device_name:
        title += f"\non {search.device_name}"
    ax.set_title(title, fontsize=10)
    if reference_note:
        fig.text(0.01, 0.01, reference_note, fontsize=7, color="dimgray")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png")
    return path


# ---------------------------------------------------------------------- reading the search


def entry_from_run(run: RunInfo) -> Entry:
    """A leaderboard entry from a candidate run of :mod:`nas.tracking`'s record."""
    m = run.metrics
    met = m.get("meets_target")
    reason = run.tags.get("failure_reason", "")
    if reason and run.tags.get("failure_type"):
        reason = f"{run.tags['failure_type']}: {reason}"
    return Entry(
        run_id=run.run_id, arch_id=run.params.get("arch_id", run.name), arch=run.params.get("arch", ""),
        status=run.tags.get("status", run.status), accuracy=m.get("accuracy", math.nan),
        val_loss=m.get("val_loss", math.nan), latency_p50=m.get("latency_p50", math.nan),
        latency_p90=m.get("latency_p90", math.nan), latency_p99=m.get("latency_p99", math.nan),
        latency_source=run.tags.get("latency_source", ""), params=m.get("params", math.nan),
        macs=m.get("macs", math.nan), reward=m.get("reward", math.nan),
        meets_target=None if met is None else bool(met), failure_reason=reason,
    )


def search_record(parent: RunInfo, candidates: Sequence[RunInfo], experiment_id: str) -> SearchRecord:
    """What the leaderboard needs to know about a search, from its parent run and candidates."""
    target = parse_param(parent.params.get("target_ms", "None"))
    dataset = parse_param(parent.params.get("dataset", "None"))
    devices = {r.tags["latency_device"] for r in candidates if "latency_device" in r.tags}
    device_name = None
    if devices == {"cpu"}:
        device_name = parent.tags.get("cpu_model")
    elif len(devices) == 1:
        device_name = f"{devices.pop()} ({parent.tags.get('gpu', 'GPU not recorded')})"
    refs, _ = SearchStore.reference_latencies(parent)
    return SearchRecord(
        parent_run_id=parent.run_id, name=parent.tags.get("latnas.search_name", parent.name),
        experiment_id=experiment_id, target_ms=float(target) if isinstance(target, int | float) else None,
        latency=parent.config("latency"),
        num_classes=int(dataset["classes"]) if isinstance(dataset, dict) and "classes" in dataset else None,
        device_name=device_name, references=refs,
    )


def load_search(store: SearchStore, search: str | None = None) -> tuple[SearchRecord, list[Entry]]:
    """A search (the latest, or by name or parent run id) and its candidates in MLflow's reward order.

    Raises:
        TrackingError: no such search.
    """
    parent = store.find_search(search)
    runs = store.candidates(parent.run_id)
    return search_record(parent, runs, store.experiment_id), [entry_from_run(r) for r in runs]


def measure_references(record: SearchRecord, names: Sequence[str] | None = None) -> tuple[dict[str, float], str]:
    """Measure reference networks now with the search's latency settings, on this machine.

    Returns:
        name -> p50 ms, and the device they ran on.

    Raises:
        LeaderboardError: the search's latency settings are not recorded, or this machine is not
            the device the search measured on (the figures would not be comparable).
        LatencyError: the search's backend cannot run here.
    """
    if not record.latency.get("backend"):
        raise LeaderboardError(f"search {record.name!r} recorded no latency settings to measure references with")
    cfg = LatencyConfig(
        backend=str(record.latency["backend"]), input_shape=list(record.latency.get("input_shape", [1, 3, 224, 224])),
        options=dict(record.latency.get("options") or {}), measure=dict(record.latency.get("measure") or {}),
    )
    est = make_latency_estimator(cfg, record.num_classes or 1000)
    env = getattr(est, "environment", None)
    here = str(env().get("device_name", "")) if callable(env) else ""
    if record.device_name and here and here not in record.device_name:
        raise LeaderboardError(
            f"search {record.name!r} measured latency on {record.device_name!r} but this machine is {here!r}: "
            "reference latencies measured here would not be comparable; run the leaderboard there"
        )
    out = {name: est.measure(reference(name)).latency_ms for name in (names or sorted(REFERENCES))}
    return out, here or record.device_name or "unknown"


# ---------------------------------------------------------------------- the command


@dataclass
class LeaderboardConfig:
    """Everything ``python -m nas.leaderboard`` takes.

    Attributes:
        search: the search's name or parent run id; None: the latest search.
        top_k: candidates shown.
        sort: ``reward``, ``accuracy``, ``latency_p50``, ``latency_p99``, ``params`` or ``macs``.
        feasible: only candidates that meet the latency target.
        pareto: only the Pareto front (accuracy vs latency p50).
        failed: also list failed and pruned candidates with their reason.
        format: ``table``, ``csv`` or ``json``.
        output: write the CSV/JSON/table to this file instead of printing it.
        plot: save the Pareto plot and log it on the search's parent run.
        plot_path: where to save it; None: ``pareto-<search>.png`` in the current directory.
        references: reference networks on the plot: ``logged`` (those recorded on the parent run),
            ``measure`` (measure them now with the search's backend on this machine, which must be
            the search's device, and record them on the parent run) or ``none``.
        tracking: the MLflow store and experiment.
    """

    search: str | None = None
    top_k: int = 10
    sort: str = "reward"
    feasible: bool = False
    pareto: bool = False
    failed: bool = False
    format: str = "table"
    output: str | None = None
    plot: bool = True
    plot_path: str | None = None
    references: str = "logged"
    tracking: TrackingConfig = field(default_factory=TrackingConfig)


@dataclass
class LeaderboardResult:
    """What :func:`run_leaderboard` produced."""

    search: SearchRecord
    entries: list[Entry]
    text: str
    plot_path: Path | None = None
    notes: list[str] = field(default_factory=list)


def run_leaderboard(cfg: LeaderboardConfig) -> LeaderboardResult:
    """Rank a search's candidates, render them, and save and log the Pareto plot.

    Raises:
        LeaderboardError: a bad option, or nothing to plot.
        TrackingError: the store, experiment or search does not exist.
        LatencyError: ``references=measure`` with a backend that cannot run here.
    """
    if cfg.format not in FORMATS:
        raise LeaderboardError(f"format={cfg.format!r} is not one of {list(FORMATS)}")
    if cfg.references not in ("logged", "measure", "none"):
        raise LeaderboardError(f"references={cfg.references!r} is not one of ['logged', 'measure', 'none']")
    store = SearchStore(cfg.tracking.uri, cfg.tracking.experiment)
    record, entries = load_search(store, cfg.search)
    ranked = rank(entries, cfg.sort, cfg.top_k, cfg.feasible, cfg.pareto, cfg.failed)
    if cfg.format == "csv":
        text = to_csv(ranked)
    elif cfg.format == "json":
        text = to_json(ranked, record)
    else:
        text = format_table(ranked)
    result = LeaderboardResult(record, ranked, text)
    done = sum(e.completed for e in entries)
    result.notes.append(
        f"search {record.name!r} ({record.parent_run_id}): {len(entries)} candidates, {done} completed"
        + ("" if cfg.failed or done == len(entries) else f", {len(entries) - done} failed or pruned (failed=true)")
    )
    if cfg.plot and not any(e.completed and math.isfinite(e.latency_p50) for e in entries):
        result.notes.append("no Pareto plot: no candidate of this search completed")
    elif cfg.plot:
        refs: dict[str, float] = {}
        note = ""
        if cfg.references == "measure":
            refs, device = measure_references(record)
            store.log_reference_latencies(record.parent_run_id, refs, device)
            note = f"reference latencies measured with {record.latency.get('backend')} on {device}"
        elif cfg.references == "logged" and record.references:
            refs = record.references
            note = f"reference latencies logged on the search's run ({record.latency.get('backend')})"
        path = Path(cfg.plot_path or f"pareto-{record.name}.png").expanduser().resolve()
        plot_pareto(entries, record, path, refs, note)
        store.log_artifact(record.parent_run_id, path)
        result.plot_path = path
        result.notes.append(f"Pareto plot: {path} (logged on run {record.parent_run_id})")
    if cfg.output:
        out = Path(cfg.output).expanduser().resolve()
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text if text.endswith("\n") else text + "\n")
        result.notes.append(f"{cfg.format} written to {out}")
    return result


USER_ERRORS: tuple[type[Exception], ...] = (NASError, SearchSpaceError, LatencyError)


def main() -> None:
    """``python -m nas.leaderboard [search=...] [top_k=...] [sort=...] [pareto=true] [format=csv] ...``.

    Hydra composes ``conf/leaderboard.yaml`` with the overrides; a user error prints one line
    and exits with status 2.
    """
    import sys

    import hydra  # the command line only: library callers never need Hydra
    from hydra.core.config_store import ConfigStore
    from omegaconf import DictConfig, OmegaConf

    cs = ConfigStore.instance()
    for group, schema in GROUP_SCHEMAS.items():
        cs.store(group=group, name="schema", node=schema)
    cs.store(name="leaderboard_schema", node=LeaderboardConfig)
    conf_dir = Path(__file__).resolve().parent.parent / "conf"

    @hydra.main(version_base="1.3", config_path=str(conf_dir), config_name="leaderboard")
    def _main(dcfg: DictConfig) -> None:
        cfg = OmegaConf.to_object(dcfg)
        if not isinstance(cfg, LeaderboardConfig):
            raise TypeError(f"the composed config is a {type(cfg).__name__}, not a LeaderboardConfig")
        try:
            result = run_leaderboard(cfg)
        except USER_ERRORS as err:
            print(f"error: {err}", file=sys.stderr)
            sys.exit(2)
        if not cfg.output:
            print(result.text.rstrip("\n"))
        for note in result.notes:
            print(note, file=sys.stderr if cfg.format != "table" else sys.stdout)

    _main()


if __name__ == "__main__":
    main()
