"""``BENCHMARKS.md`` rendered from the JSON records under each area's ``benchmarks/<area>/records/``, so it
never drifts from what was measured.

Each section comes from one record: a short prose explanation (fixed text: what is measured and
how to read it), the figures as tables, and the record's machine, versions, date and the command
that reproduces it. A full-mode record (``benchmarks/<area>/records/<name>.json``) is preferred; without
one, the quick-mode record (``benchmarks/<area>/records/quick/<name>.json``) is rendered and marked as such. A
benchmark with no record gets no section. Records of unknown layout are rendered generically (their scalar
figures). Hand-written observations about a record's figures live beside the benchmark, in
``benchmarks/<area>/<name>.md``, and are placed, marked as such, under the generated tables.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, cast

from benchmarks.common import AREAS, area, portable, records_dir

Rec = dict[str, Any]

ORDER = ("latency", "openvino_parity", "spread", "tail", "tail_predictor", "predictor", "transfer", "transfer_many",
         "agent", "search", "contention", "reliability", "sampler", "screening", "scale", "train_speed", "fidelity",
         "reference_noise", "fidelity_deploy", "supernet", "references", "deployment", "cifar10_deploy")
TITLES = {
    "latency": "Latency measurement", "openvino_parity": "OpenVINO backend against benchmark_app",
    "spread": "Latency across searches: the final latency pass",
    "tail": "Tail latency, batches and throughput",
    "tail_predictor": "A p99 predictor trained at scale",
    "predictor": "Latency predictor",
    "transfer": "A predictor for a new device from a few measurements",
    "transfer_many": "A predictor for a new device from several devices' predictors",
    "agent": "Measurement agent overhead",
    "search": "Search overhead",
    "contention": "Measurement under load", "reliability": "Reliability (fault injection)",
    "sampler": "Sampler quality", "screening": "Predictor-driven screening speed",
    "scale": "Search throughput and scale", "train_speed": "Training on the CPU: channels-last against NCHW",
    "references": "Searched vs hand-designed networks",
    "fidelity": "Proxy fidelity on CIFAR-10",
    "reference_noise": "Proxy fidelity: how reproducible the reference is",
    "fidelity_deploy": "Rung fidelity at the deployment budget",
    "supernet": "One-shot accuracy on CIFAR-10: a weight-sharing supernet",
    "deployment": "Deployment variants on CIFAR-10: INT8 and pruning",
    "cifar10_deploy": "Searched vs hand-designed networks on CIFAR-10 at the deployment budget",
}


def records_dirs(records: Path | None = None) -> list[Path]:
    """The records folders to render: ``records`` alone when given, else every area's."""
    return [records] if records is not None else [records_dir(a) for a in AREAS]


def load_records(*dirs: Path) -> dict[str, Rec]:
    """Name -> record from these records folders, full-mode records preferred over quick ones."""
    out: dict[str, Rec] = {}
    for records in dirs:
        for base, quick in ((records / "quick", True), (records, False)):
            for p in sorted(base.glob("*.json")):
                rec = json.loads(p.read_text())
                if not isinstance(rec, dict):
                    continue
                rec.setdefault("mode", "quick" if quick else "full")
                out[p.stem] = rec
    return out


def load_notes(*dirs: Path) -> dict[str, str]:
    """Name -> the hand-written notes beside these records folders (``<area>/<name>.md``)."""
    return {p.stem: p.read_text() for records in dirs for p in sorted(records.parent.glob("*.md"))}


