"""Deployment variants on CIFAR-10: FP32 against INT8 on ONNX Runtime's CPU provider, and pruned networks.

Networks at one latency on this machine (ONNX Runtime, CPU, one thread, 1x3x32x32), and the next
smaller searched one:

* **searched**: LatNAS's own search of ``mobile_cifar`` on CIFAR-10 (``python -m nas.search
  +space=mobile_cifar ... data=cifar10_jpeg``, ``search_n`` candidates, its default cheap accuracy
  estimate) at the measured latency of MobileNetV2 x0.5 in its 32x32 layout; the best candidate,
  and the **next smaller** one: the candidate before it on the search's Pareto front (accuracy
  against latency), the network a user would otherwise take to go faster. When the best is the
  fastest network of its front (the cheap estimate often favours small networks that learn fast,
  and the reward gives nothing for unused budget), there is no such candidate, and the next smaller
  network is the best of a second search at ``smaller_target`` times the searched network's
  latency, the search a user would run to go faster;
* **MobileNetV2** in its 32x32 layout, width-scaled to the multiplier whose measured latency is
  closest to the searched network's.

Each is exported from the search's record (or by its string) and trained with ``python -m
nas.export train.epochs=...`` on ``train_samples`` CIFAR-10 training images, then optimised with
``python -m nas.optimize``: INT8 (ONNX Runtime static quantisation, ``calibration`` training images,
per-channel weights) and, for the searched network and MobileNetV2, pruned by each of ``ratios``, the
share of their MACs removed (sensitivity, progressive schedule, BatchNorm recalibration, fine-tuning
with distillation), each pruned network also in INT8. Accuracy is each variant's on the validation
images carved from the training split. Every variant's model file is then timed again, all of them alternately in one
process with the same protocol (``rounds`` rounds, each keeping its fastest), so the latencies
are side by side. A variant that fails ``nas.optimize``'s check (agreement with its FP32 network:
its defaults at full size, lower bounds in quick mode) is not kept and so not timed; its row says why.

Goals reported against: INT8 at least 1.5x faster than FP32 with at most 1 point of accuracy lost;
a pruned variant of the searched network on the accuracy/latency front between it and the next
smaller searched network (faster than the searched one, slower than the next smaller one, and
more accurate than the next smaller one, so neither dominates it).
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.common import Headline
from latency_predictor import LatencyResult
from latency_predictor.measurement.backends import OnnxRuntimeBackend, make_estimator
from latency_predictor.measurement.timing import MeasureConfig
from nas.core.config import DataConfig, ExportConfig, OptimizeConfig, TrackingConfig, TrainConfig
from nas.core.errors import OptimizeError
from nas.core.record import Candidate, pareto_front
from nas.deploy.export import run_export
from nas.deploy.optimize import OUT, run_optimize
from search_spaces import Arch, reference
from search_spaces.references import MULTIPLIERS, scale_width, small_input_variant

SHAPE = (1, 3, 32, 32)
FULL: dict[str, Any] = {"search_n": 16, "train_samples": 30000, "epochs": 10, "val": 2000, "ratios": [0.3, 0.5],
                        "steps": 2, "finetune_epochs": 1, "sensitivity": 1000, "calibration": 512, "rounds": 5,
                        "min_agreement": 0.98, "min_agreement_pruned": 0.85, "smaller_target": 0.7,
                        "measure": {"min_runs": 200, "min_time_s": 1.0, "max_time_s": 4.0}, "search_overrides": []}
# The quick networks are barely trained, so their logits are near ties and a rounding flips many of
# them: the checks' bounds are lowered there, so that every variant is kept and timed (a smoke run).
QUICK: dict[str, Any] = {"search_n": 3, "train_samples": 300, "epochs": 1, "val": 200, "ratios": [0.4], "steps": 1,
                         "finetune_epochs": 1, "sensitivity": 100, "calibration": 128, "rounds": 2,
                         "min_agreement": 0.9, "min_agreement_pruned": 0.0, "smaller_target": 0.7,
                         "measure": {"min_runs": 30, "min_time_s": 0.1, "max_time_s": 1.0},
                         "search_overrides": ["data.max_train_samples=500", "data.max_val_samples=200",
                                              "train.epochs=1"]}
INT8_SPEEDUP_GOAL = 1.5
INT8_LOSS_GOAL_POINTS = 1.0


def _data(archive: Path, size: dict[str, Any]) -> DataConfig:
    return DataConfig(name="image_folder", path=str(archive), resolution=32, val_fraction=0.1,
                      max_train_samples=size["train_samples"], max_val_samples=size["val"])


def _fp32_ms(arch: Arch, size: dict[str, Any]) -> float:
    est = make_estimator("onnxruntime", input_shape=SHAPE, num_classes=10, intra_op_threads=1,
                         measure=MeasureConfig(**size["measure"]))
    return est.measure(arch).latency_ms


def search(archive: Path, target_ms: float, size: dict[str, Any], tracking_uri: str, work: Path,
           log: Callable[[str], None], seed: int = 0) -> dict[str, Any]:
    """LatNAS's search at ``target_ms``: the best candidate and the next smaller one on its Pareto front."""
    from nas.cli import compose_search_config
    from nas.driver import run_search

    name = f"deploy-{target_ms:g}ms"
    cfg = compose_search_config(
        "+space=mobile_cifar", f"target_ms={target_ms}", "latency.input_shape=[1,3,32,32]", "data=cifar10_jpeg",
        "~data_rungs", f"data.path={archive}", f"search.n_trials={size['search_n']}", f"search.seed={seed}",
        f"tracking.uri={tracking_uri}", f"output_dir={work / name}", "progress=false", f"name={name}",
        *size["search_overrides"],
    )
    result = run_search(cfg)
    if result.best is None:
        raise RuntimeError(f"the search at {target_ms:g} ms completed no candidate")
    best = result.best
    front = pareto_front(result.candidates)
    nxt = next_smaller(best, front)
    log(f"  search: {len(result.candidates)} candidates in {result.wall_seconds:.0f} s; best {best.arch_id} "
        f"({best.latency_p50:.3f} ms, proxy accuracy {best.accuracy:.3f}); next smaller "
        f"{nxt.arch_id if nxt else 'none'}")
    return {"name": name, "target_ms": target_ms, "best": best.arch, "best_arch_id": best.arch_id,
            "next_smaller": nxt.arch if nxt else None, "next_smaller_arch_id": nxt.arch_id if nxt else None,
            "next_smaller_search": name if nxt else None,
            "candidates": len(result.candidates), "front_size": len(front), "wall_seconds": result.wall_seconds}


