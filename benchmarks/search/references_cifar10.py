"""Searched vs hand-designed networks on CIFAR-10, at two latency targets on this machine.

Latency: ONNX Runtime on the CPU, one thread, at CIFAR's deployment shape 1x3x32x32, every
network measured in this run with the same protocol. The targets are the measured latencies of
MobileNetV2 (in its 32x32 layout: :func:`search_spaces.references.small_input_variant`) at width
0.35 and 0.5 (rounded up to the microsecond), so they follow this machine's speed; that network is
the target's *anchor*. This host's speed moves between levels about 2x apart within seconds, so a
network is never judged by one absolute figure against a target set minutes before: it is measured
back to back with the anchor in several rounds, and judged by the median of its ratios to the anchor
(:func:`paired_ratios`; at most 1 meets the target). The widths are chosen that way at the start
(:data:`SCALE_ROUNDS` rounds), and every network of the comparison is measured that way again at the
end (:data:`ROUNDS` rounds): the latency column and the "meets" verdicts come from that end pass.

* **searched**: LatNAS itself at each target: ``python -m nas.search +space=mobile_cifar
  target_ms=<t> latency.input_shape=[1,3,32,32] data=cifar10_jpeg ...`` with its default cheap
  accuracy estimate on CIFAR-10 (brief training on a subset), ``search_n`` candidates; the
  best-rewarded candidate is kept.
* **hand-designed**: MobileNetV2, EfficientNet-B0 and MnasNet-B1 in their 32x32 layouts, each
  width-scaled to the largest multiplier whose latency relative to the anchor meets the target (the
  smallest tried when none does, which the section says).

Every network is then trained with the same recipe and budget (``train_samples`` images for
``epochs`` epochs, the ``train`` group's defaults) with several weight seeds, and validated on
the same images carved from the training split. One seed of each is exported to
``benchmarks/cifar10/<target>-<network>/`` (``model.onnx``, Conv+BN fused and checked against
PyTorch, and ``arch.json`` with the preprocessing), so anyone can evaluate and time them on the
real CIFAR-10 test split.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from benchmarks.common import ROOT, spread
from benchmarks.render import comparison_lines
from latency_predictor.measurement.backends import make_estimator
from latency_predictor.measurement.export import INPUT_NAME, OUTPUT_NAME, export_onnx
from latency_predictor.measurement.paired import alternate
from latency_predictor.measurement.timing import MeasureConfig
from nas.accuracy.training import train_briefly
from nas.core.config import DataConfig, TrainConfig
from nas.data import load_dataset
from nas.deploy.fuse import fuse_conv_bn
from nas.runtime.workers import in_workers
from search_spaces import REFERENCES, Arch, build, count_macs, count_params, reference
from search_spaces.references import MULTIPLIERS, scale_width, small_input_variant

SHAPE = (1, 3, 32, 32)
EXPORT_DIR = ROOT / "benchmarks" / "cifar10"
# Sized for 90 minutes on 2 cores: a run with 10,000 images and targets at widths 0.5 and 0.75 was
# still training after 78 minutes (the wider references cost up to 5x a searched network to train);
# one with 24 candidates and 6,000 images took 82 minutes before the paired latency rounds (about
# 8 minutes more) were added, and this host then ran at its slow level for long stretches.
FULL = {"search_n": 16, "train_samples": 4000, "epochs": 5, "seeds": 3, "val": 2000}
QUICK = {"search_n": 4, "train_samples": 500, "epochs": 1, "seeds": 1, "val": 300}
TARGET_WIDTHS = (0.35, 0.5)
SCALE_ROUNDS = 3
"""Rounds of paired measurement (network, then its anchor) behind each width choice."""
ROUNDS = 5
"""Rounds of the final paired measurement of every network in the comparison."""


@dataclasses.dataclass(frozen=True)
class Paired:
    """A network measured back to back with an anchor: medians over the rounds."""

    latency_ms: float
    ratio: float
    ratios: tuple[float, ...]

    @property
    def meets(self) -> bool:
        return self.ratio <= 1.0


def paired_ratios(archs: list[Arch], anchor: Arch, measure: Callable[[Arch], float], rounds: int) -> dict[Arch, Paired]:
    """Each network against ``anchor``: in every round the network, then the anchor, measured back to back
    (:func:`latency_predictor.measurement.paired.alternate`, as a search's final latency pass measures).

    A network's ratio is the median over the rounds of (its p50 / the anchor's p50 measured right after
    it); a shift of this host's speed between rounds moves both figures of a pair, and one that falls
    inside a pair is outvoted by the other rounds. The anchor itself has ratio 1 by definition, and
    its latency is the median of all its measurements here.
    """
    pairs = alternate(archs, anchor, measure, rounds)
    own = [t for a in archs for _, t in pairs[a]] or [measure(anchor) for _ in range(rounds)]
    out = {}
    for a in archs:
        if a == anchor:
            out[a] = Paired(float(np.median(own)), 1.0, (1.0,) * rounds)
            continue
        ratios = tuple(m / t for m, t in pairs[a])
        out[a] = Paired(float(np.median([m for m, _ in pairs[a]])), float(np.median(ratios)), ratios)
    return out


def anchor_targets(measure: Callable[[Arch], float]) -> tuple[list[Arch], list[float]]:
    """MobileNetV2 (32x32 layout) at each of :data:`TARGET_WIDTHS`, and its measured latency as a target."""
    mnv2 = small_input_variant(reference("mobilenetv2_100"))
    anchors = [scale_width(mnv2, w) for w in TARGET_WIDTHS]
    # Rounded up, so that the network a target is taken from meets it (rounded down, MobileNetV2 at
    # width 0.35 measured 0.5274 ms against a 0.527 ms target and entered that comparison at x0.25).
    start = paired_ratios(anchors, anchors[0], measure, SCALE_ROUNDS)
    return anchors, [math.ceil(start[a].latency_ms * 1000) / 1000 for a in anchors]


def _estimator() -> Any:
    return make_estimator("onnxruntime", input_shape=SHAPE, num_classes=10, intra_op_threads=1,
                          measure=MeasureConfig(min_runs=200, min_time_s=1.0, max_time_s=4.0))


def _data_config(archive: Path, size: dict[str, int]) -> DataConfig:
    return DataConfig(name="image_folder", path=str(archive), resolution=32, val_fraction=0.1,
                      max_val_samples=size["val"])


def search(archive: Path, target_ms: float, n: int, workdir: Path, log: Callable[[str], None]) -> dict[str, Any]:
    """LatNAS's search at ``target_ms`` on CIFAR-10 (the single-fidelity CIFAR-10 defaults it was recorded
    with: ``~data_rungs``), in a store of its own."""
    from nas.cli import compose_search_config
    from nas.driver import run_search

    cfg = compose_search_config(
        "+space=mobile_cifar", f"target_ms={target_ms}", "latency.input_shape=[1,3,32,32]", "data=cifar10_jpeg",
        "~data_rungs", f"data.path={archive}", f"search.n_trials={n}",
        f"tracking.uri=sqlite:///{workdir / 'mlflow.db'}",
        f"output_dir={workdir / f'search-{target_ms:g}'}", "progress=false", f"name=cifar10-{target_ms:g}ms",
    )
    result = run_search(cfg)
    if result.best is None:
        raise RuntimeError(f"the search at {target_ms:g} ms completed no candidate")
    best = result.best
    log(f"  search at {target_ms:.3f} ms: {len(result.candidates)} candidates in {result.wall_seconds:.0f} s; best "
        f"{best.arch_id}, proxy accuracy {best.accuracy:.3f}, {best.latency_p50:.3f} ms in the search")
    return {"arch": best.arch, "arch_id": best.arch_id, "proxy_accuracy": best.accuracy,
            "search_latency_ms": best.latency_p50, "candidates": len(result.candidates),
            "wall_seconds": result.wall_seconds,
            "settings": {"data.max_train_samples": cfg.data.max_train_samples, "train.epochs": cfg.train.epochs,
                         "accuracy": cfg.accuracy.estimator, "sampler": cfg.search.sampler}}


def scaled(name: str, anchor: Arch, measure: Callable[[Arch], float], rounds: int = SCALE_ROUNDS,
           log: Callable[[str], None] = print) -> tuple[Arch, float, Paired]:
    """The widest 32x32-layout ``name`` no slower than ``anchor`` (median paired ratio <= 1), and its width.

    Widths are tried from the smallest up and the search stops at the first that is slower; when
    even the smallest is slower, it is returned (its ratio says by how much).
    """
    base = small_input_variant(reference(name))
    best: tuple[Arch, float, Paired] | None = None
    first: tuple[Arch, float, Paired] | None = None
    for m in (0.25, *MULTIPLIERS):
        arch = scale_width(base, m)
        p = paired_ratios([arch], anchor, measure, rounds)[arch]
        log(f"    {name} x{m:g}: {p.latency_ms:.3f} ms, {p.ratio:.3f}x the anchor "
            f"(rounds {', '.join(f'{r:.2f}' for r in p.ratios)})")
        first = first or (arch, m, p)
        if not p.meets:
            break
        best = (arch, m, p)
    assert first is not None
    return best if best is not None else first


def _train(job: tuple[str, int, DataConfig, int, int]) -> dict[str, Any]:
    arch_text, seed, data_cfg, samples, epochs = job
    torch.set_num_threads(1)
    data = load_dataset(data_cfg).take_train(samples, 0)
    torch.manual_seed(seed)
    net = build(Arch.decode(arch_text), num_classes=10)
    history = train_briefly(net, data, TrainConfig(epochs=epochs, seed=seed, device="cpu"), torch.device("cpu"))
    state = {k: v.detach().clone() for k, v in net.state_dict().items()} if seed == 0 else None
    return {"arch": arch_text, "seed": seed, "accuracy": history[-1].accuracy, "val_loss": history[-1].val_loss,
            "seconds": sum(h.seconds for h in history), "state": state, "mean": list(data.mean),
            "std": list(data.std), "classes": list(data.classes)}


def export(name: str, arch: Arch, trained: dict[str, Any], latency_ms: float, folder: Path) -> dict[str, Any]:
    """``model.onnx`` (Conv+BN fused, checked against PyTorch) and ``arch.json`` of one trained network."""
    import onnxruntime as ort

    net = build(arch, num_classes=10)
    net.load_state_dict(trained["state"])
    net.eval()
    fused = fuse_conv_bn(net)
    folder.mkdir(parents=True, exist_ok=True)
    onnx_bytes = export_onnx(fused, SHAPE)
    (folder / "model.onnx").write_bytes(onnx_bytes)
    x = torch.randn(8, *SHAPE[1:])
    with torch.no_grad():
        want = net(x).numpy()
    session = ort.InferenceSession(onnx_bytes, providers=["CPUExecutionProvider"])
    got = np.concatenate([session.run([OUTPUT_NAME], {INPUT_NAME: x[i : i + 1].numpy()})[0] for i in range(8)])
    max_diff = float(np.abs(got - want).max())
    if max_diff > 1e-3 * max(1.0, float(np.abs(want).max())):
        raise RuntimeError(f"{name}: the exported ONNX model differs from PyTorch by {max_diff}")
    with torch.device("meta"):
        meta = build(arch, num_classes=10)
    info = {
        "network": name, "arch": arch.encode(), "arch_id": arch.arch_id, "input_shape": list(SHAPE),
        "input_name": INPUT_NAME, "output_name": OUTPUT_NAME, "layout": "NCHW", "dtype": "float32",
        "classes": trained["classes"], "preprocessing": {"scale": 1 / 255, "mean": trained["mean"],
                                                         "std": trained["std"], "resolution": 32,
                                                         "formula": "(rgb_uint8 / 255 - mean) / std, per channel"},
        "params": count_params(meta), "macs": count_macs(meta, SHAPE),
        "validation_accuracy": trained["accuracy"], "latency_p50_ms": latency_ms, "seed": trained["seed"],
        "onnx_vs_pytorch_max_abs_diff": max_diff,
        "load": "onnxruntime.InferenceSession('model.onnx'); or search_spaces.build(Arch.decode(arch), num_classes=10)",
    }
    (folder / "arch.json").write_text(json.dumps(info, indent=2) + "\n")
    return info


def run(archive: Path, quick: bool, workers: int = 2, log: Callable[[str], None] = print) -> dict[str, Any]:
    """Targets, searches, scaled references, training with seeds, exports; the comparison."""
    size = QUICK if quick else FULL
    data_cfg = _data_config(archive, size)
    est = _estimator()

    def measure(arch: Arch) -> float:
        return float(est.measure(arch).latency_ms)

    anchors, targets = anchor_targets(measure)
    log(f"  targets: MobileNetV2 (32x32 layout) at width {TARGET_WIDTHS} measures {targets} ms "
        f"(medians of {SCALE_ROUNDS} rounds)")
    out_targets: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="latnas-cifar-refs-") as tmp:
        for target, width, anchor in zip(targets, TARGET_WIDTHS, anchors, strict=True):
            found = search(archive, target, size["search_n"], Path(tmp), log)
            cands: list[dict[str, Any]] = [{"name": "searched", "arch": found["arch"], "multiplier": None,
                                            "search": found}]
            log(f"  widths at {target:.3f} ms, against the anchor MobileNetV2 x{width:g} "
                f"({SCALE_ROUNDS} paired rounds):")
            for name in sorted(REFERENCES):
                arch, m, p = scaled(name, anchor, measure, SCALE_ROUNDS, log)
                cands.append({"name": f"{name} x{m:g}", "arch": arch.encode(), "multiplier": m,
                              "ratio_at_choice": p.ratio, "latency_at_choice_ms": p.latency_ms})
            out_targets.append({"target_ms": target, "anchor": f"mobilenetv2_100 x{width:g}",
                                "anchor_arch": anchor.encode(), "candidates": cands})
    keys = list(dict.fromkeys((c["arch"], s) for t in out_targets for c in t["candidates"]
                              for s in range(size["seeds"])))
    unique = [(arch, s, data_cfg, size["train_samples"], size["epochs"]) for arch, s in keys]
    log(f"  training {len(unique)} networks x seeds ({size['train_samples']} images x {size['epochs']} epochs), "
        f"{workers} at a time")
    trained = {(r["arch"], r["seed"]): r for r in in_workers(_train, unique, workers)}
    # The latency column: every network again, paired with its target's anchor in rounds. The widths
    # were chosen at the start of the run, and this machine's speed drifts over the hour between.
    finals = []
    for t in out_targets:
        anchor = Arch.decode(t["anchor_arch"])
        archs = list(dict.fromkeys([anchor, *(Arch.decode(c["arch"]) for c in t["candidates"])]))
        final = paired_ratios(archs, anchor, measure, ROUNDS)
        t["anchor_final_ms"] = final[anchor].latency_ms
        finals.append(final)
        log(f"  at {t['target_ms']:.3f} ms, paired with the anchor in {ROUNDS} rounds: "
            + ", ".join(f"{a.arch_id} {p.latency_ms:.3f} ms ({p.ratio:.2f}x)" for a, p in final.items()))
    if not quick:
        for folder in EXPORT_DIR.glob("*/"):
            for f in folder.glob("*"):
                f.unlink()
    for t, final in zip(out_targets, finals, strict=True):
        for c in t["candidates"]:
            a = Arch.decode(c["arch"])
            c["latency_ms"] = final[a].latency_ms
            c["latency_ratio"] = final[a].ratio
            c["meets_target"] = final[a].meets
            with torch.device("meta"):
                c["params_m"] = count_params(build(a, num_classes=10)) / 1e6
            accs = [trained[(c["arch"], s)]["accuracy"] for s in range(size["seeds"])]
            c["accuracy"] = {**spread(accs), "values": accs}
            c["train_seconds"] = float(np.median([trained[(c["arch"], s)]["seconds"] for s in range(size["seeds"])]))
            label = c["name"].split(" ")[0] + ("" if c["multiplier"] is None else f"-x{c['multiplier']:g}")
            folder = (EXPORT_DIR if not quick else Path(tempfile.gettempdir()) / "latnas-cifar10-exports") / (
                f"{t['target_ms']:g}ms-{label}")
            c["export"] = export(c["name"], a, trained[(c["arch"], 0)], c["latency_ms"], folder)["arch_id"]
            c["export_folder"] = os.path.relpath(folder, ROOT) if not quick else None
            log(f"  target {t['target_ms']:.3f} ms: {c['name']:<22} {c['latency_ms']:.3f} ms, accuracy median "
                f"{np.median(accs):.4f} ({min(accs):.4f}-{max(accs):.4f})")
    summary = comparison_lines(out_targets)
    for line in summary:
        log(f"  {line}")
    return {
        "dataset": "cifar10", "targets": out_targets, "target_widths": list(TARGET_WIDTHS), "summary": summary,
        "seeds": size["seeds"],
        "train_samples": size["train_samples"],
        "epochs": size["epochs"], "search_n": size["search_n"], "val_images": size["val"],
        "scale_rounds": SCALE_ROUNDS, "rounds": ROUNDS,
        "latency": f"ONNX Runtime CPU, 1 intra-op thread, 1x3x32x32, p50: the median of {ROUNDS} rounds at the end "
                   "of the run, each measuring a network and then its target's anchor back to back",
        "training": dataclasses.asdict(TrainConfig(epochs=size["epochs"], device="cpu")),
    }


def render_figures(f: dict[str, Any], matched: str) -> str:
    """The section of a record of this benchmark on its area's page (docs/benchmarks/<area>.md)."""
    from benchmarks.render import _f, _pct, table
    s = f["targets"][0]["candidates"][0]["search"]
    st = s["settings"]
    exports = sorted({c["export_folder"] for t in f["targets"] for c in t["candidates"] if c.get("export_folder")})
    widths = " and ".join(f"{w:g}" for w in f["target_widths"])
    rows = [[f"{t['target_ms']:g}", c["name"], _f(c["latency_ms"], 3), _f(c["latency_ratio"], 2),
             "yes" if c["meets_target"] else "no", _f(c.get("params_m"), 2),
             f"{_pct(c['accuracy']['median'])} ({_pct(c['accuracy']['min'])} - {_pct(c['accuracy']['max'])})"]
            for t in f["targets"] for c in t["candidates"]]
    header = ["target ms", "network", "latency ms", "x anchor", "meets", "params M", "accuracy"]
    missed = [f"{c['name']} at {t['target_ms']:g} ms ({c['latency_ratio']:.2f}x"
              + (", even at the smallest width tried" if c["multiplier"] == 0.25 else "") + ")"
              for t in f["targets"] for c in t["candidates"] if not c["meets_target"]]
    how = f"""Each target's *anchor* is the MobileNetV2 that set it. This host's speed moves between levels about 2x
apart within seconds, so no network is judged by one absolute figure: each is measured back to back
with its anchor, and *x anchor* is the median over the rounds of its p50 over the anchor's ({f['rounds']}
rounds at the end of the run; the widths were chosen the same way at the start, {f['scale_rounds']}
rounds each). A network meets its target when it is no slower than the anchor (x anchor <= 1).
{"Slower than the anchor at the end: " + "; ".join(missed) + "." if missed else "Every network met its target."}"""
    budget = (f"These are short-budget accuracies ({f['train_samples']:,} images x {f['epochs']} epochs): "
              "they compare what each network learns in that budget, not what it reaches with full training.")
    return f"""The same question on real images. At two latency targets on this machine's ONNX Runtime CPU (1 thread,
CIFAR's deployment shape 1x3x32x32, every network measured in this run), chosen as the measured
latencies of MobileNetV2 in its 32x32 layout at widths {widths}: LatNAS's own search of
`mobile_cifar` ({f['search_n']} candidates, its CIFAR-10 defaults: {st['accuracy']} estimate,
{st['train.epochs']} epochs on {st['data.max_train_samples']} images, {st['sampler']} sampler)
against MobileNetV2, EfficientNet-B0 and MnasNet-B1 in their 32x32 layouts (the first two stride-2
stages run at stride 1), each width-scaled to the widest multiplier that meets the target. Every
network trained with the same recipe and budget ({f['train_samples']:,} CIFAR-10 training images,
{f['epochs']} epochs), {f['seeds']} seeds, validated on {f['val_images']:,} images carved from the
training split; accuracy median (min - max). The JPEG copy of CIFAR-10 differs slightly from the
original release: accuracies are close to, not identical with, published figures. Latency: {f['latency']}.

{table(header, rows)}

{how}

{matched}

{budget}

The trained networks (seed 0) are committed as `model.onnx` (Conv+BN fused, checked against
PyTorch) with `arch.json` (architecture, preprocessing, classes, accuracy, latency) in
{', '.join(f'`{e}`' for e in exports) or 'no folder (quick mode)'}: evaluate and time them on the
real CIFAR-10 test split."""
