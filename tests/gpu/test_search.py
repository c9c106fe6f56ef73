"""On a real GPU: what a search, ``nas.optimize`` and Ray do with it.

Two half-GPU Ray tasks on one GPU, a small search with ``ray.gpus_per_trial=1``, ``nas.optimize``
timed with TensorRT and with torch in half precision, and a search trial at
``latency.precision=int8`` on TensorRT. Every test here carries the ``gpu`` marker, those needing
TensorRT the ``tensorrt`` marker too; each skips, saying why, where its hardware or runtime is
missing. ``scripts/gpu_check.py`` runs them and records their figures.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from nas.cli import compose_search_config
from nas.core.config import AccuracyConfig, DataConfig, ExportConfig, LatencyConfig, OptimizeConfig, TrainConfig
from nas.core.record import COMPLETED
from nas.data import load_dataset
from nas.deploy.export import ExportTarget, export_candidate
from nas.deploy.optimize import run_optimize
from nas.driver import run_search
from nas.trial.evaluate import TrialContext, evaluate_candidate
from search_spaces import Arch, load_space
from tests.gpu.checks import (
    MEASURE,
    MIN_P50_MS,
    SMALL_ARCH,
    half_gpu_consistent,
    half_gpu_task_reports_apart,
    needs_cuda,
    needs_tensorrt,
    nvidia_smi,
)

pytestmark = [pytest.mark.gpu, needs_cuda]


def test_two_half_gpu_ray_tasks_share_the_gpu_and_name_its_slot_by_uuid(figures: Callable[..., None]) -> None:
    """A local Ray cluster with one GPU and two tasks of ``num_gpus=0.5``: each task's
    ``CUDA_VISIBLE_DEVICES`` is its accelerator ids, and both name the same slot, the GPU's UUID."""
    reports, uuid = half_gpu_task_reports_apart()
    smi = nvidia_smi()
    gpus = smi if isinstance(smi, list) else []
    smi_uuids = [g.get("uuid") for g in gpus]
    figures(tasks=reports, uuid=uuid, nvidia_smi_uuids=smi_uuids)
    assert uuid is not None, "torch sees no CUDA device in a fresh process, so the slot key cannot be the GPU's UUID"
    half_gpu_consistent(reports, uuid)
    # Under MIG, CUDA's devices are MIG instances, whose UUIDs nvidia-smi's GPU list does not show.
    mig = any(g.get("mig.mode.current") == "Enabled" for g in gpus)
    if gpus and not mig:
        assert uuid in smi_uuids, f"CUDA's UUID {uuid} is not one nvidia-smi lists"


def test_a_search_with_one_gpu_per_trial_measures_each_trial_on_its_own_gpu(
        tmp_path: Path, figures: Callable[..., None]) -> None:
    """A two-trial search, ``ray.gpus_per_trial=1``, the torch backend on ``cuda:0`` with CUDA graphs."""
    cfg = compose_search_config(
        "+space=tiny", "target_ms=5", "search.n_trials=2", "search.max_concurrent=1", "train.epochs=1",
        "ray.gpus_per_trial=1", "latency=torch", "latency.options.device=cuda:0", "+latency.options.cuda_graphs=true",
        "latency.input_shape=[1,3,32,32]", f"tracking.uri=sqlite:///{tmp_path / 'mlflow.db'}",
        f"output_dir={tmp_path / 'out'}", "progress=false", "name=gpu-check", "data.max_train_samples=512",
        "data.max_val_samples=128",
    )
    result = run_search(cfg)
    rows = [{"status": c.status, "latency_device": c.tags.get("latency_device"),
             "ray_gpu_ids": c.tags.get("ray_gpu_ids"), "latency_p50_ms": c.metrics.get("latency_p50"),
             "failure_reason": c.failure_reason} for c in result.candidates]
    figures(status=result.status, candidates=rows)
    done = [r for r in rows if r["status"] == COMPLETED]
    assert done and len(done) == len(rows), f"{len(done)} of {len(rows)} candidates completed: {rows}"
    assert all(r["latency_device"] == "cuda:0" and r["ray_gpu_ids"] for r in done), \
        f"a trial did not measure on its own GPU (latency_device, ray_gpu_ids): {rows}"


# ---------------------------------------------------------------------- nas.optimize


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """:data:`SMALL_ARCH` trained briefly on digits and exported (``nas.export``), once for the module."""
    out = tmp_path_factory.mktemp("exports")
    cfg = ExportConfig(output_dir=str(out), num_classes=10, engine=False,
                       data=DataConfig(max_train_samples=1024, max_val_samples=256),
                       train=TrainConfig(epochs=3, device="cuda"))
    cfg.latency.input_shape = [1, 3, 32, 32]
    cfg.latency.measure = dict(MEASURE)
    cfg.latency.rounds = 1
    return export_candidate(ExportTarget(Arch.decode(SMALL_ARCH), "arch_string"), cfg).folder


