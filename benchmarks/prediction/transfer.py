"""Benchmark of predictors for a new device from a few measurements (``train --adapt-from``).

Usage::

    python -m benchmarks.prediction.transfer [--devices ort1,ort2,torch,ort160,ort-b4] [--n-full 300] [--n-test 60]
                                  [--shots 10,20,30] [--splits 5] [--reps 10] [--combine median|min]
                                  [--out benchmarks/prediction/records/transfer.json]

"Devices" with really different latency profiles stand in for real ones (:data:`DEVICES`): ONNX
Runtime on one thread (``ort1``, the predictor benchmark's setting) and on two (``ort2``), eager
PyTorch on one thread (``torch``), ONNX Runtime at 160x160 (``ort160``) and at batch 4 (``ort-b4``),
and eager PyTorch on the GPU (``torch-cuda``) where one is present.

1. Each device's dataset is collected (or topped up) to ``--n-full + --n-test`` usable
   architectures of the ``mobile`` space, all from the same coverage stream (seed 0), so every
   device measures the same networks. ``ort1``'s folder is the one ``benchmarks.prediction.predictor``
   collects (``.latnas/datasets/``): its measurements are reused, not repeated.
2. For every ordered pair source -> target and each of ``--splits`` random splits: ``--n-test``
   architectures of the target are held out; the source's predictor is fitted on the source's
   other architectures (at most ``--n-full``); the full predictor on the target's (at most
   ``--n-full``). For each n of ``--shots``, the target's n measurements are chosen from its
   non-held-out architectures by the informative order (``collect --adapt-from``) and, ``--reps``
   times, at random; the source is adapted with them, and a predictor is fitted from scratch on the
   same n. The adapted predictor (the mean of the two per-operator fits, pulled towards the
   global scale and towards the family fit) is also fitted with its group scales alone
   (``scales_only``, no per-feature refinement), and the chosen n are also adapted with ``--padding``
   (``adapted_padding_informative``). Every figure is the +-10% share and Spearman on
   the held-out architectures, averaged over the splits (random choices: also over the
   repetitions).

An architecture's latency is the median of its records, or with ``--combine min`` the fastest (for datasets
that measured every architecture in two or more sessions: ``collect n=0 repeats=N``; see
:mod:`latency_predictor.prediction.dataset`).

Goal: at n = 10, Spearman >= 0.95 and +-10% >= 90% for the adapted predictor.
"""

from __future__ import annotations

import argparse
import itertools
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common import Headline, header, write_record
from latency_predictor.measurement.backends import make_estimator
from latency_predictor.measurement.timing import MeasureConfig
from latency_predictor.prediction.collection import collect, default_out
from latency_predictor.prediction.dataset import COMBINE, Dataset, LatencyTable
from latency_predictor.prediction.features import FeatureExtractor
from latency_predictor.prediction.metrics import accuracy_metrics
from latency_predictor.prediction.models import AdditiveModel
from latency_predictor.prediction.target import PredictorTarget
from latency_predictor.prediction.transfer import COARSE, adapt_model, informative_order, unadapted
from search_spaces import Arch, load_space

GOAL = {"n": 10, "spearman": 0.95, "within_10": 0.90}
MEASURE = MeasureConfig(warmup_runs=5, warmup_s=0.1, min_runs=40, min_time_s=0.3, max_time_s=3.0)
"""The predictor benchmark's protocol, so ``ort1`` shares its dataset."""


@dataclass(frozen=True)
class Device:
    """A measuring setup standing in for a device."""

    label: str
    backend: str
    input_shape: tuple[int, int, int, int]
    options: dict[str, Any] = field(default_factory=dict)
    needs_cuda: bool = False


