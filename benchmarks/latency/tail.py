"""Tail latency, batches and throughput: the figures a deployment states its target in.

Usage::

    python -m benchmarks.latency.tail [--predictor-n 80] [--search-trials 8]
        [--out benchmarks/latency/records/tail.json]

Everything runs on this machine's CPU, one thread, at CIFAR-10's deployment shape 1x3x32x32, with
the protocol a p99 needs (:func:`latency_predictor.measurement.statistic.protocol_for`: at least 1,000 timed
runs per measurement). The networks are the hand-designed references in their 32x32 layouts
(MobileNetV2 at width 0.5 and 1, EfficientNet-B0 and MnasNet-B1 at width 1) and the searched
network of the p99 search (part 4), with the searched networks of the CIFAR-10 comparison when its
record exists (``benchmarks/search/records/references_cifar10.json``) or those named with ``--arch``.

Parts, one after another, nothing else running:

1. **p50 and p99 at batch 1** with their 95% confidence intervals (order statistics), per network,
   on ONNX Runtime and on PyTorch eager: the p99/p50 ratio per backend.
1b. **The input pipeline** (``latency.preprocessing``): decoding a 480x640 JPEG or PNG (or taking a raw
   frame), resizing it to 32x32 and normalising it, with the same protocol.
2. **Throughput at a latency bound**: ONNX Runtime at batches 1, 2, 4, ... 32, each batch timed
   with the p90 protocol (:data:`THROUGHPUT_STAT`); for each bound, the batch with the most images
   per second whose p90 stays within it (:func:`latency_predictor.measurement.scenario.server_point`).
3. **The predictor on p99 vs p50**: ``--predictor-n`` architectures of ``mobile_cifar`` collected
   once with the p99 protocol; a p50 and a p99 predictor trained on the same split, held-out
   accuracy side by side.
4. **A search at a p99 target** (the p99 of MobileNetV2 x0.5, measured first): the quickstart's data
   and recipe on ``mobile_cifar`` at 32x32 with ``latency.target_stat=p99``; its winner is then
   measured again here, ``--remeasure`` times in fresh sessions, and each p99 checked against the
   target. This part runs first, and its winner is one of the networks of parts 1 and 2.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common import ROOT, header, write_record
from latency_predictor.measurement.backends import make_estimator
from latency_predictor.measurement.protocol import LatencyResult
from latency_predictor.measurement.scenario import server_point
from latency_predictor.measurement.statistic import protocol_for
from latency_predictor.measurement.timing import MeasureConfig

SHAPE = (1, 3, 32, 32)
BATCHES = (1, 2, 4, 8, 16, 32)
BOUNDS_MS = (5.0, 20.0)
SOURCE_SIZE = (480, 640)
# Throughput bounds the p90: a p99 at every batch size (1,000 runs of a batch of 32, up to 3 attempts)
# took about 7 minutes for MobileNetV2 x0.5 alone on this machine.
THROUGHPUT_STAT = "p90"
REFERENCES = (("mobilenetv2_100", 0.5), ("mobilenetv2_100", 1.0), ("efficientnet_b0", 1.0), ("mnasnet_b1", 1.0))
BASE_PROTOCOL = {"warmup_runs": 10, "warmup_s": 0.2, "min_runs": 100, "min_time_s": 1.0, "max_time_s": 10.0,
                 "stability_threshold": 0.1, "max_repeats": 3}


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--predictor-n", type=int, default=80, help="architectures collected for the predictors (80)")
    p.add_argument("--search-trials", type=int, default=8, help="trials of the p99 search (8)")
    p.add_argument("--remeasure", type=int, default=3, help="fresh measurements of the p99 search's winner (3)")
    p.add_argument("--arch", action="append", default=[], metavar="NAME=ARCH",
                   help="a searched network to include (default: the CIFAR-10 comparison's searched networks)")
    p.add_argument("--out", type=Path, default=Path("benchmarks/latency/records/tail.json"),
                   help="JSON record to write")
    return p


def p99_protocol(batch_sizes: tuple[int, ...] = (1,), stat: str = "p99") -> MeasureConfig:
    """The measurement protocol with the timed runs ``stat`` (a p99 by default) needs."""
    return MeasureConfig(**protocol_for(stat, BASE_PROTOCOL), throughput_batch_sizes=batch_sizes)


def networks(extra: list[str]) -> list[tuple[str, Any]]:
    """(label, Arch) of the reference networks and the searched ones."""
    from search_spaces import Arch, reference
    from search_spaces.references import scale_width, small_input_variant

    out: list[tuple[str, Any]] = [(f"{name} x{m:g}", scale_width(small_input_variant(reference(name)), m))
                                  for name, m in REFERENCES]
    for item in extra:
        label, _, text = item.partition("=")
        out.append((label, Arch.decode(text)))
    rec_path = ROOT / "benchmarks" / "search" / "records" / "references_cifar10.json"
    if not extra and rec_path.exists():  # the CIFAR-10 comparison's searched networks, when it has run
        rec = json.loads(rec_path.read_text())
        for t in rec["figures"]["targets"]:
            for c in t["candidates"]:
                if c["name"] == "searched":
                    out.append((f"searched @{t['target_ms']:g} ms", Arch.decode(c["arch"])))
    return out


def summary(r: LatencyResult) -> dict[str, Any]:
    """The figures of one measurement that this benchmark reports."""
    s = r.stats
    return {"n": s.n, "p50": s.p50, "p90": s.p90, "p99": s.p99, "mean": s.mean, "cv": s.cv,
            "ci95_p50": s.ci95.get("p50"), "ci95_p99": s.ci95.get("p99"), "p99_over_p50": s.p99 / s.p50,
            "stable": r.stable, "attempts": r.attempts, "cpu_per_wall": r.extra.get("cpu_per_wall")}


def percentiles(nets: list[tuple[str, Any]], log: Callable[[str], None]) -> dict[str, Any]:
    """Part 1: p50 and p99 with CIs at batch 1, ONNX Runtime and PyTorch."""
    backends = {
        "onnxruntime": make_estimator("onnxruntime", input_shape=SHAPE, num_classes=10, intra_op_threads=1,
                                      measure=p99_protocol()),
        "torch": make_estimator("torch", input_shape=SHAPE, num_classes=10, threads=1, measure=p99_protocol()),
    }
    rows = []
    for label, arch in nets:
        row: dict[str, Any] = {"network": label, "arch": arch.encode()}
        for name, est in backends.items():
            row[name] = summary(est.measure(arch))
            f = row[name]
            log(f"  {label:<26} {name:<12} p50 {f['p50']:.3f} ms  p99 {f['p99']:.3f} ms  "
                f"(p99/p50 {f['p99_over_p50']:.2f}, {f['n']} runs)")
        rows.append(row)
    ratios = {name: {"median": float(np.median([r[name]["p99_over_p50"] for r in rows])),
                     "min": float(min(r[name]["p99_over_p50"] for r in rows)),
                     "max": float(max(r[name]["p99_over_p50"] for r in rows))} for name in backends}
    return {"rows": rows, "p99_over_p50": ratios}


def preprocessing(log: Callable[[str], None]) -> dict[str, Any]:
    """Part 1b: the input pipeline's cost (``latency.preprocessing``) for a 480x640 image, p99 protocol."""
    from latency_predictor.measurement.preprocess import Preprocessing, measure_preprocessing

    rows = []
    for fmt in ("jpeg", "png", "raw"):
        spec = Preprocessing.create(fmt, SOURCE_SIZE, SHAPE)
        s = measure_preprocessing(spec, p99_protocol())
        rows.append({"format": fmt, "pipeline": spec.describe(), "n": s.n, "p50": s.p50, "p99": s.p99,
                     "ci95_p50": s.ci95.get("p50"), "ci95_p99": s.ci95.get("p99")})
        log(f"  {spec.describe():<28} p50 {s.p50:.3f} ms  p99 {s.p99:.3f} ms ({s.n} runs)")
    return {"source_size": list(SOURCE_SIZE), "rows": rows}


