"""Benchmark: training on the CPU in the channels-last memory format against contiguous (NCHW) tensors.

Usage::

    python -m benchmarks.train_speed --cifar10 ARCHIVE [--quick]

``train.channels_last=auto`` trains in channels-last on CUDA only; ``on`` asks for it on the CPU too.
This measures what that buys, side by side, on CIFAR-10's JPEG training images at 32x32:

1. **Speed**: each network of the CIFAR-10 deployment comparison (the hand-designed references at
   their widths and the two searched networks) and a ``mobile_cifar`` network with squeeze-excitation
   trains one epoch of :func:`~nas.accuracy.training.train_briefly` (the ``train`` recipe, batch 64,
   then validation on 500 images) with ``channels_last=off`` and ``on``, in alternating order, for
   :data:`FULL`'s ``rounds`` paired rounds at each of its ``threads`` torch thread counts; the ratio of
   each round's pair is the speed-up (the pair sees the same load from other work).
2. **Supernet**: one sandwich step of ``mobile_cifar_hr``'s weight-sharing supernet (its largest
   networks, the smallest and two random subnets, forward and backward on one batch, then SGD), in
   both formats the same way.
3. **Accuracy**: :data:`FULL`'s ``accuracy_archs`` trained from scratch at its ``accuracy_budget``
   (images, epochs) with seeds ``0`` to ``seeds - 1`` in each format (two at a time), validated on
   the 5,000 carved images: the format changes float rounding, not the recipe, so the two formats'
   accuracies should differ by no more than the seeds do.

Written to ``benchmarks/records/train_speed.json`` (``records/quick/`` with ``--quick``), with the
load average before and after each part.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from benchmarks.cifar10_deploy import _MBV2_035, _MBV2_05, _MNAS_035, data_config
from benchmarks.common import ROOT, header, record_path, write_record
from benchmarks.fidelity import cifar10_archive
from nas.accuracy.training import train_briefly
from nas.core.config import TrainConfig
from nas.core.workers import in_workers
from nas.data import load_dataset
from nas.data.datasets import Dataset
from search_spaces import Arch, build, load_space
from search_spaces.supernet import Supernet, sandwich_ends

FORMATS = ("off", "on")
FULL = {"images": 1280, "rounds": 3, "threads": [1, 2], "supernet_rounds": 3,
        "accuracy_archs": ["MnasNet-B1 x0.35", "searched 0.326 ms"], "seeds": 2, "accuracy_budget": [10000, 3]}
QUICK = {"images": 128, "rounds": 1, "threads": [1], "supernet_rounds": 1,
         "accuracy_archs": ["MobileNetV2 x0.35"], "seeds": 1, "accuracy_budget": [256, 1]}


def networks() -> dict[str, str]:
    """The networks timed: the deployment comparison's references and searched networks, and a
    ``mobile_cifar`` network with squeeze-excitation (the first such of a seeded sample)."""
    records = ROOT / "benchmarks" / "records" / "cifar10_deploy"
    out = {"MobileNetV2 x0.35": _MBV2_035, "MnasNet-B1 x0.35": _MNAS_035, "MobileNetV2 x0.5": _MBV2_05}
    for target in ("0.235", "0.326"):
        path = records / f"search-{target}ms.json"
        if path.exists():
            out[f"searched {target} ms"] = json.loads(path.read_text())["arch"]
    space, rng = load_space("mobile_cifar"), np.random.default_rng(0)
    with_se = next(a for a in (space.sample(rng) for _ in range(1000)) if "_se" in a.encode())
    out["mobile_cifar with SE"] = with_se.encode()
    return out


def _load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def _paired(measure: Callable[[str], float], rounds: int) -> tuple[dict[str, list[float]], list[float]]:
    """``measure(format)`` in both formats for ``rounds`` rounds, the order alternating; the seconds of
    each format and each round's speed-up (off over on)."""
    seconds: dict[str, list[float]] = {f: [] for f in FORMATS}
    for r in range(rounds):
        for fmt in (FORMATS if r % 2 == 0 else FORMATS[::-1]):
            seconds[fmt].append(measure(fmt))
    return seconds, [off / on for off, on in zip(seconds["off"], seconds["on"], strict=True)]


def _epoch_seconds(arch: Arch, data: Any, threads: int, fmt: str) -> float:
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    net = build(arch, num_classes=10)
    cfg = TrainConfig(epochs=1, seed=0, device="cpu", channels_last=fmt)
    t0 = time.perf_counter()
    train_briefly(net, data, cfg, torch.device("cpu"))
    return time.perf_counter() - t0