DEVICES: dict[str, Device] = {
    "ort1": Device("ONNX Runtime, 1 thread", "onnxruntime", (1, 3, 224, 224), {"intra_op_threads": 1}),
    "ort2": Device("ONNX Runtime, 2 threads", "onnxruntime", (1, 3, 224, 224), {"intra_op_threads": 2}),
    "torch": Device("eager PyTorch, 1 thread", "torch", (1, 3, 224, 224), {"threads": 1}),
    "ort160": Device("ONNX Runtime at 160x160", "onnxruntime", (1, 3, 160, 160), {"intra_op_threads": 1}),
    "ort-b4": Device("ONNX Runtime at batch 4", "onnxruntime", (4, 3, 224, 224), {"intra_op_threads": 1}),
    "torch-cuda": Device("eager PyTorch on the GPU", "torch", (1, 3, 224, 224), {"device": "cuda:0"}, True),
}


def _default_devices() -> str:
    import torch

    return ",".join(k for k, d in DEVICES.items() if not d.needs_cuda or torch.cuda.is_available())


def split_options(p: argparse.ArgumentParser, devices: str, n_full: str) -> None:
    """The options the transfer benchmarks share: the devices, ``--n-full``, ``--n-test``, ``--shots``
    and ``--splits`` (``devices``, ``n_full``: what their help says)."""
    p.add_argument("--devices", default=None,
                   help=f"comma separated, {devices} of {list(DEVICES)} (default: all this machine can run)")
    p.add_argument("--n-full", type=int, default=300, help=f"measurements of {n_full} (default 300)")
    p.add_argument("--n-test", type=int, default=60, help="held-out architectures per split (default 60)")
    p.add_argument("--shots", default="10,20,30", help="n, comma separated (default 10,20,30)")
    p.add_argument("--splits", type=int, default=5, help="random held-out splits (default 5)")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    split_options(p, "two or more", "the full predictors")
    p.add_argument("--reps", type=int, default=10, help="random choices of the n per split (default 10)")
    p.add_argument("--retries", type=int, default=3, help="re-measurements of a disturbed architecture (default 3)")
    p.add_argument("--data-root", type=Path, default=Path(".latnas/datasets"),
                   help="where the datasets are (default .latnas/datasets, shared with "
                        "benchmarks.prediction.predictor)")
    p.add_argument("--out", type=Path, default=Path("benchmarks/prediction/records/transfer.json"),
                   help="JSON record to write")
    p.add_argument("--combine", choices=COMBINE, default="median",
                   help="an architecture's latency from its records: their median, or the fastest session's "
                        "(min; for datasets that measured every architecture in two or more sessions) "
                        "(default median)")
    return p


def dataset_for(key: str, n: int, root: Path, retries: int) -> tuple[Dataset, dict[str, Any]]:
    """``key``'s dataset with at least ``n`` usable architectures (collected or topped up now)."""
    d = DEVICES[key]
    space = load_space("mobile")
    est = make_estimator(d.backend, input_shape=d.input_shape, measure=MEASURE, **d.options)
    path = root / default_out(space, PredictorTarget.create(space, est)).name
    have = len(Dataset.open(path).table()) if (path / "dataset.json").exists() else 0
    t0 = time.perf_counter()
    for _ in range(3):  # disturbed architectures are left out; top up until n are usable
        if have >= n:
            break
        collect(space, est, path, n - have, retries=retries, repeats=0)
        have = len(Dataset.open(path).table())
    ds = Dataset.open(path)
    info = {"label": d.label, "backend": d.backend, "input_shape": list(d.input_shape), "options": d.options,
            "usable_archs": len(ds.table()), "records": len(ds.records),
            "collect_seconds_this_run": time.perf_counter() - t0, "fingerprint": ds.target.fingerprint.digest}
    print(f"{key}: {d.label}: {info['usable_archs']} usable architectures ({info['records']} measurements; "
          f"{info['collect_seconds_this_run']:.0f} s measuring in this run)", flush=True)
    return ds, info


def _fit(extractor: FeatureExtractor, table: LatencyTable) -> AdditiveModel:
    m = AdditiveModel(extractor, members=0)
    m.fit([Arch.decode(a) for a in table.archs], table.latency_ms)
    return m


