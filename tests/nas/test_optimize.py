"""python -m nas.optimize: real INT8 quantisation, real pruning and fine-tuning, real measurement, one table."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from mlflow import MlflowClient

from latency_predictor import ConfigError as LatencyConfigError
from latency_predictor.measurement.backends import make_estimator
from nas.core.config import DataConfig, ExportConfig, OptimizeConfig, TrackingConfig, TrainConfig
from nas.core.errors import ConfigError, OptimizeError
from nas.deploy.distill import distillation_loss
from nas.deploy.export import run_export
from nas.deploy.optimize import OptimizeResult, run_optimize
from search_spaces import Arch, build, count_macs

ARCH = "act_relu-stem_c16-mb_k3_e4_c24_s2-mb_k3_e4_c24_s1-rb_k3_c32_s2-head_c64"
FAST = {"warmup_runs": 2, "warmup_s": 0.0, "min_runs": 10, "min_time_s": 0.02, "max_repeats": 1}
DATA = DataConfig(resolution=16, max_train_samples=192, max_val_samples=96)


@pytest.fixture(scope="module")
def export(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A trained candidate exported and logged to MLflow, as ``python -m nas.export`` leaves it."""
    root = tmp_path_factory.mktemp("optimize")
    uri = f"sqlite:///{root / 'mlflow.db'}"
    cfg = ExportConfig(candidate=ARCH, output_dir=str(root / "exports"), num_classes=10, data=DATA, log_model=True,
                       train=TrainConfig(epochs=2, device="cpu"), tracking=TrackingConfig(uri=uri),
                       train_samples=DATA.max_train_samples, val_samples=DATA.max_val_samples)
    cfg.latency.input_shape = [1, 3, 16, 16]
    cfg.latency.measure = dict(FAST)
    cfg.latency.options = {"slot": False}
    cfg.latency.rounds = 1
    result = run_export(cfg)
    return result.folder, uri


def _config(folder: Path, **changes: object) -> OptimizeConfig:
    cfg = OptimizeConfig(candidate=str(folder), train=TrainConfig(epochs=1, lr=0.01, warmup_epochs=0.0, device="cpu"))
    cfg.latency.measure = dict(FAST)
    cfg.latency.options = {"slot": False}
    cfg.latency.rounds = 2
    cfg.calibration.samples = 64
    cfg.calibration.min_samples = 16
    cfg.check.min_agreement = 0.5  # a briefly trained network of 96 validation images: loose bounds
    cfg.check.min_agreement_pruned = 0.0
    for key, value in changes.items():
        group, _, name = key.partition("__")
        setattr(getattr(cfg, group), name, value) if name else setattr(cfg, key, value)
    return cfg


@pytest.fixture(scope="module")
def optimized(export: tuple[Path, str]) -> OptimizeResult:
    cfg = _config(export[0], prune__ratios=[0.4], prune__steps=1, prune__sensitivity_ratios=[0.5],
                  prune__sensitivity_samples=64, prune__recalibration_batches=2)
    return run_optimize(cfg, log=lambda s: None)


def test_the_table_has_every_variant_timed_sized_and_judged(optimized: OptimizeResult) -> None:
    rows = {r.variant: r for r in optimized.rows}
    assert [r for r in rows if rows[r].status != "skipped"] == ["fp32", "int8", "pruned-0.4", "pruned-0.4-int8"]
    for name in ("fp32", "int8", "pruned-0.4", "pruned-0.4-int8"):
        r = rows[name]
        assert r.status == "passed" and r.backend == "onnxruntime", r.reason
        assert r.latency is not None and 0 < r.latency["p50_ms"] <= r.latency["p99_ms"]
        assert len(r.latency["round_p50_ms"]) == 2 and r.latency["precision"] == r.precision
        assert r.size_bytes > 0 and 0.0 <= r.accuracy <= 1.0 and 0.0 <= r.agreement <= 1.0
    assert rows["fp32"].agreement == 1.0 and rows["fp32"].max_abs_diff < 1e-3  # ONNX Runtime's fp32 = PyTorch's
    assert rows["int8"].precision == "int8" and rows["int8"].size_bytes < 0.6 * rows["fp32"].size_bytes
    assert rows["fp16"].status == "skipped" and "cpu provider" in rows["fp16"].reason
    md = (optimized.folder / "report.md").read_text()
    assert "| variant | precision | backend | p50 ms | p99 ms | speed-up | size | accuracy % | agreement %" in md
    saved = json.loads((optimized.folder / "report.json").read_text())
    assert [v["variant"] for v in saved["variants"]][:4] == ["fp32", "int8", "pruned-0.4", "pruned-0.4-int8"]