def part_speed(archive: Path, size: dict[str, Any], nets: dict[str, str], log: Any) -> dict[str, Any]:
    """Seconds per epoch of each network in both formats, paired rounds, at each thread count."""
    full = load_dataset(data_config(archive))
    assert isinstance(full, Dataset)  # the archive is decoded into memory
    data = dataclasses.replace(full.take_train(size["images"], 0), x_val=full.x_val[:500], y_val=full.y_val[:500])
    rows = []
    load_before = _load()
    for threads in size["threads"]:
        for name, text in nets.items():
            arch = Arch.decode(text)
            _epoch_seconds(arch, data, threads, "on")  # warm-up: first allocations, kernel choice
            seconds, ratios = _paired(functools.partial(_epoch_seconds, arch, data, threads), size["rounds"])
            row = {"network": name, "arch_id": arch.arch_id, "threads": threads, "seconds": seconds,
                   "images_per_s": {f: size["images"] / statistics.median(s) for f, s in seconds.items()},
                   "speedup_per_round": ratios, "speedup_median": statistics.median(ratios)}
            rows.append(row)
            log(f"  {threads} thread(s) {name:<22} off {statistics.median(seconds['off']):6.2f} s  "
                f"on {statistics.median(seconds['on']):6.2f} s  per epoch of {size['images']} images: "
                f"{row['speedup_median']:.2f}x (rounds {', '.join(f'{x:.2f}' for x in ratios)})")
    return {"images": size["images"], "val_images": 500, "rounds": size["rounds"], "rows": rows,
            "load_before": load_before, "load_after": _load()}


def _supernet_step_seconds(space_name: str, fmt: str, steps: int = 3) -> float:
    torch.set_num_threads(1)
    space = load_space(space_name)
    smallest, largest = sandwich_ends(space, 32)
    rng = np.random.default_rng(0)
    archs = [*largest, smallest, space.sample(rng), space.sample(rng)]
    torch.manual_seed(0)
    net = Supernet(space, 10).train()
    x, y = torch.randn(64, 3, 32, 32), torch.randint(0, 10, (64,))
    if fmt == "on":
        net.to(memory_format=torch.channels_last)  # type: ignore[call-overload]
        x = x.contiguous(memory_format=torch.channels_last)
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    t0 = 0.0
    for i in range(steps + 1):  # the first step warms up
        if i == 1:
            t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        for a in archs:
            F.cross_entropy(net(x, a), y).backward()
        opt.step()
    return (time.perf_counter() - t0) / steps


def part_supernet(size: dict[str, Any], log: Any) -> dict[str, Any]:
    """Seconds per sandwich step of each CIFAR supernet in both formats, paired rounds, one thread."""
    rows = []
    load_before = _load()
    for space_name in ("mobile_cifar", "mobile_cifar_hr"):
        seconds, ratios = _paired(functools.partial(_supernet_step_seconds, space_name), size["supernet_rounds"])
        rows.append({"space": space_name, "seconds": seconds, "speedup_per_round": ratios,
                     "speedup_median": statistics.median(ratios)})
        log(f"  supernet {space_name:<16} off {statistics.median(seconds['off']):.2f} s  on "
            f"{statistics.median(seconds['on']):.2f} s  per sandwich step: {statistics.median(ratios):.2f}x")
    return {"batch": 64, "threads": 1, "rows": rows, "load_before": load_before, "load_after": _load()}


def _accuracy_job(job: tuple[str, str, int, str, str, list[int]]) -> dict[str, Any]:
    name, text, seed, fmt, archive, budget = job
    torch.set_num_threads(1)
    data = load_dataset(data_config(Path(archive))).take_train(budget[0], 0)
    torch.manual_seed(seed)
    net = build(Arch.decode(text), num_classes=10)
    t0 = time.perf_counter()
    history = train_briefly(net, data, TrainConfig(epochs=budget[1], seed=seed, device="cpu", channels_last=fmt),
                            torch.device("cpu"))
    return {"network": name, "seed": seed, "format": fmt, "accuracy": history[-1].accuracy,
            "seconds": time.perf_counter() - t0, "val_images": data.n_val}


