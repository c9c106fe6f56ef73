"""Benchmark: training on the CPU in the channels-last memory format against contiguous (NCHW) tensors.

Usage::

    python -m benchmarks.accuracy.train_speed --cifar10 ARCHIVE [--quick]

``train.channels_last=auto`` trains in channels-last on CUDA, and on an x86-64 CPU only where oneDNN is
held below AVX-512, as a search holds its trials (:func:`nas.accuracy.training.channels_last_on`); ``on``
asks for it anywhere. This measures what it buys, side by side, on CIFAR-10's JPEG training images at 32x32:

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
4. **oneDNN's instruction set** (``isa``): the speed part's epoch, one thread, in both formats under
   each of :data:`ISAS`: oneDNN's own choice (AVX-512 where the CPU has it) and ``ONEDNN_MAX_CPU_ISA=AVX2``,
   the cap a search gives its trials on an x86-64 CPU (:func:`nas.accuracy.training.trial_environment`).
   oneDNN reads the cap once per process, so each (round, instruction set) runs in a process of its
   own; a round runs both, in alternating order.

``--parts`` runs some of the parts; the others' figures are kept from the record already written.
Written to ``benchmarks/accuracy/records/train_speed.json`` (``records/quick/`` with ``--quick``), with the
load average before and after each part and the date of each.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch
import torch.nn.functional as F

from benchmarks.accuracy.fidelity import cifar10_archive
from benchmarks.common import ROOT, header, record_path, write_record
from benchmarks.search.cifar10_deploy import _MBV2_035, _MBV2_05, _MNAS_035, data_config
from nas.accuracy.training import ONEDNN_ISA_VARS, TRAINING_ISA, train_briefly
from nas.core.config import TrainConfig
from nas.data import load_dataset
from nas.data.datasets import Dataset
from nas.runtime.workers import in_workers
from search_spaces import Arch, build, load_space
from search_spaces.supernet import Supernet, sandwich_ends

FORMATS = ("off", "on")
ISAS = ("native", TRAINING_ISA)
"""oneDNN's instruction sets of the ``isa`` part: ``native`` (no cap) and the trials' cap."""
PARTS = ("speed", "supernet", "accuracy", "isa")
FULL = {"images": 1280, "rounds": 3, "threads": [1, 2], "supernet_rounds": 3,
        "accuracy_archs": ["MnasNet-B1 x0.35", "searched 0.326 ms"], "seeds": 2, "accuracy_budget": [10000, 3],
        "isa_rounds": 3}
QUICK = {"images": 128, "rounds": 1, "threads": [1], "supernet_rounds": 1,
         "accuracy_archs": ["MobileNetV2 x0.35"], "seeds": 1, "accuracy_budget": [256, 1], "isa_rounds": 1}


def networks() -> dict[str, str]:
    """The networks timed: the deployment comparison's references and searched networks, and a
    ``mobile_cifar`` network with squeeze-excitation (the first such of a seeded sample)."""
    records = ROOT / "benchmarks" / "search" / "records" / "cifar10_deploy"
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


def _ratios(a: list[float], b: list[float]) -> list[float]:
    """Each round's ``a`` over its ``b``."""
    return [x / y for x, y in zip(a, b, strict=True)]


def _paired(measure: Callable[[str], float], rounds: int) -> tuple[dict[str, list[float]], list[float]]:
    """``measure(format)`` in both formats for ``rounds`` rounds, the order alternating; the seconds of
    each format and each round's speed-up (off over on)."""
    seconds: dict[str, list[float]] = {f: [] for f in FORMATS}
    for r in range(rounds):
        for fmt in (FORMATS if r % 2 == 0 else FORMATS[::-1]):
            seconds[fmt].append(measure(fmt))
    return seconds, _ratios(seconds["off"], seconds["on"])


def _epoch_seconds(arch: Arch, data: Any, threads: int, fmt: str) -> float:
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    net = build(arch, num_classes=10)
    cfg = TrainConfig(epochs=1, seed=0, device="cpu", channels_last=fmt)
    t0 = time.perf_counter()
    train_briefly(net, data, cfg, torch.device("cpu"))
    return time.perf_counter() - t0


def _speed_data(archive: Path, images: int) -> Dataset:
    full = load_dataset(data_config(archive))
    assert isinstance(full, Dataset)  # the archive is decoded into memory
    return dataclasses.replace(full.take_train(images, 0), x_val=full.x_val[:500], y_val=full.y_val[:500])


def part_speed(archive: Path, size: dict[str, Any], nets: dict[str, str], log: Any) -> dict[str, Any]:
    """Seconds per epoch of each network in both formats, paired rounds, at each thread count."""
    data = _speed_data(archive, size["images"])
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