def search_smaller(found: dict[str, Any], searched_ms: float, archive: Path, size: dict[str, Any], tracking_uri: str,
                   work: Path, log: Callable[[str], None]) -> dict[str, Any]:
    """``found`` with its next smaller network from a second search, when its front had none.

    The second search runs at ``smaller_target`` times the searched network's latency, with another
    seed (no candidate of the first search was faster than its best); its best is taken when it is
    another network and measures faster than the searched one (else there is none).
    """
    if found["next_smaller"]:
        return found
    target = round(size["smaller_target"] * searched_ms, 3)
    log(f"  the best is the fastest on its front: a second search at {target:g} ms for the next smaller network")
    second = search(archive, target, size, tracking_uri, work, log, seed=1)  # other samples than the first's
    ms = _fp32_ms(Arch.decode(second["best"]), size)
    taken = second["best_arch_id"] != found["best_arch_id"] and ms < searched_ms
    log(f"  second search's best {second['best_arch_id']}: {ms:.3f} ms against the searched {searched_ms:.3f} ms"
        + ("" if taken else ": not faster, so no next smaller network"))
    return {**found, "second_search": {k: second[k] for k in ("name", "target_ms", "best_arch_id", "candidates",
                                                                 "wall_seconds")},
            "next_smaller": second["best"] if taken else None,
            "next_smaller_arch_id": second["best_arch_id"] if taken else None,
            "next_smaller_search": second["name"] if taken else None}


