"""Benchmark of a predictor for a new device adapted from several other devices' predictors.

Usage::

    python -m benchmarks.prediction.transfer_many [--devices ort1,ort2,torch,ort160,ort-b4] [--shots 10,20,30]
                                       [--splits 5] [--combine median|min]
                                       [--out benchmarks/prediction/records/transfer_many.json]

The datasets, held-out splits and source predictors are those of :mod:`benchmarks.prediction.transfer` (run it
first: its datasets are read, not measured again). For every ordered pair ``first -> target`` and
each n of ``--shots``, the n measurements of the target are those ``collect --adapt-from FIRST``
chooses (the first source's informative order), and two predictors are adapted with them:

* ``first``: adapted from the first source alone (``train --adapt-from FIRST``, the figure of
  :mod:`benchmarks.prediction.transfer`);
* ``mix``: adapted from every device except the target, the first included, and mixed with weights
  chosen by leave-one-out error (``train --adapt-from FIRST OTHER ...``).

Every figure is the +-10% share and Spearman on the held-out architectures, averaged over the
splits; the mix's weights are averaged too. Nothing is timed.

Goal: at n = 10 (:data:`benchmarks.prediction.transfer.GOAL`), Spearman >= 0.95 and +-10% >= 90%.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common import write_record
from benchmarks.prediction.transfer import GOAL, _fit, _mean, _met, _score, open_devices, record, split_options
from latency_predictor.prediction.dataset import COMBINE, Dataset
from latency_predictor.prediction.features import FeatureExtractor
from latency_predictor.prediction.models import AdditiveModel
from latency_predictor.prediction.transfer import adapt_model_from_many, informative_order
from search_spaces import Arch


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    split_options(p, "three or more", "each source predictor")
    p.add_argument("--data-root", type=Path, default=Path(".latnas/datasets"),
                   help="where the datasets are (default .latnas/datasets, those of benchmarks.prediction.transfer)")
    p.add_argument("--out", type=Path, default=Path("benchmarks/prediction/records/transfer_many.json"),
                   help="JSON record to write")
    p.add_argument("--combine", choices=COMBINE, default="median",
                   help="an architecture's latency from its records, as benchmarks.prediction.transfer's --combine "
                        "(default median)")
    return p


def evaluate(datasets: dict[str, Dataset], shots: list[int], n_full: int, n_test: int,
             splits: int, combine: str = "median") -> list[dict[str, Any]]:
    """The figures of every ``first -> target`` pair (module docstring; ``combine``: as :meth:`Dataset.table`)."""
    keys = list(datasets)
    tables = {k: d.table(combine=combine) for k, d in datasets.items()}
    extractors = {k: FeatureExtractor(d.target.input_shape, d.target.num_classes) for k, d in datasets.items()}
    scores: dict[tuple[str, str], dict[str, list[tuple[float, float]]]] = {}
    weights: dict[tuple[str, str], dict[int, list[np.ndarray]]] = {}
    for split in range(splits):
        sources: dict[tuple[str, str], AdditiveModel] = {}  # (device, target): fitted without the target's held-out
        for t in keys:
            rng = np.random.default_rng(1000 + split)  # benchmarks.prediction.transfer's held-out split
            held = tables[t].subset(np.sort(rng.permutation(len(tables[t]))[:n_test]))
            held_set, held_archs = set(held.archs), [Arch.decode(a) for a in held.archs]
            for s in keys:
                if s != t:
                    rows = [i for i, a in enumerate(tables[s].archs) if a not in held_set][:n_full]
                    sources[s, t] = _fit(extractors[s], tables[s].subset(rows))
            pool = tables[t].subset([i for i, a in enumerate(tables[t].archs) if a not in held_set])
            pool_archs = [Arch.decode(a) for a in pool.archs]
            others = [s for s in keys if s != t]
            for first in others:
                order = [first, *(s for s in others if s != first)]
                cell = scores.setdefault((first, t), {})
                chosen = informative_order(sources[first, t], extractors[t], pool_archs, max(shots))
                for n in shots:
                    idx = chosen[:n]  # each n measures the first n of the one order
                    archs, y = [pool_archs[i] for i in idx], pool.latency_ms[idx]
                    mixed, mix = adapt_model_from_many([sources[s, t] for s in order], extractors[t], archs, y,
                                                       members=0)
                    alone = mix.alone[0]
                    cell.setdefault(f"{n}.first", []).append(_score(held.latency_ms, alone.predict(held_archs)))
                    cell.setdefault(f"{n}.mix", []).append(_score(held.latency_ms, mixed.predict(held_archs)))
                    weights.setdefault((first, t), {}).setdefault(n, []).append(
                        np.array([mix.weights[order.index(s)] for s in others]))
        print(f"split {split + 1}/{splits} done", flush=True)
    pairs = []
    for (first, t), cell in scores.items():
        others = [s for s in keys if s != t]
        by_n = {str(n): {"first": _mean(cell[f"{n}.first"]), "mix": _mean(cell[f"{n}.mix"]),
                         "weights": dict(zip(others, np.mean(weights[first, t][n], axis=0).tolist(), strict=True))}
                for n in shots}
        met = _met(by_n.get(str(GOAL["n"]), {}).get("mix"), GOAL)
        pairs.append({"first": first, "target": t, "sources": others, "by_n": by_n, "goal_met": met})
        cells = "; ".join(f"n={n}: first {v['first']['within_10']:.0%}, mix {v['mix']['within_10']:.0%}"
                          for n, v in by_n.items())
        print(f"{first} (+ {len(others) - 1} more) -> {t}: {cells}", flush=True)
    return pairs


def render(rec: dict[str, Any]) -> str:
    """The section of a record of this benchmark on its area's page (docs/benchmarks/<area>.md)."""
    from benchmarks.render import _f, _pct, table
    st, goal = rec["settings"], rec["goal"]

    def cell(m: dict[str, float]) -> str:
        return f"{_pct(m['within_10'])} / {_f(m['spearman'], 3)}"

    gn = str(goal["n"])
    header = ["first -> target"]
    for n in st["shots"]:
        header += [f"first alone, n={n}", f"mix, n={n}"]
    header += [f"weights at n={gn}", "goal"]
    rows = []
    for p in rec["pairs"]:
        row = [f"{p['first']} -> {p['target']}"]
        for n in st["shots"]:
            row += [cell(p["by_n"][str(n)]["first"]), cell(p["by_n"][str(n)]["mix"])]
        w = p["by_n"].get(gn, {}).get("weights", {})
        row += [", ".join(f"{k} {v:.2f}" for k, v in sorted(w.items(), key=lambda kv: -kv[1])),
                "-" if p.get("goal_met") is None else "met" if p["goal_met"] else "not met"]
        rows.append(row)
    means = []
    for n in st["shots"]:
        a = [p["by_n"][str(n)]["first"]["within_10"] for p in rec["pairs"]]
        b = [p["by_n"][str(n)]["mix"]["within_10"] for p in rec["pairs"]]
        means.append(f"n = {n}: {_pct(sum(a) / len(a))} alone, {_pct(sum(b) / len(b))} mixed")
    met = [p for p in rec["pairs"] if p.get("goal_met")]
    sessions = (" As above, each architecture's latency is the faster of its two sessions (`--combine min`)."
                if st.get("combine") == "min" else "")
    return f"""The same devices, splits and held-out architectures as the section above, with every other device's
predictor as a source: `python -m latency_predictor.train --adapt-from FIRST OTHER ...` adapts each with the
same n measurements of the target (those `collect --adapt-from FIRST` chooses) and mixes them, weighted so
that the mix's leave-one-out error is least. "first alone" is FIRST adapted by itself with the same n (the
section above's "adapted"). Each cell: +-10% share / Spearman on {st['n_test']} held-out architectures, averaged
over {st['splits']} splits; the weights are averaged over the splits.{sessions}

{table(header, rows)}

Mean +-10% share over the {len(rec['pairs'])} rows: {'; '.join(means)}.
Goal at n = {gn} (the mix): Spearman >= {goal['spearman']} and +-10% >= {_pct(goal['within_10'])}: met by
{len(met)} of {len(rec['pairs'])}."""


def main() -> int:
    """Run the benchmark; returns 0 (goals missed are reported, not turned into a failure)."""
    args = _parser().parse_args()
    shots = [int(x) for x in args.shots.split(",") if x]
    load_before = os.getloadavg()[0]
    t0 = time.perf_counter()
    datasets, devices, collect_s = open_devices(args.devices, 3, args.n_full + args.n_test, args.data_root, 3)
    pairs = evaluate(datasets, shots, args.n_full, args.n_test, args.splits, args.combine)
    settings = {"space": "mobile", "n_full": args.n_full, "n_test": args.n_test, "shots": shots, "splits": args.splits,
                "combine": args.combine}
    write_record(args.out, record("benchmarks.prediction.transfer_many", settings, load_before, t0, collect_s, devices,
                                  pairs))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
