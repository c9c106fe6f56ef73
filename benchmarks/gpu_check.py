"""The GPU smoke check: what LatNAS's GPU and TensorRT paths do on a real GPU, in one command.

    python scripts/gpu_check.py --out gpu_check.json [--only NAME ...] [--budget-s 480]

Each check records ``passed``, ``failed`` or ``skipped`` with the reason, its seconds and its
figures, in one JSON record with the machine, the GPU (driver, name, UUID, MIG mode) and the
versions (torch, CUDA, cuDNN, ONNX Runtime and its providers, TensorRT, Ray). On a machine without
a GPU it runs the version check and says, check by check, that the GPU checks were skipped. The
whole run stays under ``--budget-s`` (8 minutes by default): checks that would start after it are
skipped, saying so. Exit status 1 when a check failed, else 0.

The checks (:data:`CHECKS`), each reaching the code a user runs:

* ``versions``: the record above; fails when torch's and ONNX Runtime's CUDA majors differ;
* ``pytest_gpu``, ``pytest_tensorrt``: the test sets marked ``gpu`` and ``tensorrt``;
* ``ort_tensorrt_fp32``, ``ort_tensorrt_fp16``, ``ort_cuda_no_cpu_fallback``: ONNX Runtime on its
  GPU providers with CPU fallback disabled, outputs against PyTorch, a measurement;
* ``tensorrt_outputs_fp32``, ``tensorrt_outputs_fp16``: engine outputs against PyTorch;
* ``clocks_torch_eager``, ``clocks_torch_graphs``, ``clocks_tensorrt``: the p50 of CUDA-event
  times against wall clock plus synchronise within 25 %, and every p50 above 10 us (a graph that
  captured nothing, or events on an idle stream, time about 0);
* ``graph_not_slower_than_eager``: graph replay p50 <= eager p50;
* ``graph_replay_after_empty_cache``: a replay after ``gc.collect()``, ``empty_cache()`` and
  fresh allocations still gives the eager network's outputs;
* ``engine_cache_fused_after_unfused``: the Conv+BN-fused network measured after the unfused
  one gets its own engine, and the unfused one is served from the cache again;
* ``ray_half_gpu_tasks``: a local Ray cluster with one GPU and two half-GPU tasks: each task's
  ``CUDA_VISIBLE_DEVICES`` is its accelerator ids, and both name the same slot, the GPU's UUID;
* ``search_gpus_per_trial_1``: a small search with ``ray.gpus_per_trial=1``, the torch backend
  on ``cuda:0`` with CUDA graphs;
* ``optimize_tensorrt``: ``nas.optimize`` timed with TensorRT on a briefly trained export: FP16 and
  INT8 engines (INT8 calibrated on training images) of the network and of its pruned form, each
  run on the validation images and checked against its FP32 network;
* ``optimize_torch_half``: ``nas.optimize`` timed with eager torch on CUDA: fp16 and bf16 variants of
  the same export, each run on the validation images and checked against its FP32 network;
* ``int8_search_trial_tensorrt``: one search trial at ``latency.precision=int8`` on TensorRT.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import json
import logging
import os
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from benchmarks.common import ROOT, machine_and_load, portable
from latency_predictor.measurement.environment import package_version

CLOCK_TOLERANCE = 0.25
"""Largest accepted |event p50 - wall p50| / wall p50."""
MIN_P50_MS = 0.010
"""Every timed p50 must exceed this: a no-op replay or events on an idle stream time about 0."""
DEFAULT_BUDGET_S = 480.0
TIMING_ARCH = "mobilenetv2_100"
TIMING_SHAPE = (1, 3, 224, 224)
SMALL_ARCH = "act_relu-stem_c16-mb_k3_e4_c24_s2_se0.25-mb_k5_e4_c40_s2-rb_k3_c80_s2-mb_k3_e6_c96_s1-head_c256"
"""A small network for the output and cache checks: its engines build in seconds."""
SMALL_SHAPE = (1, 3, 64, 64)
MEASURE = {"warmup_runs": 20, "warmup_s": 0.2, "min_runs": 200, "min_time_s": 0.5, "max_repeats": 2}
PASSED, FAILED, SKIPPED = "passed", "failed", "skipped"


class CheckFailed(Exception):
    """A check found the behaviour wrong; carries its figures."""

    def __init__(self, detail: str, figures: dict[str, Any] | None = None) -> None:
        super().__init__(detail)
        self.figures = figures or {}


@dataclass
class Outcome:
    """One check's result, as written to the record."""

    name: str
    status: str
    detail: str
    seconds: float = 0.0
    figures: dict[str, Any] = field(default_factory=dict)