def _score(y: np.ndarray, pred: np.ndarray) -> tuple[float, float]:
    m = accuracy_metrics(y, pred)
    return m.within_10, m.spearman


def _mean(scores: list[tuple[float, float]]) -> dict[str, float]:
    a = np.array(scores)
    return {"within_10": float(a[:, 0].mean()), "spearman": float(a[:, 1].mean()),
            "within_10_min": float(a[:, 0].min()), "spearman_min": float(a[:, 1].min())}


def evaluate_pair(source: Dataset, target: Dataset, shots: list[int], n_full: int, n_test: int, splits: int,
                  reps: int, padding: bool = False, combine: str = "median") -> dict[str, Any]:
    """The figures of one source -> target pair (module docstring, step 2; ``padding``: as
    :func:`evaluate_tables`; ``combine``: as :meth:`Dataset.table`)."""
    return evaluate_tables(source.table(combine=combine), target.table(combine=combine),
                           FeatureExtractor(source.target.input_shape, source.target.num_classes),
                           FeatureExtractor(target.target.input_shape, target.target.num_classes),
                           shots, n_full, n_test, splits, reps, padding=padding)


def evaluate_tables(src_table: LatencyTable, tgt_table: LatencyTable, sx: FeatureExtractor, tx: FeatureExtractor,
                    shots: list[int], n_full: int, n_test: int, splits: int, reps: int,
                    goal: dict[str, float] = GOAL, padding: bool = False) -> dict[str, Any]:
    """:func:`evaluate_pair` on the two devices' latency tables and feature extractors; ``goal_met`` is
    ``goal``'s verdict on the adapted predictor at ``goal["n"]`` measurements. With ``padding``, the chosen n
    are also adapted with ``adapt_model(..., padding=True)`` (``adapted_padding_informative``; its verdict
    ``goal_met_padding``)."""
    scores: dict[str, list[tuple[float, float]]] = {}

    def add(name: str, y: np.ndarray, pred: np.ndarray) -> None:
        scores.setdefault(name, []).append(_score(y, pred))

    for split in range(splits):
        rng = np.random.default_rng(1000 + split)
        held_idx = rng.permutation(len(tgt_table))[:n_test]
        held = tgt_table.subset(np.sort(held_idx))
        held_set = set(held.archs)
        held_archs = [Arch.decode(a) for a in held.archs]
        src_rows = [i for i, a in enumerate(src_table.archs) if a not in held_set][:n_full]
        pool = tgt_table.subset([i for i, a in enumerate(tgt_table.archs) if a not in held_set])
        src_model = _fit(sx, src_table.subset(src_rows))
        add("full", held.latency_ms, _fit(tx, pool.subset(np.arange(min(n_full, len(pool))))).predict(held_archs))
        add("source_as_is", held.latency_ms, unadapted(src_model, tx).predict(held_archs))
        pool_archs = [Arch.decode(a) for a in pool.archs]
        order = informative_order(src_model, tx, pool_archs, max(shots))  # each n measures its first n
        for n in shots:
            choices = {"informative": [order[:n]]}
            choices["random"] = [list(rng.choice(len(pool), n, replace=False)) for _ in range(reps)]
            for how, picks in choices.items():
                for idx in picks:
                    archs, y = [pool_archs[i] for i in idx], pool.latency_ms[idx]
                    adapted, _ = adapt_model(src_model, tx, archs, y, members=0)
                    add(f"{n}.adapted_{how}", held.latency_ms, adapted.predict(held_archs))
                    if padding and how == "informative":
                        padded, _ = adapt_model(src_model, tx, archs, y, members=0, padding=True)
                        add(f"{n}.adapted_padding_{how}", held.latency_ms, padded.predict(held_archs))
                    scales_only, _ = adapt_model(src_model, tx, archs, y, members=0, refine=False)
                    add(f"{n}.scales_only_{how}", held.latency_ms, scales_only.predict(held_archs))
                    scratch = AdditiveModel(tx, members=0)
                    scratch.fit(archs, y)
                    add(f"{n}.scratch_{how}", held.latency_ms, scratch.predict(held_archs))
                    if how == "random":
                        one, _ = adapt_model(src_model, tx, archs, y, members=0, lam=1e9, refine=False,
                                           groupings=(COARSE,))
                        add(f"{n}.global_scale_random", held.latency_ms, one.predict(held_archs))
    out: dict[str, Any] = {"full": _mean(scores["full"]), "source_as_is": _mean(scores["source_as_is"]), "by_n": {}}
    for n in shots:
        out["by_n"][str(n)] = {k.split(".", 1)[1]: _mean(v) for k, v in scores.items() if k.startswith(f"{n}.")}
    at_goal = out["by_n"].get(str(goal["n"]), {})
    out["goal_met"] = _met(at_goal.get("adapted_informative"), goal)
    if padding:
        out["goal_met_padding"] = _met(at_goal.get("adapted_padding_informative"), goal)
    return out