def part_accuracy(archive: Path, size: dict[str, Any], nets: dict[str, str], log: Any) -> dict[str, Any]:
    """Each of ``size``'s networks trained with each seed in both formats, two at a time."""
    jobs = [(n, nets[n], s, fmt, str(archive), size["accuracy_budget"])
            for n in size["accuracy_archs"] for s in range(size["seeds"]) for fmt in FORMATS]
    load_before = _load()
    runs = []
    for run in in_workers(_accuracy_job, jobs, 2, ordered=False):
        runs.append(run)
        log(f"  {run['network']} seed {run['seed']} channels_last={run['format']}: {run['accuracy']:.2%} "
            f"({run['seconds']:.0f} s, two at a time)")
    summary = []
    for n in size["accuracy_archs"]:
        acc = {f: sorted(r["accuracy"] for r in runs if r["network"] == n and r["format"] == f) for f in FORMATS}
        summary.append({"network": n, "accuracy": acc,
                        "median_difference": statistics.median(acc["on"]) - statistics.median(acc["off"])})
    return {"budget": size["accuracy_budget"], "seeds": size["seeds"], "runs": runs, "summary": summary,
            "load_before": load_before, "load_after": _load()}


def render(rec: dict[str, Any]) -> str:
    """The BENCHMARKS.md section of a record of this benchmark."""
    from benchmarks.render import table

    f = rec["figures"]
    sp = f["speed"]
    rows = [[r["network"], str(r["threads"]), f"{r['images_per_s']['off']:.0f}", f"{r['images_per_s']['on']:.0f}",
             f"**{r['speedup_median']:.2f}x**", ", ".join(f"{x:.2f}" for x in r["speedup_per_round"])]
            for r in sp["rows"]]
    sn = [[r["space"], f"{statistics.median(r['seconds']['off']):.2f}", f"{statistics.median(r['seconds']['on']):.2f}",
           f"**{r['speedup_median']:.2f}x**"] for r in f["supernet"]["rows"]]
    acc = f["accuracy"]
    ac = [[s["network"], ", ".join(f"{a:.1%}" for a in s["accuracy"]["off"]),
           ", ".join(f"{a:.1%}" for a in s["accuracy"]["on"]), f"{100 * s['median_difference']:+.1f}"]
          for s in acc["summary"]]
    budget = f"{acc['budget'][0]:,} images x {acc['budget'][1]} epochs"
    return f"""Training on the CPU with `train.channels_last=off` (contiguous NCHW tensors, what `auto` chooses on the
CPU) against `on` (channels-last, `auto`'s choice on CUDA), on CIFAR-10's JPEG images at 32x32. One epoch of
`train_briefly` (the `train` recipe, batch 64) on {sp['images']:,} images, then validation on
{sp['val_images']} images; {sp['rounds']} rounds, each timing both formats in alternating order, the speed-up
being each round's ratio (load average {sp['load_before'][0]} before, {sp['load_after'][0]} after).

{table(['network', 'threads', 'images/s, off', 'images/s, on', 'speed-up (median)', 'per round'], rows)}

One sandwich step of each CIFAR supernet (its largest networks, the smallest and two random subnets
on one batch of 64, then SGD), one thread, {len(f['supernet']['rows'][0]['seconds']['off'])} paired rounds:

{table(['supernet', 's per step, off', 's per step, on', 'speed-up (median)'], sn)}

The format changes float rounding, not the recipe: trained from scratch at {budget} with
seeds 0-{acc['seeds'] - 1} in each format (two at a time), validated on the {acc['runs'][0]['val_images']:,}
carved images:

{table(['network', 'accuracy, off', 'accuracy, on', 'median on - off (points)'], ac)}"""


def main(argv: list[str] | None = None) -> int:
    """Run the three parts and write the record."""
    p = argparse.ArgumentParser(prog="python -m benchmarks.train_speed", description=__doc__.split("\n\n")[0])
    p.add_argument("--cifar10", help="the CIFAR-10 JPEG archive (default: $LATNAS_CIFAR10_JPEG)")
    p.add_argument("--quick", action="store_true", help="a few seconds of each part, the record under records/quick/")
    args = p.parse_args(argv)
    archive = cifar10_archive(args.cifar10)
    size = QUICK if args.quick else FULL
    t0 = time.perf_counter()

    def log(line: str) -> None:
        print(line, flush=True)

    mode = "quick" if args.quick else "full"
    rec = header("train_speed", mode, ["python", "-m", "benchmarks.train_speed", "--cifar10",
                                       "DIR/cifar10-train-jpeg.tar.gz", *(["--quick"] if args.quick else [])])
    log("speed: one epoch in each format")
    nets = networks()
    speed = part_speed(archive, size, nets, log)
    log("supernet: one sandwich step in each format")
    supernet = part_supernet(size, log)
    log("accuracy: trained from scratch in each format")
    accuracy = part_accuracy(archive, size, nets, log)
    rec.update({"size": size, "figures": {"speed": speed, "supernet": supernet, "accuracy": accuracy},
                "wall_seconds": time.perf_counter() - t0})
    path = write_record(record_path("train_speed", mode), rec)
    log(f"record: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
