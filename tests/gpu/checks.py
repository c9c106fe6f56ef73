"""What the tests on a real GPU share: their networks, sizes and tolerances, when they skip, and
the verdicts that need no GPU (tested on the CPU in ``tests/gpu/test_checks.py``). Where they
write their figures is ``tests/gpu/figures.py``.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]

CLOCK_TOLERANCE = 0.25
"""Largest accepted |event p50 - wall p50| / wall p50."""
MIN_P50_MS = 0.010
"""Every timed p50 must exceed this: a no-op replay or events on an idle stream time about 0."""
ORT_CUDA_RTOL = 1e-3
"""Largest accepted difference from PyTorch, as a fraction of the largest logit, of ONNX Runtime's CUDA provider."""
REPLAY_RTOL = 1e-3
"""Largest accepted difference, as a fraction of the largest logit, of a CUDA-graph replay from eager mode."""
TIMING_ARCH = "mobilenetv2_100"
TIMING_SHAPE = (1, 3, 224, 224)
SMALL_ARCH = "act_relu-stem_c16-mb_k3_e4_c24_s2_se0.25-mb_k5_e4_c40_s2-rb_k3_c80_s2-mb_k3_e6_c96_s1-head_c256"
"""A small network for the output and cache checks: its engines build in seconds."""
SMALL_SHAPE = (1, 3, 64, 64)
MEASURE = {"warmup_runs": 20, "warmup_s": 0.2, "min_runs": 200, "min_time_s": 0.5, "max_repeats": 2}

HAS_CUDA = torch.cuda.is_available()
HAS_TENSORRT = importlib.util.find_spec("tensorrt") is not None
ORT_PROVIDERS = set(ort.get_available_providers())

NO_CUDA = "no GPU: torch sees no CUDA device"
NO_TENSORRT = "TensorRT is not installed (pip install 'latnas[tensorrt]')"
needs_cuda = pytest.mark.skipif(not HAS_CUDA, reason=NO_CUDA)
needs_tensorrt = pytest.mark.skipif(not HAS_TENSORRT, reason=NO_TENSORRT)


def needs_ort(provider: str) -> pytest.MarkDecorator:
    """Skip where ONNX Runtime lacks ``provider`` (``CUDAExecutionProvider``, ``TensorrtExecutionProvider``)."""
    return pytest.mark.skipif(provider not in ORT_PROVIDERS,
                              reason=f"ONNX Runtime has no {provider}: its GPU build is not installed "
                                     "(bash scripts/install.sh --gpu)")


# ---------------------------------------------------------------------- verdicts (tested on the CPU)


def scaled_diff(got: np.ndarray, want: np.ndarray) -> float:
    """The largest difference of ``got`` from ``want``, as a fraction of ``want``'s largest magnitude."""
    return float(np.abs(got.astype(np.float64) - want).max() / np.abs(want).max())


def clock_agreement(event_p50_ms: float, wall_p50_ms: float, tolerance: float = CLOCK_TOLERANCE) -> dict[str, Any]:
    """Compare a runtime's event-timed p50 with the wall-clock-plus-sync p50; the figures.

    Raises:
        AssertionError: either p50 is at most :data:`MIN_P50_MS`, or they differ by more than ``tolerance``.
    """
    rel = abs(event_p50_ms - wall_p50_ms) / wall_p50_ms if wall_p50_ms > 0 else float("inf")
    figures = {"event_p50_ms": event_p50_ms, "wall_p50_ms": wall_p50_ms, "relative_difference": rel}
    if min(event_p50_ms, wall_p50_ms) <= MIN_P50_MS:
        raise AssertionError(f"a p50 is at most {MIN_P50_MS * 1000:g} us: nothing was timed ({figures})")
    if rel > tolerance:
        raise AssertionError(f"event and wall-clock p50 differ by {rel:.0%} (> {tolerance:.0%}) ({figures})")
    return figures


def half_gpu_consistent(reports: list[dict[str, Any]], uuid: str | None) -> dict[str, Any]:
    """Check what two half-GPU Ray tasks saw: their GPU ids, ``CUDA_VISIBLE_DEVICES`` and slot keys.

    Args:
        reports: per task: ``visible`` (its ``CUDA_VISIBLE_DEVICES``), ``gpu_ids`` (Ray's
            accelerator ids) and ``slot_key`` (of ``cuda:0``).
        uuid: the GPU's UUID (``GPU-...``); None on a logical GPU (no CUDA), where the key is the index.

    Raises:
        AssertionError: the tasks were given different GPUs, a task's variable is not its ids, or
            the slot key does not name the GPU (by UUID where there is one).
    """
    figures = {"tasks": reports, "uuid": uuid}
    if len(reports) != 2:
        raise AssertionError(f"expected 2 task reports, got {len(reports)}")
    ids = {tuple(r["gpu_ids"]) for r in reports}
    if len(ids) != 1 or len(next(iter(ids))) != 1:
        raise AssertionError(f"two half-GPU tasks should share one GPU; Ray gave {sorted(ids)}")
    for r in reports:
        if r["visible"] != ",".join(r["gpu_ids"]):
            raise AssertionError(f"CUDA_VISIBLE_DEVICES={r['visible']!r} is not the accelerator ids {r['gpu_ids']}")
    want = "cuda-" + (uuid if uuid is not None else reports[0]["gpu_ids"][0])
    keys = {r["slot_key"] for r in reports}
    if keys != {want}:
        raise AssertionError(f"slot keys {sorted(keys)}; both tasks must hold {want!r}")
    return figures


# ---------------------------------------------------------------------- the GPUs and Ray's half-GPU tasks


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
    except subprocess.TimeoutExpired:
        return "nvidia-smi did not answer in 30 s"
    keys = fields.split(",")
    return [dict(zip(keys, (v.strip() for v in line.split(",")), strict=False)) for line in out.splitlines() if line]


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


def half_gpu_task_reports_apart() -> tuple[list[dict[str, Any]], str | None]:
    """:func:`half_gpu_task_reports` in a Python process of its own: the tests may hold a Ray cluster already."""
    code = ("import json; from tests.gpu.checks import half_gpu_task_reports as r; "
            "reports, uuid = r(); print(json.dumps([reports, uuid]))")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=env,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    reports, uuid = json.loads(proc.stdout.strip().splitlines()[-1])
    return reports, uuid
