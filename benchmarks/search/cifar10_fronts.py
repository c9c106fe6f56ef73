"""The references' accuracy-latency fronts on CIFAR-10 at the deployment budget: the bar a searched network meets.

A searched network is compared with the strongest hand-designed network a practitioner would try at its
latency, not with one member width-scaled to the target. Every member of every reference family
(:data:`search_spaces.references.FAMILIES`: the classic CIFAR ResNets over depth and width; MobileNetV2,
MnasNet-B1 and EfficientNet-B0 over width and depth multiplier, in their 32x32 layouts) is timed in paired
rounds against the comparison's anchors (:mod:`benchmarks.search.cifar10_deploy`'s ``widths.json``: MobileNetV2
x0.35 and x0.5 on this CPU, ONNX Runtime, one thread, 1x3x32x32). At each target, a family's members that
come within :data:`WITHIN` times the target are its candidates; the widest of each depth among them is its
front, which is trained at the deployment budget beside the comparison's other networks (the same state
folder, so a training is never repeated).

Steps (``--step``): ``time`` (a quiet machine: every member against the first anchor in
:data:`ROUNDS` paired rounds; ``fronts.json``; run again, it keeps the members' figures and times the anchors of
the targets ``widths.json`` has gained since), ``train`` (the fronts' members, ``--seeds`` seeds,
``--family`` to train one family first), ``export`` (the committed networks, seed 0, under
``benchmarks/cifar10-deploy/<target>-<network>/``: the search's winner ``searched``, each family's most
accurate member that meets the target, once all of those are trained, and random search's winner
``random``) and ``report`` (each family's front with its trained seeds, set against the comparison's
searched network at each target: the record ``cifar10_fronts.json`` and its row of the results table).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.common import ROOT, Headline, header, machine_and_load, record_path, spread, write_record
from benchmarks.search.cifar10_deploy import (
    BUDGET,
    GOAL_POINTS,
    RECIPES,
    SEARCH,
    SHAPE,
    STATE_DIR,
    _read_step,
    _search_label,
    data_config,
    export_network,
    random_control,
    train_all,
    training_key,
)
from benchmarks.search.references_cifar10 import paired_ratios
from latency_predictor.measurement.backends import make_estimator
from latency_predictor.measurement.timing import MeasureConfig
from nas.accuracy.training import trial_environment
from nas.core.config import SearchAlgConfig, TrainConfig
from nas.data import load_dataset
from search_spaces import Arch, build, count_macs, load_space
from search_spaces.references import FAMILIES, member, parse_member

ROUNDS = 3
"""Paired rounds (member, then anchor) behind each member's ratio."""
WITHIN = 1.1
"""A member within this many times a target is in that target's comparison."""
EXPORT_DIR = ROOT / "benchmarks" / "cifar10-deploy"
"""The committed networks: ``<target>ms-<network>/`` (``model.onnx``, seed 0, Conv+BN fused; ``arch.json``)."""
LONGER_SEARCH = {**SEARCH, "n_trials": 16, "latency_floor": 0.7}
"""A study beside the comparison's search: twice the candidates, and proposals under 0.7x the target not
trained, so that the extra candidates are spent near the target, where a start at 0.58x leaves latency unused
(``python -m benchmarks.search.cifar10_deploy --cifar10 ... --step search --target 0.326 --latency-floor 0.7
--trials 16``)."""
RUNG_SEARCH: dict[str, Any] = {**SEARCH, "rungs": [{"train_images": 20000, "epochs": 5}, SEARCH["rungs"][-1]]}
"""A study beside the comparison's search: its first rung (10,000 x 3) at 20,000 x 5, a third of the deployment
budget, so that the quarter promoted is chosen by a training that ranks these networks better (the deployment
fidelity study: 10,000 x 3 ranked ten networks at 0.47, 20,000 x 8 at 0.72), at about three times a first
rung's cost (``python -m benchmarks.search.cifar10_deploy --cifar10 ... --step search --target 0.326
--first-rung 20000x5``)."""
MAX_MMACS = 160.0
"""Members over this many million multiply-accumulates at 32x32 are not timed: the slowest member timed in
the first sweep that came within 1.1x of the larger target had 70 M (ResNet-32 at width 24 took 1.8x)."""


def _macs(arch: Arch) -> float:
    import torch

    with torch.device("meta"):
        net = build(arch, num_classes=10)
    return count_macs(net, (1, 3, 32, 32)) / 1e6


def _sweep_estimator() -> Any:
    """ONNX Runtime, one thread, 1x3x32x32, shorter measurements than the comparison's final pass (1-4 s each):
    64 members x 3 rounds x 2 networks."""
    return make_estimator("onnxruntime", input_shape=SHAPE, num_classes=10, intra_op_threads=1,
                          measure=MeasureConfig(min_runs=100, min_time_s=0.5, max_time_s=2.0))


