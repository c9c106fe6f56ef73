"""INT8 on CIFAR-10 at the deployment budget: an INT8 search's winner against MobileNetV2's and the CIFAR ResNets'
INT8 fronts, beside the FP32 search's winner quantised after the fact.

The network that is best in FP32 need not be best in INT8 (depthwise convolutions, squeeze-excitation and
activations quantise differently), so the comparison is made where the network is deployed: in INT8, at equal
INT8 latency. Every network is trained in float at the deployment budget (``cifar10_deploy.BUDGET``, three
seeds), quantised after training by ONNX Runtime (static QDQ, calibrated on ``cifar10_deploy.INT8_CALIBRATION``
training images) and scored in INT8 on the carved validation split. Latency is ONNX Runtime's INT8 (one thread,
1x3x32x32), each network timed in paired rounds against the target's anchor, MobileNetV2 x0.5 in INT8 (the
anchor of the FP32 comparison's 0.326 ms target).

Steps (``--step``), each resumable (trainings are kept beside the FP32 comparison's, in its state folder):

- ``time`` (a quiet machine): every member of :data:`FAMILIES_INT8` at most ``cifar10_fronts.MAX_MMACS``, and the
  FP32 search's winner, against the INT8 anchor (``int8_fronts.json``); a family's INT8 front is the widest member
  of each depth within ``cifar10_fronts.WITHIN`` times the anchor, as in the FP32 fronts;
- ``train``: each family's INT8 front and the FP32 winner, every seed, with their INT8 accuracy (a training saved
  without one is scored from its saved weights; one saved before weights were kept is run again with the same
  seed and data, and its new float figures replace the saved ones: they repeat them exactly where the memory
  format is the same, as ``cifar10_int8.md`` records). With ``--recipe`` (one of ``cifar10_deploy.RECIPES``),
  the winners and the front members in the goal's range only, trained with that recipe (or scored in INT8 from
  the weights of a training with it), for the report's check under a second recipe;
- ``search``: the FP32 comparison's search (``cifar10_deploy.SEARCH``, the same start) with
  ``latency.precision=int8``: each candidate is quantised after training, timed and scored in INT8, its FP32
  accuracy logged beside; then its winner's trainings;
- ``report``: the record ``cifar10_int8.json``: the INT8 winner against every front member no faster
  (``cifar10_fronts.against_fronts``, on INT8 accuracy), and the FP32 winner quantised beside it; where the
  winner and members in its range were trained with ``cifar10_fronts.CHECK_RECIPE`` too, the same test under
  that recipe (``cifar10_fronts.recipe_check``), which is not the verdict.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.common import Headline, header, machine_and_load, record_path, spread, write_record
from benchmarks.search.cifar10_deploy import (
    BUDGET,
    INT8_CALIBRATION,
    QUICK_BUDGET,
    RECIPES,
    SEARCH,
    SHAPE,
    START,
    STATE_DIR,
    _search_label,
    step_search,
    train_all,
    training_key,
)
from benchmarks.search.cifar10_fronts import (
    MAX_MMACS,
    ROUNDS,
    _macs,
    _render_check,
    _verdict,
    against_fronts,
    fronts,
    recipe_check,
)
from benchmarks.search.references_cifar10 import paired_ratios
from latency_predictor.measurement.backends import make_estimator
from latency_predictor.measurement.timing import MeasureConfig
from nas.accuracy.training import trial_environment
from nas.core.config import TrainConfig
from search_spaces import Arch, anchor_network
from search_spaces.references import FAMILIES, member, parse_member

FAMILIES_INT8 = ("mobilenetv2_100", "resnet_cifar")
"""The families the INT8 comparison sweeps: the issue's MobileNetV2 and the classic CIFAR ResNets."""
ANCHOR = "mobilenetv2_100@0.5"
"""The target: no slower in INT8 than MobileNetV2 x0.5 in INT8."""
ANCHOR_WIDTH = 0.5
FP32_WINNER = START[ANCHOR_WIDTH][1]
"""The FP32 comparison's winner at 0.326 ms (f48756ad2893), quantised after the fact."""
SEARCH_INT8 = {**SEARCH, "precision": "int8"}
ANCHOR_LATENCY_LABEL = 0.326
"""The FP32 target whose anchor the INT8 target shares: the INT8 search's record is named after it
(``search-0.326ms-int8.json``)."""
TIMING = "int8_fronts.json"
GOAL = ">= 1 point above every trained INT8 front member no faster, seed ranges apart (as the FP32 fronts' goal)"
QUICK_DIR = Path("/tmp/latnas-cifar10-int8-quick")