def test_the_int8_artefact_is_a_quantised_model_onnx_runtime_runs_in_int8(optimized: OptimizeResult) -> None:
    model = (optimized.folder / "int8" / "model.onnx").read_bytes()
    est = make_estimator("onnxruntime", input_shape=(1, 3, 16, 16), precision="int8", num_classes=10, measure=FAST,
                         slot=False)
    r = est.measure_onnx(model)  # refuses a model that would run any convolution in float
    assert r.precision == "int8"
    rows = {x.variant: x for x in optimized.rows}
    assert rows["int8"].notes["calibration"].startswith("64 training images of digits")


def test_the_pruned_network_is_an_arch_with_fewer_macs_that_can_be_measured_like_any_candidate(
    optimized: OptimizeResult,
) -> None:
    info = json.loads((optimized.folder / "pruned-0.4" / "arch.json").read_text())
    arch = Arch.decode(info["arch"])
    with torch.device("meta"):
        before, after = (count_macs(build(a, num_classes=10), (1, 3, 16, 16)) for a in (Arch.decode(ARCH), arch))
    assert after <= 0.6 * before
    net = build(arch, num_classes=10)
    net.load_state_dict(torch.load(optimized.folder / "pruned-0.4" / "model.pt"))
    assert all(c["passed"] for c in info["checks"])  # its ONNX model against its PyTorch network
    est = make_estimator("onnxruntime", input_shape=(1, 3, 16, 16), num_classes=10, measure=FAST, slot=False)
    r = est.measure(arch)
    assert r.arch == info["arch"] and r.latency_ms > 0
    result = optimized.report["pruning"]["results"][0]
    assert result["removed_share"] >= 0.4 and result["distill"]["on"] and len(result["steps"]) == 1
    assert result["steps"][0]["finetune"]  # fine-tuned after the step


def test_every_variant_is_logged_under_the_export_run(optimized: OptimizeResult, export: tuple[Path, str]) -> None:
    client = MlflowClient(export[1])
    export_run = json.loads((export[0] / "report.json").read_text())["mlflow"]["run_id"]
    for name, run_id in optimized.run_ids.items():
        run = client.get_run(run_id)
        assert run.data.tags["mlflow.parentRunId"] == export_run and run.data.tags["variant"] == name
        assert run.info.status == "FINISHED" and run.data.metrics["latency_p50"] > 0
    assert "optimized" in {a.path for a in client.list_artifacts(export_run)}


@pytest.mark.parametrize("backend", [
    "onnxruntime",
    pytest.param("openvino", marks=pytest.mark.skipif(
        importlib.util.find_spec("openvino") is None or importlib.util.find_spec("nncf") is None,
        reason="OpenVINO or NNCF not installed: pip install 'latnas[openvino]'")),
])
def test_a_variant_below_the_agreement_bound_is_reported_failed_and_not_kept(export: tuple[Path, str],
                                                                             tmp_path: Path, backend: str) -> None:
    from nas.data import load_dataset
    from nas.deploy.calibration import calibration_set

    # Calibration images a thousand times too dark: every activation range collapses and int8 clips.
    data = load_dataset(DATA)
    dark = calibration_set(_config(export[0]).calibration, data, (1, 3, 16, 16)) * 1e-3
    np.save(tmp_path / "dark.npy", dark)
    cfg = _config(export[0], calibration__path=str(tmp_path / "dark.npy"), check__min_agreement=0.9,
                  latency__rounds=1, latency__backend=backend, precisions=["int8"])
    with pytest.raises(OptimizeError, match=r"int8: top-1 agreement 0\.\d+ with fp32 < 0\.9"):
        run_optimize(cfg, log=lambda s: None)
    out = export[0] / "optimized"
    report = json.loads((out / "report.json").read_text())
    int8 = next(v for v in report["variants"] if v["variant"] == "int8")
    assert int8["status"] == "FAILED" and int8["files"] == [] and report["failed"] == ["int8"]
    assert not (out / "int8").exists()
    run = MlflowClient(export[1]).get_run(report["mlflow"]["variant_runs"]["int8"])
    assert run.info.status == "FAILED" and run.data.tags["status"] == "FAILED"