def step_time(state_dir: Path, log: Callable[[str], None]) -> dict[str, Any]:
    """Every member of :data:`FAMILIES` against the first target's anchor, the anchors against each other."""
    widths = _read_step(state_dir, "widths", "widths")
    est = _sweep_estimator()

    def measure(arch: Arch) -> float:
        return float(est.measure(arch).latency_ms)

    anchors = [Arch.decode(t["anchor_arch"]) for t in widths["targets"]]
    specs = [s for family in FAMILIES.values() for s in family]
    macs = {s: _macs(member(s, 32)) for s in specs}
    timed = [s for s in specs if macs[s] <= MAX_MMACS]
    log(f"  {len(timed)} of {len(specs)} members at most {MAX_MMACS:g} M MACs, {ROUNDS} paired rounds each "
        f"against {widths['targets'][0]['anchor']}")
    t0 = time.perf_counter()
    archs = list(dict.fromkeys([*anchors, *(member(s, 32) for s in timed)]))
    paired = paired_ratios(archs, anchors[0], measure, ROUNDS)
    anchor_ratios = [paired[a].ratio for a in anchors]
    members = []
    for s in specs:
        arch = member(s, 32)
        p = paired.get(arch) if s in timed else None
        members.append({"member": s, "family": parse_member(s).family, "arch": arch.encode(), "arch_id": arch.arch_id,
                        "mmacs": macs[s], "latency_ms": p.latency_ms if p else None,
                        "x_first_anchor": p.ratio if p else None,
                        "ratios": list(p.ratios) if p else None})
    return {"targets": [{"target_ms": t["target_ms"], "anchor": t["anchor"], "anchor_x_first": r}
                        for t, r in zip(widths["targets"], anchor_ratios, strict=True)],
            "members": members, "rounds": ROUNDS, "within": WITHIN, "max_mmacs": MAX_MMACS,
            "seconds": time.perf_counter() - t0, "machine": machine_and_load(),
            "measured": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}


def add_anchors(timing: dict[str, Any], state_dir: Path, log: Callable[[str], None]) -> dict[str, Any]:
    """``timing`` (an earlier ``fronts.json``) with the targets ``widths.json`` has gained since: each new anchor
    against the first in :data:`ROUNDS` paired rounds. The members' figures are kept as they were timed."""
    widths = _read_step(state_dir, "widths", "widths")
    timed = {t["anchor"] for t in timing["targets"]}
    new = [t for t in widths["targets"] if t["anchor"] not in timed]
    if not new:
        log("  fronts.json has every target of widths.json (remove it to time every member again)")
        return timing
    est = _sweep_estimator()

    def measure(arch: Arch) -> float:
        return float(est.measure(arch).latency_ms)

    first = Arch.decode(widths["targets"][0]["anchor_arch"])
    anchors = [Arch.decode(t["anchor_arch"]) for t in new]
    paired = paired_ratios([first, *anchors], first, measure, ROUNDS)
    added = [{"target_ms": t["target_ms"], "anchor": t["anchor"], "anchor_x_first": paired[a].ratio,
              "ratios": list(paired[a].ratios), "measured": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
              "machine": machine_and_load()} for t, a in zip(new, anchors, strict=True)]
    for t in added:
        log(f"  target {t['target_ms']:g} ms: {t['anchor']} {t['anchor_x_first']:.3f}x the first anchor")
    return {**timing, "targets": [*timing["targets"], *added]}


def fronts(timing: dict[str, Any]) -> dict[float, dict[str, list[dict[str, Any]]]]:
    """At each target, each family's front: among its members within :data:`WITHIN` times the target, the
    widest of each depth (a ResNet's depth is its name; an ImageNet reference's, its depth multiplier),
    fastest first. Each member carries ``x_anchor``, its ratio to that target's anchor."""
    out: dict[float, dict[str, list[dict[str, Any]]]] = {}
    for t in timing["targets"]:
        by_family: dict[str, dict[Any, dict[str, Any]]] = {}
        for m in timing["members"]:
            if m["x_first_anchor"] is None:
                continue
            x = m["x_first_anchor"] / t["anchor_x_first"]
            if x > WITHIN:
                continue
            spec = parse_member(m["member"])
            depth = spec.name if spec.family == "resnet_cifar" else spec.depth
            best = by_family.setdefault(spec.family, {}).get(depth)
            if best is None or spec.width > parse_member(best["member"]).width:
                by_family[spec.family][depth] = {**m, "x_anchor": x}
        out[t["target_ms"]] = {f: sorted(d.values(), key=lambda m: m["x_anchor"]) for f, d in sorted(by_family.items())}
    return out


def _seeds(state_dir: Path, arch: str, recipe: str | None = None, field: str = "accuracy") -> list[float]:
    """The accuracies of ``arch``'s trainings at the deployment budget under ``state_dir``, seed by seed (with
    ``recipe``, those trained with that recipe of :data:`~benchmarks.search.cifar10_deploy.RECIPES`; with
    ``field`` ``int8_accuracy``, the INT8 accuracies of those scored in INT8)."""
    a = Arch.decode(arch)
    runs = [json.loads(p.read_text()) for s in range(BUDGET["seeds"])
            if (p := state_dir / f"{training_key(a, s, BUDGET, recipe)}.json").exists()]
    return [r[field] for r in runs if field in r]