@dataclass
class Context:
    """What the checks share: the machine's capabilities and a scratch folder."""

    work: Path
    has_gpu: bool
    has_tensorrt: bool
    ort_providers: list[str]
    p50_ms: dict[str, float] = field(default_factory=dict)
    """Event-timed p50s of the clock checks, by check name (the graph-vs-eager check reads them)."""

    @classmethod
    def detect(cls, work: Path) -> Context:
        import onnxruntime as ort

        return cls(work, torch.cuda.is_available(), importlib.util.find_spec("tensorrt") is not None,
                   list(ort.get_available_providers()))

    def missing(self, needs: Sequence[str]) -> str | None:
        """Why a check needing ``needs`` cannot run here, or None."""
        reasons = {
            "gpu": (self.has_gpu, "no GPU: torch sees no CUDA device"),
            "tensorrt": (self.has_tensorrt, "TensorRT is not installed (pip install 'latnas[tensorrt]')"),
            "ort-gpu": ("CUDAExecutionProvider" in self.ort_providers,
                        "ONNX Runtime's GPU build is not installed (bash scripts/install.sh --gpu)"),
            "ort-tensorrt": ("TensorrtExecutionProvider" in self.ort_providers,
                             "ONNX Runtime's GPU build is not installed (bash scripts/install.sh --gpu)"),
        }
        for need in needs:
            ok, why = reasons[need]
            if not ok:
                return why
        return None


# ---------------------------------------------------------------------- pure parts (tested on CPU)


def clock_agreement(event_p50_ms: float, wall_p50_ms: float, tolerance: float = CLOCK_TOLERANCE) -> dict[str, Any]:
    """Compare a runtime's event-timed p50 with the wall-clock-plus-sync p50.

    Raises:
        CheckFailed: either p50 is at most :data:`MIN_P50_MS`, or they differ by more than ``tolerance``.
    """
    rel = abs(event_p50_ms - wall_p50_ms) / wall_p50_ms if wall_p50_ms > 0 else float("inf")
    figures = {"event_p50_ms": event_p50_ms, "wall_p50_ms": wall_p50_ms, "relative_difference": rel}
    if min(event_p50_ms, wall_p50_ms) <= MIN_P50_MS:
        raise CheckFailed(f"a p50 is at most {MIN_P50_MS * 1000:g} us: nothing was timed", figures)
    if rel > tolerance:
        raise CheckFailed(f"event and wall-clock p50 differ by {rel:.0%} (> {tolerance:.0%})", figures)
    return figures


def junit_counts(path: Path) -> dict[str, int]:
    """Tests, failures, errors and skips from a JUnit XML report (pytest's ``--junitxml``)."""
    root = ET.parse(path).getroot()
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    keys = ("tests", "failures", "errors", "skipped")
    return {k: sum(int(s.get(k, 0)) for s in suites) for k in keys}


def half_gpu_consistent(reports: list[dict[str, Any]], uuid: str | None) -> dict[str, Any]:
    """Check what two half-GPU Ray tasks saw: their GPU ids, ``CUDA_VISIBLE_DEVICES`` and slot keys.

    Args:
        reports: per task: ``visible`` (its ``CUDA_VISIBLE_DEVICES``), ``gpu_ids`` (Ray's
            accelerator ids) and ``slot_key`` (of ``cuda:0``).
        uuid: the GPU's UUID (``GPU-...``); None on a logical GPU (no CUDA), where the key is the index.

    Raises:
        CheckFailed: the tasks were given different GPUs, a task's variable is not its ids, or
            the slot key does not name the GPU (by UUID where there is one).
    """
    figures = {"tasks": reports, "uuid": uuid}
    if len(reports) != 2:
        raise CheckFailed(f"expected 2 task reports, got {len(reports)}", figures)
    ids = {tuple(r["gpu_ids"]) for r in reports}
    if len(ids) != 1 or len(next(iter(ids))) != 1:
        raise CheckFailed(f"two half-GPU tasks should share one GPU; Ray gave {sorted(ids)}", figures)
    for r in reports:
        if r["visible"] != ",".join(r["gpu_ids"]):
            raise CheckFailed(f"CUDA_VISIBLE_DEVICES={r['visible']!r} is not the accelerator ids {r['gpu_ids']}",
                              figures)
    want = "cuda-" + (uuid if uuid is not None else reports[0]["gpu_ids"][0])
    keys = {r["slot_key"] for r in reports}
    if keys != {want}:
        raise CheckFailed(f"slot keys {sorted(keys)}; both tasks must hold {want!r}", figures)
    return figures


# ---------------------------------------------------------------------- the checks