def next_smaller(best: Candidate, front: list[Candidate]) -> Candidate | None:
    """The network a user would take to go faster than ``best``: the slowest on the front that is faster.

    None when ``best`` is the front's fastest (no candidate of the search is faster and as accurate).
    """
    faster = [c for c in front if c.latency_p50 < best.latency_p50]
    return max(faster, key=lambda c: c.latency_p50) if faster else None


def export(candidate: str, search_name: str | None, data: DataConfig, size: dict[str, Any], out: Path,
           tracking_uri: str) -> Path:
    """``python -m nas.export`` of one network, trained on the benchmark's budget."""
    cfg = ExportConfig(candidate=candidate, search=search_name, output_dir=str(out), data=data, engine=False,
                       log_model=search_name is not None, train=TrainConfig(epochs=size["epochs"], device="cpu"),
                       tracking=TrackingConfig(uri=tracking_uri))
    cfg.latency.backend = "onnxruntime"
    cfg.latency.input_shape = list(SHAPE)
    cfg.latency.options = {"intra_op_threads": 1}
    cfg.latency.measure = dict(size["measure"])
    cfg.latency.rounds = 1
    return run_export(cfg).folder


def optimize(folder: Path, ratios: list[float], size: dict[str, Any], log: Callable[[str], None]) -> dict[str, Any]:
    """``python -m nas.optimize`` of one export; its report (also when a variant failed its check)."""
    cfg = OptimizeConfig(candidate=str(folder), engines=False,
                         train=TrainConfig(epochs=size["finetune_epochs"], lr=0.01, warmup_epochs=0.0, device="cpu"))
    cfg.latency.options = {"intra_op_threads": 1}
    cfg.latency.measure = dict(size["measure"])
    cfg.latency.rounds = 1  # timed side by side afterwards
    cfg.calibration.samples = size["calibration"]
    cfg.calibration.min_samples = min(100, size["calibration"])
    cfg.prune.ratios = list(ratios)
    cfg.prune.steps = size["steps"]
    cfg.prune.sensitivity_samples = size["sensitivity"]
    cfg.check.min_agreement = size["min_agreement"]
    cfg.check.min_agreement_pruned = size["min_agreement_pruned"]
    path = folder / OUT / "report.json"
    try:
        run_optimize(cfg, log=lambda s: log("  " + s))
    except OptimizeError as err:
        if not path.is_file():  # stopped before its report: not a finding, a failure
            raise
        log(f"  {folder.name}: {err}")  # a variant failed its check: its row says so, the rest is timed
    report: dict[str, Any] = json.loads(path.read_text())
    return report


def side_by_side(models: dict[str, tuple[Path, str]], size: dict[str, Any], log: Callable[[str], None]) -> dict[
        str, dict[str, Any]]:
    """Every model file timed alternately, ``rounds`` times; each keeps its fastest p50 (and that round's p99)."""
    ests = {p: OnnxRuntimeBackend(SHAPE, num_classes=10, intra_op_threads=1, precision=p,
                                  measure=MeasureConfig(**size["measure"])) for p in ("fp32", "int8")}
    blobs = {k: path.read_bytes() for k, (path, _) in models.items()}
    results: dict[str, list[LatencyResult]] = {k: [] for k in models}
    for r in range(size["rounds"]):
        for key, (_, precision) in models.items():
            results[key].append(ests[precision].measure_onnx(blobs[key], name=key))
        log(f"  side-by-side round {r + 1}/{size['rounds']} done")
    return keep_fastest(results)


def keep_fastest(results: dict[str, list[LatencyResult]]) -> dict[str, dict[str, Any]]:
    """Each model's fastest round (its p50 and p99, whether it was stable) and every round's p50, in order."""
    best = {}
    for key, rounds in results.items():
        fastest = min(rounds, key=lambda res: res.stats.p50)
        best[key] = {"p50_ms": fastest.stats.p50, "p99_ms": fastest.stats.p99, "stable": fastest.stable,
                     "cpu_per_wall": fastest.extra.get("cpu_per_wall"), "rounds": [res.stats.p50 for res in rounds]}
    return best


