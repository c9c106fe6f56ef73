"""A tail-latency predictor trained at scale, read against the p99's own repeatability.

Usage::

    python -m benchmarks.prediction.tail_predictor [--n 300] [--data DIR]
        [--out benchmarks/prediction/records/tail_predictor.json]

1. Collects (or resumes) a dataset of ``--n`` architectures of ``mobile_cifar`` measured with ONNX
   Runtime on this machine's CPU, one thread, at CIFAR-10's deployment shape 1x3x32x32, with the
   protocol a p99 needs (at least 1,000 timed runs per measurement, :func:`benchmarks.latency.tail.p99_protocol`):
   the collection's coverage stream, disturbed measurements retried, ``--repeats`` architectures measured
   twice for the noise estimate (``latency_predictor.prediction.collection``).
2. Trains a p99 predictor and a p50 predictor on the same 80% of the architectures and scores both on
   the held-out 20%, beside the MACs baseline (``latency_predictor.prediction.training``); the same over
   ``--splits`` further random splits, to show how much the reported split owes to chance.
3. **The repeatability ceiling**: every held-out architecture is timed again, in a fresh session, with the
   same protocol. The share whose new p99 lands within +-10% of the figure the predictor is scored against
   is what a predictor that knew that figure exactly would reach against a second timing: the predictor's
   error is read against it.

Goal (issue 37): the p99 predictor within +-10% on at least 85% of the held-out architectures, or, where the
p99 repeats less often than that, on at least the share the repeatability ceiling reaches.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common import header, write_record

GOAL_WITHIN_10 = 0.85
SHAPE = (1, 3, 32, 32)
SPACE = "mobile_cifar"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=300, help="architectures in the dataset (default 300)")
    p.add_argument("--repeats", type=int, default=30, help="architectures measured twice in the collection (30)")
    p.add_argument("--retries", type=int, default=3, help="re-measurements of a disturbed measurement (default 3)")
    p.add_argument("--data", type=Path, default=Path(".latnas/datasets/tail-p99-mobile_cifar-32"),
                   help="dataset folder, resumed when it exists (default .latnas/datasets/tail-p99-mobile_cifar-32)")
    p.add_argument("--seed", type=int, default=0, help="coverage stream and reported split seed (default 0)")
    p.add_argument("--splits", type=int, default=10, help="further random splits summarised (default 10)")
    p.add_argument("--out", type=Path, default=Path("benchmarks/prediction/records/tail_predictor.json"),
                   help="JSON record to write")
    return p


def estimator() -> Any:
    """ONNX Runtime on the CPU, one thread, 1x3x32x32, with the p99 protocol."""
    from benchmarks.latency.tail import p99_protocol
    from latency_predictor.measurement.backends import make_estimator

    return make_estimator("onnxruntime", input_shape=SHAPE, num_classes=10, intra_op_threads=1,
                          measure=p99_protocol())


def remeasure(archs: list[str], est: Any, retries: int) -> list[dict[str, Any]]:
    """Each architecture timed again in a fresh session; a disturbed measurement is retried up to ``retries``
    times (the last one is kept, marked)."""
    from latency_predictor.prediction.dataset import disturbance
    from search_spaces import Arch

    out = []
    for i, a in enumerate(archs, 1):
        attempts = 0
        while True:
            r = est.measure(Arch.decode(a))
            why, attempts = disturbance(r), attempts + 1
            if why is None or attempts > retries:
                break
        out.append({"arch": a, "p50": r.stats.p50, "p99": r.stats.p99, "n": r.stats.n, "disturbed": why,
                    "attempts": attempts})
        print(f"  again {i}/{len(archs)}: p99 {r.stats.p99:.3f} ms{' (disturbed: ' + why + ')' if why else ''}",
              flush=True)
    return out


def repeatability(first: list[float], second: list[float]) -> dict[str, Any]:
    """How a second timing compares with the first, per architecture (second / first)."""
    ratio = np.asarray(second) / np.asarray(first)
    rel = np.abs(ratio - 1)
    return {"n": len(ratio), "within_10": float(np.mean(rel <= 0.10)), "within_5": float(np.mean(rel <= 0.05)),
            "median_abs_rel": float(np.median(rel)), "max_abs_rel": float(rel.max()),
            "ratio_min": float(ratio.min()), "ratio_max": float(ratio.max())}


def goal(within_10: float, ceiling: float) -> dict[str, Any]:
    """The goal: within +-10% on :data:`GOAL_WITHIN_10` of the held-out architectures, or on the share the
    repeatability ceiling reaches where that is lower."""
    bar = min(GOAL_WITHIN_10, ceiling)
    return {"bar": bar, "within_10": within_10, "ceiling": ceiling, "met": within_10 >= bar}


def splits(ds: Any, n: int, seed: int) -> dict[str, Any]:
    """The p99 predictor's held-out +-10% share over ``n`` further random splits."""
    from latency_predictor.prediction.training import train_predictor

    w, m = [], []
    for s in range(seed + 1, seed + 1 + n):
        rep = train_predictor(ds, test_fraction=0.2, seed=s, members=0, statistic="p99")[1]
        w.append(rep.models["additive"].within_10)
        m.append(rep.models["macs"].within_10)
    return {"n": n, "within_10_mean": float(np.mean(w)), "within_10_min": float(np.min(w)),
            "within_10_max": float(np.max(w)), "macs_within_10_mean": float(np.mean(m))}