CHECK_RECIPE = "plain"
"""The second recipe the report holds a searched network's verdict to (:data:`RECIPES`)."""


def recipe_check(state_dir: Path, searched: dict[str, Any], members: list[dict[str, Any]],
                 recipe: str = CHECK_RECIPE, field: str = "accuracy") -> dict[str, Any] | None:
    """The goal's test at one target under a second recipe: the searched network and the front members in the
    goal's range (no faster than it, within the target) that were trained with ``recipe`` as well
    (``cifar10_deploy --step train --recipe``), each with its seeds under both recipes. ``untried`` names the
    members in the range not trained with it, which the test leaves out: the check says whether the verdict rests
    on the comparison's recipe where it was tried, not the verdict of the whole front. None until the searched
    network and at least one member in the range have a training with ``recipe``. With ``field``
    ``int8_accuracy`` the check is on INT8 accuracy (``searched``'s and ``members``' own figures are then INT8
    ones too, as ``cifar10_int8``'s report holds them)."""
    own = _seeds(state_dir, searched["arch"], recipe, field)
    if not own:
        return None
    in_range = [m for m in members if searched["x_anchor"] <= m["x_anchor"] <= 1.0]
    rows, tried = [], []
    for m in in_range:
        accs = _seeds(state_dir, m["arch"], recipe, field)
        if accs:
            tried.append({**m, "accuracy": {**spread(accs), "values": accs}})
            rows.append({"member": m["member"], "x_anchor": m["x_anchor"],
                         "own": m["accuracy"] and m["accuracy"]["values"], "recipe": accs})
    if not rows:
        return None
    trained = {r["member"] for r in rows}
    entry = {**searched, "accuracy": {**spread(own), "values": own}}
    return {"recipe": recipe, "changes": RECIPES[recipe], "field": field, "searched": {
                "arch_id": searched["arch_id"], "x_anchor": searched["x_anchor"], "space": searched["space"],
                "own": searched["accuracy"] and searched["accuracy"]["values"], "recipe": own,
                "accuracy": entry["accuracy"]},
            "members": rows, "goal": against_fronts(entry, tried),
            "untried": [m["member"] for m in in_range if m["member"] not in trained]}


def against_fronts(searched: dict[str, Any], members: list[dict[str, Any]]) -> dict[str, Any]:
    """The searched network against the trained front members that meet the target and are no faster than it
    (``x_anchor`` between the searched network's and 1): the goal of the comparison, applied to the fronts. It
    is met when the searched network's median is :data:`~benchmarks.search.cifar10_deploy.GOAL_POINTS` or more
    above each of theirs with the seed ranges apart. ``best`` is the most accurate of them (by median).
    ``pending`` names the members in the goal's range not yet trained with every seed of the budget (those
    untrained are not judged): until it is empty, ``met`` holds for the seeds trained so far only."""
    in_range = [m for m in members if searched["x_anchor"] <= m["x_anchor"] <= 1.0]
    in_goal = [m for m in in_range if m["accuracy"] is not None]
    pending = [m["member"] for m in in_range if m["accuracy"] is None or m["accuracy"]["n"] < BUDGET["seeds"]]
    rows = []
    for m in in_goal:
        points = 100 * (searched["accuracy"]["median"] - m["accuracy"]["median"])
        apart = searched["accuracy"]["min"] > m["accuracy"]["max"]
        rows.append({"member": m["member"], "family": m["family"], "points": points, "apart": apart,
                     "met": points >= GOAL_POINTS and apart})
    best = max(in_goal, key=lambda m: m["accuracy"]["median"], default=None)
    return {"met": all(r["met"] for r in rows), "against": rows, "best": best and best["member"], "pending": pending}


def _seeded_search(state_dir: Path, target: float, size: dict[str, Any] = SEARCH) -> dict[str, Any] | None:
    """The comparison's search of its own space at ``target``, started from the front (``search-<target>ms.json``,
    :data:`~benchmarks.search.cifar10_deploy.SEARCH`; with ``size`` :func:`random_control` of it, random search's
    control, ``search-<target>ms-random.json``), with its winner's trainings at the deployment budget; None
    before it has run. Its ``x_anchor`` is the search's own, measured beside the anchor while trials trained."""
    path = state_dir / f"{_search_label(target, size)}.json"
    if not path.exists():
        return None
    found = json.loads(path.read_text())
    if found["settings"] != size:  # another space or other settings: a study, not this search
        return None
    accs = _seeds(state_dir, found["arch"])
    return {"arch_id": found["arch_id"], "arch": found["arch"], "x_anchor": found["search_x_anchor"],
            "latency_ms": found["search_latency_ms"],
            "search_accuracy": found["search_accuracy"], "space": SEARCH["space"], "start": found["start"],
            "settings_control": found["settings"].get("control"),
            "fill_mutate_after": found["settings"].get("fill_mutate_after"),
            "candidates": found["candidates"], "wall_seconds": found["wall_seconds"],
            "top_rung": found["top_rung"], "accuracy": {**spread(accs), "values": accs} if accs else None}