def _rows(name: str, folder: Path, report: dict[str, Any], timed: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for v in report["variants"]:
        if v["status"] == "skipped":
            continue
        lat = timed.get(f"{name}/{v['variant']}", {})
        rows.append({"variant": v["variant"], "precision": v["precision"], "status": v["status"],
                     "arch": v["arch"], "macs": v["macs"], "size_bytes": v["size_bytes"], "accuracy": v["accuracy"],
                     "agreement": v["agreement"], "max_abs_diff": v["max_abs_diff"],
                     "p50_ms": lat.get("p50_ms"), "p99_ms": lat.get("p99_ms"), "stable": lat.get("stable"),
                     "round_p50_ms": lat.get("rounds")})
    return rows


def int8_verdict(rows: list[dict[str, Any]], source: str = "fp32") -> dict[str, Any] | None:
    """INT8 against FP32 of one network: speed-up of p50 and accuracy lost (points); the goals met or not."""
    by = {r["variant"]: r for r in rows}
    fp32, int8 = by.get(source), by.get("int8" if source == "fp32" else f"{source}-int8")
    if not fp32 or not int8 or not fp32["p50_ms"] or not int8["p50_ms"]:
        return None
    speedup = fp32["p50_ms"] / int8["p50_ms"]
    loss = 100 * (fp32["accuracy"] - int8["accuracy"])
    return {"speedup": speedup, "accuracy_loss_points": loss, "int8_status": int8["status"],
            "meets_speedup": speedup >= INT8_SPEEDUP_GOAL, "meets_accuracy": loss <= INT8_LOSS_GOAL_POINTS}


def front_verdict(searched: dict[str, Any], smaller: dict[str, Any] | None, pruned: list[dict[str, Any]]) -> dict[
        str, Any]:
    """Each pruned variant of the searched network placed against it and the next smaller searched network."""
    out: dict[str, Any] = {"searched": {"p50_ms": searched["p50_ms"], "accuracy": searched["accuracy"]},
                           "next_smaller": None, "pruned": [], "meets_goal": False}
    if searched["p50_ms"] is None or smaller is None or smaller["p50_ms"] is None:
        return out
    out["next_smaller"] = {"p50_ms": smaller["p50_ms"], "accuracy": smaller["accuracy"]}
    for p in pruned:
        if p["p50_ms"] is None:
            continue
        between = smaller["p50_ms"] < p["p50_ms"] < searched["p50_ms"]
        dominated = any(o["p50_ms"] <= p["p50_ms"] and o["accuracy"] >= p["accuracy"] for o in (searched, smaller))
        on_front = between and not dominated and p["status"] == "passed"
        out["pruned"].append({"variant": p["variant"], "p50_ms": p["p50_ms"], "accuracy": p["accuracy"],
                              "between": between, "dominated": dominated, "on_front": on_front})
    out["meets_goal"] = any(x["on_front"] for x in out["pruned"])
    return out


def run(archive: Path, quick: bool, log: Callable[[str], None] = print) -> dict[str, Any]:
    """Search, exports, optimisation, side-by-side timing; the goals."""
    size = QUICK if quick else FULL
    data = _data(archive, size)
    mnv2 = small_input_variant(reference("mobilenetv2_100"))
    target = round(_fp32_ms(scale_width(mnv2, 0.5), size), 3)
    log(f"  target: MobileNetV2 (32x32 layout) x0.5 measures {target} ms")
    with tempfile.TemporaryDirectory(prefix="latnas-deployment-") as tmp:
        work = Path(tmp)
        uri = f"sqlite:///{work / 'mlflow.db'}"
        found = search(archive, target, size, uri, work, log)
        searched_ms = _fp32_ms(Arch.decode(found["best"]), size)
        found = search_smaller(found, searched_ms, archive, size, uri, work, log)
        widths = {m: _fp32_ms(scale_width(mnv2, m), size) for m in (0.25, *MULTIPLIERS)}
        multiplier = min(widths, key=lambda m: abs(widths[m] - searched_ms))
        log(f"  MobileNetV2 x{multiplier:g}: {widths[multiplier]:.3f} ms against the searched {searched_ms:.3f} ms")
        plan = [("searched", found["best_arch_id"], found["name"], size["ratios"]),
                ("mobilenetv2", scale_width(mnv2, multiplier).encode(), None, size["ratios"])]
        if found["next_smaller"]:
            plan.append(("next_smaller", found["next_smaller_arch_id"], found["next_smaller_search"], []))
        reports: dict[str, tuple[Path, dict[str, Any]]] = {}
        for name, candidate, search_name, ratios in plan:
            log(f"  {name}: export (training {size['train_samples']} images x {size['epochs']} epochs), optimise")
            folder = export(candidate, search_name, data, size, work / "exports", uri)
            reports[name] = (folder, optimize(folder, ratios, size, log))
        models: dict[str, tuple[Path, str]] = {}
        for name, (folder, report) in reports.items():
            for v in report["variants"]:
                onnx = [f for f in v["files"] if f.endswith("model.onnx")]
                if v["status"] == "passed" and onnx:
                    models[f"{name}/{v['variant']}"] = (folder / onnx[0], v["precision"])
        timed = side_by_side(models, size, log)
        networks = []
        for name, (folder, report) in reports.items():
            rows = _rows(name, folder, report, timed)
            sources = ["fp32", *(f"pruned-{r:g}" for r in (size["ratios"] if name != "next_smaller" else []))]
            networks.append({"name": name, "arch": report["arch"], "arch_id": report["arch_id"],
                             "multiplier": multiplier if name == "mobilenetv2" else None,
                             "validation_images": report["validation"]["images"], "variants": rows,
                             "int8": {s: int8_verdict(rows, s) for s in sources}})
    by_name = {n["name"]: {r["variant"]: r for r in n["variants"]} for n in networks}
    searched_rows = by_name["searched"]
    front = front_verdict(searched_rows["fp32"], by_name.get("next_smaller", {}).get("fp32"),
                          [r for v, r in searched_rows.items() if v.startswith("pruned-") and r["precision"] == "fp32"])
    summary = []
    for n in networks:
        v = n["int8"]["fp32"]
        if v:
            summary.append(f"{n['name']}: INT8 {v['speedup']:.2f}x faster than FP32 (goal >= {INT8_SPEEDUP_GOAL}x: "
                           f"{'met' if v['meets_speedup'] else 'not met'}), {v['accuracy_loss_points']:+.2f} points of "
                           f"accuracy lost (goal <= {INT8_LOSS_GOAL_POINTS:g}: "
                           f"{'met' if v['meets_accuracy'] else 'not met'})")
    summary.append("pruned variant on the front between the searched network and the next smaller one: "
                   + ("yes" if front["meets_goal"] else "no"))
    for line in summary:
        log(f"  {line}")
    return {
        "dataset": "cifar10", "target_ms": target, "search": found, "networks": networks, "front": front,
        "goals": {"int8_speedup": INT8_SPEEDUP_GOAL, "int8_max_loss_points": INT8_LOSS_GOAL_POINTS},
        "summary": summary, "settings": {k: v for k, v in size.items()},
        "latency": "ONNX Runtime on the CPU, 1 intra-op thread, input 1x3x32x32",
    }


def headline(rec: dict[str, Any]) -> Headline:
    """The record's row of the results table: the searched network's INT8 variant against its FP32 one."""
    f = rec["figures"]
    s = next(n for n in f["networks"] if n["name"] == "searched")
    v = s["int8"]["fp32"]
    g = f["goals"]
    return Headline(
        "INT8 deployment",
        f"the searched network in INT8: {v['speedup']:.2f}x faster, {-v['accuracy_loss_points']:+.2f} points "
        "of accuracy (ONNX Runtime CPU, 1 thread)",
        "the same network in FP32",
        f">= {g['int8_speedup']:g}x faster, <= {g['int8_max_loss_points']:g} point lost",
        bool(v["meets_speedup"] and v["meets_accuracy"]))


def render(rec: dict[str, Any]) -> str:
    """The section of a record of this benchmark on its area's page (docs/benchmarks/<area>.md)."""
    from benchmarks.render import _f, _pct, table
    f = rec["figures"]
    s = f["settings"]

    def label(n: dict[str, Any]) -> str:
        return n["name"] + (f" x{n['multiplier']:g}" if n.get("multiplier") else "")

    rows = []
    for n in f["networks"]:
        for v in n["variants"]:
            p50 = _f(v["p50_ms"], 3) + (" (unstable)" if v.get("stable") is False else "")
            rows.append([label(n), v["variant"], v["precision"], p50, _f(v["p99_ms"], 3),
                         f"{v['macs'] / 1e6:.1f}", f"{v['size_bytes'] / 1e3:.0f}", _pct(v["accuracy"]),
                         _pct(v["agreement"]), _f(v["max_abs_diff"], 3), v["status"]])
    int8 = []
    for n in f["networks"]:
        for source, v in n["int8"].items():
            if v:
                int8.append([label(n), source, f"{v['speedup']:.2f}x", f"{v['accuracy_loss_points']:+.2f}",
                             "yes" if v["meets_speedup"] and v["meets_accuracy"] else "no"])
    fr = f["front"]
    front = [[x["variant"], _f(x["p50_ms"], 3), _pct(x["accuracy"]), "yes" if x["between"] else "no",
              "yes" if x["dominated"] else "no", "yes" if x["on_front"] else "no"] for x in fr["pruned"]]
    small = fr.get("next_smaller")
    placed = (table(["variant", "p50", "accuracy", "between", "dominated", "on the front"], front) if front else
              "No pruned variant of the searched network to place: " + (
                  "none was timed." if small else "neither the search's front nor a second search at a lower "
                                                  "target found a smaller network."))
    ratios = " and ".join(f"{r:.0%}" for r in s["ratios"])
    second = f["search"].get("second_search")
    smaller_from = (f"the best of a second search at {_f(second['target_ms'], 3)} ms, since the first search's best "
                    "was the fastest on its front" if second else "the candidate before it on its Pareto front")
    anchors = (f"searched {_f(fr['searched']['p50_ms'], 3)} ms at {_pct(fr['searched']['accuracy'])}; next smaller "
               + (f"{_f(small['p50_ms'], 3)} ms at {_pct(small['accuracy'])}" if small else "none found"))
    return f"""What the steps after the search give on this CPU. LatNAS searched `mobile_cifar` on CIFAR-10
({f['search']['candidates']} candidates, target {_f(f['target_ms'], 3)} ms: MobileNetV2 x0.5 in its 32x32 layout).
Its best network, the next smaller one ({smaller_from}), and MobileNetV2 (32x32 layout) width-scaled to the
searched network's latency were exported and trained ({s['train_samples']:,} training images, {s['epochs']}
epoch(s)), then optimised with `python -m nas.optimize`: INT8 (ONNX Runtime static QDQ quantisation, per-channel
weights, calibrated on {s['calibration']} training images) and, for the searched network and MobileNetV2,
pruning {ratios} of the MACs away ({s['steps']} progressive step(s), {s['finetune_epochs']} fine-tuning epoch(s)
each, with distillation), each pruned network in INT8 too.

Accuracy, and top-1 agreement with the network's unpruned FP32 model, on {s['val']:,} validation images carved
from the training split. Latency p50/p99 (ms): {f['latency']}; every model timed alternately in one process, each
keeping its best of {s['rounds']} rounds. The check: a quantised variant agrees with the FP32 network it was made
from on at least {s['min_agreement']:g} of the images, a pruned one with the network it was pruned from on at
least {s['min_agreement_pruned']:g}; a variant that fails is not kept, so it has no latency here. A p50 marked
unstable is from a measurement whose spread stayed above the protocol's threshold or that did not get the
CPU it asked for (a busy machine).

{table(["network", "variant", "precision", "p50", "p99", "MMACs", "size kB", "accuracy", "agreement",
        "max diff", "check"], rows)}

**INT8 against FP32** (goal: >= {f['goals']['int8_speedup']:g}x faster, <= {f['goals']['int8_max_loss_points']:g}
point lost):

{table(["network", "INT8 of", "speed-up", "accuracy lost (points)", "goal met"], int8)}

**Pruning on the front** ({anchors}): a pruned variant of the searched network meets the goal when it is faster
than the searched network, slower than the next smaller one and dominated by neither:
**{"met" if fr["meets_goal"] else "not met"}**.

{placed}"""
