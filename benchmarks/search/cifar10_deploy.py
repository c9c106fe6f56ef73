"""Searched vs hand-designed networks on CIFAR-10 at the deployment budget, resumable in parts.

The question of :mod:`benchmarks.search.references_cifar10`, asked at the budget a network is deployed
with: every network, searched or not, is trained from scratch with one recipe (the ``train``
group's defaults) on ``train_images`` CIFAR-10 training images for ``epochs`` epochs, with
``seeds`` weight seeds, and validated on every image of the split carved from the training images
(the search's own carving).

Targets and widths, as in the short-budget comparison: each target is the latency of MobileNetV2
(32x32 layout) at a width of :data:`TARGET_WIDTHS` on this CPU (ONNX Runtime, 1 thread,
1x3x32x32), and that network is the target's *anchor*; each reference is scaled to the widest
multiplier whose median latency ratio to the anchor, measured back to back in rounds, is at most 1.

The run is split into steps that each save what they produced, so it may run in parts
(``--step``): ``widths`` (targets and reference widths: a quiet machine, a few minutes; run again, it keeps
the targets measured and adds those of :data:`FRONTS_WIDTHS` it lacks),
``references`` (the references' trainings) and ``search`` (LatNAS's multi-fidelity search at each
target, :data:`SEARCH`, resumed where it stopped, then the searched networks' trainings, in one pool with
the references' not yet trained, so a run from nothing may skip ``references``) and
``report`` (a paired latency pass of every network, the goal at each target, the committed networks
under :data:`EXPORT_DIR` and the record; a quiet machine). ``train`` trains given members of the
search's space (``--arch``, repeated) at the same budget and keeps them beside the others: the figures
that show what the space holds near a target, whichever network a search picks; with ``--probe``, networks
outside the space too (a choice the space lacks, tried before the space gains it). ``search --latency-floor F``
is a study beside the comparison: the same search with ``search.latency_floor=F`` (proposals under ``F``
times the target are not trained), its record and winner's trainings kept apart from the comparison's
search; so is ``search --trials N`` (the same search with N candidates), alone or with a floor, and
``search --first-rung IMAGESxEPOCHS`` (the same search with another first rung). ``train --recipe plain`` trains
with a second recipe (:data:`RECIPES`), saved under its own name, never in place of the comparison's: a check that
a verdict does not rest on the comparison's recipe. A training already saved under
:data:`STATE_DIR` is never repeated; a step whose inputs are missing says which step to run first.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import math
import os
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from benchmarks.common import ROOT, Headline, command_line, header, machine_and_load, record_path, spread, write_record
from benchmarks.search.references_cifar10 import SCALE_ROUNDS, TARGET_WIDTHS, anchor_targets, paired_ratios, scaled
from latency_predictor.measurement.backends import make_estimator
from latency_predictor.measurement.export import export_onnx
from latency_predictor.measurement.timing import MeasureConfig
from nas.accuracy.training import channels_last_on, train_briefly, trial_environment
from nas.core.config import DataConfig, TrainConfig
from nas.data import load_dataset
from nas.deploy.fuse import fuse_conv_bn
from nas.runtime.workers import die_with_parent, in_workers
from search_spaces import REFERENCES, Arch, SearchSpaceError, anchor_network, build, load_space

SHAPE = (1, 3, 32, 32)
BUDGET = {"train_images": 30000, "epochs": 10, "seeds": 3}
"""The deployment budget every network of the comparison is trained at."""
QUICK_BUDGET = {"train_images": 300, "epochs": 1, "seeds": 1}
STATE_DIR = ROOT / "benchmarks" / "search" / "records" / "cifar10_deploy"
"""Each finished training (``<arch_id>-seed<s>-<images>x<epochs>.json``, and for seed 0 its
fused ``.onnx``) and each finished step (``widths.json``, ...): what a later part resumes from."""
EXPORT_DIR = ROOT / "benchmarks" / "cifar10-deploy" / "width-scaled"
"""The width-scaled comparison's networks (seed 0); the fronts' comparison commits its own beside it
(:mod:`benchmarks.search.cifar10_fronts`, ``--step export``)."""


def data_config(archive: Path) -> DataConfig:
    """CIFAR-10 from the archive, validated on every carved image (the search carves the same split)."""
    return DataConfig(name="image_folder", path=str(archive), resolution=32, val_fraction=0.1, max_val_samples=None)


def _estimator() -> Any:
    return make_estimator("onnxruntime", input_shape=SHAPE, num_classes=10, intra_op_threads=1,
                          measure=MeasureConfig(min_runs=200, min_time_s=1.0, max_time_s=4.0))


FRONTS_WIDTHS = (0.75,)
"""Anchors' widths of targets that only the fronts' comparison (:mod:`benchmarks.search.cifar10_fronts`) measures
against, beside :data:`TARGET_WIDTHS`: MobileNetV2 x0.75 is the third target, where the CIFAR ResNets are at their
strongest. It lies at about the latency of ResNet-26 (``fronts.json``: ResNet-26 1.74x the x0.5 anchor, MobileNetV2
x0.75 1.82x), the deepest full-width member under twice the 0.326 ms anchor; the members below it there are
ResNet-8 x1.5 (1.21x), ResNet-20 (1.35x) and ResNet-8 x2 (1.59x). The width-scaled comparison's steps
(``references``, ``report``) leave it out."""


def step_widths(log: Callable[[str], None], have: dict[str, Any] | None = None) -> dict[str, Any]:
    """Targets (MobileNetV2 at :data:`TARGET_WIDTHS`) and every reference's width at each; then the targets of
    :data:`FRONTS_WIDTHS`. Targets already in ``have`` (an earlier ``widths.json``) are kept as they were measured,
    and a target added to them is named on their scale: the first target times its anchor's ratio to the first
    anchor, measured in paired rounds now, so that a host whose speed has changed since does not move it."""
    est = _estimator()

    def measure(arch: Arch) -> float:
        return float(est.measure(arch).latency_ms)

    if have is not None:
        return _add_targets(have, measure, log)
    anchors, target_list = anchor_targets(measure)
    targets = []
    for width, anchor, target_ms in zip(TARGET_WIDTHS, anchors, target_list, strict=True):
        log(f"  target {target_ms:.3f} ms: MobileNetV2 x{width:g} ({SCALE_ROUNDS} paired rounds); widths:")
        refs = []
        for name in sorted(REFERENCES):
            arch, m, p = scaled(name, anchor, measure, SCALE_ROUNDS, log)  # the smallest width when none meets
            refs.append({"name": name, "multiplier": m, "arch": arch.encode(), "arch_id": arch.arch_id,
                         "ratio_at_choice": p.ratio, "latency_at_choice_ms": p.latency_ms, "meets": p.meets})
        targets.append({"target_ms": target_ms, "anchor": f"mobilenetv2_100 x{width:g}",
                        "anchor_arch": anchor.encode(), "references": refs})
    widths = {"targets": targets, "machine": machine_and_load(),
              "measured": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    return _add_targets(widths, measure, log)


def _add_targets(widths: dict[str, Any], measure: Callable[[Arch], float],
                 log: Callable[[str], None]) -> dict[str, Any]:
    """``widths`` with a target for each of :data:`FRONTS_WIDTHS` it lacks (no width-scaled references: the
    fronts' comparison sweeps every family there)."""
    have = {_anchor_width(t) for t in widths["targets"]}
    todo = [w for w in FRONTS_WIDTHS if w not in have]
    if not todo:
        log("  widths.json has every target")
        return widths
    first = widths["targets"][0]
    first_anchor = Arch.decode(first["anchor_arch"])
    anchors = {w: anchor_network(f"mobilenetv2_100@{w:g}", 32) for w in todo}
    paired = paired_ratios([first_anchor, *anchors.values()], first_anchor, measure, SCALE_ROUNDS)
    added = []
    for w, anchor in anchors.items():
        ratio = paired[anchor].ratio
        target_ms = math.ceil(first["target_ms"] * ratio * 1000) / 1000  # rounded up, as anchor_targets rounds
        log(f"  target {target_ms:.3f} ms: MobileNetV2 x{w:g}, {ratio:.3f}x the first anchor "
            f"({SCALE_ROUNDS} paired rounds; {paired[anchor].latency_ms:.3f} ms here now)")
        added.append({"target_ms": target_ms, "anchor": f"mobilenetv2_100 x{w:g}", "anchor_arch": anchor.encode(),
                      "references": [], "fronts_only": True, "x_first_anchor": ratio,
                      "ratios": list(paired[anchor].ratios), "machine": machine_and_load(),
                      "measured": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})
    return {**widths, "targets": [*widths["targets"], *added]}


def _compared(widths: dict[str, Any]) -> list[dict[str, Any]]:
    """The width-scaled comparison's targets: those of :data:`TARGET_WIDTHS` (not :data:`FRONTS_WIDTHS`')."""
    return [t for t in widths["targets"] if not t.get("fronts_only")]


RECIPES: dict[str, dict[str, Any]] = {
    "plain": {"batch_size": 128, "lr": 0.1, "weight_decay": 5e-4, "label_smoothing": 0.0, "no_decay_norm_bias": False},
}
"""Recipes a network may be trained with beside the comparison's (the ``train`` group's defaults), as changes to
those defaults: ``plain`` is the textbook CIFAR recipe (SGD at 0.1 on batches of 128, weight decay 5e-4 on every
weight, no label smoothing), a check that a verdict does not rest on the comparison's own recipe. The epochs,
images, schedule, warm-up and augmentation stay the budget's and the defaults'."""


def training_key(arch: Arch, seed: int, budget: dict[str, int], recipe: str | None = None) -> str:
    """The file stem a training is saved under (with ``recipe``, one of :data:`RECIPES`, its name last)."""
    return f"{arch.arch_id}-seed{seed}-{budget['train_images']}x{budget['epochs']}" + (f"-{recipe}" if recipe else "")


INT8_CALIBRATION = 512
"""Training images (seeded by the weight seed) an INT8 accuracy is calibrated on: ONNX Runtime's static QDQ
quantisation, as ``latency.precision=int8`` scores a candidate and ``nas.optimize`` quantises a winner."""


def _int8_figures(net: torch.nn.Module, data: Any, seed: int) -> dict[str, Any]:
    """A trained network's INT8 accuracy (ONNX Runtime's static QDQ, :data:`INT8_CALIBRATION` images)."""
    from nas.accuracy.precision import int8_accuracy

    net.eval()
    return {"int8_accuracy": int8_accuracy(net, data, INT8_CALIBRATION, seed, 1, "onnxruntime"),
            "int8": {"runtime": "onnxruntime", "quantisation": "static QDQ", "calibration_images": INT8_CALIBRATION}}


Job = tuple[str, int, str, dict[str, int], str, bool, str | None]
"""One training of :func:`train_all`: architecture, seed, archive, budget, state folder, INT8, recipe."""


def _int8_from_weights(job: Job) -> dict[str, Any]:
    """A saved training's INT8 accuracy from its saved weights: the network is rebuilt, not trained again."""
    arch_text, seed, archive, budget, state_dir, _, recipe = job
    torch.set_num_threads(1)
    arch = Arch.decode(arch_text)
    data = load_dataset(data_config(Path(archive))).take_train(budget["train_images"], 0)
    key = training_key(arch, seed, budget, recipe)
    folder = Path(state_dir)
    net = build(arch, num_classes=10)
    net.load_state_dict(torch.load(folder / f"{key}.pt", map_location="cpu", weights_only=True))
    out = {**json.loads((folder / f"{key}.json").read_text()), **_int8_figures(net, data, seed)}
    (folder / f"{key}.json").write_text(json.dumps(out, indent=2) + "\n")
    return out


def _train(job: Job) -> dict[str, Any]:
    arch_text, seed, archive, budget, state_dir, int8, recipe = job
    torch.set_num_threads(1)
    arch = Arch.decode(arch_text)
    data = load_dataset(data_config(Path(archive))).take_train(budget["train_images"], 0)
    torch.manual_seed(seed)
    net = build(arch, num_classes=10)
    cfg = TrainConfig(epochs=budget["epochs"], seed=seed, device="cpu", **(RECIPES[recipe] if recipe else {}))
    t0 = time.perf_counter()
    history = train_briefly(net, data, cfg, torch.device("cpu"))
    out = {
        "arch": arch_text, "arch_id": arch.arch_id, "seed": seed, **budget,
        "val_images": data.n_val, "accuracy": history[-1].accuracy, "val_loss": history[-1].val_loss,
        "per_epoch_accuracy": [h.accuracy for h in history], "seconds": time.perf_counter() - t0,
        **({"recipe_name": recipe} if recipe else {}),
        "recipe": dataclasses.asdict(cfg), "channels_last": channels_last_on(cfg, torch.device("cpu")),
        "onednn_max_cpu_isa": os.environ.get("ONEDNN_MAX_CPU_ISA"),
        "mean": list(data.mean), "std": list(data.std),
        "classes": list(data.classes), "load_average_after": list(os.getloadavg()),
    }
    if int8:
        out.update(_int8_figures(net, data, seed))
    key = training_key(arch, seed, budget, recipe)
    folder = Path(state_dir)
    folder.mkdir(parents=True, exist_ok=True)
    net.eval()
    torch.save(net.state_dict(), folder / f"{key}.pt")  # every seed's weights: a later INT8 score needs no training
    if seed == 0:
        net.eval()
        (folder / f"{key}.onnx").write_bytes(export_onnx(fuse_conv_bn(net), SHAPE))
    (folder / f"{key}.json").write_text(json.dumps(out, indent=2) + "\n")
    return out


def _training_worker(env: dict[str, str]) -> None:
    """A training worker's first step, before any kernel runs: ``env`` (the oneDNN cap, which oneDNN reads once per
    process), then :func:`die_with_parent`."""
    os.environ.update(env)
    die_with_parent()


def train_all(archs: list[Arch], archive: Path, budget: dict[str, int], workers: int, state_dir: Path,
              log: Callable[[str], None], int8: bool = False,
              recipe: str | None = None) -> dict[tuple[str, int], dict[str, Any]]:
    """Every (architecture, seed) at ``budget``: saved ones read back, the others trained ``workers`` at a time.
    Every training saves its weights (``<key>.pt``). With ``int8``, each training also records its network's INT8
    accuracy (:data:`INT8_CALIBRATION`); one saved without it is scored in INT8 from its saved weights, or, saved
    before weights were kept, trained again with the same seed and data (its new float figures replace the saved
    ones, and repeat them exactly where the memory format is the same: ``cifar10_int8.md``).

    The workers train as a search's trials do on this CPU, whoever calls: channels-last, with oneDNN held at
    AVX2 (:func:`nas.accuracy.training.trial_environment`; the user's own cap holds). Each record says which
    format trained it (``channels_last``, ``onednn_max_cpu_isa``). With ``recipe`` (one of :data:`RECIPES`), each
    network is trained with that recipe instead and saved under its own name (:func:`training_key`)."""
    if recipe is not None and recipe not in RECIPES:
        raise ValueError(f"recipe {recipe!r}: not one of {', '.join(sorted(RECIPES))}")
    done: dict[tuple[str, int], dict[str, Any]] = {}
    todo: list[Job] = []
    rescore: list[Job] = []
    again = 0
    for arch in dict.fromkeys(archs):
        for seed in range(budget["seeds"]):
            key = training_key(arch, seed, budget, recipe)
            path = state_dir / f"{key}.json"
            saved = json.loads(path.read_text()) if path.exists() else None
            job = (arch.encode(), seed, str(archive), budget, str(state_dir), int8, recipe)
            if saved is not None and (not int8 or "int8_accuracy" in saved):
                done[(arch.encode(), seed)] = saved
            elif saved is not None and (state_dir / f"{key}.pt").exists():
                rescore.append(job)
            else:
                again += saved is not None
                todo.append(job)
    log(f"  trainings at {budget['train_images']} images x {budget['epochs']} epochs"
        + (f", recipe {recipe}" if recipe else "") + f": {len(done)} saved, "
        + (f"{len(rescore)} to score in INT8 from their saved weights, " if rescore else "")
        + f"{len(todo)} to train" + (f" ({again} of them saved without an INT8 accuracy or weights)" if again else "")
        + f", {workers} at a time")
    if todo or rescore:
        # Decoded here first: the decoding's own process pool cannot start inside a pool worker, and each worker
        # then reads the decoded images from the cache instead of decoding them again.
        load_dataset(data_config(archive))
    env = (trial_environment(TrainConfig(device="cpu"), False),)
    for i, r in enumerate(in_workers(_int8_from_weights, rescore, workers, ordered=False, initializer=_training_worker,
                                     initargs=env) if rescore else [], 1):
        done[(r["arch"], r["seed"])] = r
        log(f"    [{i}/{len(rescore)}] {r['arch_id']} seed {r['seed']}: INT8 {r['int8_accuracy']:.4f} (float "
            f"{r['accuracy']:.4f}, saved)")
    for i, r in enumerate(in_workers(_train, todo, workers, ordered=False, initializer=_training_worker,
                                     initargs=env) if todo else [], 1):
        done[(r["arch"], r["seed"])] = r
        log(f"    [{i}/{len(todo)}] {r['arch_id']} seed {r['seed']}: accuracy {r['accuracy']:.4f}"
            + (f", INT8 {r['int8_accuracy']:.4f}" if "int8_accuracy" in r else "") + f" in {r['seconds']:.0f} s")
    return done


SEARCH: dict[str, Any] = {"space": "cifar", "sampler": "evolution", "population_size": 4, "tournament_size": 2,
          "n_trials": 8, "reduction_factor": 4, "max_concurrent": 2, "latency_screen": 1.2, "fill_mutate_after": 10,
          "rungs": [{"train_images": 10000, "epochs": 3}, {"train_images": 30000, "epochs": 10}]}
"""LatNAS's multi-fidelity search at each target: the last rung is the deployment budget. Regularised
evolution starts from :data:`START` (then random members until the population is full) and mutates the
fittest; ASHA promotes the best quarter of the first rung and never stops a start network, so the search
can only improve on its start. The first rung is ``conf/rungs/cifar10_cpu.yaml``'s, chosen from the
deployment fidelity study (:mod:`benchmarks.accuracy.fidelity_deploy`), where 2,500 x 2 ranked little better
than chance. The space is ``cifar`` (``search_spaces/spaces/cifar.yaml``), which holds every reference of
:data:`search_spaces.references.FAMILIES` exactly: the classic CIFAR ResNets (a stride-1 stem, three stages
of basic blocks) as much as the phone designs and everything between them. Most of its members are far
over either target (a full-resolution stage is expensive), so the latency screen refuses a proposal over
1.2x the target before it trains, and once it has refused 10 uniform draws in a row the first population
fills with mutations of the members so far (``search.fill_mutate_after``): without it, a search at 0.235 ms
ended after 3 candidates, 78 of its 79 draws refused. The searches whose first population was drawn
uniformly only are kept as studies (``search-<target>ms-uniform.json``).

Eight candidates and the best quarter promoted, each candidate promoted to the top rung costing a training
at the deployment budget (6-20 minutes here). The searches of ``mobile_cifar_res`` before it (no
full-resolution stage, no start) are kept as studies (``search-<target>ms-mobile_cifar_res.json``; those
with 12 candidates, ``-n12``); so is a search with ``search.latency_floor=0.6`` (``--latency-floor``)."""
QUICK_SEARCH: dict[str, Any] = {
    "space": "mobile_cifar_res", "sampler": "evolution", "population_size": 2, "tournament_size": 1,
    "n_trials": 3, "reduction_factor": 2, "max_concurrent": 2,
    "rungs": [{"train_images": 100, "epochs": 1}, {"train_images": 300, "epochs": 1}]}

# The references' shapes in mobile_cifar_hr (ReLU), stage by stage: in the start of the searches before
# mobile_cifar_res, and the networks benchmarks/train_speed.py times.
_MBV2_035 = ("act_relu-stem_c16-mb_k3_e1_c8_s1-mb_k3_e6_c8_s1-mb_k3_e6_c8_s1-mb_k3_e6_c16_s1-mb_k3_e6_c16_s1-"
             "mb_k3_e6_c16_s1-mb_k3_e6_c24_s2-mb_k3_e6_c24_s1-mb_k3_e6_c24_s1-mb_k3_e6_c24_s1-mb_k3_e6_c40_s1-"
             "mb_k3_e6_c40_s1-mb_k3_e6_c56_s2-mb_k3_e6_c56_s1-mb_k3_e6_c56_s1-mb_k3_e6_c112_s1-head_c1280")
_MBV2_05 = ("act_relu-stem_c16-mb_k3_e1_c8_s1-mb_k3_e6_c16_s1-mb_k3_e6_c16_s1-mb_k3_e6_c16_s1-mb_k3_e6_c16_s1-"
            "mb_k3_e6_c16_s1-mb_k3_e6_c32_s2-mb_k3_e6_c32_s1-mb_k3_e6_c32_s1-mb_k3_e6_c32_s1-mb_k3_e6_c48_s1-"
            "mb_k3_e6_c48_s1-mb_k3_e6_c48_s1-mb_k3_e6_c80_s2-mb_k3_e6_c80_s1-mb_k3_e6_c80_s1-mb_k3_e6_c160_s1-head_c1280")
_MNAS_035 = ("act_relu-stem_c16-mb_k3_e1_c8_s1-mb_k3_e3_c8_s1-mb_k3_e3_c8_s1-mb_k3_e3_c8_s1-mb_k5_e3_c16_s1-"
             "mb_k5_e3_c16_s1-mb_k5_e3_c16_s1-mb_k5_e6_c32_s2-mb_k5_e6_c32_s1-mb_k5_e6_c32_s1-mb_k3_e6_c32_s1-"
             "mb_k3_e6_c32_s1-mb_k5_e6_c64_s2-mb_k5_e6_c64_s1-mb_k5_e6_c64_s1-mb_k5_e6_c64_s1-mb_k3_e6_c112_s1-head_c1280")
START: dict[float, list[str]] = {0.35: ["resnet20@0.5", "act_relu-stem_c32-mb_k3_e3_c24_s1-mb_k5_e3_c64_s2_se0.25-"
                                         "rb_k5_c128_s2-mb_k3_e3_c128_s1_se0.25"],
                                  0.5: ["resnet14", "act_relu-stem_c32-mb_k3_e3_c24_s1-mb_k5_e3_c64_s2_se0.25-"
                                        "rb_k5_c128_s2-mb_k3_e3_c128_s1_se0.25"],
                                  0.75: ["resnet20", "act_relu-stem_c32-mb_k3_e3_c24_s1-mb_k5_e3_c64_s2_se0.25-"
                                         "rb_k5_c128_s2-mb_k3_e3_c128_s1_se0.25-rb_k3_c128_s1"]}
"""The search's start at each target (by its anchor's width): the most accurate member of the CIFAR ResNets'
front there (``python -m benchmarks.search.cifar10_fronts --step report``: at 0.235 ms ResNet-20 at half
width, 69.8%; at 0.326 ms ResNet-14, 76.1% over three seeds; at 0.689 ms ResNet-20, 78.1% on seed 0, above
ResNet-8 x2, -14, -26 and -32) and the most accurate network an earlier search found within the target: at the
first two, f48756ad2893 (77.7% over three seeds; 0.83x the 0.235 ms anchor, 0.58x the 0.326 ms one), the
winner of the ``mobile_cifar_res`` study with a latency floor, more accurate than either target's own earlier
winner (7f2ce65cf905, 75.4% at 0.79x; bad3ca6572c2, 76.4% at 0.77x); at 0.689 ms 1a19d4c01584, the winner of
the 0.326 ms study with a costlier first rung (77.8% over three seeds); all members of ``cifar``. A change
to the start or to :data:`SEARCH` makes the search step search again;
rename the recorded search first to keep it as a study (``search-0.326ms-start1.json``: the first start).
Searches of another space (``--quick``'s) start from random members."""


def _start(size: dict[str, Any], width: float) -> list[str]:
    """The start of a search of ``size`` at the target of anchor width ``width``: :data:`START`'s in the
    comparison's space, none in another.

    Raises:
        SystemExit: a target of the comparison's space that :data:`START` has no start for yet (a target of
            :data:`FRONTS_WIDTHS` before its front is trained), naming what to run first.
    """
    if size["space"] != SEARCH["space"]:
        return []
    if width not in START:
        raise SystemExit(f"cifar10_deploy: the target of MobileNetV2 x{width:g} has no start yet: train its front "
                         "first (python -m benchmarks.search.cifar10_fronts --cifar10 ... --step train), then name "
                         "its most accurate CIFAR ResNet (and the best network searched near it) in START")
    return START[width]


def _first_rung(text: str, top: dict[str, int]) -> dict[str, int] | None:
    """``IMAGESxEPOCHS`` (``20000x5``) as a rung cheaper than ``top``; None when it is not one."""
    parts = text.lower().split("x")
    if len(parts) != 2 or not all(p.isdigit() for p in parts):
        return None
    images, epochs = int(parts[0]), int(parts[1])
    if not (0 < images <= top["train_images"] and 0 < epochs <= top["epochs"]) or (images, epochs) == (
            top["train_images"], top["epochs"]):
        return None
    return {"train_images": images, "epochs": epochs}


def _other_first_rung(size: dict[str, Any]) -> dict[str, int] | None:
    """The first rung of a search of the comparison's space that differs from :data:`SEARCH`'s; None otherwise."""
    first: dict[str, int] = size["rungs"][0]
    return first if size.get("space") == SEARCH["space"] and first != SEARCH["rungs"][0] else None


def _rungs_override(rungs: list[dict[str, int]]) -> str:
    items = ",".join(f"{{train_images:{r['train_images']},epochs:{r['epochs']}}}" for r in rungs)
    return f"search.rungs=[{items}]"


def _overrides(size: dict[str, Any]) -> list[str]:
    fill = size.get("fill_mutate_after")  # absent: the first population drawn uniformly (the control's)
    precision = ([f"latency.precision={size['precision']}", f"accuracy.calibration_samples={INT8_CALIBRATION}"]
                 if size.get("precision", "fp32") != "fp32" else [])  # timed and scored at that precision
    return ([f"search.{key}={size[key]:g}" for key in ("latency_screen", "latency_floor") if size.get(key)]
            + [f"search.fill_mutate_after={'null' if fill is None else fill}", *precision])


def _search_label(target_ms: float, size: dict[str, Any]) -> str:
    """The name of a search's record (``search-0.235ms``; with a latency floor, ``search-0.235ms-floor0.6``;
    with another number of candidates, ``search-0.235ms-n16``; with another first rung, ``search-0.235ms-r20000x5``;
    random search's control,
    ``search-0.235ms-random``). Records of earlier settings are kept beside them as studies, renamed
    (``search-0.235ms-uniform.json``)."""
    floor = size.get("latency_floor")
    longer = size["n_trials"] != SEARCH["n_trials"] and size["space"] == SEARCH["space"]
    first = _other_first_rung(size)
    rung = f"-r{first['train_images']}x{first['epochs']}" if first else ""
    return (f"search-{target_ms:g}ms" + (f"-{size['precision']}" if size.get("precision", "fp32") != "fp32" else "")
            + (f"-floor{floor:g}" if floor else "") + (f"-n{size['n_trials']}" if longer else "") + rung
            + ("-random" if size.get("control") == "random" else ""))


def random_control(size: dict[str, Any]) -> dict[str, Any]:
    """Random search at the cost of the search ``size`` (Li and Talwalkar 2019): the same space, rungs, number of
    candidates, start, latency screen and training seeds, but every proposal a uniform draw from the space.
    Regularised evolution draws uniformly until its population is full, so a population as large as the whole
    budget, filled by uniform draws only (no ``fill_mutate_after``), never mutates: the proposals pass the same
    screen as the search's, and only the sampler differs."""
    uniform = {k: v for k, v in size.items() if k != "fill_mutate_after"}
    return {**uniform, "population_size": max(2, size["n_trials"]), "tournament_size": 1, "control": "random"}


def _start_names(start: list[str]) -> list[str]:
    """A search's start as the report names it: a reference by its name, a network by its id."""
    return [s if not s.startswith("act_") else Arch.decode(s).arch_id for s in start]


def _width_of(study: dict[str, Any]) -> float:
    """The anchor width of a recorded search (``mobilenetv2_100@0.5``: 0.5)."""
    return float(study["target_anchor"].rsplit("@", 1)[1])


def _study_role(study: dict[str, Any]) -> str:
    """How the report names a recorded search that is not the comparison's: its target, size and floor."""
    size = study["settings"]
    floor = size.get("latency_floor")
    return (f"searched at {study['target_ms']:g} ms, {size['n_trials']} candidates"
            + (f", space {size['space']}" if size.get("space") != SEARCH["space"] else "")
            + (f", latency floor {floor:g}" if floor else "")
            + (f", first rung {first['train_images']:,} x {first['epochs']}" if (first := _other_first_rung(size))
               else "")
            + (", first population drawn uniformly only" if "fill_mutate_after" not in size
               and size.get("control") != "random" else "")
            + (f", started from {', '.join(_start_names(study['start']))}"
               if study.get("start") and study["start"] != START.get(_width_of(study), []) else "")
            + (", random proposals (the control)" if size.get("control") == "random" else "") + " (a study)")


def search_overrides(archive: Path, anchor_width: float, start: list[str], size: dict[str, Any], state_dir: Path,
                     name: str, resume: bool) -> list[str]:
    """The ``nas.search`` settings of the search ``size`` called ``name``, at the target of MobileNetV2 at
    ``anchor_width``, from ``start``, recorded under ``state_dir``."""
    store = state_dir / "search" / "mlflow.db"
    return [
        f"+space={size['space']}", f"target_anchor=mobilenetv2_100@{anchor_width:g}",
        "latency.input_shape=[1,3,32,32]", "data=cifar10_jpeg",
        f"data.path={archive}", "data.max_train_samples=null", "data.max_val_samples=null",
        "search.scheduler=asha", f"search.sampler={size['sampler']}",
        f"search.population_size={size['population_size']}", f"search.tournament_size={size['tournament_size']}",
        "search.start=[" + ",".join(f"'{a}'" for a in start) + "]",
        f"search.reduction_factor={size['reduction_factor']}",
        f"search.n_trials={size['n_trials']}", f"search.max_concurrent={size['max_concurrent']}",
        _rungs_override(size["rungs"]), *_overrides(size), "train.device=cpu", f"tracking.uri=sqlite:///{store}",
        f"output_dir={state_dir / 'search' / name}", "progress=false", f"name={name}", f"resume={str(resume).lower()}",
    ]


def step_search(archive: Path, target_ms: float, anchor_width: float, start: list[str], size: dict[str, Any],
                state_dir: Path, log: Callable[[str], None]) -> dict[str, Any]:
    """LatNAS's multi-fidelity search at the target of ``target_ms`` from ``start`` (resumed where a run of it
    stopped). The target is relative (``target_anchor``): no slower than MobileNetV2 at ``anchor_width``,
    measured beside each candidate. Two trainings share the two cores while candidates are timed, which
    inflates every figure alike (benchmarks/search/cifar10_deploy.md), so milliseconds against ``target_ms``
    would call nearly every candidate too slow; the ratio to the anchor timed at the same moment does not
    move with the load. The search's leaderboard (every candidate with its rung, accuracy and ``x_anchor``)
    is copied beside the step's record as ``search-<target>ms-leaderboard.csv`` (``-floor<F>`` before
    ``-leaderboard`` with a latency floor)."""
    from nas.cli import compose_search_config
    from nas.core.record import trials_seconds
    from nas.driver import run_search

    settings = hashlib.sha1(json.dumps([size, start], sort_keys=True).encode()).hexdigest()[:8]
    name = f"cifar10-deploy-{target_ms:g}ms-{settings}"  # other settings or start: another search
    started = state_dir / "search" / f"{name}.started"  # the search is recorded: a later part resumes it
    resume = started.exists()
    started.parent.mkdir(parents=True, exist_ok=True)
    cfg = compose_search_config(*search_overrides(archive, anchor_width, start, size, state_dir, name, resume))
    started.touch()
    result = run_search(cfg)
    if result.status == "KILLED":  # interrupted: what ended is recorded, and the same command resumes it
        raise SystemExit(f"the search at {target_ms:g} ms was interrupted: run the same command again to resume it")
    if result.best is None:
        raise RuntimeError(f"the search at {target_ms:g} ms completed no candidate")
    best = result.best
    top = [c for c in result.candidates if c.completed and c.rung == best.rung]
    trials = trials_seconds(result.candidates)  # every part's trials; wall_seconds is the last part's
    board = state_dir / f"{_search_label(target_ms, size)}-leaderboard.csv"
    shutil.copyfile(result.output_dir / "leaderboard.csv", board)
    log(f"  search at {target_ms:.3f} ms: {len(result.candidates)} candidates, their trials "
        f"{trials:.0f} s in all ({size['max_concurrent']} at a time); best "
        f"{best.arch_id} at rung {best.rung_label}, accuracy {best.accuracy:.4f}, {best.x_anchor:.2f}x the anchor")
    return {
        "target_ms": target_ms, "target_anchor": f"mobilenetv2_100@{anchor_width:g}", "arch": best.arch,
        "arch_id": best.arch_id, "rung": best.rung_label, "search_accuracy": best.accuracy,
        "search_latency_ms": best.latency_p50, "search_x_anchor": best.x_anchor,
        "candidates": len(result.candidates), "wall_seconds": result.wall_seconds,
        "trials_seconds": trials,
        "per_rung": {str(k): sum(c.rung >= k for c in result.candidates) for k in range(len(size["rungs"]))},
        "top_rung": [{"arch_id": c.arch_id, "accuracy": c.accuracy, "latency_ms": c.latency_p50,
                      "x_anchor": c.x_anchor} for c in top],
        "settings": size, "start": start,
    }


ROUNDS = 5
"""Rounds of the report's paired latency pass (each network, then its target's anchor)."""
GOAL_POINTS = 1.0
GOAL_ACCURACY = 0.65


def _network(name: str, multiplier: float | None, arch: str) -> dict[str, Any]:
    return {"name": name if multiplier is None else f"{name} x{multiplier:g}", "network": name,
            "multiplier": multiplier, "arch": arch}


def goal(target: dict[str, Any]) -> dict[str, Any]:
    """The goal at one target: the searched network at least :data:`GOAL_POINTS` more accurate (medians)
    than every reference that meets the target and is no faster than it, the seed ranges apart, and at
    :data:`GOAL_ACCURACY` or more."""
    s = next(c for c in target["candidates"] if c["name"] == "searched")
    rows = []
    for c in target["candidates"]:
        if c is s or not c["meets_target"] or c["latency_ratio"] < s["latency_ratio"]:
            continue  # faster than the searched network, or missing the target: not in the goal
        d = 100 * (s["accuracy"]["median"] - c["accuracy"]["median"])
        apart = s["accuracy"]["min"] > c["accuracy"]["max"]
        rows.append({"reference": c["name"], "points": d, "apart": apart, "met": d >= GOAL_POINTS and apart})
    met = s["accuracy"]["median"] >= GOAL_ACCURACY and all(r["met"] for r in rows)
    return {"met": met, "against": rows, "searched_median": s["accuracy"]["median"]}


def _onnx_accuracy(path: Path, data: Any) -> float:
    """Top-1 accuracy of an exported ``model.onnx`` on the carved validation split (the images as the
    training normalised them), one image at a time as it is deployed."""
    import numpy as np
    import onnxruntime as ort

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    name = session.get_inputs()[0].name
    correct, n = 0, 0
    for xb, y in data.val_batches(256, torch.device("cpu")):
        x = data.normalise(xb).numpy()
        out = np.concatenate([session.run(None, {name: x[i : i + 1]})[0] for i in range(len(x))])
        correct += int((out.argmax(1) == y.numpy()).sum())
        n += len(y)
    return correct / n


def export_network(folder: Path, network: str, arch: Arch, target_ms: float, state_dir: Path, budget: dict[str, int],
                   data: Any, latency_ms: float, x_anchor: float, timed: str) -> dict[str, Any]:
    """Commit one trained network (seed 0) under ``folder``: its fused ``model.onnx``, scored again on the
    validation split (one image at a time, as deployed; it must agree with the training's figure within half
    a point), and ``arch.json`` (what it is, how it was trained, its latency ratio and how that was ``timed``,
    the preprocessing a user applies). Returns the ``arch.json``'s content."""
    run = json.loads((state_dir / f"{training_key(arch, 0, budget)}.json").read_text())
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(state_dir / f"{training_key(arch, 0, budget)}.onnx", folder / "model.onnx")
    onnx_acc = _onnx_accuracy(folder / "model.onnx", data)
    if abs(onnx_acc - run["accuracy"]) > 0.005:
        raise RuntimeError(f"{network}: model.onnx scores {onnx_acc:.4f} on the validation split, the "
                           f"training recorded {run['accuracy']:.4f}")
    info = {"network": network, "arch": arch.encode(), "arch_id": arch.arch_id, "target_ms": target_ms,
            "train_images": budget["train_images"], "epochs": budget["epochs"], "seed": 0,
            "validation_accuracy": run["accuracy"], "onnx_validation_accuracy": onnx_acc,
            "validation_images": run["val_images"], "latency_p50_ms": latency_ms,
            "x_anchor": x_anchor, "x_anchor_timed": timed, "input_shape": list(SHAPE), "classes": run["classes"],
            "preprocessing": {"scale": 1 / 255, "mean": run["mean"], "std": run["std"],
                              "resolution": 32, "formula": "(rgb_uint8 / 255 - mean) / std, per channel"},
            "recipe": run["recipe"],
            "load": "onnxruntime.InferenceSession('model.onnx'); or "
                    "search_spaces.build(Arch.decode(arch), num_classes=10)"}
    (folder / "arch.json").write_text(json.dumps(info, indent=2) + "\n")
    return info


def _trained(state_dir: Path, budget: dict[str, int]) -> list[dict[str, Any]]:
    """Every network trained at ``budget`` under ``state_dir`` (the comparison's, earlier searches' winners and
    those of ``--step train``), with each seed's accuracy: what the space holds near the targets."""
    runs: dict[str, list[dict[str, Any]]] = {}
    for path in sorted(state_dir.glob(f"*-seed*-{budget['train_images']}x{budget['epochs']}.json")):
        run = json.loads(path.read_text())
        runs.setdefault(run["arch"], []).append(run)
    out = []
    for arch, rs in runs.items():
        rs.sort(key=lambda r: r["seed"])
        accs = [r["accuracy"] for r in rs]
        out.append({"arch": arch, "arch_id": rs[0]["arch_id"], "seeds": [r["seed"] for r in rs],
                    "accuracy": {**spread(accs), "values": accs}})
    return out


def step_report(archive: Path, budget: dict[str, int], size: dict[str, Any], state_dir: Path, export_dir: Path,
                log: Callable[[str], None]) -> dict[str, Any]:
    """The paired latency pass, the comparison against the goal, and the committed networks (seed 0).
    Every target's search must have been run with ``size`` and the target's :data:`START`."""
    import numpy as np

    widths = _read_step(state_dir, "widths", "widths")
    est = _estimator()

    def measure(arch: Arch) -> float:
        return float(est.measure(arch).latency_ms)

    data = load_dataset(data_config(archive))
    trained = _trained(state_dir, budget)
    comparison = {f"{_search_label(t['target_ms'], size)}.json" for t in widths["targets"]}
    for path in sorted(state_dir.glob("search-*ms*.json")):  # the studies beside the comparison
        if path.name in comparison:
            continue
        study = json.loads(path.read_text())
        for r in trained:
            if r["arch"] == study["arch"]:
                r.setdefault("roles", []).append(_study_role(study))
    targets = []
    for t in _compared(widths):
        found = _read_step(state_dir, _search_label(t["target_ms"], size), "search")
        if not _searched_with(found, size, t):
            raise SystemExit(f"cifar10_deploy: the search at {t['target_ms']:g} ms was run with other settings "
                             "or another start: run --step search again")
        nets = [{**_network("searched", None, found["arch"]), "search": {k: v for k, v in found.items()
                                                                          if k != "arch"}}]
        nets += [{**_network(r["name"], r["multiplier"], r["arch"]), "ratio_at_choice": r["ratio_at_choice"]}
                 for r in t["references"] if r["meets"]]
        anchor = Arch.decode(t["anchor_arch"])
        archs = list(dict.fromkeys([anchor, *(Arch.decode(c["arch"]) for c in nets),
                                    *(Arch.decode(r["arch"]) for r in trained)]))
        final = paired_ratios(archs, anchor, measure, ROUNDS)
        for r in trained:
            r.setdefault("roles", [])
            r["roles"] += [f"{c['name']} at {t['target_ms']:g} ms" for c in nets if c["arch"] == r["arch"]]
            r.setdefault("x_anchor", {})[f"{t['target_ms']:g}"] = final[Arch.decode(r["arch"])].ratio
        missing = [n for n in nets for seed in range(budget["seeds"])
                   if not (state_dir / f"{training_key(Arch.decode(n['arch']), seed, budget)}.json").exists()]
        if missing:
            raise SystemExit(f"cifar10_deploy: {len(missing)} trainings at {t['target_ms']:g} ms are missing "
                             f"(e.g. {missing[0]['name']}): run --step references and --step search first")
        for c in nets:
            a = Arch.decode(c["arch"])
            runs = [json.loads((state_dir / f"{training_key(a, s, budget)}.json").read_text())
                    for s in range(budget["seeds"])]
            accs = [r["accuracy"] for r in runs]
            with torch.device("meta"):
                c["params_m"] = sum(p.numel() for p in build(a, num_classes=10).parameters()) / 1e6
            c.update(latency_ms=final[a].latency_ms, latency_ratio=final[a].ratio, meets_target=final[a].meets,
                     accuracy={**spread(accs), "values": accs},
                     train_seconds=float(np.median([r["seconds"] for r in runs])))
            label = c["network"] + ("" if c["multiplier"] is None else f"-x{c['multiplier']:g}")
            folder = export_dir / f"{t['target_ms']:g}ms-{label}"
            export_network(folder, c["network"] if c["multiplier"] is None else f"{c['network']}@{c['multiplier']:g}",
                           a, t["target_ms"], state_dir, budget, data, c["latency_ms"], c["latency_ratio"],
                           f"the report's paired pass, {ROUNDS} rounds beside the anchor")
            c["export_folder"] = str(folder.relative_to(ROOT)) if folder.is_relative_to(ROOT) else str(folder)
            log(f"  target {t['target_ms']:.3f} ms: {c['name']:<22} {c['latency_ms']:.3f} ms "
                f"({c['latency_ratio']:.2f}x), accuracy median {np.median(accs):.4f} ({min(accs):.4f}-{max(accs):.4f})")
        entry = {"target_ms": t["target_ms"], "anchor": t["anchor"], "anchor_final_ms": final[anchor].latency_ms,
                 "candidates": nets, "not_meeting": [r["name"] + f" x{r['multiplier']:g}" for r in t["references"]
                                                     if not r["meets"]]}
        entry["goal"] = goal(entry)
        targets.append(entry)
    return {"dataset": "cifar10", "targets": targets, "trained": trained, "budget": budget, "rounds": ROUNDS,
            "val_images": data.n_val, "widths_measured": widths["measured"],
            "goal": {"points": GOAL_POINTS, "accuracy": GOAL_ACCURACY}}


def headline(rec: dict[str, Any]) -> Headline:
    """The record's row of the results table: the searched network against the references at each target."""
    f = rec["figures"]
    figure, against = [], []
    for t in f["targets"]:
        s = next(c for c in t["candidates"] if c["name"] == "searched")
        figure.append(f"{100 * s['accuracy']['median']:.1f}% at {s['latency_ratio']:.2f}x {t['anchor']} "
                      f"(median of {s['accuracy']['n']} seeds)")
        against.append(", ".join(f"{c['name']} {100 * c['accuracy']['median']:.1f}%"
                                 for c in t["candidates"] if c is not s))
    return Headline(
        "Searched vs hand-designed networks, CIFAR-10 at the deployment budget",
        "searched: " + "; ".join(figure),
        "; ".join(against) + " (width-scaled to each target, trained the same way)",
        f">= {f['goal']['points']:g} point more accurate than every reference no faster, seed ranges apart, "
        f">= {100 * f['goal']['accuracy']:.0f}%, at each target", all(t["goal"]["met"] for t in f["targets"]))


def render(rec: dict[str, Any]) -> str:
    """The section of a record of this benchmark on its area's page (docs/benchmarks/<area>.md)."""
    from benchmarks.render import _f, _pct, comparison_lines, table

    f = rec["figures"]
    b = f["budget"]
    rows = [[f"{t['target_ms']:g}", c["name"], _f(c["latency_ms"], 3), _f(c["latency_ratio"], 2),
             "yes" if c["meets_target"] else "no", _f(c.get("params_m"), 2),
             f"{_pct(c['accuracy']['median'])} ({_pct(c['accuracy']['min'])} - {_pct(c['accuracy']['max'])})"]
            for t in f["targets"] for c in t["candidates"]]
    goals = []
    for t in f["targets"]:
        g = t["goal"]
        against = "; ".join(f"{r['reference']} {r['points']:+.1f} points ({'apart' if r['apart'] else 'overlap'})"
                            for r in g["against"]) or "no reference meets the target no faster than it"
        goals.append(f"- at {t['target_ms']:g} ms: **{'met' if g['met'] else 'not met'}** (searched "
                     f"{_pct(g['searched_median'])}; {against})")
    found = f["targets"][0]["candidates"][0]["search"]
    search = found["settings"]
    start = "started from the references' shapes" if found.get("start", True) else "started from random members"
    if search.get("latency_screen"):
        start += f", proposals over {search['latency_screen']:g}x the target not trained"
    rungs = ", ".join(f"{r['train_images']:,} x {r['epochs']}" for r in search["rungs"])
    lines = "\n".join(f"- {line}" for line in comparison_lines(f["targets"]))
    keys = [f"{t['target_ms']:g}" for t in f["targets"]]
    held = [[f"`{r['arch_id']}`", "; ".join(r["roles"]) or "-", *(_f(r["x_anchor"][k], 2) for k in keys),
             str(len(r["seeds"])),
             f"{_pct(r['accuracy']['median'])} ({', '.join(_pct(a) for a in r['accuracy']['values'])})"]
            for r in sorted(f.get("trained", []), key=lambda r: -r["accuracy"]["median"])]
    held_table = table(["network", "in the comparison", *(f"x anchor at {k} ms" for k in keys), "seeds",
                        "accuracy median (each seed)"], held)
    exports = ", ".join(f"`{c['export_folder']}`" for t in f["targets"] for c in t["candidates"])
    missing = "; ".join(f"at {t['target_ms']:g} ms, {', '.join(t['not_meeting'])}" for t in f["targets"]
                        if t["not_meeting"])
    missing = (f"A reference that misses its target at the narrowest width tried is not trained: {missing}."
               if missing else "Every reference meets both targets at some width.")
    anchors = " and ".join(f"{t['anchor']} {t['anchor_final_ms']:.3f} ms (target {t['target_ms']:g} ms)"
                           for t in f["targets"])
    return f"""Searched against hand-designed networks at the budget a network is deployed with. Targets: the
latencies of MobileNetV2 (32x32 layout) at widths 0.35 and 0.5 on this CPU (ONNX Runtime, 1 thread,
1x3x32x32). LatNAS's multi-fidelity search of `{search.get('space', 'mobile_cifar')}` ({search['n_trials']} candidates,
{search.get('sampler', 'tpe')} {start}, rungs {rungs} images x epochs, ASHA reduction factor
{search['reduction_factor']}) against MobileNetV2,
MnasNet-B1 and EfficientNet-B0 width-scaled to each target. Every network trained from scratch with
the same recipe at {b['train_images']:,} images x {b['epochs']} epochs, {b['seeds']} seeds, validated on
the {f['val_images']:,} images carved from the training split (the JPEG copy of CIFAR-10: close to, not
identical with, published figures); accuracy median (min - max). Latency: the median of {f['rounds']}
paired rounds at the end, each network then its target's anchor; *x anchor* is the median ratio.
A target is named by its anchor's latency when the widths were chosen ({f['widths_measured'][:10]}); in
the final pass the anchors measured {anchors}. Milliseconds move with the machine; the ratios decide.
{missing}

{table(["target ms", "network", "latency ms", "x anchor", "meets", "params M", "accuracy"], rows)}

Goal: the searched network at least {f['goal']['points']:g} point more accurate than every reference that
meets the target and is no faster than it, the seed ranges apart, at {_pct(f['goal']['accuracy'])} or more:

{chr(10).join(goals)}

{lines}

Every network trained at {b['train_images']:,} x {b['epochs']}: the comparison's, earlier searches' winners and
members of the space trained by `--step train`, timed in the same paired pass (their strings are in
`benchmarks/search/records/cifar10_deploy/<id>-seed0-{b['train_images']}x{b['epochs']}.json`). What the space holds
near the targets, whichever network a search picks:

{held_table}

The trained networks (seed 0: `model.onnx`, Conv+BN fused, scored again on the validation split; and
`arch.json`) are in {exports}."""


def _anchor_width(target: dict[str, Any]) -> float:
    """The width of a target's anchor (``mobilenetv2_100 x0.35``: 0.35), the key of :data:`START`."""
    return float(target["anchor"].rsplit("x", 1)[1])


def _searched_with(found: dict[str, Any], size: dict[str, Any], target: dict[str, Any]) -> bool:
    """Whether a recorded search at ``target`` ran with ``size`` and the target's :data:`START` (a record
    from before starts were recorded has none: another start)."""
    return (found["settings"], found.get("start")) == (size, _start(size, _anchor_width(target)))


def _reference_archs(widths: dict[str, Any]) -> list[Arch]:
    """The networks the comparison trains besides the searched ones: every reference that meets a target,
    and the targets' anchors (duplicates are trained once)."""
    archs = [Arch.decode(r["arch"]) for t in _compared(widths) for r in t["references"] if r["meets"]]
    return archs + [Arch.decode(t["anchor_arch"]) for t in _compared(widths)]


def _read_step(state_dir: Path, name: str, run_first: str) -> dict[str, Any]:
    path = state_dir / f"{name}.json"
    if not path.exists():
        shown = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
        raise SystemExit(f"cifar10_deploy: {shown} is missing: run --step {run_first} first")
    result: dict[str, Any] = json.loads(path.read_text())
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.search.cifar10_deploy",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--cifar10", type=Path, required=True, help="the CIFAR-10 training-image archive")
    parser.add_argument("--step", choices=("widths", "references", "search", "train", "report"), required=True)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--state-dir", type=Path, default=None,
                        help="where the steps save and resume (default: the committed records; with --quick a "
                             "scratch folder); another folder also takes the report's exports and record, so a "
                             "run from nothing can be timed without touching the committed ones")
    parser.add_argument("--quick", action="store_true", help="a tiny budget, state in a scratch folder")
    parser.add_argument("--target", type=float, default=None,
                        help="search step: only the target of this many ms (as widths.json rounds it), "
                             "so the step may run in parts; default every target of the width-scaled comparison "
                             "(a target of FRONTS_WIDTHS is searched by name only)")
    parser.add_argument("--latency-floor", type=float, default=None,
                        help="search step: a study beside the comparison: the same search with "
                             "search.latency_floor=F, recorded as search-<target>ms-floor<F>.json; its winner is "
                             "trained like the others (the report's comparison keeps the search without a floor)")
    parser.add_argument("--trials", type=int, default=None,
                        help="search step: a study beside the comparison: the same search with N candidates, "
                             "recorded as search-<target>ms-n<N>.json (with --latency-floor, -floor<F>-n<N>); "
                             "its winner is trained like the others")
    parser.add_argument("--first-rung", default=None, metavar="IMAGESxEPOCHS",
                        help="search step: a study beside the comparison: the same search with this first rung "
                             "(e.g. 20000x5), recorded as search-<target>ms-r<IMAGES>x<EPOCHS>.json; its winner is "
                             "trained like the others")
    parser.add_argument("--control", action="store_true",
                        help="search step: random search at the same cost (same space, rungs, candidates, start and "
                             "screen; uniform proposals), recorded as search-<target>ms-random.json; its winner is "
                             "trained like the others")
    parser.add_argument("--arch", action="append", default=[],
                        help="train step: a member of the search's space (its canonical string); may repeat")
    parser.add_argument("--seeds", type=int, default=None,
                        help="train step: train seeds 0 to N-1 (default: the budget's, 3)")
    parser.add_argument("--recipe", choices=sorted(RECIPES), default=None,
                        help="train step: train with this recipe instead of the comparison's (RECIPES), saved under "
                             "its own name beside the others: a check that a verdict holds under another recipe")
    parser.add_argument("--probe", action="store_true",
                        help="train step: the networks of --arch may lie outside the search's space (a probe of a "
                             "choice the space lacks, before the space gains it); kept beside the others")
    args = parser.parse_args(argv)
    if args.control and args.step != "search":
        parser.error("--control: random search's control is a search: use it with --step search")
    if args.latency_floor is not None and (args.step != "search" or not 0 < args.latency_floor < 1):
        parser.error(f"--latency-floor {args.latency_floor:g}: a share of the target between 0 and 1, "
                     "for --step search")
    if args.trials is not None and (args.step != "search" or args.trials < 2):
        parser.error(f"--trials {args.trials}: at least 2 candidates (the start and one more), for --step search")
    first_rung = None
    if args.first_rung is not None:
        top = (QUICK_SEARCH if args.quick else SEARCH)["rungs"][-1]
        first_rung = _first_rung(args.first_rung, top)
        if args.step != "search" or first_rung is None:
            parser.error(f"--first-rung {args.first_rung}: IMAGESxEPOCHS (e.g. 20000x5), at most the top rung's "
                         f"{top['train_images']} images and {top['epochs']} epochs and not both, for --step search")
    if args.step == "train":
        if not args.arch:
            parser.error("--step train: name the networks with --arch")
        if args.seeds is not None and args.seeds < 1:
            parser.error(f"--seeds {args.seeds}: must be at least 1")
        space = load_space(str((QUICK_SEARCH if args.quick else SEARCH)["space"]))
        archs = []
        for text in args.arch:
            try:
                archs.append(Arch.decode(text) if args.probe else space.decode(text))
            except SearchSpaceError as e:
                parser.error(f"--arch {text}: {e}" + ("" if args.probe else " (a network outside the space: --probe)"))
    elif args.probe:
        parser.error("--probe: trains networks outside the search's space, for --step train")
    elif args.recipe is not None:
        parser.error(f"--recipe {args.recipe}: trains networks with another recipe, for --step train")
    if not args.cifar10.is_file():
        parser.error(f"--cifar10 {args.cifar10}: no such file")
    # Every training here is on the CPU, as a search's trials train there: channels-last, with oneDNN held
    # at AVX2 for the whole process (it reads the cap once); latency is ONNX Runtime's, which the cap leaves alone.
    os.environ.update(trial_environment(TrainConfig(device="cpu"), False))  # empty where the user set the cap
    budget = QUICK_BUDGET if args.quick else BUDGET
    default_dir = STATE_DIR if not args.quick else Path("/tmp/latnas-cifar10-deploy-quick")
    state_dir = args.state_dir.resolve() if args.state_dir is not None else default_dir
    apart = args.quick or state_dir != STATE_DIR  # exports and the record stay beside the state
    state_dir.mkdir(parents=True, exist_ok=True)

    def log(line: str) -> None:
        print(line, flush=True)

    if args.step == "widths":
        saved = state_dir / "widths.json"
        widths = step_widths(log, json.loads(saved.read_text()) if saved.exists() else None)
        (state_dir / "widths.json").write_text(json.dumps(widths, indent=2) + "\n")
        log(f"  saved {state_dir / 'widths.json'}")
    elif args.step == "references":
        widths = _read_step(state_dir, "widths", "widths")
        train_all(_reference_archs(widths), args.cifar10, budget, args.workers, state_dir, log)
    elif args.step == "search":
        widths = _read_step(state_dir, "widths", "widths")
        size = QUICK_SEARCH if args.quick else SEARCH
        if args.latency_floor is not None:
            size = {**size, "latency_floor": args.latency_floor}
        if args.trials is not None:
            size = {**size, "n_trials": args.trials}
        if first_rung is not None:
            size = {**size, "rungs": [first_rung, *size["rungs"][1:]]}
        if args.control:
            size = random_control(size)
        winners = []
        targets = (_compared(widths) if args.target is None  # a target of FRONTS_WIDTHS is searched by name
                   else [t for t in widths["targets"] if round(t["target_ms"], 3) == args.target])
        if not targets:
            known = ", ".join(f"{t['target_ms']:.3f}" for t in widths["targets"])
            parser.error(f"--target {args.target:g}: not a target of widths.json ({known})")
        for t in targets:  # the searches, then every winner's trainings (the pool kept full)
            path = state_dir / f"{_search_label(t['target_ms'], size)}.json"
            width = _anchor_width(t)
            found = json.loads(path.read_text()) if path.exists() else None
            if found is not None and not _searched_with(found, size, t):
                log(f"  {path.name} was searched with other settings or another start: searching again")
                found = None
            if found is None:
                found = step_search(args.cifar10, t["target_ms"], width, _start(size, width), size, state_dir, log)
                path.write_text(json.dumps(found, indent=2) + "\n")
            winners.append(Arch.decode(found["arch"]))
        # The references' trainings not yet saved share the pool with the winners' (no worker waits alone
        # between two steps), first: theirs are the longest (many thin layers), and the winners' shorter ones
        # fill the end. A part that searches one target, or a study, trains its winner only.
        partial = (args.target is not None or args.latency_floor is not None or args.trials is not None
                   or first_rung is not None or args.control)
        refs = [] if partial else _reference_archs(widths)
        train_all([*refs, *winners], args.cifar10, budget, args.workers, state_dir, log)
    elif args.step == "train":
        seeds = budget["seeds"] if args.seeds is None else args.seeds
        train_all(archs, args.cifar10, {**budget, "seeds": seeds}, args.workers, state_dir, log, recipe=args.recipe)
    elif args.step == "report":
        t0 = time.perf_counter()
        export_dir = EXPORT_DIR if not apart else state_dir / "exports"
        figures = step_report(args.cifar10, budget, QUICK_SEARCH if args.quick else SEARCH, state_dir, export_dir, log)
        mode = "quick" if args.quick else "full"
        rec = {**header("cifar10_deploy", mode, command_line(["--cifar10", "DIR/cifar10-train-jpeg.tar.gz",
                                                              "--step", "report"])),
               "figures": figures, "wall_seconds": time.perf_counter() - t0}
        rec["command"] = "python -m benchmarks.search.cifar10_deploy --cifar10 DIR/cifar10-train-jpeg.tar.gz --step " \
                         "widths|references|search|report"
        path = write_record(record_path("cifar10_deploy", mode, state_dir if apart else None), rec)
        log(f"  record: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