def _met(at: dict[str, float] | None, goal: dict[str, float]) -> bool | None:
    """``goal``'s verdict on one predictor's figures at the goal's n (None: not measured at that n)."""
    return None if at is None else bool(at["spearman"] >= goal["spearman"] and at["within_10"] >= goal["within_10"])


def pair_line(source: str, target: str, fig: dict[str, Any]) -> str:
    """One pair's figures as a progress line: the full predictor, then per n the adapted and scratch ones."""
    cells = "; ".join(
        f"n={n}: adapted {v['adapted_informative']['within_10']:.0%}/{v['adapted_informative']['spearman']:.3f}"
        f", scratch {v['scratch_random']['within_10']:.0%}/{v['scratch_random']['spearman']:.3f}"
        for n, v in fig["by_n"].items())
    return (f"{source} -> {target}: full {fig['full']['within_10']:.0%}/{fig['full']['spearman']:.3f}; {cells} "
            "(+-10% / Spearman)")


def open_devices(spec: str | None, at_least: int, n: int, root: Path, retries: int
                 ) -> tuple[dict[str, Dataset], dict[str, Any], float]:
    """The datasets of the devices ``spec`` names (comma separated; None: all this machine can run),
    each with at least ``n`` usable architectures, their summaries, and the seconds collecting took.

    Raises:
        SystemExit: status 2, an unknown device or fewer than ``at_least`` (the message on stderr).
    """
    keys = (spec or _default_devices()).split(",")
    if [k for k in keys if k not in DEVICES] or len(keys) < at_least:
        print(f"error: --devices needs {at_least} or more of {list(DEVICES)}, got {keys}", file=sys.stderr)
        raise SystemExit(2)
    t0 = time.perf_counter()
    datasets, devices = {}, {}
    for key in keys:
        datasets[key], devices[key] = dataset_for(key, n, root, retries)
    return datasets, devices, time.perf_counter() - t0


def record(module: str, settings: dict[str, Any], load_before: float, t0: float, collect_s: float,
           devices: dict[str, Any], pairs: list[dict[str, Any]]) -> dict[str, Any]:
    """A transfer benchmark's record."""
    return {
        **header(module.rsplit(".", 1)[-1], "full", ["python", "-m", module, *sys.argv[1:]], ("scipy",)),
        "settings": settings, "load_average_before": load_before, "load_average_after": os.getloadavg()[0],
        "collect_seconds": collect_s, "wall_seconds": time.perf_counter() - t0, "goal": GOAL,
        "devices": devices, "pairs": pairs,
    }


def goal_figures(rec: dict[str, Any]) -> tuple[str, list[float], list[float], int]:
    """A transfer record's figures at its goal's n: n, the adapted and the from-scratch predictors' +-10%
    shares over the pairs, and the pairs that meet the goal."""
    goal, pairs = rec["goal"], rec["pairs"]
    n = str(goal["n"])
    adapted = [p["by_n"][n]["adapted_informative"]["within_10"] for p in pairs]
    scratch = [p["by_n"][n]["scratch_random"]["within_10"] for p in pairs]
    return n, adapted, scratch, sum(bool(p.get("goal_met")) for p in pairs)