def throughput(nets: list[tuple[str, Any]], log: Callable[[str], None]) -> dict[str, Any]:
    """Part 2: batches 1-32 with the protocol of :data:`THROUGHPUT_STAT`; the best batch within each bound."""
    est = make_estimator("onnxruntime", input_shape=SHAPE, num_classes=10, intra_op_threads=1,
                         measure=p99_protocol(BATCHES, THROUGHPUT_STAT))
    rows = []
    for label, arch in nets:
        r = est.measure(arch)
        per = {b: dict(v) for b, v in r.extra["batch_stats"].items()}
        points = {}
        for bound in BOUNDS_MS:
            pt = server_point(r, bound, THROUGHPUT_STAT)
            points[f"{bound:g}"] = {"batch": pt.batch, "throughput_per_s": pt.throughput_per_s,
                                    "latency_ms": pt.latency_ms}
        rows.append({"network": label, "per_batch": per, "bounds": points})
        best = ", ".join(f"{b} ms: batch {p['batch']} at {p['throughput_per_s']:.0f}/s" for b, p in points.items())
        log(f"  {label:<26} {best}")
    return {"bounds_ms": list(BOUNDS_MS), "batches": list(BATCHES), "stat": THROUGHPUT_STAT, "rows": rows}


def predictors(n: int, workdir: Path, log: Callable[[str], None]) -> dict[str, Any]:
    """Part 3: one dataset measured with the p99 protocol; p50 and p99 predictors on the same split."""
    from latency_predictor.prediction.collection import collect
    from latency_predictor.prediction.dataset import Dataset
    from latency_predictor.prediction.training import train_predictor
    from search_spaces import load_space

    space = load_space("mobile_cifar")
    est = make_estimator("onnxruntime", input_shape=SHAPE, num_classes=10, intra_op_threads=1,
                         measure=p99_protocol())
    t0 = time.perf_counter()
    collect(space, est, workdir / "dataset", n, seed=0, progress=False, statistic="p99")
    collect_s = time.perf_counter() - t0
    ds = Dataset.open(workdir / "dataset")
    out: dict[str, Any] = {"space": space.name, "n": n, "collect_s": collect_s, "dataset": ds.summary()}
    for stat in ("p50", "p99"):
        _, report = train_predictor(ds, statistic=stat)
        m = report.models["additive"].to_dict()
        out[stat] = {"additive": m, "macs": report.models["macs"].to_dict(), "n_train": len(report.train_archs),
                     "n_test": len(report.test_archs), "noise_ceiling_10": report.noise["ceiling_10"]}
        log(f"  predictor for the {stat}: MAPE {m['mape']:.1%}, within +-10% {m['within_10']:.0%} of "
            f"{len(report.test_archs)} held-out networks (trained on {len(report.train_archs)})")
    return out