def _estimator(min_runs: int = 100, min_time_s: float = 0.5, max_time_s: float = 2.0) -> Any:
    return make_estimator("onnxruntime", input_shape=SHAPE, num_classes=10, intra_op_threads=1, precision="int8",
                          measure=MeasureConfig(min_runs=min_runs, min_time_s=min_time_s, max_time_s=max_time_s))


def members(max_mmacs: float = MAX_MMACS) -> list[str]:
    """The members of :data:`FAMILIES_INT8` that are timed: at most ``max_mmacs`` million MACs at 32x32."""
    return [s for f in FAMILIES_INT8 for s in FAMILIES[f] if _macs(member(s, 32)) <= max_mmacs]


def step_time(specs: list[str], log: Callable[[str], None], estimator: Any = None) -> dict[str, Any]:
    """Each member of ``specs`` and the FP32 winner against the INT8 anchor, in :data:`ROUNDS` paired rounds."""
    est = estimator or _estimator()

    def measure(arch: Arch) -> float:
        return float(est.measure(arch).latency_ms)

    anchor = anchor_network(ANCHOR, 32)
    winner = Arch.decode(FP32_WINNER)
    log(f"  {len(specs)} members and the FP32 winner {winner.arch_id}, {ROUNDS} paired rounds each against "
        f"{ANCHOR} in INT8 (ONNX Runtime, one thread)")
    t0 = time.perf_counter()
    paired = paired_ratios(list(dict.fromkeys([anchor, winner, *(member(s, 32) for s in specs)])), anchor, measure,
                           ROUNDS)
    rows = []
    for s in specs:
        arch = member(s, 32)
        p = paired[arch]
        rows.append({"member": s, "family": parse_member(s).family, "arch": arch.encode(), "arch_id": arch.arch_id,
                     "mmacs": _macs(arch), "latency_ms": p.latency_ms, "x_first_anchor": p.ratio,
                     "ratios": list(p.ratios)})
    w = paired[winner]
    return {"targets": [{"target_ms": round(paired[anchor].latency_ms, 3), "anchor": f"{ANCHOR} (int8)",
                         "anchor_x_first": 1.0}],
            "members": rows, "fp32_winner": {"arch": winner.encode(), "arch_id": winner.arch_id,
                                             "latency_ms": w.latency_ms, "x_anchor": w.ratio},
            "rounds": ROUNDS, "precision": "int8", "seconds": time.perf_counter() - t0,
            "machine": machine_and_load(), "measured": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}


def front_archs(timing: dict[str, Any]) -> list[Arch]:
    """Every member of the INT8 fronts, and the FP32 winner: what the train step trains."""
    (front,) = fronts(timing).values()
    return [Arch.decode(m["arch"]) for f in FAMILIES_INT8 for m in front.get(f, [])] + [
        Arch.decode(timing["fp32_winner"]["arch"])]


