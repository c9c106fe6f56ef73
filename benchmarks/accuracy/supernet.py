"""One-shot accuracy on CIFAR-10: a supernet trained within a stated budget on this machine, how
faithfully it ranks the proxy-fidelity study's architectures, what one candidate costs, and a
search with it against the brief-training search.

1. **Supernet**: ``python -m nas.supernet`` on ``mobile_cifar`` with its defaults (each step the
   largest network of each block type, the smallest and two random subnets; in-place
   distillation; the ``train`` recipe), on ``train_samples`` CIFAR-10 training images of the
   fidelity study's split (``val_fraction`` 0.1, seed 0: its validation images are never trained
   on). The epochs are chosen to fit ``budget_minutes`` from the measured time of a few training
   steps on this machine (``--epochs`` sets them instead).
2. **Fidelity**: the fidelity study of ``python scripts/bench.py fidelity`` (its folder
   ``.latnas/bench/fidelity-<mode>``, which must be complete) is copied and run again with
   ``supernet.checkpoint``: only the supernet's estimates are computed, and its Kendall tau and
   Spearman come from the same architectures and reference accuracies as the other estimators'.
3. **Cost per candidate** on one core (one torch thread): extraction, BatchNorm recalibration on
   ``bn_batches`` x 64 training images and validation on the study's validation images, for the
   study's architectures.
4. **Search**: LatNAS's search at a latency target (MobileNetV2 in its 32x32 layout at width 0.5,
   measured now with ONNX Runtime on one thread at 1x3x32x32) with ``accuracy=supernet`` and with
   its default brief training, the same number of candidates each; the best of each is then
   trained ``final_epochs`` epochs on ``train_samples`` images by ``nas.export`` (the supernet's
   best both from the supernet's weights, ``init=supernet``, and from scratch): accuracy, and the
   compute each path took (supernet training included).

Everything is kept under ``.latnas/bench/supernet-<mode>/`` (a stopped supernet training continues).
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
import yaml

from benchmarks.accuracy import fidelity
from benchmarks.common import ROOT, record_path, spread
from nas.core.config import (
    DataConfig,
    ExportConfig,
    ExportLatencyConfig,
    SupernetConfig,
    SupernetEstimateConfig,
    TrackingConfig,
    TrainConfig,
)
from nas.data import load_dataset
from nas.oneshot.subnet import SupernetTarget, load_supernet, read_checkpoint, subnet_accuracy
from nas.oneshot.train import run_supernet
from nas.studies.fidelity import RECORDS, REFERENCE, SUPERNET, choose_archs, run_fidelity, table
from search_spaces import Arch, reference
from search_spaces.references import scale_width, small_input_variant
from search_spaces.space import SPACES_DIR, SearchSpace
from search_spaces.supernet import Supernet, sandwich_ends

# search_overrides: the brief-training search's budget (full: the CIFAR-10 defaults, 5,000 images x 2 epochs).
FULL: dict[str, Any] = {"train_samples": 10000, "budget_minutes": 90, "max_epochs": 40, "search_n": 24,
                        "final_epochs": 5, "val": 2000, "search_overrides": []}
QUICK: dict[str, Any] = {"train_samples": 500, "budget_minutes": 3, "max_epochs": 1, "search_n": 3, "final_epochs": 1,
                         "val": 500, "search_overrides": ["data.max_train_samples=500", "train.epochs=1"]}
BN_BATCHES = 10
TARGET_WIDTH = 0.5
SHAPE = (1, 3, 32, 32)


def _space() -> dict[str, Any]:
    return dict(yaml.safe_load((SPACES_DIR / "mobile_cifar.yaml").read_text()))


def _data(archive: Path, size: dict[str, Any], train_samples: int | None) -> DataConfig:
    # The fidelity study's split: the same validation images, none of them trained on.
    return DataConfig(name="image_folder", path=str(archive), resolution=32, val_fraction=0.1, seed=0,
                      max_train_samples=train_samples, max_val_samples=size["val"])


def seconds_per_step(space: SearchSpace, data_cfg: DataConfig, batch: int = 64, steps: int = 6) -> float:
    """The measured time of one sandwich step (2 largest, the smallest, 2 random subnets) on this machine."""
    data = load_dataset(data_cfg)
    torch.manual_seed(0)
    net = Supernet(space, data.num_classes).train()
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    smallest, largest = sandwich_ends(space, data.resolution)
    rng = np.random.default_rng(0)
    times = []
    for _, (xb, y) in zip(range(steps), data.train_batches(batch, rng), strict=False):
        t0 = time.perf_counter()
        opt.zero_grad()
        for arch in (*largest, smallest, space.sample(rng), space.sample(rng)):
            F.cross_entropy(net(data.normalise(xb), arch), y).backward()
        opt.step()
        times.append(time.perf_counter() - t0)
    return float(np.median(times[1:]))


def train_supernet(archive: Path, size: dict[str, Any], work: Path, epochs: int | None,
                   log: Callable[[str], None]) -> dict[str, Any]:
    """Train (or continue, or find trained) the benchmark's supernet; its figures."""
    data_cfg = _data(archive, size, size["train_samples"])
    space = _space()
    checkpoint = work / "supernet" / "supernet.pt"
    plan: dict[str, Any] = {"budget_minutes": size["budget_minutes"]}
    if checkpoint.is_file():
        epochs = int(read_checkpoint(checkpoint)["epochs"])
        plan["epochs_from"] = "the existing checkpoint"
    elif epochs is None:
        step = seconds_per_step(SearchSpace.from_dict(space), data_cfg)
        steps = size["train_samples"] // 64
        per_epoch = step * steps * 1.1  # and the end-of-epoch validation of two subnets
        epochs = max(1, min(size["max_epochs"], int(size["budget_minutes"] * 60 // per_epoch)))
        plan.update(seconds_per_step=step, estimated_seconds_per_epoch=per_epoch, epochs_from="the measured step time")
        log(f"  one sandwich step takes {step:.2f} s here: {epochs} epochs of {steps} steps fit "
            f"{size['budget_minutes']} minutes")
    else:
        plan["epochs_from"] = "--epochs"
    cfg = SupernetConfig(space=space, space_source="search_spaces/spaces/mobile_cifar.yaml", name="bench-supernet",
                         output_dir=str(checkpoint.parent), data=data_cfg, progress=False,
                         train=TrainConfig(epochs=epochs, device="cpu"),
                         tracking=TrackingConfig(uri=f"sqlite:///{work / 'mlflow.db'}"))
    result = run_supernet(cfg, log=lambda s: log(f"  {s}"))
    last = result.history[-1]
    return {"checkpoint": str(checkpoint), "epochs": result.epochs, "train_images": size["train_samples"],
            "train_seconds": result.train_seconds, "plan": plan, "history": result.history,
            "accuracy_largest": last.get("accuracy_largest"), "accuracy_smallest": last.get("accuracy_smallest"),
            "settings": {"random_subnets": cfg.random_subnets, "distill": cfg.distill,
                         "train": dataclasses.asdict(cfg.train)}}


def records_from_committed(record_path: Path, folder: Path, quick: bool, log: Callable[[str], None]) -> None:
    """Write a fidelity study's ``records.jsonl`` from its committed record, when its folder is gone.

    The committed record holds every architecture's estimates and reference accuracy, and each
    estimator's median seconds per candidate (not each estimate's seconds: every row carries its
    estimator's median, and says so in ``detail``). The architectures must be those the study
    chooses today; otherwise the reference would be trained again (hours), so that is refused.
    """
    record = json.loads(record_path.read_text())
    fig = record["figures"]
    space = SearchSpace.from_dict(_space())
    chosen = [a.encode() for a in choose_archs(space, int(fig["k"]), int(fig["seed"]), SHAPE, fig["data"]["classes"])]
    recorded = [a["arch"] for a in fig["archs"]]
    if sorted(chosen) != sorted(recorded):
        raise SystemExit(f"{record_path} holds other architectures than the fidelity study chooses today; run "
                         f"`python scripts/bench.py {'--quick ' if quick else ''}fidelity` again")
    seconds = {e: float(v["seconds_per_candidate"]) for e, v in fig["estimators"].items()}
    seconds[REFERENCE] = float(fig["reference_seconds_per_candidate"])
    detail = {"from_record": str(record_path.relative_to(ROOT)), "seconds": "the estimator's median in the record"}
    rows = [{"arch": a["arch"], "arch_id": a["arch_id"], "estimator": e, "value": float(a[e]), "seconds": seconds[e],
             "detail": detail}
            for a in fig["archs"] for e in seconds if e not in ("params", "macs")]
    folder.mkdir(parents=True, exist_ok=True)
    (folder / RECORDS).write_text("".join(json.dumps(r) + "\n" for r in rows))
    log(f"  the fidelity study's folder is gone: its {len(rows)} estimates are read from {record_path.name} "
        f"(measured {record['date'][:10]})")


def supernet_fidelity(archive: Path, quick: bool, checkpoint: Path, work: Path, source: Path,
                      log: Callable[[str], None]) -> dict[str, Any]:
    """The fidelity study's records with the supernet estimator added (in a copy of its folder)."""
    folder = work / "fidelity"
    folder.mkdir(parents=True, exist_ok=True)
    if (source / "study.json").is_file():
        shutil.copy2(source / "study.json", folder / "study.json")
    # The study's records are copied over every time (the supernet's own rows are kept).
    ours = [line for line in (folder / RECORDS).read_text().splitlines()
            if f'"estimator": "{SUPERNET}"' in line] if (folder / RECORDS).is_file() else []
    (folder / RECORDS).write_text("".join(line + "\n" for line in [*(source / RECORDS).read_text().splitlines(),
                                                                     *ours] if line.strip()))
    with tempfile.TemporaryDirectory(prefix="latnas-supernet-fidelity-") as tmp:
        cfg = fidelity.config(archive, quick, 1, f"sqlite:///{Path(tmp) / 'mlflow.db'}")
        cfg = dataclasses.replace(cfg, output_dir=str(folder),
                                  supernet=SupernetEstimateConfig(checkpoint=str(checkpoint), bn_batches=BN_BATCHES))
        trained = [f"train_{e}ep" for e in cfg.cheap_epochs] + list(cfg.zero_cost) + [REFERENCE]
        missing = _missing(source / RECORDS, trained, cfg.k)
        if missing:
            raise SystemExit(f"the fidelity study in {source} is incomplete ({missing}); run `python scripts/bench.py "
                             f"{'--quick ' if quick else ''}fidelity` first")
        result = run_fidelity(cfg, log=lambda s: log(f"  {s}"))
    if result.computed > cfg.k:
        raise RuntimeError(f"the study computed {result.computed} estimates: more than the supernet's")
    for line in table(result, cfg).splitlines():
        log(f"  {line}")
    record = json.loads((folder / "fidelity.json").read_text())
    record["computed_in_this_run"] = result.computed
    record["source"] = str(source.relative_to(ROOT)) if source.is_relative_to(ROOT) else source.name
    return record


def _missing(records: Path, estimators: list[str], k: int) -> str:
    rows = [json.loads(x) for x in records.read_text().splitlines() if x.strip()] if records.is_file() else []
    counts = {e: len({r["arch"] for r in rows if r["estimator"] == e}) for e in estimators}
    short = [f"{e} {n}/{k}" for e, n in counts.items() if n < k]
    return ", ".join(short)


def cost_per_candidate(archive: Path, size: dict[str, Any], checkpoint: Path, archs: list[str],
                       log: Callable[[str], None]) -> dict[str, Any]:
    """Seconds per candidate on one core: extraction, recalibration, validation."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        data = load_dataset(_data(archive, size, None))
        space = SearchSpace.from_dict(_space())
        loaded = load_supernet(checkpoint, space, SupernetTarget.of(space, data))
        subnet_accuracy(loaded, Arch.decode(archs[0]), data, BN_BATCHES, 64)  # warm-up: first calls allocate
        seconds = [subnet_accuracy(loaded, Arch.decode(a), data, BN_BATCHES, 64).seconds for a in archs]
    finally:
        torch.set_num_threads(threads)
    s = spread(seconds)
    log(f"  one candidate on one core: median {s['median']:.2f} s (max {s['max']:.2f} s) with {BN_BATCHES} x 64 "
        f"recalibration images and {data.n_val} validation images")
    return {"seconds": s, "bn_batches": BN_BATCHES, "batch_size": 64, "val_images": data.n_val, "threads": 1,
            "goal_seconds": 2.0, "meets_goal": s["median"] <= 2.0}


def _search(archive: Path, size: dict[str, Any], target_ms: float, accuracy: list[str], name: str,
            workdir: Path) -> dict[str, Any]:
    from nas.cli import compose_search_config
    from nas.driver import run_search

    cfg = compose_search_config(
        "+space=mobile_cifar", f"target_ms={target_ms}", "latency.input_shape=[1,3,32,32]", "data=cifar10_jpeg",
        f"data.path={archive}", f"data.max_val_samples={size['val']}", f"search.n_trials={size['search_n']}",
        f"tracking.uri=sqlite:///{workdir / 'mlflow.db'}", f"output_dir={workdir / name}", "progress=false",
        f"name={name}", *size["search_overrides"], *accuracy,
    )
    result = run_search(cfg)
    if result.best is None:
        raise RuntimeError(f"the search {name} completed no candidate")
    best = result.best
    return {"arch": best.arch, "arch_id": best.arch_id, "proxy_accuracy": best.accuracy,
            "latency_ms": best.latency_p50, "meets_target": best.meets_target, "candidates": len(result.candidates),
            "search_seconds": result.wall_seconds, "train_images": cfg.data.max_train_samples,
            "train_epochs": cfg.train.epochs,
            "median_trial_seconds": float(np.median([c.metrics.get("trial_seconds", np.nan)
                                                     for c in result.candidates]))}


def _final(archive: Path, size: dict[str, Any], arch: str, init: str, checkpoint: Path, out: Path) -> dict[str, Any]:
    from nas.deploy.export import ExportTarget, export_candidate

    cfg = ExportConfig(candidate=arch, output_dir=str(out), init=init, engine=False,
                       supernet=SupernetEstimateConfig(checkpoint=str(checkpoint), bn_batches=BN_BATCHES),
                       train=TrainConfig(epochs=size["final_epochs"], device="cpu"),
                       data=_data(archive, size, size["train_samples"]),
                       latency=ExportLatencyConfig(backend="onnxruntime", input_shape=list(SHAPE),
                                                   options={"intra_op_threads": 1}, rounds=1))
    report = export_candidate(ExportTarget(Arch.decode(arch), "arch_string"), cfg).report
    return {"init": init, "accuracy": report["training"]["accuracy"], "train_seconds": report["training"]["seconds"],
            "init_accuracy": report["init"]["accuracy"] if report.get("init") else None,
            "latency_ms": report["latency"]["fused"]["p50_ms"]}


def search_comparison(archive: Path, size: dict[str, Any], checkpoint: Path, supernet_seconds: float, work: Path,
                      log: Callable[[str], None]) -> dict[str, Any]:
    """The two searches at one target and their best networks trained; accuracy and compute of each path."""
    from latency_predictor.measurement.backends import make_estimator
    from latency_predictor.measurement.timing import MeasureConfig

    est = make_estimator("onnxruntime", input_shape=SHAPE, num_classes=10, intra_op_threads=1,
                         measure=MeasureConfig(min_runs=200, min_time_s=1.0, max_time_s=4.0))
    target = round(est.measure(scale_width(small_input_variant(reference("mobilenetv2_100")), TARGET_WIDTH))
                   .latency_ms, 3)
    log(f"  target: MobileNetV2 (32x32 layout) at width {TARGET_WIDTH} measures {target} ms")
    paths: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="latnas-supernet-search-") as tmp:
        one_shot = _search(archive, size, target, ["accuracy=supernet", f"accuracy.checkpoint={checkpoint}"],
                           "one-shot", Path(tmp))
        log(f"  accuracy=supernet search: {one_shot['candidates']} candidates in {one_shot['search_seconds']:.0f} s")
        brief = _search(archive, size, target, [], "brief-training", Path(tmp))
        log(f"  brief-training search: {brief['candidates']} candidates in {brief['search_seconds']:.0f} s")
    exports = work / "exports"
    finals = {
        "supernet search, best fine-tuned from the supernet": (one_shot, _final(archive, size, one_shot["arch"],
                                                                               "supernet", checkpoint, exports)),
        "supernet search, best trained from scratch": (one_shot, _final(archive, size, one_shot["arch"], "random",
                                                                        checkpoint, exports)),
        "brief-training search, best trained from scratch": (brief, _final(archive, size, brief["arch"], "random",
                                                                           checkpoint, exports)),
    }
    for label, (search, final) in finals.items():
        supernet_part = supernet_seconds if final["init"] == "supernet" or search is one_shot else 0.0
        total = supernet_part + search["search_seconds"] + final["train_seconds"]
        paths[label] = {"search": search, "final": final, "supernet_seconds": supernet_part,
                        "total_seconds": total}
        log(f"  {label}: {search['arch_id']}, final accuracy {final['accuracy']:.3f}, "
            f"{final['latency_ms']:.3f} ms, total {total / 60:.1f} min")
    return {"target_ms": target, "final_epochs": size["final_epochs"], "final_train_images": size["train_samples"],
            "candidates_per_search": size["search_n"], "brief_training": {
                "data.max_train_samples": brief["train_images"], "train.epochs": brief["train_epochs"]},
            "paths": paths}


def run(archive: Path, quick: bool, epochs: int | None = None, fidelity_dir: Path | None = None,
        work_dir: Path | None = None, log: Callable[[str], None] = print,
        minutes: float | None = None) -> dict[str, Any]:
    """The benchmark (see the module's text); its record.

    ``minutes``: the supernet's training budget (default the size's; the issue allows at most 90).
    """
    size = dict(QUICK if quick else FULL)
    if minutes is not None:
        if not 0 < minutes <= 90:
            raise SystemExit(f"--supernet-minutes must be in (0, 90], not {minutes}")
        size["budget_minutes"] = minutes
    mode = "quick" if quick else "full"
    work = work_dir or ROOT / ".latnas" / "bench" / f"supernet-{mode}"
    source = fidelity_dir or ROOT / ".latnas" / "bench" / f"fidelity-{mode}"
    committed = record_path("fidelity", "quick" if quick else "full")
    work.mkdir(parents=True, exist_ok=True)
    if not (source / RECORDS).is_file():
        if fidelity_dir is not None or not committed.is_file():
            raise SystemExit(f"no fidelity study in {source}: run `python scripts/bench.py "
                             f"{'--quick ' if quick else ''}fidelity` first (its references are the supernet's "
                             "yardstick)")
        source = work / "fidelity-record"
        if not (source / RECORDS).is_file():
            records_from_committed(committed, source, quick, log)
    log(f"  supernet: mobile_cifar on {size['train_samples']} CIFAR-10 images (budget {size['budget_minutes']} min)")
    sn = train_supernet(archive, size, work, epochs if epochs is not None else (1 if quick else None), log)
    checkpoint = Path(sn["checkpoint"])
    fid = supernet_fidelity(archive, quick, checkpoint, work, source, log)
    if source == work / "fidelity-record":
        fid["source"] = f"{committed.relative_to(ROOT)}, the study's committed record"
    archs = [a["arch"] for a in fid["archs"]]
    cost = cost_per_candidate(archive, size, checkpoint, archs, log)
    comparison = search_comparison(archive, size, checkpoint, sn["train_seconds"], work, log)
    return {"size": size, "supernet": sn, "fidelity": fid, "cost": cost, "search": comparison,
            "supernet_command": (
                "python -m nas.supernet +space=mobile_cifar data=cifar10_jpeg data.path=CIFAR10_ARCHIVE "
                f"data.max_train_samples={size['train_samples']} data.max_val_samples={size['val']} "
                f"train.epochs={sn['epochs']} train.device=cpu")}


def render(rec: dict[str, Any]) -> str:
    """The section of a record of this benchmark on its area's page (docs/benchmarks/<area>.md)."""
    from benchmarks.render import _f, _pct, table
    f = rec["figures"]
    sn, fid, cost, search = f["supernet"], f["fidelity"], f["cost"], f["search"]
    plan = sn["plan"]
    chosen = (f"{sn['epochs']} epoch{'s' if sn['epochs'] != 1 else ''}, chosen from {plan['epochs_from']}"
              + (f" ({plan['seconds_per_step']:.2f} s per step)" if "seconds_per_step" in plan else ""))
    hist = table(["epoch", "loss (largest)", "loss (others)", "largest subnet", "smallest subnet", "s"],
                 [[str(int(h["epoch"])), _f(h["loss_largest"], 3), _f(h["loss_others"], 3),
                   _pct(h.get("accuracy_largest")), _pct(h.get("accuracy_smallest")), _f(h["seconds"], 0)]
                  for h in sn["history"]])
    ests = sorted(fid["estimators"], key=lambda e: -fid["estimators"][e]["kendall_tau"])
    rows = []
    for e in ests:
        x = fid["estimators"][e]
        name = f"**{e}**" if e == "supernet" else e
        rows.append([name, f"{x['kendall_tau']:.3f}", f"{x['kendall_ci'][0]:.2f} to {x['kendall_ci'][1]:.2f}",
                     f"{x['spearman']:.3f}", f"{x['top_overlap']:.0%} of {x['top_n']}",
                     _f(x["seconds_per_candidate"], 2)])
    s = cost["seconds"]
    paths = []
    for label, p in search["paths"].items():
        paths.append([label, p["search"]["arch_id"], _f(p["final"]["latency_ms"], 3),
                      _pct(p["search"]["proxy_accuracy"]), _pct(p["final"]["init_accuracy"]),
                      _pct(p["final"]["accuracy"]), _f(p["supernet_seconds"] / 60, 1),
                      _f(p["search"]["search_seconds"] / 60, 1), _f(p["final"]["train_seconds"] / 60, 1),
                      _f(p["total_seconds"] / 60, 1)])
    goal = "meets" if cost["meets_goal"] else "misses"
    return f"""A supernet of `mobile_cifar` (`python -m nas.supernet`: each step the largest network of each
block type, the smallest and two random subnets, in-place distillation, the `train` recipe) trained on
{sn['train_images']:,} CIFAR-10 training images for {chosen}, in **{sn['train_seconds'] / 60:.1f} minutes**
(budget {plan['budget_minutes']} minutes). Its validation images are those of the proxy-fidelity study and
were never trained on.

{hist}

**Fidelity.** The proxy-fidelity study's {fid['k']} architectures and reference accuracies (`{fid.get('source', '')}`),
with the supernet's estimate (each subnet extracted, BatchNorm recalibrated on {cost['bn_batches']} x
{cost['batch_size']} training images, validated) next to the study's other estimators: Kendall's tau with its
95% bootstrap interval, Spearman's rho, top-10% overlap, seconds per candidate (the supernet's training is not
in that figure: it is paid once, above).

{table(["estimator", "Kendall tau", "95% CI", "Spearman", "top-10%", "s / candidate"], rows)}

**Cost per candidate** on one core (one torch thread): median **{s['median']:.2f} s** (quartiles
{s['q25']:.2f} - {s['q75']:.2f} s, max {s['max']:.2f} s) for extraction, recalibration and validation on
{cost['val_images']:,} images; it {goal} the 2 s goal. A 1,000-candidate search then costs about
{s['median'] * 1000 / 60:.0f} core-minutes of accuracy estimates besides the latency measurements.

**Search.** LatNAS at {search['target_ms']:g} ms (MobileNetV2, 32x32 layout, width 0.5, measured here), once
with `accuracy=supernet` and once with brief training ({search['brief_training']['data.max_train_samples']:,}
images x {search['brief_training']['train.epochs']} epochs per candidate), {search['candidates_per_search']}
candidates each; each best network then trained {search['final_epochs']} epochs on
{search['final_train_images']:,} images by `nas.export` (from the supernet's weights, `init=supernet`, or
from scratch). Compute is wall time on this machine's two cores; a path through the supernet search carries
the supernet's training.

{table(["path", "best", "latency ms", "search's estimate", "after recalibration", "final accuracy",
        "supernet min", "search min", "training min", "total min"], paths)}

Reproduce the supernet alone: `{f.get('supernet_command', '')}`"""