def _f(x: Any, digits: int = 2) -> str:
    if x is None:
        return "-"
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, int):
        return f"{x:,}"
    if isinstance(x, float):
        return f"{x:,.{digits}f}"
    return str(x)


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def table(header: list[str], rows: list[list[str]]) -> str:
    """A Markdown table."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def meta(rec: Rec) -> str:
    """The record's provenance (its header, :func:`benchmarks.common.header`): date, machine, versions,
    command, mode."""
    m = rec.get("machine") or {}
    v = rec.get("versions") or {}
    cmd = portable(rec.get("command", ""))  # a folder outside the repository is the reader's choice
    date = rec.get("date", "?")
    cpus = m.get("cpus_usable", "?")
    load = m.get("load_average")
    load_s = f", load average {'/'.join(_f(x) for x in load)} at the end" if load else ""
    if not load and "load_average_before" in rec:  # records that keep the 1-minute load at both ends
        load_s = (f", load average {_f(rec['load_average_before'])} before and "
                  f"{_f(rec.get('load_average_after'))} after")
    vers = ", ".join(f"{k} {val}" for k, val in v.items() if val != "not installed")
    mode = " (quick mode)" if rec.get("mode") == "quick" else ""
    wall = f"; took {rec['wall_seconds']:.0f} s" if "wall_seconds" in rec else ""
    return (f"*Measured {date}{mode} on {m.get('cpu_model', '?')}, {cpus} usable CPUs{load_s}; "
            f"Python {m.get('python', '?')}; {vers}{wall}.*\n\nReproduce:\n\n    {cmd}")


def _ci(ci: list[float] | None) -> str:
    return "-" if not ci else f"{_f(ci[0], 3)} - {_f(ci[1], 3)}"












def comparison_lines(targets: list[dict[str, Any]]) -> list[str]:
    """The searched network against each reference (accuracy at each target; latency at matched accuracy)."""
    lines = []
    searched_all = [c for t in targets for c in t["candidates"] if c["name"] == "searched"]
    for t in targets:
        s = next(c for c in t["candidates"] if c["name"] == "searched")
        for c in t["candidates"]:
            if c is s:
                continue
            d = s["accuracy"]["median"] - c["accuracy"]["median"]
            apart = s["accuracy"]["min"] > c["accuracy"]["max"] or c["accuracy"]["min"] > s["accuracy"]["max"]
            lines.append(f"at {t['target_ms']:g} ms, searched ({s['latency_ms']:.2f} ms) vs {c['name']} "
                         f"({c['latency_ms']:.2f} ms): accuracy {100 * d:+.1f} points (medians; the seed ranges "
                         f"{'do not overlap' if apart else 'overlap'})")
    seen = set()
    for c in (c for t in targets for c in t["candidates"] if c["name"] != "searched"):
        # one line per network and its accuracy (the same trainings may serve several targets)
        key = (c["name"], c.get("arch", c["latency_ms"]), c["accuracy"]["median"])
        if key in seen:
            continue
        seen.add(key)
        ok = [s for s in searched_all if s["accuracy"]["median"] >= c["accuracy"]["median"]]
        if not ok:
            lines.append(f"at matched accuracy: no searched network reached {c['name']}'s "
                         f"{100 * c['accuracy']['median']:.1f}%")
            continue
        f = min(ok, key=lambda s: s["latency_ms"])
        ratio = c["latency_ms"] / f["latency_ms"]
        how = f"{ratio:.2f}x faster" if ratio >= 1 else f"{1 / ratio:.2f}x slower"
        acc = 100 * c["accuracy"]["median"]
        lines.append(f"at matched accuracy: {c['name']} ({acc:.1f}%, {c['latency_ms']:.2f} ms)"
                     f" against the fastest searched network at least as accurate ({f['latency_ms']:.2f} ms): "
                     f"the searched one is {how}")
    return lines










def _generic(rec: Rec) -> str:
    flat: list[list[str]] = []

    def walk(prefix: str, x: Any) -> None:
        if isinstance(x, dict):
            for k, v in x.items():
                if k not in ("benchmark", "mode", "machine", "versions", "command", "date"):
                    walk(f"{prefix}{k}.", v)
        elif isinstance(x, int | float | str | bool) and len(flat) < 40:
            text = _f(x)
            flat.append([prefix.rstrip("."), text if len(text) <= 80 else text[:77] + "..."])

    walk("", rec.get("figures", rec))
    note = "Figures as recorded (this record's layout has no dedicated renderer):"
    return f"{note}\n\n" + table(["figure", "value"], flat)










RENDERERS: dict[str, str] = {
    "latency": "latency",
    "openvino_parity": "openvino_parity",
    "spread": "spread",
    "tail": "tail",
    "tail_predictor": "tail_predictor",
    "predictor": "predictor",
    "transfer": "transfer",
    "transfer_many": "transfer_many",
    "agent": "agent",
    "search": "search",
    "sampler": "sampler_quality",
    "screening": "screening",
    "scale": "scale",
    "train_speed": "train_speed",
    "references": "references",
    "contention": "contention",
    "reliability": "reliability",
    "fidelity": "fidelity",
    "supernet": "supernet",
    "reference_noise": "reference_noise",
    "fidelity_deploy": "fidelity_deploy",
    "deployment": "deployment",
    "cifar10_deploy": "cifar10_deploy",
}
"""Each record's benchmark module (``benchmarks.<area>.<module>``), whose ``render(rec)`` writes its section."""