def check_archs(timing: dict[str, Any], state_dir: Path) -> list[Arch]:
    """What ``--step train --recipe`` trains: the INT8 search's winner (once it has run) and the FP32 winner, and
    the front members in the goal's range, no faster than the faster winner and within the target. The members
    the goal leaves out are left out here too: the check under a second recipe judges the range only."""
    (front,) = fronts(timing).values()
    w = timing["fp32_winner"]
    winners, lowest = [w["arch"]], w["x_anchor"]
    path = state_dir / f"{_search_label(ANCHOR_LATENCY_LABEL, SEARCH_INT8)}.json"
    if path.exists():
        found = json.loads(path.read_text())
        winners.insert(0, found["arch"])
        lowest = min(lowest, found["search_x_anchor"])
    in_range = [m["arch"] for f in FAMILIES_INT8 for m in front.get(f, []) if lowest <= m["x_anchor"] <= 1.0]
    return [Arch.decode(a) for a in dict.fromkeys([*winners, *in_range])]


def _int8_seeds(state_dir: Path, arch: str, budget: dict[str, int]) -> tuple[list[float], list[float]]:
    """The float and INT8 accuracies of ``arch``'s trainings saved with an INT8 accuracy, seed by seed."""
    a = Arch.decode(arch)
    runs = [json.loads(p.read_text()) for s in range(budget["seeds"])
            if (p := state_dir / f"{training_key(a, s, budget)}.json").exists()]
    runs = [r for r in runs if "int8_accuracy" in r]
    return [r["accuracy"] for r in runs], [r["int8_accuracy"] for r in runs]


def _figures(accs: list[float]) -> dict[str, Any] | None:
    return {**spread(accs), "values": accs} if accs else None


def step_report(state_dir: Path, timing: dict[str, Any], budget: dict[str, int]) -> dict[str, Any]:
    """Each front member's float and INT8 accuracy, the INT8 search's winner against them, the FP32 winner beside."""
    (front,) = fronts(timing).values()
    rows = []
    for family in FAMILIES_INT8:
        for m in front.get(family, []):
            fp32, int8 = _int8_seeds(state_dir, m["arch"], budget)
            rows.append({"family": family, "member": m["member"], "arch_id": m["arch_id"], "arch": m["arch"],
                         "x_anchor": m["x_anchor"], "latency_ms": m["latency_ms"], "mmacs": m["mmacs"],
                         "fp32_accuracy": _figures(fp32), "accuracy": _figures(int8)})
    w = timing["fp32_winner"]
    fp32, int8 = _int8_seeds(state_dir, w["arch"], budget)
    quantised = {**w, "fp32_accuracy": _figures(fp32), "accuracy": _figures(int8)}
    out: dict[str, Any] = {"target": timing["targets"][0], "members": rows, "fp32_winner": quantised,
                           "budget": budget, "timed": {k: timing[k] for k in ("measured", "seconds", "machine")}}
    path = state_dir / f"{_search_label(ANCHOR_LATENCY_LABEL, SEARCH_INT8)}.json"
    if path.exists():
        found = json.loads(path.read_text())
        fp32, int8 = _int8_seeds(state_dir, found["arch"], budget)
        searched = {"arch_id": found["arch_id"], "arch": found["arch"], "space": SEARCH_INT8["space"],
                    "x_anchor": found["search_x_anchor"],
                    "search_accuracy": found["search_accuracy"], "candidates": found["candidates"],
                    "wall_seconds": found["wall_seconds"], "top_rung": found["top_rung"],
                    "fp32_accuracy": _figures(fp32), "accuracy": _figures(int8)}
        if searched["accuracy"] is not None:
            searched["goal"] = against_fronts(searched, rows)
            check = recipe_check(state_dir, searched, rows, field="int8_accuracy")
            if check is not None:
                searched["recipe_check"] = check
            if quantised["accuracy"] is not None:
                searched["points_over_fp32_winner"] = 100 * (searched["accuracy"]["median"]
                                                              - quantised["accuracy"]["median"])
        out["searched"] = searched
    return out


def _acc(a: dict[str, Any] | None) -> str:
    if a is None:
        return "no INT8 training yet"
    return ", ".join(f"{100 * v:.1f}%" for v in a["values"])