def p99_search(target_ms: float, trials: int, remeasure: int, workdir: Path,
               log: Callable[[str], None]) -> dict[str, Any]:
    """Part 4: a search at a p99 target; its winner measured again here, in fresh sessions."""
    from nas.cli import compose_search_config
    from nas.driver import run_search
    from search_spaces import Arch

    cfg = compose_search_config(
        "+space=mobile_cifar", f"target_ms={target_ms:.4f}", "latency.input_shape=[1,3,32,32]",
        "latency.target_stat=p99", f"search.n_trials={trials}", f"tracking.uri=sqlite:///{workdir / 'mlflow.db'}",
        f"output_dir={workdir / 'search'}", "progress=false", "name=tail-p99",
    )
    result = run_search(cfg)
    if result.best is None:
        raise RuntimeError("the p99 search completed no candidate")
    best = result.best
    arch = Arch.decode(best.arch)
    checks = []
    for _ in range(remeasure):
        est = make_estimator("onnxruntime", input_shape=SHAPE, num_classes=10, intra_op_threads=1,
                             measure=p99_protocol())
        checks.append(summary(est.measure(arch)))
    met = [c["p99"] <= target_ms for c in checks]
    log(f"  p99 search at {target_ms:.3f} ms: {len(result.candidates)} candidates in {result.wall_seconds:.0f} s; "
        f"winner {best.arch_id} p99 {best.metric('latency_p99'):.3f} ms in the search; measured again: "
        + ", ".join(f"{c['p99']:.3f}" for c in checks) + f" ms ({sum(met)}/{len(met)} within the target)")
    return {"target_ms": target_ms, "trials": trials, "candidates": len(result.candidates),
            "wall_seconds": result.wall_seconds, "winner": best.arch, "winner_id": best.arch_id,
            "winner_reward": best.reward, "winner_accuracy": best.accuracy,
            "search_p50": best.metric("latency_p50"), "search_p99": best.metric("latency_p99"),
            "final_pass": best.tags.get("latency_final_pass") == "true",
            "remeasured": checks, "met": met, "all_met": all(met)}