MACS_BANDS = (0.0, 10.0, 20.0, 40.0, 80.0, MAX_MMACS)
"""The report's ceiling table: the networks trained at the deployment budget, by M MACs in these bands."""


def ceiling(state_dir: Path, timing: dict[str, Any]) -> list[dict[str, Any]]:
    """The most accurate network (by median) of each :data:`MACS_BANDS` band among every network trained at the
    deployment budget under ``state_dir`` (references, searched networks and studies alike): how far accuracy at
    that budget rises with capacity. Each band has its count of networks; an empty band is left out."""
    names = {Arch.decode(m["arch"]).arch_id: m["member"] for m in timing["members"]}
    trained: dict[str, list[float]] = {}
    archs: dict[str, str] = {}
    suffix = f"-{BUDGET['train_images']}x{BUDGET['epochs']}.json"
    for path in sorted(state_dir.glob(f"*-seed*{suffix}")):
        run = json.loads(path.read_text())
        if run.get("seed", BUDGET["seeds"]) < BUDGET["seeds"]:
            trained.setdefault(run["arch_id"], []).append(run["accuracy"])
            archs[run["arch_id"]] = run["arch"]
    mmacs = {k: _macs(Arch.decode(a)) for k, a in archs.items()}  # built once, not once per band
    space = load_space(SEARCH["space"])
    bands = []
    for low, high in itertools.pairwise(MACS_BANDS):
        inside = [(k, mmacs[k], v) for k, v in trained.items() if low < mmacs[k] <= high]
        if not inside:
            continue
        k, macs, accs = max(inside, key=lambda e: spread(e[2])["median"])
        bands.append({"mmacs": [low, high], "networks": len(inside), "best": {
            "arch_id": k, "member": names.get(k), "mmacs": macs, "accuracy": {**spread(accs), "values": accs},
            "in_space": space.contains(Arch.decode(archs[k]))}})
    return bands


def step_report(state_dir: Path, timing: dict[str, Any]) -> dict[str, Any]:
    """Each target's fronts with their trained seeds, and the comparison's searched network (from its record,
    ``benchmarks/search/records/cifar10_deploy.json``) against them."""
    deploy_path = record_path("cifar10_deploy", "full")
    deploy = json.loads(deploy_path.read_text())["figures"] if deploy_path.exists() else {"targets": []}
    searched_at = {t["target_ms"]: next(c for c in t["candidates"] if c["name"] == "searched")
                   for t in deploy["targets"]}
    targets = []
    for target, families in fronts(timing).items():
        members = []
        for family, ms in families.items():
            for m in ms:
                accs = _seeds(state_dir, m["arch"])
                members.append({"family": family, "member": m["member"], "arch_id": Arch.decode(m["arch"]).arch_id,
                                "arch": m["arch"], "x_anchor": m["x_anchor"], "latency_ms": m["latency_ms"],
                                "mmacs": m["mmacs"],
                                "accuracy": {**spread(accs), "values": accs} if accs else None})
        entry: dict[str, Any] = {"target_ms": target, "members": members}
        s = searched_at.get(target)
        if s is not None:
            entry["searched"] = {"arch_id": Arch.decode(s["arch"]).arch_id, "x_anchor": s["latency_ratio"],
                                 "accuracy": s["accuracy"],
                                 "space": s.get("search", {}).get("settings", {}).get("space")}
            entry["goal"] = against_fronts(entry["searched"], members)
        seeded = _seeded_search(state_dir, target)
        if seeded is not None:
            entry["seeded_search"] = seeded
            seeded["reference"] = next((m["member"] for m in members if m["arch_id"] == seeded["arch_id"]), None)
            if seeded["accuracy"] is not None:
                seeded["goal"] = against_fronts(seeded, members)
            check = recipe_check(state_dir, seeded, members)
            if check is not None:
                entry["recipe_check"] = check
            control = _seeded_search(state_dir, target, random_control(SEARCH))
            if control is not None:
                entry["random_control"] = control
                if seeded["accuracy"] is not None and control["accuracy"] is not None:
                    control["search_at_least_as_accurate"] = (
                        seeded["accuracy"]["median"] >= control["accuracy"]["median"])
        longer = _seeded_search(state_dir, target, LONGER_SEARCH)
        if longer is not None:
            entry["longer_search"] = longer
            if longer["accuracy"] is not None:
                longer["goal"] = against_fronts(longer, members)
        rung = _seeded_search(state_dir, target, RUNG_SEARCH)
        if rung is not None:
            entry["rung_search"] = rung
            if rung["accuracy"] is not None:
                rung["goal"] = against_fronts(rung, members)
        entry["exports"] = _exports(EXPORT_DIR, target)
        targets.append(entry)
    return {"targets": targets, "budget": BUDGET, "within": WITHIN, "rounds": timing["rounds"],
            "timed": {"measured": timing["measured"], "seconds": timing["seconds"], "machine": timing["machine"]},
            "members_timed": sum(m["x_first_anchor"] is not None for m in timing["members"]),
            "members": len(timing["members"]), "goal_points": GOAL_POINTS, "ceiling": ceiling(state_dir, timing)}


