"""Export: a self-contained folder whose models are checked against PyTorch."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import mlflow.pyfunc
import numpy as np
import onnxruntime as ort
import pytest
import torch
from mlflow import MlflowClient

from nas.core.config import DataConfig, ExportConfig, ExportLatencyConfig, TrackingConfig
from nas.core.errors import ExportError, TrackingError
from nas.core.record import SearchRecord
from nas.data import Dataset, load_dataset
from nas.deploy.export import (
    ExportResult,
    ExportTarget,
    compare_outputs,
    engine_options,
    export_candidate,
    merged_latency_settings,
    report_json,
    run_export,
    summary,
    training_calibration,
)
from nas.deploy.export_report import render_report
from nas.deploy.fuse import fuse_conv_bn
from search_spaces import Arch, build
from tests.nas.review_search import SmallSearch, small_search_once

ARCH = "act_relu-stem_c8-mb_k3_e2_c16_s2_se0.25-mb_k5_e1_c16_s1-rb_k3_c24_s2-rb_k3_c48_s2_se0.25"
FAST_MEASURE = {"warmup_runs": 3, "warmup_s": 0.01, "min_runs": 20, "min_time_s": 0.05, "max_repeats": 1}


def fast_config(out: Path, **kw: object) -> ExportConfig:
    """A quick export: its latency measured briefly, and no OpenVINO or LiteRT files unless ``runtimes`` is given
    (tests/nas/test_export_runtimes.py checks those)."""
    kw.setdefault("runtimes", [])
    cfg = ExportConfig(output_dir=str(out), **kw)  # type: ignore[arg-type]
    cfg.latency.input_shape = [1, 3, 32, 32]
    cfg.latency.measure = dict(FAST_MEASURE)
    cfg.latency.options = {"slot": False}
    cfg.latency.rounds = 2
    return cfg


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("exports")
    target = ExportTarget(Arch.decode(ARCH), "arch_string")
    res = export_candidate(target, fast_config(out, space="tiny", num_classes=10))
    return res.folder, res.report


def test_folder_is_named_by_arch_id_and_holds_every_file(exported: tuple[Path, dict]) -> None:
    folder, report = exported
    assert folder.name == Arch.decode(ARCH).arch_id
    for name in ("arch.json", "model.pt", "model.ts", "model.onnx", "report.json", "report.md"):
        assert (folder / name).is_file(), name
    engine_here = importlib.util.find_spec("tensorrt") is not None and torch.cuda.is_available()
    assert (folder / "model.engine").is_file() == engine_here == report["engine"]["built"]
    if not engine_here:  # the report says why there is none and how to build one on the target
        assert report["engine"]["reason"] and report["engine"]["how_to_build"].startswith("trtexec --onnx=model.onnx")
    info = json.loads((folder / "arch.json").read_text())
    assert info["arch"] == ARCH
    assert info["space"] == "tiny"
    assert info["decisions"]["s0.b0.exp_ratio"] == 2
    assert info["input_shape"] == [1, 3, 32, 32]
    assert json.loads((folder / "report.json").read_text())["arch_id"] == info["arch_id"]


def test_onnx_in_a_fresh_session_matches_pytorch(exported: tuple[Path, dict]) -> None:
    folder, report = exported
    net = build(Arch.decode(ARCH), num_classes=10)
    net.load_state_dict(torch.load(folder / "model.pt"))
    net.eval()
    x = torch.randn(1, 3, 32, 32, generator=torch.Generator().manual_seed(7))
    with torch.no_grad():
        want = net(x).numpy()
    sess = ort.InferenceSession(str(folder / "model.onnx"), providers=["CPUExecutionProvider"])
    got = sess.run(None, {sess.get_inputs()[0].name: x.numpy()})[0]
    np.testing.assert_allclose(got, want, atol=1e-5, rtol=1e-4)
    onnx_check = next(c for c in report["checks"] if c["name"].startswith("onnxruntime"))
    assert onnx_check["passed"] and onnx_check["max_abs_diff"] <= onnx_check["atol"]
    assert report["onnx"]["ops"].get("BatchNormalization", 0) == 0


def test_the_reports_loader_gives_back_the_exported_network(exported: tuple[Path, dict], tmp_path: Path) -> None:
    folder, _ = exported
    # The snippet report.md gives, run as written from the export folder in a fresh interpreter.
    md = (folder / "report.md").read_text()
    snippet = md.split("```python\n", 1)[1].split("```", 1)[0]
    x = torch.randn(1, 3, 32, 32, generator=torch.Generator().manual_seed(3))  # the static shape of model.onnx
    torch.save(x, tmp_path / "x.pt")
    x_pt, y_pt = str(tmp_path / "x.pt"), str(tmp_path / "y.pt")
    code = snippet + f"import torch\nwith torch.no_grad():\n    torch.save(net(torch.load({x_pt!r})), {y_pt!r})\n" \
        "print(net.training)\n"
    proc = subprocess.run([sys.executable, "-c", code], cwd=folder, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip().endswith("False")  # eval mode
    sess = ort.InferenceSession(str(folder / "model.onnx"), providers=["CPUExecutionProvider"])
    want = sess.run(None, {sess.get_inputs()[0].name: x.numpy()})[0]
    np.testing.assert_allclose(torch.load(tmp_path / "y.pt").numpy(), want, atol=1e-5, rtol=1e-4)
    from nas.export import load_exported

    with pytest.raises(ExportError, match=r"is not an export folder: no arch.json or model.pt"):
        load_exported(tmp_path)


@pytest.mark.filterwarnings("ignore:.*torch.jit.*:DeprecationWarning")
def test_torchscript_and_fused_graph_match_the_state_dict(exported: tuple[Path, dict]) -> None:
    folder, report = exported
    net = build(Arch.decode(ARCH), num_classes=10)
    net.load_state_dict(torch.load(folder / "model.pt"))
    net.eval()
    x = torch.randn(3, 3, 32, 32)
    scripted = torch.jit.load(str(folder / "model.ts"))
    with torch.no_grad():
        torch.testing.assert_close(scripted(x), net(x), atol=1e-5, rtol=1e-4)
        torch.testing.assert_close(fuse_conv_bn(net)(x), net(x), atol=1e-5, rtol=1e-4)
    assert report["fusion"]["batchnorms_before"] > 0 and report["fusion"]["batchnorms_after"] == 0
    assert all(c["passed"] for c in report["checks"])


@pytest.mark.parametrize(("accuracy", "warned"), [(0.097, True), (0.14, True), (0.16, False), (0.62, False)])
def test_training_at_chance_accuracy_is_printed_with_a_warning(
    exported: tuple[Path, dict], accuracy: float, warned: bool
) -> None:
    folder, report = exported
    training = {"epochs": 1, "dataset": {"name": "cifar10"}, "accuracy": accuracy, "val_loss": 2.3,
                "preprocessing": {"classes": [str(i) for i in range(10)]}}
    r = {**report, "training": training}
    printed = summary(ExportResult(folder, r))
    assert f"trained 1 epoch(s) on cifar10: validation accuracy {accuracy:.4f}" in printed
    assert ("warning: the exported network is at chance accuracy" in printed) == warned
    assert ("where guessing gives 0.100 (10 classes)" in printed) == warned
    assert ("**Warning**: the exported network is at chance accuracy" in render_report(r)) == warned


def _searched_on_a_subset() -> ExportTarget:
    """A candidate of a search that trained on a proxy subset of digits, as the store records it."""
    data = dataclasses.asdict(DataConfig(resolution=16, max_train_samples=128, max_val_samples=64))
    record = SearchRecord(run_id="0" * 32, name="proxy", experiment_id="0", space="tiny", data=data)
    return ExportTarget(Arch.decode(ARCH), "best", search=record)


def test_export_training_uses_the_whole_split_not_the_searchs_subset(tmp_path: Path) -> None:
    whole = load_dataset(DataConfig(resolution=16))  # the search's split, at no subset size
    printed: list[str] = []
    cfg = fast_config(tmp_path)
    cfg.train.epochs = 1
    r = export_candidate(_searched_on_a_subset(), cfg, log=printed.append).report
    assert r["training"]["dataset"]["train"] == whole.n_train > 128
    assert r["training"]["dataset"]["val"] == whole.n_val > 64
    assert r["training"]["data_config"]["max_train_samples"] is None  # what nas.optimize reads back
    assert printed[0] == (
        f"export: training 1 epoch(s) on digits: {whole.n_train:,} training images (the whole training split), "
        f"{whole.n_val:,} validation images (the whole validation split); data.max_train_samples=128 and "
        "data.max_val_samples=64: a search's proxy budget, not applied here (train_samples=N, val_samples=N "
        "train on fewer)"
    )


def test_export_training_takes_its_own_size(tmp_path: Path) -> None:
    printed: list[str] = []
    cfg = fast_config(tmp_path, train_samples=200, val_samples=50)
    cfg.train.epochs = 1
    r = export_candidate(_searched_on_a_subset(), cfg, log=printed.append).report
    assert (r["training"]["dataset"]["train"], r["training"]["dataset"]["val"]) == (200, 50)
    assert printed[0].startswith("export: training 1 epoch(s) on digits: 200 training images (train_samples=200), "
                                 "50 validation images (val_samples=50)")
    untrained: list[str] = []
    export_candidate(_searched_on_a_subset(), fast_config(tmp_path), log=untrained.append)
    assert not any(line.startswith(("export: training", "export: epoch")) for line in untrained)  # none trained


def test_the_export_says_each_epoch_of_its_training_as_it_ends(tmp_path: Path) -> None:
    printed: list[str] = []
    cfg = fast_config(tmp_path, train_samples=200, val_samples=50)
    cfg.train.epochs = 3
    r = export_candidate(_searched_on_a_subset(), cfg, log=printed.append).report
    history = r["training"]["history"]
    epochs = [line for line in printed if line.startswith("export: epoch")]
    assert epochs == [
        f"export: epoch {h['epoch']}/3: train loss {h['train_loss']:.4f}, validation loss {h['val_loss']:.4f}, "
        f"accuracy {h['accuracy']:.4f} ({h['seconds']:.0f} s)" for h in history
    ]
    assert [h["epoch"] for h in history] == [1, 2, 3]
    # said in the order it happens: the plan, each epoch, then the latency measurement
    assert printed[0].startswith("export: training 3 epoch(s) on digits") and printed[1:4] == epochs
    assert printed[4].startswith("export: measuring the latency (onnxruntime, 2 round(s)")


def test_the_export_calls_the_data_by_its_label(tmp_path: Path) -> None:
    # A search on data=cifar10_jpeg: loaded as an image folder, called cifar10_jpeg.
    from PIL import Image

    rng = np.random.default_rng(0)
    for cls in ("cat", "dog", "owl"):
        folder = tmp_path / "images" / cls
        folder.mkdir(parents=True)
        for i in range(8):
            Image.fromarray(rng.integers(0, 255, (20, 30, 3), dtype=np.uint8)).save(folder / f"{i}.png")
    data = dataclasses.asdict(DataConfig(name="image_folder", label="cifar10_jpeg", path=str(tmp_path / "images"),
                                         resolution=16, val_fraction=0.25, cache_dir=str(tmp_path / "cache")))
    target = ExportTarget(Arch.decode(ARCH), "best", search=SearchRecord("0" * 32, "jpeg", "0", data=data))
    printed: list[str] = []
    cfg = fast_config(tmp_path / "out")
    cfg.train.epochs = 1
    result = export_candidate(target, cfg, log=printed.append)
    assert printed[0].startswith("export: training 1 epoch(s) on cifar10_jpeg: 18 training images")
    assert result.report["training"]["dataset"]["label"] == "cifar10_jpeg"
    assert result.report["training"]["dataset"]["name"] == "image_folder"  # the loader, as recorded
    assert "trained 1 epochs on cifar10_jpeg (18 images, 3 classes)" in result.report["weights"]
    assert "final accuracy after 1 epochs on cifar10_jpeg" in (result.folder / "report.md").read_text()
    assert "trained 1 epoch(s) on cifar10_jpeg: validation accuracy" in summary(result)


def test_report_has_latency_before_and_after_fusion_and_the_environment(exported: tuple[Path, dict]) -> None:
    folder, report = exported
    lat = report["latency"]
    assert lat["backend"] == "onnxruntime"
    for stage in ("unfused", "fused"):
        assert 0 < lat[stage]["p50_ms"] <= lat[stage]["p90_ms"] <= lat[stage]["p99_ms"]
    assert lat["torch_eager"]["fused"]["p50_ms"] > 0
    assert lat["rounds"] == 2 and len(lat["fused"]["round_p50_ms"]) == 2
    assert lat["fused"]["p50_ms"] == min(lat["fused"]["round_p50_ms"])
    assert lat["environment"]["onnxruntime"] == ort.__version__
    md = (folder / "report.md").read_text()
    assert "Conv+BN fusion" in md and "p50" in md
    if not report["engine"]["built"]:
        assert "trtexec --onnx=model.onnx" in md


def test_output_check_is_relative_to_the_size_of_the_logits() -> None:
    big = np.array([[3.0, -1.0, 0.5]])
    assert compare_outputs("ok", big + 1e-6, big, 1e-4, 1e-3).passed
    assert not compare_outputs("off", big + 1e-2, big, 1e-4, 1e-3).passed
    # Logits far below atol (an untrained deep network): a 1% error must still fail.
    tiny = big * 1e-9
    check = compare_outputs("tiny", tiny * 1.01, tiny, 1e-4, 1e-3)
    assert not check.passed and check.scaled_diff == pytest.approx(0.01)
    assert not compare_outputs("nan", np.full_like(big, np.nan), big, 1e-4, 1e-3).passed


def test_required_engine_without_tensorrt_is_an_error(tmp_path: Path) -> None:
    try:
        import tensorrt  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("TensorRT is installed here")
    cfg = fast_config(tmp_path, engine=True, num_classes=10)
    with pytest.raises(ExportError, match="engine=true but no TensorRT engine"):
        export_candidate(ExportTarget(Arch.decode(ARCH), "arch_string"), cfg)
    assert not any(tmp_path.iterdir()), "a failed precondition must not leave a half-written export"


def test_int8_engine_is_calibrated_on_the_training_images(tmp_path: Path) -> None:
    data = load_dataset(DataConfig(max_train_samples=64))
    loads: list[int] = []

    def load() -> Dataset:
        loads.append(1)
        return data

    calibration = training_calibration(load)
    cfg = fast_config(tmp_path, engine_precision="int8")
    options = engine_options(cfg, 10, calibration)
    assert options["precision"] == "int8" and options["calibration_data"] is calibration
    assert "calibration_data" not in engine_options(fast_config(tmp_path, engine_precision="fp16"), 10, calibration)
    assert not loads, "the data is loaded only when an engine is calibrated"
    # What the builder asks for: whole batches at the engine's input shape.
    images = calibration(16, (2, 3, 32, 32))
    assert images.shape == (16, 3, 32, 32) and images.dtype == np.float32
    train = data.normalise(torch.from_numpy(data.x_train)).numpy()  # every training image, normalised as training does
    for img in images:
        assert np.isclose(train, img, atol=1e-6).all(axis=(1, 2, 3)).any(), "not a training image"
    # at another resolution, the same images resized
    bigger = calibration(16, (2, 3, 64, 64))
    assert bigger.shape == (16, 3, 64, 64)
    resized = torch.nn.functional.interpolate(torch.from_numpy(images), size=(64, 64), mode="bilinear",
                                              align_corners=False).numpy()
    np.testing.assert_allclose(bigger, resized, atol=1e-5)


@pytest.mark.tensorrt
@pytest.mark.gpu
@pytest.mark.skipif(importlib.util.find_spec("tensorrt") is None or not torch.cuda.is_available(),
                    reason="needs TensorRT and a GPU")
@pytest.mark.parametrize("precision", ["fp16", "int8"])
def test_engine_outputs_are_checked_against_pytorch(precision: str, tmp_path: Path) -> None:
    cfg = fast_config(tmp_path, engine=True, engine_precision=precision, num_classes=10)
    cfg.train.epochs = 1
    cfg.train_samples, cfg.val_samples = 256, 128
    res = export_candidate(ExportTarget(Arch.decode(ARCH), "arch_string"), cfg)
    engine_check = next(c for c in res.report["checks"] if c["name"].startswith("tensorrt"))
    assert engine_check["passed"] and (res.folder / "model.engine").is_file()
    assert (res.report["engine"]["calibration"] is not None) == (precision == "int8")


# ---------------------------------------------------------------------- the best of a real search


@pytest.fixture(scope="module")
def small_search(ray_cluster: None, tmp_path_factory: pytest.TempPathFactory) -> SmallSearch:
    return small_search_once(tmp_path_factory)


def _store_config(small: SmallSearch, out: Path, **kw: object) -> ExportConfig:
    cfg = ExportConfig(output_dir=str(out), tracking=TrackingConfig(uri=small.uri), **kw)  # type: ignore[arg-type]
    cfg.latency.measure = dict(FAST_MEASURE)
    cfg.latency.options = {"slot": False}
    cfg.latency.rounds = 1
    return cfg


@pytest.fixture(scope="module")
def best_export(small_search: SmallSearch, tmp_path_factory: pytest.TempPathFactory) -> ExportResult:
    # no OpenVINO or LiteRT files: tests/nas/test_export_runtimes.py checks those (a LiteRT conversion is most of
    # a minute on two cores)
    cfg = _store_config(small_search, tmp_path_factory.mktemp("best"), register="latnas-test-model",
                        train_samples=256, val_samples=128, runtimes=[])
    cfg.train.epochs = 1
    return run_export(cfg)


def test_best_of_a_search_is_exported_under_its_arch_id(small_search: SmallSearch, best_export: ExportResult) -> None:
    r = best_export.report
    assert best_export.folder.name == r["arch_id"]
    assert r["arch_id"] in small_search.best_arch_ids
    assert r["candidate"]["run_id"] in small_search.best_run_ids
    assert r["candidate"]["parent_run_id"] == small_search.parent_run_id
    info = json.loads((best_export.folder / "arch.json").read_text())
    assert info["space"] == "tiny" and info["input_shape"] == [1, 3, 32, 32] and info["num_classes"] == 10
    assert info["decisions"] and info["preprocessing"]["mean"]
    # The search's latency is reported next to the one measured now, on the same backend and shape.
    assert r["search"]["metrics"]["latency_p50"] > 0 and r["search"]["latency_source"] == "measured (final pass)"
    assert r["latency"]["backend"] == "onnxruntime" and r["latency"]["input_shape"] == [1, 3, 32, 32]
    assert r["training"]["epochs"] == 1 and 0.0 <= r["training"]["accuracy"] <= 1.0
    md = (best_export.folder / "report.md").read_text()
    assert "final accuracy after 1 epochs on digits" in md
    # The search measured beside an anchor network: the export times it right after the fused network.
    anchor = r["latency"]["anchor"]
    assert anchor["network"] == "mobilenetv2_100@0.35" and anchor["paired_with"] == "fused"
    assert anchor["x_anchor"] == pytest.approx(anchor["round_ratios"][0]) and anchor["p50_ms"] > 0
    assert r["search"]["metrics"]["x_anchor"] > 0 and r["search"]["metrics"]["target_x"] == 0.1
    assert "Beside the anchor network `mobilenetv2_100@0.35`, timed right after the fused network" in md
    assert "Latency target of the search: x0.1 `mobilenetv2_100@0.35`" in md


def test_best_export_onnx_matches_its_trained_weights(best_export: ExportResult) -> None:
    info = json.loads((best_export.folder / "arch.json").read_text())
    net = build(Arch.decode(info["arch"]), num_classes=info["num_classes"])
    net.load_state_dict(torch.load(best_export.folder / "model.pt"))
    net.eval()
    x = torch.randn(1, 3, 32, 32, generator=torch.Generator().manual_seed(3))
    sess = ort.InferenceSession(str(best_export.folder / "model.onnx"), providers=["CPUExecutionProvider"])
    with torch.no_grad():
        np.testing.assert_allclose(sess.run(None, {"input": x.numpy()})[0], net(x).numpy(), atol=1e-4, rtol=1e-3)


def test_export_is_logged_under_the_search_and_registered(small_search: SmallSearch, best_export: ExportResult) -> None:
    client = MlflowClient(small_search.uri)
    run = client.get_run(best_export.mlflow_run_id or "")
    assert run.data.tags["latnas.role"] == "export"
    assert run.data.tags["mlflow.parentRunId"] == small_search.parent_run_id
    assert run.data.tags["latnas.exported_from"] == best_export.report["candidate"]["run_id"]
    assert run.data.metrics["latency_p50"] > 0
    assert "export" in {a.path for a in client.list_artifacts(run.info.run_id)}
    versions = client.search_model_versions("name='latnas-test-model'")
    assert [v.run_id for v in versions] == [run.info.run_id]
    previous = mlflow.get_tracking_uri()
    mlflow.set_tracking_uri(small_search.uri)
    try:
        model = mlflow.pyfunc.load_model(best_export.report["mlflow"]["model_uri"])
    finally:
        mlflow.set_tracking_uri(previous)
    out = model.predict(np.zeros((1, 3, 32, 32), dtype=np.float32))
    assert next(iter(out.values())).shape == (1, 10)


def test_unknown_arch_id_and_run_without_architecture_fail_clearly(small_search: SmallSearch, tmp_path: Path) -> None:
    with pytest.raises(ExportError, match=r"no candidate with arch_id '0123456789ab' in experiment 'latnas'"):
        run_export(_store_config(small_search, tmp_path, candidate="0123456789ab"))
    with pytest.raises(TrackingError, match=r"has no architecture \(no 'arch' param\): it is the parent run"):
        run_export(_store_config(small_search, tmp_path, candidate=small_search.parent_run_id))
    assert not any(tmp_path.iterdir())


@pytest.mark.slow
@pytest.mark.ci
def test_command_line_error_is_one_line_and_non_zero(small_search: SmallSearch, tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "nas.export", "candidate=0123456789ab", f"tracking.uri={small_search.uri}"],
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
    )
    assert proc.returncode == 2
    assert proc.stderr.startswith("error: no candidate with arch_id '0123456789ab'")
    assert "Traceback" not in proc.stderr


def test_given_latency_settings_override_the_recorded_ones_one_by_one() -> None:
    recorded = {"backend": "onnxruntime", "options": {"intra_op_threads": 4, "provider": "cpu"},
                "measure": {"min_runs": 50}, "input_shape": [1, 3, 64, 64]}
    given = ExportLatencyConfig(options={"intra_op_threads": 1}, measure={"max_repeats": 2})
    assert merged_latency_settings(recorded, given, [1, 3, 224, 224]) == (
        "onnxruntime", (1, 3, 64, 64), {"intra_op_threads": 1, "provider": "cpu"}, {"min_runs": 50, "max_repeats": 2})
    # the recorded options are the recorded backend's only; a predicted latency is re-measured with ONNX Runtime
    assert merged_latency_settings(recorded, ExportLatencyConfig(backend="torch"), [1, 3, 224, 224])[2] == {}
    assert merged_latency_settings({"backend": "predictor", "options": {"path": "p.json"}}, ExportLatencyConfig(),
                                   [1, 3, 32, 32])[:3] == ("onnxruntime", (1, 3, 32, 32), {})


def test_a_report_is_strict_json_with_non_finite_numbers_as_null() -> None:
    text = report_json({"speedup": np.float32(1.5), "max_abs_diff": float("nan"),
                        "rows": [np.float64("inf"), Path("/x/model.onnx")]})
    assert json.loads(text) == {"speedup": 1.5, "max_abs_diff": None, "rows": [None, "/x/model.onnx"]}
    assert "NaN" not in text and "Infinity" not in text