def render(rec: dict[str, Any]) -> str:
    """The section of a record of this benchmark on its area's page (docs/benchmarks/<area>.md)."""
    from benchmarks.render import _ci, _f, _pct, table
    f, st = rec["figures"], rec["settings"]
    pr = f["percentiles"]
    rows = [[r["network"], b, _f(r[b]["p50"], 3), _ci(r[b]["ci95_p50"]), _f(r[b]["p99"], 3), _ci(r[b]["ci95_p99"]),
             _f(r[b]["p99_over_p50"], 2), _f(r[b]["n"])] for r in pr["rows"] for b in ("onnxruntime", "torch")]
    ratios = "; ".join(f"{b}: median {_f(v['median'], 2)} (range {_f(v['min'], 2)} - {_f(v['max'], 2)})"
                       for b, v in pr["p99_over_p50"].items())
    pre = f.get("preprocessing")
    pre_head = "\n\n**The input pipeline** (`latency.preprocessing`, same protocol, one thread):\n\n"
    pre_text = "" if not pre else pre_head + table(
        ["pipeline", "p50", "95% CI", "p99", "95% CI", "runs"],
        [[r["pipeline"], _f(r["p50"], 3), _ci(r["ci95_p50"]), _f(r["p99"], 3), _ci(r["ci95_p99"]), _f(r["n"])]
         for r in pre["rows"]])
    th = f["throughput"]
    ts = th.get("stat", "p99")
    bounds = [f"{b:g}" for b in th["bounds_ms"]]
    trows = []
    for r in th["rows"]:
        per = r["per_batch"]
        cells = [f"{_f(per[str(b)][ts], 2)}" for b in th["batches"]]
        best = [f"{p['batch'] or 'none'}: {_f(p['throughput_per_s'], 0)}/s" for p in (r["bounds"][k] for k in bounds)]
        trows.append([r["network"], *cells, *best])
    pred = f["predictor"]
    prow = [[stat, _f(pred[stat]["n_train"]), _f(pred[stat]["n_test"]), _pct(pred[stat]["additive"]["mape"]),
             _pct(pred[stat]["additive"]["within_10"]), _f(pred[stat]["additive"]["kendall"], 3),
             _pct(pred[stat]["macs"]["within_10"]), _pct(pred[stat]["noise_ceiling_10"])] for stat in ("p50", "p99")]
    pheader = ['statistic', 'trained on', 'held out', 'MAPE', 'within 10%', 'Kendall', 'MACs within 10%',
               'noise ceiling 10%']
    s = f["search"]
    checks = ", ".join(_f(c["p99"], 3) for c in s["remeasured"])
    proto = st["protocol"]
    return f"""What a deployment states its target in: the tail, batches, throughput within a bound. ONNX Runtime and
PyTorch eager on this machine's CPU, one thread, at CIFAR-10's shape 1x3x32x32; every measurement times at least
{_f(proto['min_runs'])} runs (the p99 protocol, `latency.target_stat=p99`), so about 10 runs lie beyond each p99.
Networks: the hand-designed references in their 32x32 layouts and the winner of the p99 search below
(with the CIFAR-10 comparison's searched networks when that benchmark has run). Confidence intervals are
95%, distribution-free (order statistics of the timed runs).

**p50 and p99 at batch 1** (ms):

{table(['network', 'backend', 'p50', '95% CI', 'p99', '95% CI', 'p99 / p50', 'runs'], rows)}

p99 / p50 per backend: {ratios}.{pre_text}

**Throughput within a {ts} bound** (ONNX Runtime; each batch timed with the {ts} protocol): the {ts} (ms) of
each batch, and for each bound the batch with the most images per second whose {ts} stays within it
(`latency.scenario=server`):

{table(['network', *[f'b{b} {ts}' for b in th['batches']], *[f'best within {b} ms' for b in bounds]], trows)}

**The predictor on p99 vs p50**: {_f(pred['n'])} architectures of `{pred['space']}` measured once with the p99
protocol ({_f(pred['collect_s'], 0)} s); a predictor trained on each statistic, same split:

{table(pheader, prow)}

**A search at a p99 target** of {_f(s['target_ms'], 3)} ms (the p99 of MobileNetV2 x0.5, ONNX Runtime, measured first):
{s['trials']} trials on `mobile_cifar` at 32x32 (the quickstart's data and recipe) with `latency.target_stat=p99`.
Winner {s['winner_id']}: p99 {_f(s['search_p99'], 3)} ms in the search{' (final pass)' if s['final_pass'] else ''};
measured again here in {len(s['remeasured'])} fresh sessions: {checks} ms, {sum(s['met'])} of {len(s['met'])}
within the target."""