def _label(member: str) -> str:
    """A member's name in a folder name (``mobilenetv2_100@0.5:d0.75``: ``mobilenetv2_100-x0.5-d0.75``)."""
    return member.replace("@", "-x").replace(":", "-")


def to_export(entry: dict[str, Any]) -> list[dict[str, Any]]:
    """What a target's entry of the report commits: the search's winner (``searched``; once trained with every
    seed), each family's most accurate member that meets the target (by median; named by its member,
    ``resnet20-x0.5``; once every member of the family that meets the target is trained, so that the pick is that
    family's best and not the first one trained), and random search's winner (``random``), each with its latency
    ratio and how that was timed."""
    out = []
    seeded = entry.get("seeded_search")
    searched_timed = "measured in the search's final pass, beside the anchor, while trials trained"
    if seeded is not None and seeded["accuracy"] is not None and seeded["accuracy"]["n"] >= BUDGET["seeds"]:
        out.append({"label": "searched", "network": "searched", "arch": seeded["arch"],
                    "latency_ms": seeded["latency_ms"], "x_anchor": seeded["x_anchor"], "timed": searched_timed})
    best: dict[str, dict[str, Any]] = {}
    meeting = [m for m in entry["members"] if m["x_anchor"] <= 1.0]
    untrained = {m["family"] for m in meeting if m["accuracy"] is None}
    for m in meeting:
        if m["family"] in untrained:
            continue
        if m["family"] not in best or m["accuracy"]["median"] > best[m["family"]]["accuracy"]["median"]:
            best[m["family"]] = m
    for _, m in sorted(best.items()):
        out.append({"label": _label(m["member"]), "network": m["member"], "arch": m["arch"],
                    "latency_ms": m["latency_ms"], "x_anchor": m["x_anchor"],
                    "timed": f"the fronts' timing ({ROUNDS} paired rounds beside the first anchor), quiet machine"})
    control = entry.get("random_control")
    if control is not None and control["accuracy"] is not None and control["accuracy"]["n"] >= BUDGET["seeds"]:
        out.append({"label": "random", "network": "random", "arch": control["arch"],
                    "latency_ms": control["latency_ms"], "x_anchor": control["x_anchor"], "timed": searched_timed})
    return out


def step_export(archive: Path, state_dir: Path, timing: dict[str, Any], export_dir: Path,
                log: Callable[[str], None]) -> None:
    """Write every target's :func:`to_export` networks under ``export_dir`` (``<target>ms-<label>/``), each
    scored again from its ``model.onnx``; a folder of an earlier export at that target that is no longer among
    them is removed, so the folders are the comparison's networks and nothing else."""
    report = step_report(state_dir, timing)
    data = load_dataset(data_config(archive))
    for t in report["targets"]:
        picks = to_export(t)
        for p in picks:
            folder = export_dir / f"{t['target_ms']:g}ms-{p['label']}"
            info = export_network(folder, p["network"], Arch.decode(p["arch"]), t["target_ms"], state_dir, BUDGET,
                                  data, p["latency_ms"], p["x_anchor"], p["timed"])
            log(f"  {folder.name}: {info['arch_id']}, validation {100 * info['onnx_validation_accuracy']:.1f}% "
                f"from model.onnx, {p['x_anchor']:.2f}x the anchor")
        keep = {f"{t['target_ms']:g}ms-{p['label']}" for p in picks}
        for old in sorted(export_dir.glob(f"{t['target_ms']:g}ms-*")):
            if old.is_dir() and old.name not in keep:
                shutil.rmtree(old)
                log(f"  removed {old.name} (not among the comparison's networks now)")


def _exports(export_dir: Path, target: float) -> list[dict[str, Any]]:
    """The networks committed at ``target`` (folder, network, id), as :func:`step_export` wrote them (the record's
    writer makes each folder relative to the repository)."""
    out = []
    for info_path in sorted(export_dir.glob(f"{target:g}ms-*/arch.json")):
        info = json.loads(info_path.read_text())
        out.append({"folder": str(info_path.parent), "network": info["network"], "arch_id": info["arch_id"]})
    return out


def _member_cell(m: dict[str, Any]) -> str:
    a = m["accuracy"]
    seeds = "" if a is None else f" ({a['n']} seed{'s' if a['n'] > 1 else ''})"
    acc = "not trained" if a is None else f"{100 * a['median']:.1f}%"
    return f"{m['member']} {acc}{seeds} at {m['x_anchor']:.2f}x"