@pytest.mark.parametrize(
    ("changes", "error", "words"),
    [
        ({"prune__ratios": [0.0]}, ConfigError, r"prune\.ratios: each ratio must be in \(0, 1\)"),
        ({"prune__ratios": [1.0]}, ConfigError, r"prune\.ratios: each ratio must be in \(0, 1\)"),
        ({"prune__ratios": [0.95]}, ConfigError, r"prune\.ratios: \[0\.95\] cannot be reached"),
        ({"precisions": ["fp16"]}, LatencyConfigError, "precision 'fp16' cannot run on ONNX Runtime's cpu provider"),
        ({"calibration__samples": 5000}, ConfigError, "the training split has 192"),
        ({"calibration__min_samples": 500, "calibration__samples": 500}, ConfigError, "training split has 192"),
    ],
)
def test_bad_requests_fail_before_any_work(export: tuple[Path, str], changes: dict[str, object],
                                           error: type[Exception], words: str) -> None:
    out = export[0] / "optimized"
    before = sorted(p.name for p in out.iterdir()) if out.exists() else None
    with pytest.raises(error, match=words):
        run_optimize(_config(export[0], **changes), log=lambda s: None)
    assert (sorted(p.name for p in out.iterdir()) if out.exists() else None) == before  # nothing written


@pytest.mark.parametrize(
    ("array", "words"),
    [(np.zeros((64, 3, 32, 32), np.float32), r"shape \[64, 3, 32, 32\]; the network takes images \(N, 3, 16, 16\)"),
     (np.zeros((8, 3, 16, 16), np.float32), "holds 8 images, fewer than calibration.min_samples=16")],
)
def test_a_calibration_set_of_the_wrong_shape_or_too_few_images_is_refused(
    export: tuple[Path, str], tmp_path: Path, array: np.ndarray, words: str
) -> None:
    np.save(tmp_path / "calibration.npy", array)
    with pytest.raises(ConfigError, match=words):
        run_optimize(_config(export[0], calibration__path=str(tmp_path / "calibration.npy")), log=lambda s: None)


def test_distillation_loss_is_hard_plus_temperature_squared_soft() -> None:
    g = torch.Generator().manual_seed(0)
    student, teacher = torch.randn(8, 10, generator=g), torch.randn(8, 10, generator=g)
    labels = torch.randint(0, 10, (8,), generator=g)
    ce = torch.nn.functional.cross_entropy(student, labels)
    assert torch.allclose(distillation_loss(student, teacher, labels, 0.0, 4.0), ce)
    assert float(distillation_loss(teacher, teacher, labels, 1.0, 4.0)) == pytest.approx(0.0, abs=1e-6)
    t = 4.0
    p, q = torch.softmax(teacher / t, 1), torch.log_softmax(student / t, 1)
    kl = (p * (p.log() - q)).sum(1).mean()
    expected = 0.7 * t * t * kl + 0.3 * ce
    assert torch.allclose(distillation_loss(student, teacher, labels, 0.7, t), expected, atol=1e-6)


@pytest.mark.skipif(importlib.util.find_spec("openvino") is None or importlib.util.find_spec("nncf") is None,
                    reason="OpenVINO or NNCF not installed: pip install 'latnas[openvino]'")
def test_openvino_variants_are_ir_files_judged_by_the_same_regression_check(export: tuple[Path, str]) -> None:
    cfg = _config(export[0], latency__backend="openvino", precisions=["int8"], latency__rounds=1)
    result = run_optimize(cfg, log=lambda s: None)
    rows = {r.variant: r for r in result.rows}
    assert [r for r in rows if rows[r].status != "skipped"] == ["fp32", "int8"]
    for name in ("fp32", "int8"):
        r = rows[name]
        assert r.status == "passed" and r.backend == "openvino", r.reason
        assert r.latency is not None and r.latency["precision"] == r.precision and r.latency["p50_ms"] > 0
        assert (result.folder / name / "model.xml").exists() and (result.folder / name / "model.bin").exists()
    assert rows["fp32"].agreement == 1.0 and rows["fp32"].max_abs_diff < 1e-3  # OpenVINO's fp32 = PyTorch's
    assert rows["int8"].notes["calibration"].startswith("64 training images of digits")
    assert " u8" in rows["int8"].notes["runtime_precision"]
