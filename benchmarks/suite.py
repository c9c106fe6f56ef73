"""The benchmark suite's command line: named benchmarks, quick and full modes, and the renderer.

    python scripts/bench.py --list                 # the benchmarks and how long each takes
    python scripts/bench.py --quick                # every benchmark, small (under 10 minutes on 2 cores)
    python scripts/bench.py sampler screening      # some benchmarks, full size (says how long first)
    python scripts/bench.py --render               # BENCHMARKS.md and docs/benchmarks/ from the records

Each benchmark prints its figures and writes a JSON record (machine, CPU model, versions, date,
exact command, mode, figures): ``benchmarks/<area>/records/<name>.json`` in full mode,
``benchmarks/<area>/records/quick/<name>.json`` in quick mode. After a run, ``BENCHMARKS.md`` (the results
table) and the documentation's pages of each area (``docs/benchmarks/<area>.md``) are rendered again from the
records, each benchmark's section by its own ``render`` and its row of the table by its own ``headline``.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks import common
from nas.core.errors import ConfigError

Runner = Callable[[argparse.Namespace, bool, Callable[[str], None]], dict[str, Any]]


@dataclass(frozen=True)
class Benchmark:
    """A named benchmark: what it measures, its runner, and its expected minutes (quick, full) on 2 cores.

    The quick figures are from a fresh clone, where the first benchmark also collects the small
    latency dataset the others predict from (about 100 s)."""

    name: str
    summary: str
    run: Runner
    minutes: tuple[float, float]
    external: bool = False
    in_quick: bool = True


def _ints(text: str | None, default: Sequence[int]) -> list[int]:
    return list(default) if text is None else [int(x) for x in text.split(",") if x]


def _sampler(args: argparse.Namespace, quick: bool, log: Callable[[str], None]) -> dict[str, Any]:
    from benchmarks.search import sampler_quality

    budgets = _ints(args.budgets, (10, 25) if quick else (50, 150, 500))
    seeds = args.seeds if args.seeds is not None else (5 if quick else 10)
    return sampler_quality.run(budgets, seeds, log=log)


def _screening(args: argparse.Namespace, quick: bool, log: Callable[[str], None]) -> dict[str, Any]:
    from benchmarks.search import screening

    return screening.run(args.candidates or (200 if quick else 1000), log=log)


def _scale(args: argparse.Namespace, quick: bool, log: Callable[[str], None]) -> dict[str, Any]:
    from benchmarks.reliability import scale

    return scale.run(n_trials=args.trials or (6 if quick else 16), epochs=2 if quick else 4, log=log)


def _references(args: argparse.Namespace, quick: bool, log: Callable[[str], None]) -> dict[str, Any]:
    from benchmarks.search import references

    seeds = args.seeds or (1 if quick else 3)
    return references.run(seeds=seeds, epochs=args.epochs or (3 if quick else 8), search_n=30 if quick else 400,
                          quick=quick, log=log)


def _fidelity(args: argparse.Namespace, quick: bool, log: Callable[[str], None]) -> dict[str, Any]:
    from benchmarks.accuracy import fidelity

    return fidelity.run(fidelity.cifar10_archive(args.cifar10), quick, workers=args.workers, log=log)


def _references_cifar10(args: argparse.Namespace, quick: bool, log: Callable[[str], None]) -> dict[str, Any]:
    from benchmarks.accuracy import fidelity
    from benchmarks.search import references_cifar10

    return references_cifar10.run(fidelity.cifar10_archive(args.cifar10), quick, workers=args.workers, log=log)


def _supernet(args: argparse.Namespace, quick: bool, log: Callable[[str], None]) -> dict[str, Any]:
    from benchmarks.accuracy import fidelity, supernet

    return supernet.run(fidelity.cifar10_archive(args.cifar10), quick, epochs=args.supernet_epochs,
                        minutes=args.supernet_minutes, fidelity_dir=args.fidelity_dir, work_dir=args.work_dir, log=log)


def _deployment(args: argparse.Namespace, quick: bool, log: Callable[[str], None]) -> dict[str, Any]:
    from benchmarks.accuracy import fidelity
    from benchmarks.deployment import deployment

    return deployment.run(fidelity.cifar10_archive(args.cifar10), quick, log=log)


def _external(name: str) -> Runner:
    def runner(args: argparse.Namespace, quick: bool, log: Callable[[str], None]) -> dict[str, Any]:
        from benchmarks import external

        return external.run(name, quick, log=log)

    return runner


def registry() -> dict[str, Benchmark]:
    """Every benchmark by name (scripts of other benchmarks are included when they exist)."""
    from benchmarks import external

    items = [
        Benchmark("sampler", "sampler quality: TPE, NSGA-II, regularised evolution, random at equal budgets",
                  _sampler, (3.5, 60)),
        Benchmark("screening", "predictor-driven screening speed: candidates scored per second", _screening,
                  (0.5, 4)),
        Benchmark("scale", "search throughput with 1 and 2 workers; projection to 3 nodes x 8 GPUs", _scale,
                  (1, 5)),
        Benchmark("references", "searched vs hand-designed networks at two latency targets", _references,
                  (3, 25)),
        Benchmark("fidelity", "proxy fidelity on CIFAR-10: cheap accuracy estimates against reference training",
                  _fidelity, (4, 75), in_quick=False),
        Benchmark("references_cifar10", "searched vs hand-designed networks on CIFAR-10 at two latency targets",
                  _references_cifar10, (6, 80), in_quick=False),
        Benchmark("supernet", "one-shot accuracy on CIFAR-10: a supernet in 90 minutes, its ranking against the "
                  "fidelity study's reference, cost per candidate, search vs the brief-training search", _supernet,
                  (12, 150), in_quick=False),
        Benchmark("deployment", "deployment variants on CIFAR-10: FP32 vs INT8 on ONNX Runtime CPU, pruned networks",
                  _deployment, (3, 40), in_quick=False),
    ]
    for name, ext in external.SCRIPTS.items():
        if (common.ROOT / (ext.module.replace(".", "/") + ".py")).exists():
            items.append(Benchmark(name, ext.summary, _external(name), ext.minutes, external=True,
                                   in_quick=ext.in_quick))
    return {b.name: b for b in items}


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python scripts/bench.py", description=__doc__.split("\n\n")[0])
    p.add_argument("names", nargs="*", help="benchmarks to run (default: all)")
    p.add_argument("--quick", action="store_true", help="small versions (the whole suite in under 10 minutes)")
    p.add_argument("--list", action="store_true", help="list the benchmarks and exit")
    p.add_argument("--render", action="store_true", help="only render BENCHMARKS.md and the area pages")
    p.add_argument("--no-render", action="store_true",
                   help="do not render BENCHMARKS.md and the area pages after the run")
    p.add_argument("--records", type=Path,
                   help="one records folder for every benchmark (default: each area's, benchmarks/<area>/records/)")
    p.add_argument("--output", type=Path, default=common.ROOT / "BENCHMARKS.md", help="the rendered results page")
    p.add_argument("--pages", type=Path, default=common.ROOT / "docs" / "benchmarks",
                   help="the folder of the rendered area pages (default docs/benchmarks/)")
    p.add_argument("--seeds", type=int,
                   help="sampler: search seeds (quick 5; full 10); references: training seeds (quick 1; full 3)")
    p.add_argument("--epochs", type=int, help="references: training epochs per network (quick 3; full 8)")
    p.add_argument("--budgets", help="sampler: comma-separated budgets (quick 10,25; full 50,150,500)")
    p.add_argument("--candidates", type=int, help="screening: candidates scored (quick 200; full 1000)")
    p.add_argument("--trials", type=int, help="scale: trials per search (quick 6; full 16)")
    p.add_argument("--cifar10", help="the CIFAR-10 JPEG archive (default: $LATNAS_CIFAR10_JPEG)")
    p.add_argument("--workers", type=int, default=2, help="fidelity, CIFAR-10 references: trainings at once")
    p.add_argument("--supernet-epochs", type=int,
                   help="supernet: training epochs (default: as many as fit --supernet-minutes here; quick: 1)")
    p.add_argument("--supernet-minutes", type=float,
                   help="supernet: the training budget the epochs are chosen to fit (default 90; at most 90)")
    p.add_argument("--fidelity-dir", type=Path,
                   help="supernet: the fidelity study's folder (default .latnas/bench/fidelity-<mode>)")
    p.add_argument("--work-dir", type=Path, help="supernet: its working folder (default .latnas/bench/supernet-<mode>)")
    return p


def select(names: Sequence[str], known: dict[str, Benchmark], quick: bool = False) -> list[Benchmark]:
    """The benchmarks called ``names`` (when empty: all, or in quick mode those marked for it).

    Raises:
        ConfigError: an unknown name, listing the known ones.
    """
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ConfigError("benchmark", f"unknown benchmark {unknown[0]!r}; known: {', '.join(sorted(known))}")
    if names:
        return [known[n] for n in names]
    return [b for b in known.values() if b.in_quick or not quick]


def main(argv: Sequence[str] | None = None) -> int:
    """Run the suite; returns the exit status (2 for an unknown benchmark name)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args = _parser().parse_args(argv)
    if args.render:
        from benchmarks import render

        path = render.write(args.records, args.output, args.pages)
        print(f"rendered {common.portable(path)} and {common.portable(args.pages)}/")
        return 0
    known = registry()
    if args.list:
        for b in known.values():
            note = "" if b.in_quick else " (not in --quick unless named)"
            print(f"{b.name:<12} {common.area(b.name):<11} quick ~{b.minutes[0]:g} min, full ~{b.minutes[1]:g} min  "
                  f"{b.summary}{note}")
        quick_total = sum(b.minutes[0] for b in select([], known, quick=True))
        full_total = sum(b.minutes[1] for b in known.values())
        print(f"total: --quick ~{quick_total:g} min (the benchmarks not marked otherwise); "
              f"every benchmark at full size ~{full_total:g} min; on 2 cores")
        return 0
    try:
        chosen = select(args.names, known, args.quick)
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    mode = "quick" if args.quick else "full"
    total = sum(b.minutes[0 if args.quick else 1] for b in chosen)
    print(f"{mode} mode: {', '.join(b.name for b in chosen)}; expected about {total:g} minutes on 2 cores "
          "(longer on a busy machine)", flush=True)
    command = common.command_line(argv)
    for b in chosen:
        print(f"== {b.name}: {b.summary}", flush=True)
        t0 = time.perf_counter()
        record = common.header(b.name, mode, command)
        figures = b.run(args, args.quick, lambda s: print(s, flush=True))
        wall = time.perf_counter() - t0
        if b.external:  # the script wrote its own record (with its own command)
            print(f"   {b.name}: {wall:.0f} s; wrote {figures['script_command'].split('--out ')[-1].split()[0]}")
            continue
        record["figures"] = figures
        record["wall_seconds"] = round(wall, 1)
        path = common.write_record(common.record_path(b.name, mode, args.records), record)
        print(f"   {b.name}: {wall:.0f} s; wrote {common.portable(path)}", flush=True)
    if not args.no_render:
        from benchmarks import render

        print(f"rendered {render.write(args.records, args.output, args.pages)}")
    return 0