def pairs_table(rec: dict[str, Any]) -> str:
    """A transfer record's table: per pair, the full and unchanged predictors, then per n the adapted
    (chosen and random n) and from-scratch predictors, each as +-10% share / Spearman."""
    from benchmarks.render import _f, _pct, table
    st = rec["settings"]

    def cell(m: dict[str, float]) -> str:
        return f"{_pct(m['within_10'])} / {_f(m['spearman'], 3)}"

    header = ["source -> target", f"full ({st['n_full']})", "source as is"]
    for n in st["shots"]:
        header += [f"adapted, n={n}", f"adapted, random {n}", f"scratch, random {n}"]
    rows = []
    for p in rec["pairs"]:
        row = [f"{p['source']} -> {p['target']}", cell(p["full"]), cell(p["source_as_is"])]
        for n in st["shots"]:
            v = p["by_n"][str(n)]
            row += [cell(v["adapted_informative"]), cell(v["adapted_random"]), cell(v["scratch_random"])]
        rows.append(row)
    return table(header, rows)


def transfer_headline(rec: dict[str, Any], claim: str, kind: str, full: str) -> Headline:
    """A transfer record's row of the results table: the ``kind`` pairs (devices, runtimes) where the adapted
    predictor meets the goal; ``full``: what the predictor fitted on many measurements was fitted on."""
    goal, pairs = rec["goal"], rec["pairs"]
    n, adapted, scratch, met = goal_figures(rec)
    twice = (" (each network timed in two sessions, the faster kept)"
             if rec["settings"].get("combine") == "min" else "")
    return Headline(
        claim,
        f"adapted from {n} measurements{twice}: +-10% on {min(adapted):.0%}-{max(adapted):.0%} of held-out networks; "
        f"goal met on {met} of {len(pairs)} {kind} pairs",
        f"a predictor fitted from scratch on the same {n} ({min(scratch):.0%}-{max(scratch):.0%}), and one fitted "
        f"on {full}",
        f"from {n} measurements, +-10% on >= {goal['within_10']:.0%} and Spearman >= {goal['spearman']:.2f}, "
        "every pair", met == len(pairs))


def headline(rec: dict[str, Any]) -> Headline:
    """The record's row of the results table: pairs of devices where the adapted predictor meets the goal."""
    return transfer_headline(rec, "Predictor transfer to a new device", "device",
                             f"{rec['settings']['n_full']} measurements")


def render(rec: dict[str, Any]) -> str:
    """The section of a record of this benchmark on its area's page (docs/benchmarks/<area>.md)."""
    from benchmarks.render import _f, _pct, table
    st, goal, devices = rec["settings"], rec["goal"], rec["devices"]
    dev = table(["device", "what", "usable architectures"],
                [[k, d["label"], _f(d["usable_archs"])] for k, d in devices.items()])

    def cell(m: dict[str, float]) -> str:
        return f"{_pct(m['within_10'])} / {_f(m['spearman'], 3)}"

    met = [p for p in rec["pairs"] if p.get("goal_met")]
    gn = str(goal["n"])
    sessions = ("\n\nEvery architecture was measured in two sessions, and its latency is the faster one's "
                "(`--combine min`), for the shots and the held-out networks alike."
                if st.get("combine") == "min" else "")
    parts = ""
    if all("scales_only_informative" in p["by_n"].get(gn, {}) for p in rec["pairs"]):
        prow = [[f"{p['source']} -> {p['target']}"]
                + [cell(p["by_n"][gn][k]) for k in ("adapted_informative", "scales_only_informative",
                                                     "adapted_random", "scales_only_random")]
                + ["met" if p.get("goal_met") else "not met"] for p in rec["pairs"]]
        parts = f"""

At n = {gn}, what the per-feature refinement adds to the group scales, for the chosen and for random
architectures:

{table(['source -> target', 'adapted', 'scales only', 'adapted, random', 'scales only, random', 'goal'], prow)}"""
    return f"""A predictor for a device from n measurements there, adapted from another device's predictor
(`python -m latency_predictor.train --adapt-from`: per-group scales and the device's overheads refitted,
then each operator's cost refined; the method is described in `docs/predictor.md`), against a
predictor fitted from scratch on the same n and the full predictor fitted on {st['n_full']} measurements
of the target.
"Devices" with different latency profiles stand in for real ones:

{dev}{sessions}

Each cell is the share of {st['n_test']} held-out `{st['space']}` architectures predicted within +-10%, then the
Spearman rank correlation, averaged over {st['splits']} random held-out splits. "adapted, n" measures the n
architectures `collect --adapt-from` chooses (most informative first: the most typical, then, in turn,
those that cover the rest and those that tell the scales apart); "random n": n chosen at random
({st['reps']} draws per split); "source as is": the source device's predictor unchanged.

{pairs_table(rec)}

Goal at n = {goal['n']} (adapted): Spearman >= {goal['spearman']} and +-10% >= {_pct(goal['within_10'])}: met by
{len(met)} of {len(rec['pairs'])} pairs.{parts}{padding_section(rec, "device")}"""