def headline(rec: dict[str, Any]) -> Headline:
    """The record's row of the results table: the INT8 search's winner against the INT8 fronts (once trained)."""
    f = rec["figures"]
    s = f.get("searched")
    q = f["fp32_winner"]
    if s is None or s["accuracy"] is None or s["accuracy"]["n"] < f["budget"]["seeds"]:
        figure = "the INT8 search has not run yet" if s is None else "the INT8 search's winner is not trained yet"
        return Headline("INT8 search vs MobileNetV2's and the CIFAR ResNets' INT8 fronts, CIFAR-10", figure,
                        "the INT8 fronts; the FP32 search's winner quantised", GOAL, False)
    g = s["goal"]
    best = next((m for m in f["members"] if m["member"] == g["best"]), None)
    fp32 = "" if q["accuracy"] is None else (f"; the FP32 search's winner {q['arch_id']} in INT8 "
                                             f"{100 * q['accuracy']['median']:.1f}% at {q['x_anchor']:.2f}x")
    return Headline(
        "INT8 search vs MobileNetV2's and the CIFAR ResNets' INT8 fronts, CIFAR-10",
        f"INT8 winner {s['arch_id']} {100 * s['accuracy']['median']:.1f}% in INT8 (median of "
        f"{s['accuracy']['n']} seeds) at {s['x_anchor']:.2f}x {ANCHOR} in INT8",
        ("the most accurate INT8 front member no faster: "
         + (f"{best['member']} {100 * best['accuracy']['median']:.1f}%" if best else "none")) + fp32,
        GOAL, g["met"] and not g["pending"])