def isa_child(job: str) -> None:
    """One round of the ``isa`` part in this process (its oneDNN cap set by the parent): each network's
    epoch in both formats, after a warm-up epoch; prints the seconds as one JSON line."""
    spec = json.loads(job)
    data = _speed_data(Path(spec["archive"]), spec["images"])
    out = {}
    for name, text in spec["nets"].items():
        arch = Arch.decode(text)
        _epoch_seconds(arch, data, 1, "on")  # warm-up: first allocations, kernel choice
        seconds, _ = _paired(functools.partial(_epoch_seconds, arch, data, 1), 1)
        out[name] = {f: s[0] for f, s in seconds.items()}
    print(json.dumps(out), flush=True)


def _isa_round(isa: str, archive: Path, images: int, nets: dict[str, str]) -> dict[str, dict[str, float]]:
    env = {k: v for k, v in os.environ.items() if k not in ONEDNN_ISA_VARS}
    if isa != "native":
        env[ONEDNN_ISA_VARS[0]] = isa
    job = json.dumps({"archive": str(archive), "images": images, "nets": nets})
    proc = subprocess.run([sys.executable, "-m", "benchmarks.accuracy.train_speed", "--isa-child", job], cwd=ROOT,
                          env=env,
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"the {isa} round failed (exit {proc.returncode}): {proc.stderr[-2000:]}")
    return cast(dict[str, dict[str, float]], json.loads(proc.stdout.strip().splitlines()[-1]))


def part_isa(archive: Path, size: dict[str, Any], nets: dict[str, str], log: Any) -> dict[str, Any]:
    """Seconds per epoch of each network in both formats under each of :data:`ISAS`, one thread; each
    round runs every instruction set in a process of its own, in alternating order."""
    seconds: dict[str, dict[str, dict[str, list[float]]]] = {
        n: {isa: {f: [] for f in FORMATS} for isa in ISAS} for n in nets}
    load_before = _load()
    for r in range(size["isa_rounds"]):
        for isa in (ISAS if r % 2 == 0 else ISAS[::-1]):
            got = _isa_round(isa, archive, size["images"], nets)
            for n, by_format in got.items():
                for f, sec in by_format.items():
                    seconds[n][isa][f].append(sec)
            log(f"  round {r + 1}, {isa}: " + ", ".join(f"{n} {v['off']:.1f}/{v['on']:.1f} s" for n, v in got.items()))
    rows = []
    native, capped = ISAS
    for n, s in seconds.items():
        trials = _ratios(s[native]["off"], s[capped]["on"])
        rows.append({
            "network": n, "seconds": s,
            "images_per_s": {isa: {f: size["images"] / statistics.median(s[isa][f]) for f in FORMATS} for isa in ISAS},
            # per round: NCHW with oneDNN's own kernels (auto on the CPU before) over channels-last at the cap
            "trials_speedup": trials,
            "channels_last_speedup": {isa: _ratios(s[isa]["off"], s[isa]["on"]) for isa in ISAS},
            "cap_speedup_nchw": _ratios(s[native]["off"], s[capped]["off"]),
        })
        log(f"  {n:<22} NCHW {native} {statistics.median(s[native]['off']):.2f} s, channels-last {capped} "
            f"{statistics.median(s[capped]['on']):.2f} s: {statistics.median(trials):.2f}x")
    return {"images": size["images"], "val_images": 500, "rounds": size["isa_rounds"], "threads": 1,
            "isas": list(ISAS), "rows": rows, "load_before": load_before, "load_after": _load()}


def render(rec: dict[str, Any]) -> str:
    """The section of a record of this benchmark on its area's page (docs/benchmarks/<area>.md)."""
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
    return f"""Training on the CPU with `train.channels_last=off` (contiguous NCHW tensors) against `on` (channels-last:
`auto`'s choice on CUDA, and on an x86-64 CPU with oneDNN held below AVX-512, as in a search's trials: the
last table), on CIFAR-10's JPEG images at 32x32, oneDNN's own kernels (measured {sp.get('date', rec['date'])[:10]}).
One epoch of `train_briefly` (the `train` recipe, batch 64) on {sp['images']:,} images, then validation on
{sp['val_images']} images; {sp['rounds']} rounds, each timing both formats in alternating order, the speed-up
being each round's ratio (load average {sp['load_before'][0]} before, {sp['load_after'][0]} after).

{table(['network', 'threads', 'images/s, off', 'images/s, on', 'speed-up (median)', 'per round'], rows)}

One sandwich step of each CIFAR supernet (its largest networks, the smallest and two random subnets
on one batch of 64, then SGD), one thread, {len(f['supernet']['rows'][0]['seconds']['off'])} paired rounds:

{table(['supernet', 's per step, off', 's per step, on', 'speed-up (median)'], sn)}

The format changes float rounding, not the recipe: trained from scratch at {budget} with
seeds 0-{acc['seeds'] - 1} in each format (two at a time), validated on the {acc['runs'][0]['val_images']:,}
carved images:

{table(['network', 'accuracy, off', 'accuracy, on', 'median on - off (points)'], ac)}{_render_isa(f.get("isa"))}"""