def optimized(exported: Path, work: Path, backend: str, options: dict[str, Any], precisions: list[str],
              ratios: list[float], figures: Callable[..., None]) -> None:
    """``nas.optimize`` on ``exported``, timed with ``backend``: each precision in ``precisions`` made
    (FP32 too), run on the validation images, checked against its FP32 network and timed."""
    cfg = OptimizeConfig(candidate=str(exported), precisions=precisions, engines=False, log=False,
                         train=TrainConfig(epochs=1, lr=0.01, warmup_epochs=0.0, device="cuda"))
    cfg.latency.backend = backend
    cfg.latency.options = {**options, "slot_dir": str(work / "slots")}
    cfg.latency.measure = dict(MEASURE)
    cfg.latency.rounds = 1
    cfg.calibration.samples = 256
    cfg.check.min_agreement = 0.9  # briefly trained on digits: many near-ties among the logits
    cfg.check.min_agreement_pruned = 0.0
    cfg.prune.ratios = ratios
    cfg.prune.steps = 1
    cfg.prune.sensitivity_samples = 256
    rows = run_optimize(cfg, log=lambda s: None).rows
    figures(variants=[{"variant": r.variant, "precision": r.precision, "status": r.status, "reason": r.reason,
                       "p50_ms": r.latency["p50_ms"] if r.latency else None, "accuracy": r.accuracy,
                       "agreement": r.agreement, "source_agreement": r.source_agreement,
                       "size_bytes": r.size_bytes} for r in rows])
    made = [r for r in rows if r.status != "skipped"]
    wanted = {"fp32", *precisions}
    assert {r.precision for r in made} >= wanted, \
        f"precisions made: {sorted({r.precision for r in made})}; wanted {sorted(wanted)}"
    untimed = [r.variant for r in made if not r.latency or r.latency["p50_ms"] <= MIN_P50_MS]
    assert not untimed, f"p50 at most {MIN_P50_MS * 1000:g} us (nothing timed): {untimed}"


@pytest.mark.tensorrt
@needs_tensorrt
def test_optimize_makes_and_checks_tensorrt_fp16_and_int8_engines_of_the_network_and_its_pruned_form(
        exported: Path, tmp_path: Path, figures: Callable[..., None]) -> None:
    """``nas.optimize`` timed with TensorRT: FP16 and INT8 engines (INT8 calibrated on training
    images) of the network and of its pruned form, each run on the validation images and checked."""
    optimized(exported, tmp_path, "tensorrt", {"device": "cuda:0", "cache_dir": str(tmp_path / "engines")},
              ["fp16", "int8"], [0.4], figures)


def test_optimize_makes_and_checks_fp16_and_bf16_variants_timed_with_torch_on_cuda(
        exported: Path, tmp_path: Path, figures: Callable[..., None]) -> None:
    """``nas.optimize`` timed with eager torch on CUDA: fp16 and bf16 variants, run and checked."""
    optimized(exported, tmp_path, "torch", {"device": "cuda:0"}, ["fp16", "bf16"], [], figures)


# ---------------------------------------------------------------------- a search trial at int8


@pytest.mark.tensorrt
@needs_tensorrt
def test_a_search_trial_at_int8_on_tensorrt_completes_with_an_int8_latency(
        tmp_path: Path, figures: Callable[..., None]) -> None:
    """One search trial at ``latency.precision=int8`` on TensorRT: an INT8 engine timed, the
    accuracy after quantisation rewarded."""
    data = load_dataset(DataConfig(max_train_samples=512, max_val_samples=128))
    tc = TrialContext(space=load_space("tiny"), data=data, train=TrainConfig(epochs=1, device="cuda"),
                      accuracy=AccuracyConfig(), target_ms=1.0, reward="squared", threads=1,
                      latency=LatencyConfig(backend="tensorrt", input_shape=[1, 3, 32, 32], precision="int8",
                                            options={"device": "cuda:0", "cache_dir": str(tmp_path / "engines")},
                                            measure=dict(MEASURE)))
    reports: list[dict[str, Any]] = []
    evaluate_candidate(load_space("tiny").sample(np.random.default_rng(0)).encode(), tc, reports.append)
    last = reports[-1]
    figures(**{k: last.get(k) for k in ("status", "latency_ms", "latency_precision", "accuracy", "accuracy_fp32",
                                        "accuracy_precision", "failure_reason")})
    assert last.get("status") == "COMPLETED" and last.get("latency_precision") == "int8", \
        f"the int8 trial did not complete with an int8 latency: {last.get('failure_reason')}"