INTRO = """# Benchmarks

Generated by `python scripts/bench.py --render` from the JSON records under `benchmarks/<area>/records/`
(full runs) and `benchmarks/<area>/records/quick/` (quick runs, used where no full record exists), with the
notes beside each benchmark (`benchmarks/<area>/<name>.md`); do not edit by hand. Each
section says when and on what it was measured and the command that reproduces it. The machine is a
shared two-core CPU host with no GPU. Some runs had it to themselves, others shared it with other
work; the notes and load averages say which. Ratios were measured side by side in one run, and
spreads are reported.

    python scripts/bench.py --quick     # the quick set, small (about 9.5 minutes on 2 cores; --list sums it)
    python scripts/bench.py --list      # the benchmarks and their expected durations
    python scripts/bench.py sampler references   # named benchmarks at full size (says how long first)
    python scripts/bench.py --render    # this page again from the records

The CIFAR-10 benchmarks need the training images (`--cifar10 DIR/cifar10-train-jpeg.tar.gz`, or
`$LATNAS_CIFAR10_JPEG`) and run in `--quick` only when named.
"""


def renderer(name: str) -> Callable[[Rec], str]:
    """The ``render`` function of the benchmark that writes records called ``name`` (a generic one when none)."""
    module = RENDERERS.get(name)
    if module is None:
        return _generic
    return cast(Callable[[Rec], str], importlib.import_module(f"benchmarks.{area(name)}.{module}").render)


def render(records: dict[str, Rec], notes: dict[str, str] | None = None) -> str:
    """The whole ``BENCHMARKS.md`` text for these records.

    ``notes`` (benchmark name -> Markdown) are hand-written observations about a record's
    figures, kept in ``benchmarks/<area>/<name>.md`` and placed under its generated tables.
    """
    notes = notes or {}
    parts = [INTRO]
    # A record named <benchmark>_<variant> (e.g. predictor_seed1) follows its benchmark's section.
    def split(name: str) -> tuple[str, str]:  # a renderer's own name may hold "_"
        base, _, variant = (name, "", "") if name in RENDERERS else name.partition("_")
        return base, variant

    def key(name: str) -> tuple[int, str]:
        base = split(name)[0]
        return (ORDER.index(base) if base in ORDER else len(ORDER), name)

    for name in sorted(records, key=key):
        rec = records[name]
        base, variant = split(name)
        body = renderer(base)
        try:
            text = body(rec)
        except (KeyError, TypeError, StopIteration):
            text = _generic(rec)
        title = TITLES.get(base, base.capitalize()) + (f" ({variant})" if variant else "")
        if notes.get(name):
            text += f"\n\n**Notes** (written by hand about these figures):\n\n{notes[name].strip()}"
        parts.append(f"## {title}\n\n{text}\n\n{meta(rec)}\n")
    return "\n".join(parts)


def write(records: Path | Sequence[Path] | None, output: Path) -> Path:
    """Render the records (one folder, several, or every area's when None), with the notes beside each
    folder, to ``output``."""
    dirs = records_dirs(records) if records is None or isinstance(records, Path) else list(records)
    output.write_text(render(load_records(*dirs), load_notes(*dirs)))
    return output