def padding_section(rec: dict[str, Any], kind: str) -> str:
    """The chosen n adapted with ``--padding`` beside the default, where the record has them (``kind``: what the
    target is, "device" or "runtime")."""
    from benchmarks.render import _pct
    if not all("goal_met_padding" in p for p in rec["pairs"]):
        return ""
    shots = [str(n) for n in rec["settings"]["shots"]]

    def cell(v: dict[str, float]) -> str:
        return f"{_pct(v['within_10'])} / {v['spearman']:.3f}"

    head = " | ".join(f"adapted, n={n} | with --padding, n={n}" for n in shots)
    rows = [f"| {p['source']} -> {p['target']} | "
            + " | ".join(f"{cell(p['by_n'][n]['adapted_informative'])} | "
                         f"{cell(p['by_n'][n]['adapted_padding_informative'])}" for n in shots) + " |"
            for p in rec["pairs"]]
    met = sum(bool(p["goal_met_padding"]) for p in rec["pairs"])
    rows_text = "\n".join(rows)
    return f"""

With `--padding` (`python -m latency_predictor.train --adapt-from SOURCE --padding`), the adaptation also fits how
the target {kind} pays for the kernel taps that fall on the zero padding: the source is adapted as three
variants (its cost per tap inside the input moved onto every tap, unmoved, and the reverse) and the three are
mixed by leave-one-out error. The same chosen n:

| source -> target | {head} |
|---|{"---|" * (2 * len(shots))}
{rows_text}

Goal at n = {rec['goal']['n']} with `--padding`: met by {met} of {len(rec['pairs'])} pairs."""


def main() -> int:
    """Run the benchmark; returns 0 (goals missed are reported, not turned into a failure)."""
    args = _parser().parse_args()
    shots = [int(x) for x in args.shots.split(",") if x]
    load_before = os.getloadavg()[0]
    t0 = time.perf_counter()
    datasets, devices, collect_s = open_devices(args.devices, 2, args.n_full + args.n_test, args.data_root,
                                                args.retries)
    pairs = []
    for s, t in itertools.permutations(datasets, 2):
        fig = evaluate_pair(datasets[s], datasets[t], shots, args.n_full, args.n_test, args.splits, args.reps,
                            padding=True, combine=args.combine)
        pairs.append({"source": s, "target": t, **fig})
        print(pair_line(s, t, fig), flush=True)
    settings = {"space": "mobile", "n_full": args.n_full, "n_test": args.n_test, "shots": shots,
                "splits": args.splits, "reps": args.reps, "combine": args.combine, "measure": {
                    k: getattr(MEASURE, k)
                    for k in ("warmup_runs", "warmup_s", "min_runs", "min_time_s", "max_time_s")}}
    write_record(args.out, record("benchmarks.prediction.transfer", settings, load_before, t0, collect_s, devices,
                                  pairs))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