def render(rec: dict[str, Any]) -> str:
    """The section of a record of this benchmark on its area's page (docs/benchmarks/<area>.md)."""
    from benchmarks.render import _f, _pct, table

    f, st = rec["figures"], rec["settings"]
    col, rp, g = f["collection"], f["repeatability"], f["goal"]
    rows = []
    for stat in ("p99", "p50"):
        r = f[stat]
        for model, label in (("additive", "predictor"), ("macs", "MACs baseline")):
            m = r[model]
            rows.append([stat, label, _f(r["n_train"]), _f(r["n_test"]), _pct(m["mape"]), _pct(m["within_5"]),
                         _pct(m["within_10"]), _f(m["kendall"], 3), _pct(m["max_rel_error"])])
        rows.append([stat, "repeatability ceiling", "-", _f(rp[stat]["n"]), _pct(rp[stat]["median_abs_rel"]),
                     _pct(rp[stat]["within_5"]), _pct(rp[stat]["within_10"]), "-", _pct(rp[stat]["max_abs_rel"])])
    s = f["splits"]
    dist = rp.get("disturbed", 0)
    return f"""The p99 predictor trained at scale: {_f(col['archs'])} architectures of `{st['space']}` measured with
ONNX Runtime on this machine's CPU (1 thread, 1x3x32x32) with the p99 protocol (at least {_f(st['min_runs'])} timed runs
per measurement; {_f(col['records'])} measurements, disturbed ones retried, {_f(col['repeat_pairs'])} architectures
measured twice), in {_f(col['collect_s'], 0)} s. A p99 and a p50 predictor trained on the same
{_f(f['p99']['n_train'])} architectures and scored on the same {_f(f['p99']['n_test'])} held out, beside the MACs
baseline. The *repeatability ceiling*: every held-out architecture timed again in a fresh session with the same
protocol ({_f(rp['seconds'], 0)} s; {dist} of them still disturbed after retries), and its new figure compared
with the one the predictor is scored against: the MAPE column holds the median difference, the max column the
largest.

{table(['statistic', 'model', 'trained on', 'held out', 'MAPE', 'within 5%', 'within 10%', 'Kendall',
        'max error'], rows)}

Over {s['n']} further random splits, the p99 predictor's +-10% share: mean {_pct(s['within_10_mean'])}
(range {_pct(s['within_10_min'])} - {_pct(s['within_10_max'])}; the MACs baseline {_pct(s['macs_within_10_mean'])}).

Goal: the p99 predictor within +-10% on at least {_pct(GOAL_WITHIN_10)} of the held-out architectures, or on the
share the p99 itself repeats within +-10% where that is lower (here {_pct(g['ceiling'])}, so the bar is
{_pct(g['bar'])}): {'met' if g['met'] else 'missed'} ({_pct(g['within_10'])})."""


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; returns 0 (a goal missed is reported, not turned into a failure)."""
    args = _parser().parse_args(argv)
    if args.n < 12 or args.repeats < 0 or args.retries < 0 or args.splits < 0:
        print("error: --n must be >= 12 and --repeats, --retries, --splits >= 0", file=sys.stderr)
        return 2
    from benchmarks.latency.tail import BASE_PROTOCOL
    from latency_predictor.measurement.statistic import protocol_for
    from latency_predictor.prediction.collection import collect
    from latency_predictor.prediction.dataset import Dataset
    from latency_predictor.prediction.training import train_predictor, usable_table
    from search_spaces import load_space

    load_before = os.getloadavg()
    t0 = time.perf_counter()
    space, est = load_space(SPACE), estimator()

    def usable() -> tuple[int, int]:
        """Architectures in the dataset, and those with a record fit for a p99 (undisturbed, enough runs)."""
        if not (args.data / "dataset.json").exists():
            return 0, 0
        ds = Dataset.open(args.data)
        return len(ds.measured_archs()), len(usable_table(ds, statistic="p99")[0])

    # unstable measurements are common on this host (its speed moves within a measurement): new
    # architectures are added until n have a usable p99, at most 2n measured in all
    t = time.perf_counter()
    runs: list[dict[str, int]] = []
    have, fit = usable()
    while fit < args.n and have < 2 * args.n:
        todo = min(args.n - fit, 2 * args.n - have)
        print(f"collecting {todo} architectures with the p99 protocol ({have} in {args.data}, {fit} usable)",
              flush=True)
        summary = collect(space, est, args.data, todo, seed=args.seed, retries=args.retries if not runs else 1,
                          repeats=min(args.repeats, todo) if not runs else 0, statistic="p99", progress=True)
        runs.append({"measured": summary.measured, "new_archs": summary.new_archs, "retried": summary.retried,
                     "repeated": summary.repeated, "still_disturbed": summary.still_disturbed})
        have, fit = usable()
    collect_s = time.perf_counter() - t
    print(f"{have} architectures measured, {fit} with a usable p99", flush=True)
    ds = Dataset.open(args.data)
    figures: dict[str, Any] = {"collection": {**ds.summary(), "collect_s": collect_s,
                                              "repeat_pairs": len(ds.repeat_log_ratios("p99")),
                                              "usable_p99": fit, "this_run": runs}}
    reports = {}
    for stat in ("p99", "p50"):
        _, rep = train_predictor(ds, test_fraction=0.2, seed=args.seed, statistic=stat)
        reports[stat] = rep
        figures[stat] = {"additive": rep.models["additive"].to_dict(), "macs": rep.models["macs"].to_dict(),
                         "n_train": len(rep.train_archs), "n_test": len(rep.test_archs),
                         "noise_ceiling_10": rep.noise["ceiling_10"]}
        m = rep.models["additive"]
        print(f"{stat} predictor: MAPE {m.mape:.1%}, within +-10% {m.within_10:.0%} of {len(rep.test_archs)} held out "
              f"(MACs baseline {rep.models['macs'].within_10:.0%})", flush=True)
    if reports["p99"].test_archs != reports["p50"].test_archs:
        raise RuntimeError("the p50 and p99 predictors were held out on different architectures")
    print(f"timing the {len(reports['p99'].test_archs)} held-out architectures again", flush=True)
    t = time.perf_counter()
    again = remeasure(list(reports["p99"].test_archs), est, args.retries)
    rp: dict[str, Any] = {"seconds": time.perf_counter() - t, "disturbed": sum(a["disturbed"] is not None
                                                                             for a in again)}
    for stat in ("p99", "p50"):
        rp[stat] = repeatability(reports[stat].measured_ms, [a[stat] for a in again])
    rp["archs"] = [{**a, "first_p99": f1, "first_p50": f2} for a, f1, f2
                   in zip(again, reports["p99"].measured_ms, reports["p50"].measured_ms, strict=True)]
    figures["repeatability"] = rp
    figures["splits"] = splits(ds, args.splits, args.seed)
    figures["goal"] = goal(figures["p99"]["additive"]["within_10"], rp["p99"]["within_10"])
    wall = time.perf_counter() - t0
    print(f"p99 repeats within +-10% for {rp['p99']['within_10']:.0%} of the held-out architectures (median "
          f"difference {rp['p99']['median_abs_rel']:.1%}); goal (within +-10% on {figures['goal']['bar']:.0%}): "
          f"{'met' if figures['goal']['met'] else 'MISSED'}; {wall:.0f} s in all", flush=True)
    record = {
        **header("tail_predictor", "full", ["python", "-m", "benchmarks.prediction.tail_predictor", *sys.argv[1:]]),
        "settings": {"space": SPACE, "input_shape": list(SHAPE), "threads": 1, "n": args.n, "repeats": args.repeats,
                     "retries": args.retries, "seed": args.seed, "protocol": protocol_for("p99", BASE_PROTOCOL),
                     "min_runs": protocol_for("p99", BASE_PROTOCOL)["min_runs"]},
        "load_average_before": load_before[0], "load_average_after": os.getloadavg()[0], "wall_seconds": wall,
        "figures": figures,
    }
    print(f"wrote {write_record(args.out, record)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