def _answer(t: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """The searched network a target's row is about, and its goal: the seeded search's winner once trained with
    every seed, else the comparison's searched network (None: neither)."""
    seeded = t.get("seeded_search")
    if seeded is not None and seeded["accuracy"] is not None and seeded["accuracy"]["n"] >= BUDGET["seeds"]:
        return seeded, seeded["goal"]
    return (t["searched"], t["goal"]) if "goal" in t else None


def headline(rec: dict[str, Any]) -> Headline:
    """The record's row of the results table: the searched network against the best front member no faster."""
    f = rec["figures"]
    answers = [(t, a) for t in f["targets"] if (a := _answer(t)) is not None]
    figure = "; ".join(f"{s['arch_id']} ({s['space']}"
                       + (f"; {s['reference']} itself, the search's start" if s.get("reference") else "")
                       + f") {100 * s['accuracy']['median']:.1f}% at {s['x_anchor']:.2f}x ({t['target_ms']:g} ms)"
                       for t, (s, _) in answers)
    best = []
    for t, (_, g) in answers:
        m = next((m for m in t["members"] if m["member"] == g["best"]), None)
        best.append(f"{_member_cell(m)} ({t['target_ms']:g} ms)" if m else f"none no faster ({t['target_ms']:g} ms)")
    return Headline(
        "Searched network vs the hand-designed fronts (CIFAR ResNets and the phone designs over depth and "
        "width), CIFAR-10",
        "searched (median of 3 seeds): " + figure,
        "the most accurate front member no faster: " + "; ".join(best),
        f">= {f['goal_points']:g} point above every front member no faster ({BUDGET['seeds']} seeds each), seed "
        "ranges apart, at each target", len(answers) == len(f["targets"]) and all(g["met"] and not g.get("pending")
                                                             for _, (_, g) in answers))


def _top_rung(search: dict[str, Any]) -> str:
    """A search's top rung in words: each network's id, accuracy in the search and ``x_anchor``."""
    return ", ".join(f"{r['arch_id']} {100 * r['accuracy']:.1f}% at {r['x_anchor']:.2f}x" for r in search["top_rung"])


def _verdict(name: str, s: dict[str, Any], g: dict[str, Any]) -> str:
    a = s["accuracy"]
    behind = [r for r in g["against"] if not r["met"]]
    pending = g.get("pending", [])
    word = "not met" if not g["met"] else "met" if not pending else "met on the seeds trained so far"
    return (f"{name} {s['arch_id']} (space `{s['space']}`): {100 * a['median']:.1f}% (median of {a['n']} seeds, "
            f"{100 * a['min']:.1f}-{100 * a['max']:.1f}%) at {s['x_anchor']:.2f}x. Against the {len(g['against'])} "
            f"trained member{'' if len(g['against']) == 1 else 's'} no faster: **{word}**"
            + (": " + "; ".join(f"{r['member']} {r['points']:+.1f} points" + ("" if r["apart"] else ", ranges overlap")
                                for r in behind) if behind else "") + "."
            + (f" Not yet trained with {BUDGET['seeds']} seeds: {', '.join(pending)}." if pending else ""))


def _study_winner(study: dict[str, Any], seeded: dict[str, Any] | None) -> str:
    """A study's winner in words: the comparison's search's own, or judged against the fronts once trained."""
    if seeded is not None and study["arch_id"] == seeded["arch_id"]:
        return f"Its winner is {study['arch_id']}, the comparison's search's too."
    if "goal" in study:
        return _verdict("Its winner", study, study["goal"])
    return f"Its winner is {study['arch_id']}, another network than the comparison's search's (not trained yet)."


def _render_check(check: dict[str, Any],
                  train: str = "python -m benchmarks.search.cifar10_deploy --step train") -> list[str]:
    """A target's :func:`recipe_check` in words and a table; ``train`` is the command that trains a network with
    the recipe (given ``--recipe``)."""
    from benchmarks.render import _f, table

    def seeds(values: list[float] | None) -> str:
        return ", ".join(f"{100 * v:.1f}%" for v in values) if values else "not trained"

    s = check["searched"]
    changes = ", ".join(f"{k} {v:g}" if not isinstance(v, bool) else f"{k} {str(v).lower()}"
                        for k, v in check["changes"].items())
    rows = [[f"{s['arch_id']} (searched)", _f(s["x_anchor"], 2), seeds(s["own"]), seeds(s["recipe"])]]
    rows += [[r["member"], _f(r["x_anchor"], 2), seeds(r["own"]), seeds(r["recipe"])] for r in check["members"]]
    int8 = check.get("field") == "int8_accuracy"
    tag = " (INT8)" if int8 else ""
    out = [f"Under a second recipe, `{check['recipe']}` (the train group's defaults with {changes}; "
           f"`{train} --recipe {check['recipe']}" + ("" if int8 else " --arch A") + "`), the searched network and "
           "the members trained with it too" + (", each training scored in INT8 as above" if int8 else "") + ":", "",
           table(["network", "x anchor", f"the comparison's recipe, seed by seed{tag}",
                  f"`{check['recipe']}`, seed by seed{tag}"], rows), "",
           _verdict(f"Under `{check['recipe']}`, the winner" + (" in INT8" if int8 else ""), s, check["goal"])]
    if check["untried"]:
        n = len(check["untried"])
        out[-1] += (f" This is not the verdict at the target under `{check['recipe']}`: {n} member"
                    f"{'' if n == 1 else 's'} in its range {'is' if n == 1 else 'are'} not trained with it and left "
                    f"out here: {', '.join(check['untried'])}.")
    return out


def render(rec: dict[str, Any]) -> str:
    """The record's section on its area's page: each target's fronts, and the searched network against them."""
    from benchmarks.render import _f, meta, table

    f = rec["figures"]
    b = f["budget"]
    out = [meta(rec), "",
           f"Every member of every reference family ({f['members_timed']} of {f['members']} timed; the others are "
           f"over the MACs limit) in {f['rounds']} paired rounds against the comparison's anchor (ONNX Runtime, one "
           f"thread, 1x3x32x32); a family's front at a target is the widest member of each depth within "
           f"{f['within']:g}x of it, trained at {b['train_images']:,} images x {b['epochs']} epochs "
           "(validation split carved from the training images)."]
    for t in f["targets"]:
        out += ["", f"**Target {t['target_ms']:g} ms.**", ""]
        rows = [[m["family"], m["member"], _f(m["x_anchor"], 2), _f(m["mmacs"], 1),
                 "not trained" if m["accuracy"] is None else
                 ", ".join(f"{100 * v:.1f}%" for v in m["accuracy"]["values"])] for m in t["members"]]
        out.append(table(["family", "member", "x anchor", "M MACs", "accuracy, seed by seed"], rows))
        if "goal" in t:
            out += ["", _verdict("The comparison's searched network", t["searched"], t["goal"])]
        seeded = t.get("seeded_search")
        if seeded is not None:
            top = _top_rung(seeded)
            start = ", ".join(f"`{a}`" for a in seeded["start"])
            fill = seeded.get("fill_mutate_after")
            fill = (f" (evolution; after {fill} refused draws in a row its first population filled with mutations, "
                    "`search.fill_mutate_after`)" if fill else "")
            out += ["", f"The search of `{seeded['space']}`{fill} started from {start}: "
                        f"{seeded['candidates']} candidates in {seeded['wall_seconds'] / 60:.0f} minutes; at its top "
                        f"rung (x_anchor measured in the search, beside the anchor): {top}."]
            if seeded.get("reference"):
                out += ["", f"Its winner is `{seeded['reference']}` itself, a start: within its budget the search "
                            "found nothing that meets the target and beats it."]
            elif seeded["arch"] in seeded["start"]:
                out += ["", f"Its winner is {seeded['arch_id']}, one of its starts: within its budget the search found "
                            "nothing that meets the target and beats it by its own figures."]
            if "goal" in seeded:
                out += ["", _verdict("Its winner", seeded, seeded["goal"])]
        check = t.get("recipe_check")
        if check is not None:
            out += ["", *_render_check(check)]
        longer = t.get("longer_search")
        if longer is not None:
            out += ["", f"A longer search (a study: {longer['candidates']} candidates, proposals under "
                        f"{LONGER_SEARCH['latency_floor']:g}x the target not trained) in "
                        f"{longer['wall_seconds'] / 60:.0f} minutes; at its top rung: {_top_rung(longer)}. "
                        + _study_winner(longer, seeded)]
        rung = t.get("rung_search")
        if rung is not None:
            first = RUNG_SEARCH["rungs"][0]
            out += ["", f"A search with a costlier first rung (a study: {first['train_images']:,} x {first['epochs']} "
                        f"where the comparison's is {SEARCH['rungs'][0]['train_images']:,} x "
                        f"{SEARCH['rungs'][0]['epochs']}; {rung['candidates']} candidates) in "
                        f"{rung['wall_seconds'] / 60:.0f} minutes; at its top rung: {_top_rung(rung)}. "
                        + _study_winner(rung, seeded)]
        control = t.get("random_control")
        if control is not None:
            top = _top_rung(control)
            a = control["accuracy"]
            acc = ("not trained yet" if a is None else f"{100 * a['median']:.1f}% (median of {a['n']} seeds, "
                   f"{100 * a['min']:.1f}-{100 * a['max']:.1f}%)")
            verdict = ""
            if seeded is not None and control["arch_id"] == seeded["arch_id"]:
                verdict = " The search's winner is the same network."
            elif "search_at_least_as_accurate" in control:
                ahead = control["search_at_least_as_accurate"]
                verdict = " The search's winner is " + ("at least as accurate." if ahead else "**less accurate**.")
            short = ""
            if seeded is not None and control["candidates"] < seeded["candidates"]:
                short = (f" (it ended early: the screen refused {SearchAlgConfig().max_refused} uniform draws in a "
                         f"row, where the search ran {seeded['candidates']})")
            out += ["", f"Random search's control (the same space, rungs, budget of candidates, start, screen and "
                        f"training seeds; every proposal after the start a uniform draw): {control['candidates']} "
                        f"candidates{short} in "
                        f"{control['wall_seconds'] / 60:.0f} minutes; at its top rung: {top}. Its winner "
                        f"{control['arch_id']}: {acc}.{verdict}"]
        exports = t.get("exports") or []
        out += ["", "Committed (seed 0, `model.onnx` + `arch.json`; `--step export`): "
                + (", ".join(f"`{e['folder']}` ({e['network']}, {e['arch_id']})" for e in exports)
                   if exports else "nothing yet.")]
    bands = f.get("ceiling") or []
    if bands:
        rows = [[f"{band['mmacs'][0]:g}-{band['mmacs'][1]:g}", str(band["networks"]),
                 band["best"]["member"] or f"{band['best']['arch_id']} "
                 + ("(searched)" if band["best"].get("in_space", True) else "(a probe outside the space)"),
                 _f(band["best"]["mmacs"], 1),
                 f"{100 * band['best']['accuracy']['median']:.1f}% ({band['best']['accuracy']['n']} seed"
                 + ("s)" if band["best"]["accuracy"]["n"] > 1 else ")")] for band in bands]
        out += ["", "**The ceiling of the deployment budget.** Every network trained at "
                    f"{b['train_images']:,} x {b['epochs']} (references, searched networks, studies and probes), by "
                    "M MACs: "
                    "the most accurate of each band (median of its seeds).", "",
                table(["M MACs", "networks", "the most accurate", "its M MACs", "accuracy"], rows)]
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.search.cifar10_fronts",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--cifar10", type=Path, help="the CIFAR-10 training-image archive (train and export steps)")
    parser.add_argument("--step", choices=("time", "train", "export", "report"), required=True)
    parser.add_argument("--family", action="append", default=[], choices=sorted(FAMILIES),
                        help="train step: only these families (may repeat; default all)")
    parser.add_argument("--seeds", type=int, default=1, help="train step: seeds 0 to N-1 of each member (default 1)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--state-dir", type=Path, default=STATE_DIR)
    args = parser.parse_args(argv)
    state_dir = args.state_dir.resolve()

    def log(line: str) -> None:
        print(line, flush=True)

    if args.step == "time":
        saved = state_dir / "fronts.json"
        timing = add_anchors(json.loads(saved.read_text()), state_dir, log) if saved.exists() else step_time(state_dir,
                                                                                                             log)
        (state_dir / "fronts.json").write_text(json.dumps(timing, indent=2) + "\n")
        log(f"  saved {state_dir / 'fronts.json'}")
        args.step = "report"
    timing = _read_step(state_dir, "fronts", "time (python -m benchmarks.search.cifar10_fronts --step time)")
    front = fronts(timing)
    if args.step == "train":
        if args.cifar10 is None or not args.cifar10.is_file():
            parser.error(f"--cifar10 {args.cifar10}: no such file")
        if not 1 <= args.seeds <= BUDGET["seeds"]:
            parser.error(f"--seeds {args.seeds}: from 1 to {BUDGET['seeds']}")
        # as the comparison's own trainings run (benchmarks.search.cifar10_deploy.main):
        # channels-last under the AVX2 cap
        os.environ.update(trial_environment(TrainConfig(device="cpu"), False))
        families = args.family or sorted(FAMILIES)
        archs = [Arch.decode(m["arch"]) for t in front.values() for f in families for m in t.get(f, [])]
        train_all(archs, args.cifar10, {**BUDGET, "seeds": args.seeds}, args.workers, state_dir, log)
    if args.step == "export":
        if args.cifar10 is None or not args.cifar10.is_file():
            parser.error(f"--cifar10 {args.cifar10}: no such file (export scores each model.onnx again)")
        step_export(args.cifar10, state_dir, timing, EXPORT_DIR, log)
        args.step = "report"
    if args.step == "report":
        rec = {**header("cifar10_fronts", "full", "python -m benchmarks.search.cifar10_fronts --step report"),
               "figures": step_report(state_dir, timing)}
        path = write_record(record_path("cifar10_fronts", "full"), rec)
        log(f"  record: {path}")
    for target, families in front.items():
        log(f"  target {target:g} ms:")
        for family, members in families.items():
            for m in members:
                accs = ", ".join(f"{100 * a:.1f}" for a in _seeds(state_dir, m["arch"])) or "not trained"
                log(f"    {family:<16} {m['member']:<26} x{m['x_anchor']:.2f} {m['mmacs']:6.1f} M MACs  {accs}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