def _render_isa(isa: dict[str, Any] | None) -> str:
    from benchmarks.render import table

    if isa is None:
        return ""
    native, capped = isa["isas"]

    def ips(r: dict[str, Any], i: str, f: str) -> str:
        return f"{r['images_per_s'][i][f]:.0f}"

    rows = [[r["network"], ips(r, native, "off"), ips(r, native, "on"), ips(r, capped, "off"), ips(r, capped, "on"),
             f"**{statistics.median(r['trials_speedup']):.2f}x**", ", ".join(f"{x:.2f}" for x in r["trials_speedup"])]
            for r in isa["rows"]]
    return f"""

oneDNN's instruction set, which PyTorch's CPU convolutions use (measured {isa['date'][:10]}): the same epoch,
one thread, in both formats with oneDNN's own choice (`native`: AVX-512 on this CPU) and with
`ONEDNN_MAX_CPU_ISA={capped}`, the cap a search gives its trials on an x86-64 CPU; each round runs each
instruction set in a process of its own, in alternating order ({isa['rounds']} rounds; load average
{isa['load_before'][0]} before, {isa['load_after'][0]} after). The speed-up is what a trial's training gained:
NCHW with oneDNN's own kernels (`auto` on the CPU before) over channels-last at the cap, per round.

{table(['network', f'images/s, NCHW {native}', f'channels-last {native}', f'NCHW {capped}',
        f'channels-last {capped}', 'speed-up (median)', 'per round'], rows)}"""


def main(argv: list[str] | None = None) -> int:
    """Run the chosen parts (default: all) and write the record, keeping the other parts' figures."""
    p = argparse.ArgumentParser(prog="python -m benchmarks.accuracy.train_speed", description=__doc__.split("\n\n")[0])
    p.add_argument("--cifar10", help="the CIFAR-10 JPEG archive (default: $LATNAS_CIFAR10_JPEG)")
    p.add_argument("--quick", action="store_true", help="a few seconds of each part, the record under records/quick/")
    p.add_argument("--parts", default=",".join(PARTS),
                   help=f"comma-separated parts to run, of {', '.join(PARTS)} (default: all); the others' figures "
                        "are kept from the record")
    p.add_argument("--isa-child", help=argparse.SUPPRESS)  # one round of the isa part, in its own process
    args = p.parse_args(argv)
    if args.isa_child:
        isa_child(args.isa_child)
        return 0
    parts = [x.strip() for x in args.parts.split(",") if x.strip()]
    if not parts or set(parts) - set(PARTS):
        p.error(f"--parts: {args.parts!r}: choose from {', '.join(PARTS)}")
    archive = cifar10_archive(args.cifar10)
    size = QUICK if args.quick else FULL

    def log(line: str) -> None:
        print(line, flush=True)

    mode = "quick" if args.quick else "full"
    path = record_path("train_speed", mode)
    old = json.loads(path.read_text()) if path.exists() and set(parts) != set(PARTS) else {"figures": {}}
    kept = {k: {**v, "date": v.get("date", old.get("date"))} for k, v in old["figures"].items()}
    missing = [x for x in PARTS if x not in parts and x not in kept and x != "isa"]
    if missing:
        p.error(f"--parts {args.parts}: the record has no {', '.join(missing)} figures yet; run them too")
    rec = header("train_speed", mode, ["python", "-m", "benchmarks.accuracy.train_speed", "--cifar10",
                                       "DIR/cifar10-train-jpeg.tar.gz", *(["--quick"] if args.quick else [])])
    nets = networks()
    figures = dict(kept)
    runners = {"speed": ("speed: one epoch in each format", lambda: part_speed(archive, size, nets, log)),
               "supernet": ("supernet: one sandwich step in each format", lambda: part_supernet(size, log)),
               "accuracy": ("accuracy: trained from scratch in each format",
                            lambda: part_accuracy(archive, size, nets, log)),
               "isa": ("isa: one epoch in each format under each oneDNN instruction set",
                       lambda: part_isa(archive, size, nets, log))}
    wall = old.get("wall_seconds", 0.0) if kept else 0.0  # the kept parts' (records before --parts: in all)
    for part in PARTS:
        if part in parts:
            log(runners[part][0])
            t1 = time.perf_counter()
            figures[part] = {**runners[part][1](), "date": rec["date"]}
            figures[part]["wall_seconds"] = time.perf_counter() - t1
            wall -= kept.get(part, {}).get("wall_seconds", 0.0)
            wall += figures[part]["wall_seconds"]
    # the command runs every part; this run ran ``parts_run``, each part's figures carry their date
    rec.update({"size": size, "figures": figures, "parts_run": parts, "wall_seconds": wall})
    write_record(path, rec)
    log(f"record: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