def check_versions(ctx: Context) -> dict[str, Any]:
    """Driver, GPUs and library versions; fails when torch's and ONNX Runtime's CUDA majors differ."""
    import onnxruntime as ort

    figures: dict[str, Any] = {
        "gpus": nvidia_smi(), "torch": torch.__version__, "torch_cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if ctx.has_gpu else None,
        "onnxruntime": ort.__version__, "onnxruntime_providers": ctx.ort_providers,
        "onnxruntime_cuda": _ort_cuda_version(), "tensorrt": package_version("tensorrt") if ctx.has_tensorrt else None,
        "ray": package_version("ray"),
    }
    if ctx.has_gpu:
        figures["torch_devices"] = [
            {"index": i, "name": torch.cuda.get_device_name(i),
             "capability": ".".join(map(str, torch.cuda.get_device_capability(i)))}
            for i in range(torch.cuda.device_count())
        ]
    majors = {k: str(figures[k]).split(".")[0] for k in ("torch_cuda", "onnxruntime_cuda") if figures[k]}
    if len(majors) == 2 and len(set(majors.values())) == 2:
        raise CheckFailed(f"torch is built for CUDA {figures['torch_cuda']}, ONNX Runtime for "
                          f"{figures['onnxruntime_cuda']}: they need the same CUDA major", figures)
    return figures