def render(rec: dict[str, Any]) -> str:
    """The record's section: the INT8 fronts with float and INT8 accuracy, the winners against them."""
    from benchmarks.render import _f, meta, table

    f = rec["figures"]
    b = f["budget"]
    t = f["target"]
    out = [meta(rec), "",
           f"Target: no slower in INT8 than {ANCHOR} in INT8 ({t['target_ms']:g} ms when timed; ONNX Runtime, one "
           f"thread, 1x3x32x32, static QDQ). Every network trained in float at {b['train_images']:,} images x "
           f"{b['epochs']} epochs, then quantised (calibrated on {INT8_CALIBRATION} training images) and scored in "
           "INT8 on the validation split carved from the training images.", ""]
    timed = f.get("timed")
    if timed:
        load = timed["machine"].get("load_average")
        out += [f"Timed (`--step time`, {ROUNDS} paired rounds per member) {timed['measured']} in "
                f"{timed['seconds']:.0f} s" + (f", load average {'/'.join(f'{x:g}' for x in load)} at the end"
                                               if load else "") + ". A front member with no accuracy has no "
                "training saved with an INT8 accuracy yet (`--step train`).", ""]
    rows = [[m["family"], m["member"], _f(m["x_anchor"], 2), _acc(m["fp32_accuracy"]), _acc(m["accuracy"])]
            for m in f["members"]]
    q = f["fp32_winner"]
    rows.append(["FP32 search's winner", q["arch_id"], _f(q["x_anchor"], 2), _acc(q["fp32_accuracy"]),
                 _acc(q["accuracy"])])
    s = f.get("searched")
    if s is not None:
        rows.append(["INT8 search's winner", s["arch_id"], _f(s["x_anchor"], 2), _acc(s["fp32_accuracy"]),
                     _acc(s["accuracy"])])
    out.append(table(["family", "network", "x anchor (INT8)", "float accuracy, seed by seed",
                      "INT8 accuracy, seed by seed"], rows))
    if s is None:
        out += ["", "The INT8 search has not run yet (`--step search`)."]
    elif "goal" in s:
        out += ["", _verdict("The INT8 search's winner, in INT8,", s, s["goal"])]
        if "points_over_fp32_winner" in s:
            points = s["points_over_fp32_winner"]
            out += ["", f"Against the FP32 search's winner quantised after the fact: {points:+.1f} points in INT8 "
                        "(medians)."]
        if "recipe_check" in s:
            out += ["", *_render_check(s["recipe_check"], "python -m benchmarks.search.cifar10_int8 --step train")]
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.search.cifar10_int8",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--cifar10", type=Path, help="the CIFAR-10 training-image archive (train and search steps)")
    parser.add_argument("--step", choices=("time", "train", "search", "report"), required=True)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--state-dir", type=Path, default=None,
                        help="where the steps save and resume (default: the FP32 comparison's records, so its "
                             "trainings are shared; with --quick a scratch folder)")
    parser.add_argument("--recipe", choices=sorted(RECIPES), default=None,
                        help="train step: the winners and the front members in the goal's range with this recipe "
                             "instead (a check that the verdict does not rest on the comparison's recipe)")
    parser.add_argument("--quick", action="store_true",
                        help="a tiny budget and three members (a check of the steps, not a comparison)")
    args = parser.parse_args(argv)
    if args.recipe is not None and args.step != "train":
        parser.error(f"--recipe {args.recipe}: only the train step trains with another recipe (the report reads "
                     "both recipes' trainings)")
    if args.step in ("train", "search") and (args.cifar10 is None or not args.cifar10.is_file()):
        parser.error(f"--cifar10 {args.cifar10}: no such file (the {args.step} step trains)")
    state_dir = (args.state_dir or (QUICK_DIR if args.quick else STATE_DIR)).resolve()
    state_dir.mkdir(parents=True, exist_ok=True)
    budget = QUICK_BUDGET if args.quick else BUDGET
    os.environ.update(trial_environment(TrainConfig(device="cpu"), False))  # as the comparison's trainings run

    def log(line: str) -> None:
        print(line, flush=True)

    timing_path = state_dir / TIMING
    if args.step == "time":
        specs = ["resnet8@0.5", "resnet8", "mobilenetv2_100@0.5"] if args.quick else members()
        timing = step_time(specs, log, _estimator(20, 0.05, 0.2) if args.quick else None)
        timing_path.write_text(json.dumps(timing, indent=2) + "\n")
        log(f"  saved {timing_path} ({timing['seconds']:.0f} s)")
        return 0
    if not timing_path.exists():
        raise SystemExit(f"cifar10_int8: {timing_path} is missing: run --step time first")
    timing = json.loads(timing_path.read_text())
    if args.step == "train":
        archs = front_archs(timing) if args.recipe is None else check_archs(timing, state_dir)
        train_all(archs, args.cifar10, budget, args.workers, state_dir, log, int8=True, recipe=args.recipe)
    elif args.step == "search":
        if args.quick:
            raise SystemExit("cifar10_int8: --quick has no search (the comparison's space and start are its own)")
        path = state_dir / f"{_search_label(ANCHOR_LATENCY_LABEL, SEARCH_INT8)}.json"
        if path.exists():
            found = json.loads(path.read_text())
        else:
            found = step_search(args.cifar10, ANCHOR_LATENCY_LABEL, ANCHOR_WIDTH, START[ANCHOR_WIDTH], SEARCH_INT8,
                                state_dir, log)
            path.write_text(json.dumps(found, indent=2) + "\n")
        train_all([Arch.decode(found["arch"])], args.cifar10, budget, args.workers, state_dir, log, int8=True)
    elif args.step == "report":
        mode = "quick" if args.quick else "full"
        rec = {**header("cifar10_int8", mode, "python -m benchmarks.search.cifar10_int8 --step report"),
               "figures": step_report(state_dir, timing, budget),
               "command": "python -m benchmarks.search.cifar10_int8 --cifar10 DIR/cifar10-train-jpeg.tar.gz --step "
                          "time|train|search|report"}
        out = record_path("cifar10_int8", mode, state_dir if state_dir != STATE_DIR else None)
        log(f"  record: {write_record(out, rec)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
