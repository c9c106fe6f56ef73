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
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, cast

from benchmarks.common import AREAS, Headline, area, portable, records_dir

Rec = dict[str, Any]

ORDER = ("latency", "openvino_parity", "runtimes", "spread", "tail", "contention", "agent",
         "predictor", "tail_predictor", "transfer", "transfer_runtimes", "transfer_many",
         "search", "per_runtime", "sampler", "screening", "references", "cifar10_deploy", "cifar10_fronts",
         "cifar10_int8", "fidelity", "reference_noise", "fidelity_deploy", "supernet", "train_speed",
         "deployment", "reliability", "scale")
"""The order of the sections on each area's page (and of the rows of the results table within an area)."""
TITLES = {
    "latency": "Latency measurement", "openvino_parity": "OpenVINO backend against benchmark_app",
    "runtimes": "The same networks on three CPU runtimes: ONNX Runtime, OpenVINO and LiteRT",
    "spread": "Latency across searches: the final latency pass",
    "tail": "Tail latency, batches and throughput",
    "tail_predictor": "A p99 predictor trained at scale",
    "predictor": "Latency predictor",
    "transfer": "A predictor for a new device from a few measurements",
    "transfer_many": "A predictor for a new device from several devices' predictors",
    "transfer_runtimes": "A predictor for a new runtime from 10 measurements",
    "agent": "Measurement agent overhead",
    "search": "Search overhead",
    "per_runtime": "One search per runtime: each winner timed on ONNX Runtime, OpenVINO and LiteRT",
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
    "cifar10_fronts": "The hand-designed fronts on CIFAR-10: every reference family over depth and width",
    "cifar10_int8": "INT8 on CIFAR-10: an INT8 search against the INT8 fronts",
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
    "runtimes": "runtimes",
    "spread": "spread",
    "tail": "tail",
    "tail_predictor": "tail_predictor",
    "predictor": "predictor",
    "transfer": "transfer",
    "transfer_many": "transfer_many",
    "transfer_runtimes": "transfer_runtimes",
    "agent": "agent",
    "search": "search",
    "per_runtime": "per_runtime",
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
    "cifar10_fronts": "cifar10_fronts",
    "cifar10_int8": "cifar10_int8",
}
"""Each record's benchmark module (``benchmarks.<area>.<module>``), whose ``render(rec)`` writes its section."""


AREA_TITLES = {
    "latency": "Latency measurement", "prediction": "Latency prediction and transfer",
    "search": "Search and samplers", "accuracy": "Accuracy and fidelity",
    "deployment": "Deployment variants", "reliability": "Reliability and scale",
}
PAGES = "docs/benchmarks"
"""Where the area pages go, one per area (``docs/benchmarks/<area>.md``), beside the site's results page
(``docs/benchmarks.md``)."""

RUN = """    python scripts/bench.py --quick     # the quick set, small (about 9.5 minutes on 2 cores; --list sums it)
    python scripts/bench.py --list      # the benchmarks, their areas and expected durations
    python scripts/bench.py sampler references   # named benchmarks at full size (says how long first)
    python scripts/bench.py --render    # this page and the area pages again from the records

The CIFAR-10 benchmarks need the training images (`--cifar10 DIR/cifar10-train-jpeg.tar.gz`, or
`$LATNAS_CIFAR10_JPEG`) and run in `--quick` only when named."""

MACHINE = """The machine is a shared two-core CPU host with no GPU. Some runs had it to themselves, others shared
it with other work; the notes and load averages say which. Ratios were measured side by side in one run, and
spreads are reported."""


def renderer(name: str) -> Callable[[Rec], str]:
    """The ``render`` function of the benchmark that writes records called ``name`` (a generic one when none)."""
    module = RENDERERS.get(name)
    if module is None:
        return _generic
    return cast(Callable[[Rec], str], importlib.import_module(f"benchmarks.{area(name)}.{module}").render)


def headline_of(name: str) -> Callable[[Rec], Headline] | None:
    """The ``headline`` function of the benchmark that writes records called ``name`` (None: it has no row in
    the results table)."""
    module = RENDERERS.get(name)
    if module is None:
        return None
    fn = getattr(importlib.import_module(f"benchmarks.{area(name)}.{module}"), "headline", None)
    return cast(Callable[[Rec], Headline] | None, fn)


def _split(name: str) -> tuple[str, str]:
    """A record's benchmark and variant: ``predictor_seed1`` is ``predictor``'s (a renderer's own name may
    hold "_")."""
    base, _, variant = (name, "", "") if name in RENDERERS else name.partition("_")
    return base, variant


def _key(name: str) -> tuple[int, str]:
    base = _split(name)[0]
    return (ORDER.index(base) if base in ORDER else len(ORDER), name)


def _area_of(name: str) -> str:
    """The area page a record's section goes on (``other`` for a record no benchmark claims)."""
    try:
        return area(_split(name)[0])
    except KeyError:
        return "other"


def title(name: str) -> str:
    """A record's section title (a variant's in brackets after its benchmark's)."""
    base, variant = _split(name)
    return TITLES.get(base, base.capitalize()) + (f" ({variant})" if variant else "")