def nvidia_smi() -> list[dict[str, str]] | str:
    """Per GPU: index, name, UUID, driver, MIG mode, memory (``nvidia-smi``), or why there is none."""
    fields = "index,name,uuid,driver_version,mig.mode.current,memory.total"
    try:
        out = subprocess.run(["nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30, check=True).stdout
    except FileNotFoundError:
        return "nvidia-smi not found"
    except subprocess.CalledProcessError as err:
        return f"nvidia-smi failed: {err.stderr.strip() or err.returncode}"
    keys = fields.split(",")
    return [dict(zip(keys, (v.strip() for v in line.split(",")), strict=False)) for line in out.splitlines() if line]


def _ort_cuda_version() -> str | None:
    try:
        from onnxruntime.capi import build_and_package_info as info
    except ImportError:
        return None
    return getattr(info, "cuda_version", None) or None


def _pytest(marker: str, ctx: Context) -> dict[str, Any]:
    xml = ctx.work / f"pytest-{marker}.xml"
    cmd = [sys.executable, "-m", "pytest", "-m", marker, "-q", "-p", "no:cacheprovider", f"--junitxml={xml}", "tests"]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    counts = junit_counts(xml) if xml.exists() else {}
    figures = {"command": " ".join(cmd[1:]), "exit_status": proc.returncode, **counts,
               "tail": proc.stdout[-2000:]}
    ran = counts.get("tests", 0) - counts.get("skipped", 0)
    if proc.returncode != 0 or ran <= 0:
        raise CheckFailed(f"pytest -m {marker}: exit {proc.returncode}, {ran} ran", figures)
    return figures


def check_pytest_gpu(ctx: Context) -> dict[str, Any]:
    """The ``gpu`` test set."""
    return _pytest("gpu", ctx)


def check_pytest_tensorrt(ctx: Context) -> dict[str, Any]:
    """The ``tensorrt`` test set."""
    return _pytest("tensorrt", ctx)


def _small_net() -> tuple[Any, Any]:
    from latency_predictor.measurement.export import build_eval_net
    from search_spaces import Arch

    arch = Arch.decode(SMALL_ARCH)
    torch.manual_seed(0)
    return arch, build_eval_net(arch, num_classes=10)


def _torch_logits(net: Any, shape: tuple[int, ...]) -> np.ndarray:
    from latency_predictor.measurement.export import sample_input

    with torch.no_grad():
        return net(sample_input(shape)).numpy()


def _scaled_diff(got: np.ndarray, want: np.ndarray) -> float:
    return float(np.abs(got.astype(np.float64) - want).max() / np.abs(want).max())


def _ort_check(ctx: Context, provider: str, precision: str) -> dict[str, Any]:
    from latency_predictor.measurement.backends import OnnxRuntimeBackend
    from latency_predictor.measurement.export import sample_input
    from nas.deploy.export import ENGINE_RTOL

    arch, net = _small_net()
    est = OnnxRuntimeBackend(SMALL_SHAPE, provider=provider, precision=precision, num_classes=10,
                             cache_dir=ctx.work / "ort-engines", measure=MEASURE, slot_dir=ctx.work / "slots")
    got = est.run(net, sample_input(SMALL_SHAPE).numpy())
    r = est.measure(arch, net=net)
    diff = _scaled_diff(got, _torch_logits(net, SMALL_SHAPE))
    figures = {"providers": r.extra["providers"], "cpu_fallback": r.environment.get("cpu_fallback"),
               "p50_ms": r.latency_ms, "scaled_diff_vs_torch": diff, "libraries": est.gpu_libraries}
    tolerance = ENGINE_RTOL[precision] if provider == "tensorrt" else 1e-3
    if diff > tolerance:
        raise CheckFailed(f"outputs differ from PyTorch by {diff:.2g} of the largest logit (> {tolerance:g})", figures)
    if r.latency_ms <= MIN_P50_MS:
        raise CheckFailed(f"p50 {r.latency_ms * 1000:.1f} us: nothing was timed", figures)
    return figures


def check_ort_tensorrt_fp32(ctx: Context) -> dict[str, Any]:
    """ONNX Runtime, TensorRT provider (then CUDA, no CPU), fp32."""
    return _ort_check(ctx, "tensorrt", "fp32")


def check_ort_tensorrt_fp16(ctx: Context) -> dict[str, Any]:
    """ONNX Runtime, TensorRT provider (then CUDA, no CPU), fp16."""
    return _ort_check(ctx, "tensorrt", "fp16")


def check_ort_cuda_no_cpu_fallback(ctx: Context) -> dict[str, Any]:
    """ONNX Runtime, CUDA provider alone, CPU fallback disabled."""
    return _ort_check(ctx, "cuda", "fp32")


def _engine_outputs(ctx: Context, precision: str) -> dict[str, Any]:
    from latency_predictor.measurement.backends import TensorRTBackend
    from latency_predictor.measurement.export import export_onnx, sample_input
    from nas.deploy.export import ENGINE_RTOL

    _, net = _small_net()
    trt = TensorRTBackend(SMALL_SHAPE, precision=precision, num_classes=10, cache_dir=ctx.work / "engines",
                          slot=False)
    t0 = time.perf_counter()
    engine = trt.build_engine(export_onnx(net, SMALL_SHAPE), SMALL_SHAPE)
    build_s = time.perf_counter() - t0
    xs = [sample_input(SMALL_SHAPE, seed=s).numpy() for s in (1, 2)]
    got = trt.infer(engine, xs)
    with torch.no_grad():
        want = np.concatenate([net(torch.from_numpy(x)).numpy() for x in xs])
    diff = _scaled_diff(got, want)
    figures = {"build_s": build_s, "scaled_diff_vs_torch": diff, "tolerance": ENGINE_RTOL[precision],
               "tensorrt": trt.trt_version}
    if diff > ENGINE_RTOL[precision]:
        raise CheckFailed(f"engine outputs differ from PyTorch by {diff:.2g} of the largest logit", figures)
    return figures


def check_tensorrt_outputs_fp32(ctx: Context) -> dict[str, Any]:
    """A TensorRT fp32 engine's outputs against PyTorch."""
    return _engine_outputs(ctx, "fp32")


def check_tensorrt_outputs_fp16(ctx: Context) -> dict[str, Any]:
    """A TensorRT fp16 engine's outputs against PyTorch."""
    return _engine_outputs(ctx, "fp16")


def _clocks(ctx: Context, name: str, backend: str, **options: Any) -> dict[str, Any]:
    from latency_predictor.measurement.backends import make_estimator
    from latency_predictor.measurement.timing import MeasureConfig, measure_latency
    from search_spaces import resolve_arch

    est = make_estimator(backend, input_shape=TIMING_SHAPE, measure=MEASURE, slot_dir=ctx.work / "slots", **options)
    cfg = MeasureConfig.from_dict(dict(MEASURE))
    with est.prepared(resolve_arch(TIMING_ARCH)) as p:
        events = measure_latency(p.run_once, cfg, time_once=p.time_once)
        wall = measure_latency(p.run_once, cfg, sync=p.sync)
    ctx.p50_ms[name] = events.stats.p50
    return {**clock_agreement(events.stats.p50, wall.stats.p50), "arch": TIMING_ARCH,
            "input_shape": list(TIMING_SHAPE)}


def check_clocks_torch_eager(ctx: Context) -> dict[str, Any]:
    """Torch eager on cuda:0: event p50 against wall clock plus sync."""
    return _clocks(ctx, "clocks_torch_eager", "torch", device="cuda:0")


def check_clocks_torch_graphs(ctx: Context) -> dict[str, Any]:
    """Torch CUDA-graph replay on cuda:0: event p50 against wall clock plus sync."""
    return _clocks(ctx, "clocks_torch_graphs", "torch", device="cuda:0", cuda_graphs=True)


def check_clocks_tensorrt(ctx: Context) -> dict[str, Any]:
    """A TensorRT fp16 engine: event p50 against wall clock plus sync."""
    return _clocks(ctx, "clocks_tensorrt", "tensorrt", precision="fp16", cache_dir=ctx.work / "engines")


def check_graph_not_slower_than_eager(ctx: Context) -> dict[str, Any]:
    """The graph replay's p50 is at most eager mode's (from the two clock checks, run again if missing)."""
    for key, run in (("clocks_torch_eager", check_clocks_torch_eager),
                     ("clocks_torch_graphs", check_clocks_torch_graphs)):
        if key not in ctx.p50_ms:
            run(ctx)
    figures = {"eager_p50_ms": ctx.p50_ms["clocks_torch_eager"], "graph_p50_ms": ctx.p50_ms["clocks_torch_graphs"]}
    if figures["graph_p50_ms"] > figures["eager_p50_ms"]:
        raise CheckFailed("the CUDA-graph replay is slower than eager mode", figures)
    return figures


def check_graph_replay_after_empty_cache(ctx: Context) -> dict[str, Any]:
    """A replayed graph after gc.collect(), empty_cache() and new allocations gives the eager outputs."""
    from latency_predictor.measurement.backends import TorchBackend
    from search_spaces import resolve_arch

    arch = resolve_arch(TIMING_ARCH)
    torch.manual_seed(0)
    est_eager = TorchBackend(TIMING_SHAPE, device="cuda:0", slot_dir=ctx.work / "slots")
    net = est_eager.build_net(arch)
    with est_eager.prepared(arch, net) as p:
        want = p.run_once().float().cpu()  # type: ignore[attr-defined]
    est = TorchBackend(TIMING_SHAPE, device="cuda:0", cuda_graphs=True, slot_dir=ctx.work / "slots")
    with est.prepared(arch, net) as p:
        gc.collect()
        torch.cuda.empty_cache()
        # Fill freed memory with NaN: a replay reading it would show.
        junk = [torch.full((1 << 20,), float("nan"), device="cuda:0") for _ in range(64)]
        got = p.run_once().float().cpu()  # type: ignore[attr-defined]
        torch.cuda.synchronize(0)
        del junk
    diff = float((got - want).abs().max() / want.abs().max())
    figures = {"scaled_diff_vs_eager": diff, "finite": bool(torch.isfinite(got).all())}
    if not figures["finite"] or diff > 1e-3:
        raise CheckFailed(f"the replay after empty_cache differs from eager by {diff:.2g} of the largest logit",
                          figures)
    return figures


def check_engine_cache_fused_after_unfused(ctx: Context) -> dict[str, Any]:
    """The fused network measured after the unfused one is not served the unfused one's engine."""
    from latency_predictor.measurement.backends import TensorRTBackend
    from nas.deploy.fuse import fuse_conv_bn

    arch, net = _small_net()
    est = TensorRTBackend(SMALL_SHAPE, precision="fp16", num_classes=10, cache_dir=ctx.work / "cache-check",
                          measure=MEASURE, slot_dir=ctx.work / "slots")
    unfused = est.measure(arch, net=net)
    fused = est.measure(arch, net=fuse_conv_bn(net))
    again = est.measure(arch, net=net)
    runs = (("unfused", unfused), ("fused", fused), ("unfused_again", again))
    figures = {name: {"engine_cached": r.extra["engine_cached"], "engine": Path(r.extra["engine_path"]).name,
                      "p50_ms": r.latency_ms} for name, r in runs}
    if fused.extra["engine_cached"] or fused.extra["engine_path"] == unfused.extra["engine_path"]:
        raise CheckFailed("the fused network was served the unfused network's engine", figures)
    if not again.extra["engine_cached"]:
        raise CheckFailed("the unfused network's engine was built again instead of read from the cache", figures)
    return figures


def half_gpu_task_reports() -> tuple[list[dict[str, Any]], str | None]:
    """Start a local Ray cluster with one GPU, run two half-GPU tasks; what each saw, and the GPU's UUID.

    On a machine without a GPU the cluster's GPU is a logical one (Ray's bookkeeping only) and
    the UUID is None.
    """
    import ray

    from latency_predictor.measurement.slot import cuda_uuid

    @ray.remote(num_gpus=0.5, num_cpus=0)
    def task() -> dict[str, Any]:
        from latency_predictor.measurement.slot import slot_key, slot_path

        ids = ray.get_runtime_context().get_accelerator_ids().get("GPU", [])
        return {"visible": os.environ.get("CUDA_VISIBLE_DEVICES"), "gpu_ids": [str(i) for i in ids],
                "slot_key": slot_path("cuda:0", "/nonexistent").stem, "slot_key_by_index": slot_key("cuda:0")}

    ray.init(address="local", num_cpus=2, num_gpus=1, include_dashboard=False, logging_level=logging.WARNING)
    try:
        reports = list(ray.get([task.remote(), task.remote()], timeout=120))
    finally:
        ray.shutdown()
    return reports, cuda_uuid(0)


def check_ray_half_gpu_tasks(ctx: Context) -> dict[str, Any]:
    """Two half-GPU Ray tasks: CUDA_VISIBLE_DEVICES, accelerator ids and the slot key (the GPU's UUID)."""
    reports, uuid = half_gpu_task_reports()
    if uuid is None:
        raise CheckFailed("torch sees no CUDA device here, so the slot key cannot be the GPU's UUID")
    figures = half_gpu_consistent(reports, uuid)
    smi = nvidia_smi()
    gpus = smi if isinstance(smi, list) else []
    figures["nvidia_smi_uuids"] = [g.get("uuid") for g in gpus]
    # Under MIG, CUDA's devices are MIG instances, whose UUIDs nvidia-smi's GPU list does not show.
    mig = any(g.get("mig.mode.current") == "Enabled" for g in gpus)
    if gpus and not mig and uuid not in figures["nvidia_smi_uuids"]:
        raise CheckFailed(f"CUDA's UUID {uuid} is not one nvidia-smi lists", figures)
    return figures


def check_search_gpus_per_trial_1(ctx: Context) -> dict[str, Any]:
    """A small search, one GPU per trial, torch on cuda:0 with CUDA graphs."""
    from nas.cli import compose_search_config
    from nas.core.record import COMPLETED
    from nas.driver import run_search

    work = ctx.work / "search"
    cfg = compose_search_config(
        "+space=tiny", "target_ms=5", "search.n_trials=2", "search.max_concurrent=1", "train.epochs=1",
        "ray.gpus_per_trial=1", "latency=torch", "latency.options.device=cuda:0", "+latency.options.cuda_graphs=true",
        "latency.input_shape=[1,3,32,32]", f"tracking.uri=sqlite:///{work / 'mlflow.db'}", f"output_dir={work / 'out'}",
        "progress=false", "name=gpu-check", "data.max_train_samples=512", "data.max_val_samples=128",
    )
    result = run_search(cfg)
    rows = [{"status": c.status, "latency_device": c.tags.get("latency_device"),
             "ray_gpu_ids": c.tags.get("ray_gpu_ids"), "latency_p50_ms": c.metrics.get("latency_p50")}
            for c in result.candidates]
    figures = {"status": result.status, "candidates": rows}
    done = [r for r in rows if r["status"] == COMPLETED]
    if not done or len(done) != len(rows):
        raise CheckFailed(f"{len(done)} of {len(rows)} candidates completed", figures)
    if any(r["latency_device"] != "cuda:0" or not r["ray_gpu_ids"] for r in done):
        raise CheckFailed("a trial did not measure on its own GPU (latency_device, ray_gpu_ids)", figures)
    return figures


def _exported(ctx: Context) -> Path:
    """A small network trained briefly on digits and exported (``nas.export``), once per run of the checks."""
    from nas.core.config import DataConfig, ExportConfig, TrainConfig
    from nas.deploy.export import ExportTarget, export_candidate
    from search_spaces import Arch

    folder = ctx.work / "exports" / Arch.decode(SMALL_ARCH).arch_id
    if not (folder / "report.json").is_file():
        cfg = ExportConfig(output_dir=str(ctx.work / "exports"), num_classes=10, engine=False,
                           data=DataConfig(max_train_samples=1024, max_val_samples=256),
                           train=TrainConfig(epochs=3, device="cuda"))
        cfg.latency.input_shape = [1, 3, 32, 32]
        cfg.latency.measure = dict(MEASURE)
        cfg.latency.rounds = 1
        export_candidate(ExportTarget(Arch.decode(SMALL_ARCH), "arch_string"), cfg)
    return folder


def _optimize(ctx: Context, backend: str, options: dict[str, Any], precisions: list[str] | None,
              ratios: list[float]) -> dict[str, Any]:
    from nas.core.config import OptimizeConfig, TrainConfig
    from nas.core.errors import OptimizeError
    from nas.deploy.optimize import run_optimize

    cfg = OptimizeConfig(candidate=str(_exported(ctx)), precisions=precisions, engines=False, log=False,
                         train=TrainConfig(epochs=1, lr=0.01, warmup_epochs=0.0, device="cuda"))
    cfg.latency.backend = backend
    cfg.latency.options = {**options, "slot_dir": str(ctx.work / "slots")}
    cfg.latency.measure = dict(MEASURE)
    cfg.latency.rounds = 1
    cfg.calibration.samples = 256
    cfg.check.min_agreement = 0.9  # briefly trained on digits: many near-ties among the logits
    cfg.check.min_agreement_pruned = 0.0
    cfg.prune.ratios = ratios
    cfg.prune.steps = 1
    cfg.prune.sensitivity_samples = 256
    try:
        result = run_optimize(cfg, log=lambda s: None)
        rows = result.rows
    except OptimizeError as err:
        raise CheckFailed(str(err)) from None
    figures = {"variants": [{"variant": r.variant, "precision": r.precision, "status": r.status, "reason": r.reason,
                             "p50_ms": r.latency["p50_ms"] if r.latency else None, "accuracy": r.accuracy,
                             "agreement": r.agreement, "source_agreement": r.source_agreement,
                             "size_bytes": r.size_bytes} for r in rows]}
    made = [r for r in rows if r.status != "skipped"]
    wanted = {"fp32", *(precisions or [])}
    if {r.precision for r in made} < wanted:
        raise CheckFailed(f"precisions made: {sorted({r.precision for r in made})}; wanted {sorted(wanted)}", figures)
    slow = [r.variant for r in made if not r.latency or r.latency["p50_ms"] <= MIN_P50_MS]
    if slow:
        raise CheckFailed(f"p50 at most {MIN_P50_MS * 1000:g} us (nothing timed): {slow}", figures)
    return figures


def check_optimize_tensorrt(ctx: Context) -> dict[str, Any]:
    """``nas.optimize`` timed with TensorRT: FP16 and INT8 engines (calibrated on training images) of the
    network and of its pruned form, each run on the validation images and checked."""
    return _optimize(ctx, "tensorrt", {"device": "cuda:0", "cache_dir": str(ctx.work / "engines")},
                     ["fp16", "int8"], [0.4])


def check_optimize_torch_half(ctx: Context) -> dict[str, Any]:
    """``nas.optimize`` timed with eager torch on CUDA: fp16 and bf16 variants, run and checked."""
    return _optimize(ctx, "torch", {"device": "cuda:0"}, ["fp16", "bf16"], [])


def check_int8_search_trial_tensorrt(ctx: Context) -> dict[str, Any]:
    """One search trial at ``latency.precision=int8`` on TensorRT: an INT8 engine timed, the accuracy after
    quantisation rewarded."""
    from nas.core.config import AccuracyConfig, DataConfig, LatencyConfig, TrainConfig
    from nas.data import load_dataset
    from nas.trial.evaluate import TrialContext, evaluate_candidate
    from search_spaces import load_space

    data = load_dataset(DataConfig(max_train_samples=512, max_val_samples=128))
    tc = TrialContext(space=load_space("tiny"), data=data, train=TrainConfig(epochs=1, device="cuda"),
                      accuracy=AccuracyConfig(), target_ms=1.0, reward="squared", threads=1,
                      latency=LatencyConfig(backend="tensorrt", input_shape=[1, 3, 32, 32], precision="int8",
                                            options={"device": "cuda:0", "cache_dir": str(ctx.work / "engines")},
                                            measure=dict(MEASURE)))
    reports: list[dict[str, Any]] = []
    evaluate_candidate(load_space("tiny").sample(np.random.default_rng(0)).encode(), tc, reports.append)
    last = reports[-1]
    figures = {k: last.get(k) for k in ("status", "latency_ms", "latency_precision", "accuracy", "accuracy_fp32",
                                        "accuracy_precision", "failure_reason")}
    if last.get("status") != "COMPLETED" or last.get("latency_precision") != "int8":
        raise CheckFailed("the int8 trial did not complete with an int8 latency", figures)
    return figures


@dataclass(frozen=True)
class Check:
    """A named check, what it needs, and its function."""

    name: str
    needs: tuple[str, ...]
    run: Callable[[Context], dict[str, Any]]


CHECKS: tuple[Check, ...] = (
    Check("versions", (), check_versions),
    Check("pytest_gpu", ("gpu",), check_pytest_gpu),
    Check("pytest_tensorrt", ("gpu", "tensorrt"), check_pytest_tensorrt),
    Check("ort_tensorrt_fp32", ("gpu", "ort-tensorrt", "tensorrt"), check_ort_tensorrt_fp32),
    Check("ort_tensorrt_fp16", ("gpu", "ort-tensorrt", "tensorrt"), check_ort_tensorrt_fp16),
    Check("ort_cuda_no_cpu_fallback", ("gpu", "ort-gpu"), check_ort_cuda_no_cpu_fallback),
    Check("tensorrt_outputs_fp32", ("gpu", "tensorrt"), check_tensorrt_outputs_fp32),
    Check("tensorrt_outputs_fp16", ("gpu", "tensorrt"), check_tensorrt_outputs_fp16),
    Check("clocks_torch_eager", ("gpu",), check_clocks_torch_eager),
    Check("clocks_torch_graphs", ("gpu",), check_clocks_torch_graphs),
    Check("clocks_tensorrt", ("gpu", "tensorrt"), check_clocks_tensorrt),
    Check("graph_not_slower_than_eager", ("gpu",), check_graph_not_slower_than_eager),
    Check("graph_replay_after_empty_cache", ("gpu",), check_graph_replay_after_empty_cache),
    Check("engine_cache_fused_after_unfused", ("gpu", "tensorrt"), check_engine_cache_fused_after_unfused),
    Check("ray_half_gpu_tasks", ("gpu",), check_ray_half_gpu_tasks),
    Check("search_gpus_per_trial_1", ("gpu",), check_search_gpus_per_trial_1),
    Check("optimize_tensorrt", ("gpu", "tensorrt"), check_optimize_tensorrt),
    Check("optimize_torch_half", ("gpu",), check_optimize_torch_half),
    Check("int8_search_trial_tensorrt", ("gpu", "tensorrt"), check_int8_search_trial_tensorrt),
)


def run_checks(ctx: Context, checks: Sequence[Check], budget_s: float,
               log: Callable[[str], None] = print) -> list[Outcome]:
    """Run ``checks`` in order; each is passed, failed (with why) or skipped (with why)."""
    start = time.perf_counter()
    outcomes = []
    for check in checks:
        missing = ctx.missing(check.needs)
        spent = time.perf_counter() - start
        if missing is not None:
            outcome = Outcome(check.name, SKIPPED, missing)
        elif spent > budget_s:
            outcome = Outcome(check.name, SKIPPED, f"time budget of {budget_s:g} s spent ({spent:.0f} s)")
        else:
            t0 = time.perf_counter()
            try:
                figures = check.run(ctx)
                outcome = Outcome(check.name, PASSED, "", time.perf_counter() - t0, figures)
            except CheckFailed as err:
                outcome = Outcome(check.name, FAILED, str(err), time.perf_counter() - t0, err.figures)
            except Exception as err:  # the record must say which check broke and how, and go on
                outcome = Outcome(check.name, FAILED, f"{type(err).__name__}: {err}", time.perf_counter() - t0)
        log(f"{outcome.status:7s} {outcome.name}" + (f": {outcome.detail}" if outcome.detail else ""))
        outcomes.append(outcome)
    return outcomes


def record(ctx: Context, outcomes: list[Outcome], command: str, seconds: float) -> dict[str, Any]:
    """The JSON record: machine, what the machine can run, every outcome, and a summary line."""
    counts = {s: sum(o.status == s for o in outcomes) for s in (PASSED, FAILED, SKIPPED)}
    summary = f"{counts[PASSED]} passed, {counts[FAILED]} failed, {counts[SKIPPED]} skipped"
    if not ctx.has_gpu:
        summary += ": no GPU here, so every GPU check was skipped; run this on a machine with an NVIDIA GPU"
    return {
        "check": "gpu_check", "command": command, "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "machine": machine_and_load(), "has_gpu": ctx.has_gpu, "has_tensorrt": ctx.has_tensorrt,
        "onnxruntime_providers": ctx.ort_providers, "seconds": seconds, "counts": counts, "summary": summary,
        "checks": [asdict(o) for o in outcomes],
    }


def main(argv: Sequence[str] | None = None) -> int:
    """``python scripts/gpu_check.py``: run the checks, write the record; 1 if a check failed."""
    parser = argparse.ArgumentParser(prog="python scripts/gpu_check.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("gpu_check.json"), help="the JSON record (gpu_check.json)")
    parser.add_argument("--only", nargs="+", choices=[c.name for c in CHECKS], help="run these checks only")
    parser.add_argument("--budget-s", type=float, default=DEFAULT_BUDGET_S,
                        help="start no check after this many seconds (480)")
    args = parser.parse_args(argv)
    checks = [c for c in CHECKS if args.only is None or c.name in args.only]
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="latnas-gpu-check-") as tmp:
        ctx = Context.detect(Path(tmp))
        outcomes = run_checks(ctx, checks, args.budget_s)
    command = " ".join(["python scripts/gpu_check.py", *(argv if argv is not None else sys.argv[1:])])
    rec = record(ctx, outcomes, command, time.perf_counter() - t0)
    args.out.write_text(json.dumps(portable(rec), indent=2, default=str) + "\n")
    print(f"{rec['summary']}; record: {args.out}")
    return 1 if rec["counts"][FAILED] else 0