def main() -> int:
    """Run the four parts; returns 0 (a target missed is reported, not turned into a failure)."""
    args = _parser().parse_args()
    load_before = os.getloadavg()
    t0 = time.perf_counter()
    nets = networks(args.arch)
    walls: dict[str, float] = {}

    def part(name: str, fn: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        print(f"{name}:", flush=True)
        s = time.perf_counter()
        out = fn()
        walls[name] = time.perf_counter() - s
        return out

    figures: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="latnas-tail-") as tmp:
        # the p99 search first: its target is MobileNetV2 x0.5's p99, and its winner joins the networks below
        first = make_estimator("onnxruntime", input_shape=SHAPE, num_classes=10, intra_op_threads=1,
                               measure=p99_protocol())
        target = round(first.measure(nets[0][1]).stats.p99, 3)
        figures["search"] = part("a search at a p99 target", lambda: p99_search(
            target, args.search_trials, args.remeasure, Path(tmp), print))
        from search_spaces import Arch

        nets.append((f"searched (p99 search) {figures['search']['winner_id']}",
                     Arch.decode(figures["search"]["winner"])))
        figures["percentiles"] = part("p50 and p99 at batch 1", lambda: percentiles(nets, print))
        figures["preprocessing"] = part("the input pipeline", lambda: preprocessing(print))
        figures["throughput"] = part(f"throughput within a {THROUGHPUT_STAT} bound", lambda: throughput(nets, print))
        figures["predictor"] = part("the predictor on p99 vs p50",
                                    lambda: predictors(args.predictor_n, Path(tmp), print))
    wall = time.perf_counter() - t0
    print(f"{wall:.0f} s in all")
    record = {
        **header("tail", "full", ["python", "-m", "benchmarks.latency.tail", *sys.argv[1:]]),
        "settings": {"input_shape": list(SHAPE), "threads": 1, "protocol": protocol_for("p99", BASE_PROTOCOL),
                     "batches": list(BATCHES), "bounds_ms": list(BOUNDS_MS), "predictor_n": args.predictor_n,
                     "search_trials": args.search_trials, "remeasure": args.remeasure},
        "load_average_before": load_before[0], "load_average_after": os.getloadavg()[0], "wall_seconds": wall,
        "part_seconds": walls, "figures": figures,
    }
    write_record(args.out, record)
    print(f"record: {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