def slug(text: str) -> str:
    """The anchor of a heading, as MkDocs (``toc``) and GitHub both write it for these titles."""
    text = re.sub(r"[^\w\s-]", "", text).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def section(name: str, rec: Rec, notes: dict[str, str]) -> str:
    """One record's section: its benchmark's text, the notes written by hand, the provenance."""
    try:
        text = renderer(_split(name)[0])(rec)
    except (KeyError, TypeError, StopIteration):
        text = _generic(rec)
    if notes.get(name):
        text += f"\n\n**Notes** (written by hand about these figures):\n\n{notes[name].strip()}"
    return f"## {title(name)}\n\n{text}\n\n{meta(rec)}\n"


def sections(records: dict[str, Rec], notes: dict[str, str] | None = None) -> str:
    """Every record's section, in the suite's order (a variant after its benchmark's)."""
    return "\n".join(section(name, records[name], notes or {}) for name in sorted(records, key=_key))


def area_page(area_name: str, records: dict[str, Rec], notes: dict[str, str] | None = None) -> str:
    """The documentation page of one area: its sections, under what the area measures."""
    mine = {k: v for k, v in records.items() if _area_of(k) == area_name}
    if area_name in AREA_TITLES:
        doc = importlib.import_module(f"benchmarks.{area_name}").__doc__ or ""
        about = " ".join(doc.split())
        heading = AREA_TITLES[area_name]
    else:
        about, heading = "Records no benchmark of the suite claims, rendered generically.", "Other records"
    intro = (f"# Benchmarks: {heading.lower()}\n\n{about}\n\nGenerated by `python scripts/bench.py --render` from "
             f"the records under `benchmarks/{area_name}/records/` and the notes beside each benchmark; do not edit by "
             f"hand. The headline figures of every area are in [the results table](../benchmarks.md). {MACHINE}\n")
    return intro + "\n" + sections(mine, notes)


def _measured(rec: Rec) -> str:
    m = rec.get("machine") or {}
    quick = ", quick mode" if rec.get("mode") == "quick" else ""
    return f"{str(rec.get('date', '?'))[:10]}, {m.get('cpu_model', '?')} ({m.get('cpus_usable', '?')} CPUs{quick})"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def results_table(records: dict[str, Rec], pages: str) -> str:
    """The results table: one row per benchmark that declares a headline (its ``headline(rec)``), in the
    order of the areas; ``pages`` is the link to the area pages' folder from where the table is read."""
    rows = []
    for name in sorted(records, key=lambda n: (AREAS.index(_area_of(n)) if _area_of(n) in AREAS else 99, _key(n))):
        base, variant = _split(name)
        fn = None if variant else headline_of(base)
        if fn is None:
            continue
        try:
            h = fn(records[name])
        except (KeyError, TypeError, StopIteration) as err:  # a record of another layout: say so, do not skip it
            h = Headline(title(name), f"not read from this record ({type(err).__name__}: {err})", "-", "-", None)
        met = "no goal set" if h.met is None else ("**met**" if h.met else "**not met**")
        link = f"[{title(name)}]({pages}/{_area_of(name)}.md#{slug(title(name))})"
        rows.append([_cell(h.claim), _cell(h.figure), _cell(h.against), _cell(h.goal), met,
                     _measured(records[name]), link])
    return table(["claim", "figure", "against", "goal", "met", "measured", "details"], rows)


def results_page(records: dict[str, Rec], pages: str) -> str:
    """``BENCHMARKS.md`` (and the site's results page): the results table first, then where each area's
    sections are, and how to run the suite."""
    present = [a for a in (*AREAS, "other") if any(_area_of(n) == a for n in records)]
    areas = []
    for a in present:
        names = sorted((n for n in records if _area_of(n) == a), key=_key)
        links = ", ".join(f"[{title(n)}]({pages}/{a}.md#{slug(title(n))})"
                          for n in names)
        areas.append(f"- **[{AREA_TITLES.get(a, 'Other records')}]({pages}/{a}.md)**: {links}")
    return f"""# Benchmarks

Does LatNAS work, how well, and against what? One row per claim: the figure from the latest record, what it is
compared with, the goal set for it and whether the figure meets it, when and on what it was measured, and the
section with the details (tables, notes, the command that reproduces it). Rendered from the JSON records by
`python scripts/bench.py --render`; do not edit by hand.

{results_table(records, pages)}

## Every benchmark, by area

Each area is a folder of `benchmarks/` holding its benchmarks' modules, notes and records, and a page:

{chr(10).join(areas)}

## Running the benchmarks

{MACHINE}

{RUN}
"""


def write(records: Path | Sequence[Path] | None, output: Path, pages: Path | None = None) -> Path:
    """Render the records (one folder, several, or every area's when None), with the notes beside each
    folder: the results page to ``output`` and, when ``pages`` is given, the site's results page
    (``<pages>.md``) and one page per area (``<pages>/<area>.md``). Returns ``output``."""
    dirs = records_dirs(records) if records is None or isinstance(records, Path) else list(records)
    recs, notes = load_records(*dirs), load_notes(*dirs)
    rel = (pages.relative_to(output.parent) if pages is not None and pages.is_relative_to(output.parent)
           else Path(PAGES))
    output.write_text(results_page(recs, rel.as_posix()))
    if pages is not None:
        pages.mkdir(parents=True, exist_ok=True)
        pages.with_suffix(".md").write_text(results_page(recs, pages.name))
        for a in {_area_of(n) for n in recs}:
            (pages / f"{a}.md").write_text(area_page(a, recs, notes))
    return output
