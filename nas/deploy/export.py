"""Export one candidate as a self-contained, verified folder (``python -m nas.export``).

The candidate is named by ``candidate=``: ``best`` (the best completed candidate of a search:
the latest one, or ``search=<name or parent run id>``), an ``arch_id``, an MLflow run id, a
reference network name or an architecture string. The folder ``<output_dir>/<arch_id>/`` gets:

* ``arch.json``: the encoding, the space and its decisions, input shape and preprocessing;
* ``model.pt`` (the ``state_dict`` of the builder's network, before fusion) and ``model.ts``
  (TorchScript of the Conv+BN-fused network);
* ``model.onnx``: the fused network, checked by ``onnx.checker`` and run in a fresh ONNX Runtime
  session against PyTorch within a stated tolerance;
* ``model.xml`` + ``model.bin`` (OpenVINO IR, converted from ``model.onnx``) when OpenVINO is there and
  ``model.tflite`` (LiteRT, converted from the fused network) when LiteRT is there, each run on the check
  inputs against PyTorch like the ONNX model (else a note naming the extra to install);
* ``model.engine`` when TensorRT is there (else a note of the ``trtexec`` command that builds it),
  INT8 engines calibrated on the training images (normalised as training normalises them), and
  the engine run on the check inputs against PyTorch like the ONNX model;
* ``report.json`` / ``report.md``: latency re-measured now next to the search's figure, before
  and after Conv+BN fusion (with an anchor network, the fused network's ``x_anchor`` and the
  anchor's ms, the anchor timed right after it in each round), accuracy, parameters, MACs, the
  checks and their results.

Optionally the network is first trained (``train.epochs=N``, the search's training code) on the
search's dataset or another one. The exported ONNX model and the folder are logged to MLflow as
a run nested under the search (registered under a name with ``register=<name>``).
"""

from __future__ import annotations

import functools
import json
import math
import re
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, cast

import numpy as np
import onnx
import torch
import torch.nn.functional as F
from torch import nn

from latency_predictor import BackendUnavailableError, LatencyError, LatencyResult
from latency_predictor.measurement.backends import DEFAULT_BACKEND, LiteRTBackend, OpenVinoBackend, make_estimator
from latency_predictor.measurement.backends.litert_backend import LITERT_FIX
from latency_predictor.measurement.backends.openvino_backend import OPENVINO_FIX
from latency_predictor.measurement.backends.ort_backend import ORT_ERRORS, OnnxRuntimeBackend
from latency_predictor.measurement.backends.tensorrt_backend import CalibrationData, TensorRTBackend
from latency_predictor.measurement.environment import package_version
from latency_predictor.measurement.export import (
    INPUT_NAME,
    OUTPUT_NAME,
    export_onnx,
    sample_input,
    validate_input_shape,
)
from latency_predictor.measurement.paired import anchor_figures, pair
from nas.accuracy.training import EpochResult, resolve_device, train_briefly
from nas.adapters.mlflow_reader import RUN_ID_RE, StoreReader
from nas.adapters.mlflow_writer import StoreWriter
from nas.core.config import CheckConfig, DataConfig, ExportConfig, ExportLatencyConfig, validate_export
from nas.core.errors import ExportError
from nas.core.paths import default_tracking_uri, project_home
from nas.core.record import COMPLETED, Candidate, SearchRecord, latency_provenance
from nas.data import ProxyData, load_dataset
from nas.deploy.export_report import dataset_label, fmt_num, render_report, training_warning
from nas.deploy.fuse import count_batchnorms, fuse_conv_bn
from nas.oneshot.subnet import data_config_of, normalised_as_supernet, supernet_init
from search_spaces import (
    REFERENCES,
    Arch,
    SearchSpace,
    SearchSpaceError,
    anchor_network,
    build,
    count_macs,
    count_params,
    load_space,
    resolve_arch,
)

ARTIFACTS = ("arch.json", "model.pt", "model.ts", "model.onnx", "model.xml", "model.bin", "model.tflite",
             "model.engine", "report.json", "report.md")
"""Files an export writes (and replaces when the same candidate is exported again)."""


# ---------------------------------------------------------------------- the network to export


@dataclass(frozen=True)
class ExportTarget:
    """A network to export and what its search recorded about it.

    Attributes:
        arch: the architecture.
        origin: ``best``, ``run`` (an MLflow run id), ``arch_id``, ``reference`` or ``arch_string``.
        candidate: the search's record of it (None for a reference or an architecture string).
        search: the search it came from (None when not from a search).
    """

    arch: Arch
    origin: str
    candidate: Candidate | None = None
    search: SearchRecord | None = None

    @property
    def search_figures(self) -> dict[str, float]:
        """The search's figures of the candidate, and the search's target as ``target_ms``."""
        keys = ("accuracy", "val_loss", "latency_p50", "latency_p90", "latency_p99", "x_anchor", "anchor_latency_ms",
                "params", "macs", "reward", "meets_target", "epochs_completed", "rung", "rung_train_images",
                "rung_epochs", "accuracy_fp32", "latency_p50_fp32", "latency_p90_fp32", "latency_p99_fp32")
        figures = {k: self.candidate.metrics[k] for k in keys if self.candidate and k in self.candidate.metrics}
        if self.search is not None and self.search.target_ms is not None:
            figures["target_ms"] = self.search.target_ms
        if self.search is not None and self.search.target_x is not None:
            figures["target_x"] = self.search.target_x
        return figures

    @property
    def search_tags(self) -> dict[str, str]:
        """What the search noted about the candidate (latency backend, device, stability, estimator)."""
        keys = ("latency_backend", "latency_device", "latency_stable", "latency_anchor", "target_anchor",
                "accuracy_estimator", "status")
        return {k: self.candidate.tags[k] for k in keys if self.candidate and k in self.candidate.tags}


# ---------------------------------------------------------------------- checks


@dataclass(frozen=True)
class OutputCheck:
    """One comparison of a model's outputs with the unfused PyTorch network's.

    Attributes:
        name: what was compared.
        max_abs_diff: the largest absolute difference of a logit.
        output_scale: the largest absolute logit of the reference.
        scaled_diff: ``max_abs_diff / output_scale``: the difference relative to the outputs' size.
        atol: absolute tolerance.
        rtol: relative tolerance.
        passed: whether both criteria held (see :func:`compare_outputs`).
        detail: how the outputs were obtained.
    """

    name: str
    max_abs_diff: float
    output_scale: float
    scaled_diff: float
    atol: float
    rtol: float
    passed: bool
    detail: str = ""


def load_exported(folder: str | Path) -> nn.Module:
    """The exported network with its trained weights, on the CPU and in eval mode.

    ``model.pt`` is a bare ``state_dict``; this builds the network from ``arch.json`` (its
    architecture string, classes and input channels) and loads the weights into it, unfused:

        from nas.export import load_exported
        net = load_exported("<export folder>")

    Raises:
        ExportError: the folder lacks ``arch.json`` or ``model.pt``, or they do not match.
    """
    where = Path(folder)
    missing = [n for n in ("arch.json", "model.pt") if not (where / n).is_file()]
    if missing:
        raise ExportError(f"{str(where)!r} is not an export folder: no {' or '.join(missing)} in it")
    info = json.loads((where / "arch.json").read_text())
    net = build(Arch.decode(info["arch"]), num_classes=int(info["num_classes"]), in_chans=int(info["input_shape"][1]))
    try:
        net.load_state_dict(torch.load(where / "model.pt", map_location="cpu", weights_only=True))
    except RuntimeError as err:
        raise ExportError(f"{str(where / 'model.pt')!r} does not fit the architecture in arch.json: {err}") from None
    return net.eval()


def compare_outputs(
    name: str, got: np.ndarray, want: np.ndarray, atol: float, rtol: float, detail: str = ""
) -> OutputCheck:
    """Compare two logit arrays; record the largest difference.

    They match when every logit is within ``atol + rtol * |want|`` (``numpy.allclose``) *and* the
    largest difference is within ``rtol`` of the largest logit. The second criterion keeps the
    check meaningful when the logits themselves are far below ``atol`` (an untrained deep network's
    can be 1e-9), where the first alone would pass anything.
    """
    if got.shape != want.shape:
        return OutputCheck(name, math.inf, math.nan, math.inf, atol, rtol, False, f"shape {got.shape} != {want.shape}")
    g, w = got.astype(np.float64), want.astype(np.float64)
    diff = np.abs(g - w)
    scale = float(np.abs(w).max())
    max_diff = float(diff.max())
    scaled = max_diff / scale if scale > 0 else (0.0 if max_diff == 0 else math.inf)
    ok = bool(np.all(np.isfinite(g)) and np.all(diff <= atol + rtol * np.abs(w)) and scaled <= rtol)
    return OutputCheck(name, max_diff, scale, scaled, atol, rtol, ok, detail)


def _inputs(shape: tuple[int, ...], batches: int) -> list[torch.Tensor]:
    return [sample_input(shape, seed=100 + i) for i in range(batches)]


def _torch_out(net: nn.Module, xs: list[torch.Tensor]) -> np.ndarray:
    with torch.no_grad():
        return np.concatenate([net(x).numpy() for x in xs])


# ---------------------------------------------------------------------- the pipeline


@dataclass
class ExportResult:
    """Where the export went and what it found."""

    folder: Path
    report: dict[str, Any]
    mlflow_run_id: str | None = None


def _space_for(cand: ExportTarget, cfg: ExportConfig) -> SearchSpace | None:
    name = cfg.space or (cand.search.space if cand.search else None)
    if name is None:
        return None
    space = load_space(name)
    space.validate(cand.arch)
    return space


def _search_latency(cand: ExportTarget) -> dict[str, Any]:
    return dict(cand.search.latency) if cand.search else {}


LatencySettings = tuple[str, tuple[int, ...], dict[str, Any], dict[str, Any]]
"""Backend, input shape, backend options and protocol settings of a measurement."""


def merged_latency_settings(recorded: Mapping[str, Any], given: ExportLatencyConfig,
                            default_shape: Sequence[int]) -> LatencySettings:
    """The settings ``given`` sets, the rest from ``recorded`` (what a search or an export timed with).

    The backend is the given one, else the recorded one (a predictor's record is re-measured with
    ONNX Runtime); the recorded options count for the recorded backend only, and the given options
    and protocol settings override the recorded ones one by one; the shape is the given one, else
    the recorded one, else ``default_shape``.

    Raises:
        LatencyError: an invalid input shape.
    """
    recorded_backend = recorded.get("backend")
    backend = given.backend or (
        recorded_backend if recorded_backend and recorded_backend != "predictor" else DEFAULT_BACKEND
    )
    options = dict(recorded.get("options") or {}) if backend == recorded_backend else {}
    options.update(given.options)
    measure = {**(recorded.get("measure") or {}), **given.measure}
    shape = given.input_shape or recorded.get("input_shape") or default_shape
    return backend, validate_input_shape([int(d) for d in shape]), options, measure


def latency_settings(cand: ExportTarget, cfg: ExportConfig) -> LatencySettings:
    """Backend, input shape, backend options and protocol settings of the re-measurement: the
    search's latency settings under ``cfg.latency`` (:func:`merged_latency_settings`), timed at the
    precision the search timed when the backend is the search's.

    Raises:
        LatencyError: an invalid input shape.
    """
    searched = _search_latency(cand)
    if searched.get("precision"):
        searched["options"] = {"precision": searched["precision"], **(searched.get("options") or {})}
    return merged_latency_settings(searched, cfg.latency, [1, 3, 224, 224])


def epoch_line(e: EpochResult, epochs: int) -> str:
    """The line printed after each epoch of the export's training."""
    return (f"export: epoch {e.epoch}/{epochs}: train loss {e.train_loss:.4f}, validation loss {e.val_loss:.4f}, "
            f"accuracy {e.accuracy:.4f} ({e.seconds:.0f} s)")


def _train(net: nn.Module, cfg: ExportConfig, data: ProxyData, data_cfg: DataConfig,
           log: Callable[[str], None]) -> dict[str, Any]:
    device = resolve_device(cfg.train.device)
    t0 = time.perf_counter()
    epochs = train_briefly(net, data, cfg.train, device, on_epoch=lambda e: log(epoch_line(e, cfg.train.epochs)))
    net.to("cpu")
    return {
        "epochs": cfg.train.epochs,
        "dataset": {**data.summary(), "label": data_cfg.display_name},
        "accuracy": epochs[-1].accuracy,
        "val_loss": epochs[-1].val_loss,
        "history": [asdict(e) for e in epochs],
        "seconds": time.perf_counter() - t0,
        "device": str(device),
        "settings": asdict(cfg.train),
        "preprocessing": {"scale": 1 / 255, "mean": list(data.mean), "std": list(data.std),
                          "resolution": data.resolution, "classes": list(data.classes)},
    }


def _given_data_config(cand: ExportTarget, cfg: ExportConfig) -> DataConfig:
    if cfg.data is not None:
        return cfg.data
    searched = cand.search.data if cand.search else None
    if searched:
        return DataConfig(**searched)
    # A supernet's own data: its validation split is the one it never trained on.
    return data_config_of(cast(str, cfg.supernet.checkpoint)) if cfg.init == "supernet" else DataConfig()


def export_data_config(cand: ExportTarget, cfg: ExportConfig) -> DataConfig:
    """The data the export trains, validates and calibrates on: the given or the search's data
    and split, at the export's own size (``train_samples``, ``val_samples``; None: the whole
    split), not at a search's proxy budget (``data.max_train_samples``, ``data.max_val_samples``)."""
    return replace(_given_data_config(cand, cfg), max_train_samples=cfg.train_samples,
                   max_val_samples=cfg.val_samples)


def training_plan(data: ProxyData, cfg: ExportConfig, given: DataConfig) -> str:
    """The line printed before the export's training: the data (``given``, as called), its images and the epochs."""
    train = "the whole training split" if cfg.train_samples is None else f"train_samples={cfg.train_samples}"
    val = "the whole validation split" if cfg.val_samples is None else f"val_samples={cfg.val_samples}"
    line = (f"export: training {cfg.train.epochs} epoch(s) on {given.display_name}: {data.n_train:,} training images "
            f"({train}), {data.n_val:,} validation images ({val})")
    proxy = [f"data.{k}={getattr(given, k):,}" for k in ("max_train_samples", "max_val_samples")
             if getattr(given, k) is not None]
    if proxy:
        line += (f"; {' and '.join(proxy)}: a search's proxy budget, not applied here (train_samples=N, "
                 "val_samples=N train on fewer)")
    return line


def _num_classes(cand: ExportTarget, cfg: ExportConfig, data: Callable[[], ProxyData]) -> int:
    if cfg.num_classes is not None:
        return cfg.num_classes
    if cfg.train.epochs > 0 or cfg.init == "supernet":
        return data().num_classes
    searched = cand.search.num_classes if cand.search else None
    return int(searched) if searched else 1000


def _write_torchscript(net: nn.Module, path: Path) -> nn.Module:
    with warnings.catch_warnings():
        # torch 2.9+ marks TorchScript deprecated; it remains the format C++ (libtorch) loads.
        warnings.filterwarnings("ignore", category=DeprecationWarning, message=".*torch.jit.*")
        torch.jit.script(net).save(str(path))
        loaded: nn.Module = torch.jit.load(str(path))
    return loaded.eval()


def _check_onnx(path: Path, xs: list[torch.Tensor], want: np.ndarray, shape: tuple[int, ...], num_classes: int,
                cfg: CheckConfig) -> tuple[OutputCheck, dict[str, Any]]:
    model = onnx.load(str(path))
    try:
        onnx.checker.check_model(model, full_check=True)
    except onnx.checker.ValidationError as err:
        raise ExportError(f"{path.name} failed onnx.checker: {err}") from None
    ops: dict[str, int] = {}
    for node in model.graph.node:
        ops[node.op_type] = ops.get(node.op_type, 0) + 1
    # A fresh session on the file just written (not the exporter's in-memory bytes).
    runner = OnnxRuntimeBackend(shape, slot=False, num_classes=num_classes)
    session = runner.create_session(path.read_bytes())
    try:
        got = np.concatenate([session.run([OUTPUT_NAME], {INPUT_NAME: x.numpy()})[0] for x in xs])
    except ORT_ERRORS as err:
        raise ExportError(f"ONNX Runtime could not run {path.name}: {err}") from None
    info = {
        "opset": int(model.opset_import[0].version), "nodes": len(model.graph.node), "ops": dict(sorted(ops.items())),
        "checker": "passed (full_check=True)", "providers": session.get_providers(),
    }
    check = compare_outputs("onnxruntime vs pytorch", got, want, cfg.atol, cfg.rtol,
                            f"fresh InferenceSession on {path.name}, {len(xs)} random batches")
    return check, info


def _export_openvino(onnx_path: Path, xs: list[torch.Tensor], want: np.ndarray, shape: tuple[int, ...],
                     num_classes: int, cfg: CheckConfig) -> tuple[OutputCheck | None, dict[str, Any]]:
    """``model.xml`` + ``model.bin`` beside ``onnx_path``, converted from it, read back and checked; or None and
    a note naming the extra where OpenVINO is not installed.

    Raises:
        ExportError: OpenVINO is installed but could not convert, read back, compile or run the model.
    """
    try:
        ov = OpenVinoBackend(shape, slot=False, num_classes=num_classes)  # fp32, stated (not the CPU's bf16 default)
    except BackendUnavailableError as err:
        return None, {"written": False, "reason": str(err), "how_to_install": OPENVINO_FIX}
    xml = onnx_path.with_name("model.xml")
    try:
        files = ov.save(ov.read(onnx_path.read_bytes()), xml)
        # The files just written, read back (not the model converted in memory).
        compiled, _ = ov.compile_model(ov.core.read_model(str(xml)))
        request = compiled.create_infer_request()
        got = np.concatenate([np.array(request.infer({0: x.numpy()})[compiled.output(0)]) for x in xs])
    except (LatencyError, RuntimeError) as err:
        raise ExportError(f"{xml.name}: OpenVINO could not convert {onnx_path.name} or run the IR: {err}") from None
    check = compare_outputs(f"openvino ({xml.name}) vs pytorch", got, want, cfg.atol, cfg.rtol,
                            f"{xml.name} read by openvino.Core, compiled for CPU in f32, {len(xs)} random batches")
    return check, {"written": True, "files": [f.name for f in files], "converted_from": onnx_path.name,
                   "openvino": package_version("openvino"), "check": check.name}


def _export_litert(net: nn.Module, path: Path, xs: list[torch.Tensor], want: np.ndarray, shape: tuple[int, ...],
                   num_classes: int, cfg: CheckConfig) -> tuple[OutputCheck | None, dict[str, Any]]:
    """``net`` converted to a LiteRT flatbuffer at ``path``, run from the file and checked; or None and a note
    naming the extra where LiteRT (the interpreter or the converter) is not installed.

    Raises:
        ExportError: LiteRT is installed but could not convert or run the network.
    """
    try:
        litert = LiteRTBackend(shape, slot=False, num_classes=num_classes)
    except BackendUnavailableError as err:
        return None, {"written": False, "reason": str(err), "how_to_install": LITERT_FIX}
    try:
        path.write_bytes(litert.convert(net, shape))
        model = path.read_bytes()
        got = np.concatenate([litert.run_model(model, x.numpy()) for x in xs])
    except LatencyError as err:
        raise ExportError(f"{path.name}: {err}") from None
    check = compare_outputs(f"litert ({path.name}) vs pytorch", got, want, cfg.atol, cfg.rtol,
                            f"{path.name} run by the LiteRT interpreter (XNNPACK), {len(xs)} random batches")
    return check, {"written": True, "files": [path.name], "converted_from": "the fused network (litert-torch)",
                   "ai_edge_litert": package_version("ai-edge-litert"),
                   "litert_torch": package_version("litert-torch"), "check": check.name}


ENGINE_RTOL = {"fp32": 1e-2, "fp16": 5e-2, "int8": 0.25}
"""Default largest difference of an engine's logits from PyTorch's, relative to the largest logit.

fp32 engines may use TF32 (TensorRT's default on Ampere and newer); fp16 and int8 round more.
Loose enough for rounding, tight enough to catch an engine that computes something else (wrong
bindings, scales calibrated on the wrong data)."""


def training_calibration(data: Callable[[], ProxyData], seed: int = 0) -> CalibrationData:
    """INT8 calibration images from the training split of ``data()`` (loaded at the first call).

    The images are normalised as training normalises them (``normalise``) and resized to the
    engine's input, so the calibrated scales fit the inputs the network will see.

    Raises (when called):
        ExportError: an input with other than 3 channels.
    """

    def images(count: int, input_shape: tuple[int, ...]) -> np.ndarray:
        if input_shape[1] != 3:
            raise ExportError(f"INT8 calibration on training images needs 3-channel input, got {input_shape}")
        ds = data()
        xb, _ = ds.sample_train(count, seed)
        if len(xb) < count:  # fewer training images than asked for: repeat them
            xb = xb[torch.arange(count) % len(xb)]
        x = ds.normalise(xb)
        if tuple(x.shape[-2:]) != tuple(input_shape[-2:]):
            x = F.interpolate(x, size=tuple(input_shape[-2:]), mode="bilinear", align_corners=False)
        return x.numpy()

    return images


def engine_options(cfg: ExportConfig, num_classes: int, calibration: CalibrationData) -> dict[str, Any]:
    """The TensorRT builder's options for the export's engine (INT8: calibrated on ``calibration``)."""
    options: dict[str, Any] = {"precision": cfg.engine_precision, "slot": False, "num_classes": num_classes}
    if cfg.engine_precision == "int8":
        options["calibration_data"] = calibration
    return options


def _check_engine(trt: TensorRTBackend, engine: bytes, xs: list[torch.Tensor], want: np.ndarray,
                  cfg: CheckConfig) -> OutputCheck:
    got = trt.infer(engine, [x.numpy() for x in xs])
    rtol = cfg.engine_rtol if cfg.engine_rtol is not None else ENGINE_RTOL[trt.precision]
    scale = float(np.abs(want).max())
    # Rounding of fp16/int8 is relative to the logits' size, not to each logit: the largest logit sets it.
    return compare_outputs(f"tensorrt {trt.precision} vs pytorch", got, want, rtol * scale, rtol,
                           f"model.engine run by TensorRT on {len(xs)} random batches")


def _trtexec_command(precision: str) -> str:
    flag = {"fp16": " --fp16", "int8": " --int8"}.get(precision, "")
    return f"trtexec --onnx=model.onnx --saveEngine=model.engine{flag}"


def _engine_builder(
    cfg: ExportConfig, shape: tuple[int, ...], num_classes: int, calibration: CalibrationData
) -> tuple[TensorRTBackend | None, dict[str, Any]]:
    """The TensorRT builder to use, or None and the note saying why there is none.

    Raises:
        ExportError: ``engine=true`` where TensorRT or a GPU is missing.
    """
    cmd = _trtexec_command(cfg.engine_precision)
    if cfg.engine is False:
        return None, {"built": False, "reason": "not requested (engine=false)", "how_to_build": cmd}
    try:
        return TensorRTBackend(shape, **engine_options(cfg, num_classes, calibration)), {}
    except LatencyError as err:
        if cfg.engine is True:
            raise ExportError(f"engine=true but no TensorRT engine can be built here: {err}") from None
        return None, {"built": False, "reason": str(err), "how_to_build": cmd}


def _build_engine(trt: TensorRTBackend, onnx_bytes: bytes, shape: tuple[int, ...], out: Path,
                  data_cfg: DataConfig) -> tuple[bytes, dict[str, Any]]:
    t0 = time.perf_counter()
    engine = trt.build_engine(onnx_bytes, shape)
    (out / "model.engine").write_bytes(engine)
    calibration = None
    if trt.precision == "int8":
        calibration = (f"{len(trt.calibration_images(shape))} training images of {data_cfg.name}, "
                       f"normalised and resized to {shape[2]}x{shape[3]}")
    return engine, {
        "built": True, "file": "model.engine", "precision": trt.precision, "tensorrt": trt.trt_version,
        "gpu": trt.gpu_name, "build_s": time.perf_counter() - t0, "bytes": len(engine),
        "calibration": calibration,
        "note": "an engine runs only on the GPU model and TensorRT version it was built with",
        "how_to_build": _trtexec_command(trt.precision),
    }


def _latency(lat: LatencyResult, rounds: list[float]) -> dict[str, Any]:
    return {
        "p50_ms": lat.stats.p50, "p90_ms": lat.stats.p90, "p99_ms": lat.stats.p99, "mean_ms": lat.stats.mean,
        "cv": lat.stats.cv, "runs": lat.stats.n, "stable": lat.stable, "backend": lat.backend,
        "device": lat.device, "precision": lat.precision, "source": lat.source,
        "cpu_per_wall": lat.extra.get("cpu_per_wall"), "round_p50_ms": rounds,
    }


def _measure(backend: str, shape: tuple[int, ...], options: dict[str, Any], measure: dict[str, Any],
             num_classes: int, arch: Arch, nets: dict[str, nn.Module], rounds: int,
             anchor: str | None = None) -> dict[str, Any]:
    """Each of ``nets`` timed once per round, in order, and ``anchor`` (if any) right after the last of them."""
    est = make_estimator(backend, input_shape=list(shape), measure=dict(measure), num_classes=num_classes, **options)
    results: dict[str, list[LatencyResult]] = {name: [] for name in nets}
    beside: list[LatencyResult] = []
    anchor_arch = anchor_network(anchor, max(shape[2:])) if anchor is not None else None
    for _ in range(rounds):
        for name, net in nets.items():
            results[name].append(est.measure(arch, net=net))
        if anchor_arch is not None:
            beside.append(est.measure(anchor_arch))
    best = {name: min(rs, key=lambda r: r.stats.p50) for name, rs in results.items()}
    out: dict[str, Any] = {"backend": backend, "options": options, "input_shape": list(shape), "rounds": rounds}
    for name, rs in results.items():
        out[name] = _latency(best[name], [r.stats.p50 for r in rs])
    out["speedup_p50"] = best["unfused"].stats.p50 / best["fused"].stats.p50
    out["environment"] = best["fused"].environment
    last = list(nets)[-1]
    fig = anchor_figures(pair(results[last], beside, "p50", anchor)) if anchor_arch is not None else None
    if anchor_arch is not None and fig is not None:
        out["anchor"] = {"network": anchor, "arch": anchor_arch.encode(), "paired_with": last, "stat": "p50",
                         "p50_ms": fig.anchor_ms, "x_anchor": fig.x_anchor, "round_ratios": list(fig.ratios),
                         "round_p50_ms": [r.stats.p50 for r in beside]}
    return out


def export_candidate(cand: ExportTarget, cfg: ExportConfig, log: Callable[[str], None] = print) -> ExportResult:
    """Build, (train,) fuse, write, check and time one candidate; write its reports.

    Args:
        cand: the network and what the search recorded about it.
        cfg: export settings.
        log: where the export says what it does: the training's data and budget before it starts,
            each epoch's losses and accuracy as it ends, the latency measurement as it begins.

    Returns:
        The folder and the report (MLflow logging is :func:`run_export`'s).

    Raises:
        ExportError: a written model failed its check, or a required engine cannot be built.
        SearchSpaceError: the architecture is not in the given space.
        LatencyError: the latency backend is unavailable or the measurement failed.
        NASError: the training data cannot be loaded or training diverged.
    """
    t_start = time.perf_counter()
    validate_export(cfg)
    arch = cand.arch
    space = _space_for(cand, cfg)
    backend, shape, options, measure = latency_settings(cand, cfg)
    anchor = cfg.latency.anchor or (cand.search.anchor if cand.search else None)
    data_cfg = export_data_config(cand, cfg)
    data = functools.cache(lambda: load_dataset(data_cfg))  # loaded when training or calibrating
    if cfg.init == "supernet":  # inputs normalised as the supernet's training normalised them
        data = functools.cache(lambda d=data: normalised_as_supernet(d(), cast(str, cfg.supernet.checkpoint)))
    num_classes = _num_classes(cand, cfg, data)
    trt, engine = _engine_builder(cfg, shape, num_classes, training_calibration(data, cfg.seed))
    out = (Path(cfg.output_dir).expanduser().resolve() if cfg.output_dir else project_home() / "exports") / arch.arch_id
    out.mkdir(parents=True, exist_ok=True)
    for name in ARTIFACTS:
        (out / name).unlink(missing_ok=True)

    torch.manual_seed(cfg.seed)
    net = build(arch, num_classes=num_classes, in_chans=shape[1], dropout=cfg.train.dropout)
    init = None
    if cfg.init == "supernet":  # the supernet's weights, recalibrated; then fine-tuned with its normalisation
        net, init = supernet_init(arch, cast(str, cfg.supernet.checkpoint), space, data(), data_cfg, num_classes,
                                  cfg.supernet.bn_batches, cfg.supernet.batch_size, cfg.seed)
        net.dropout.p = cfg.train.dropout
    if cfg.train.epochs > 0:
        log(training_plan(data(), cfg, _given_data_config(cand, cfg)))
    training = _train(net, cfg, data(), data_cfg, log) if cfg.train.epochs > 0 else None
    if training is not None:
        training["data_config"] = asdict(data_cfg)  # what nas.optimize validates and calibrates on
    net.eval()
    fused = fuse_conv_bn(net)

    xs = _inputs(shape, cfg.check.batches)
    want = _torch_out(net, xs)
    checks = [compare_outputs("fused vs unfused (pytorch)", _torch_out(fused, xs), want, cfg.check.atol,
                              cfg.check.rtol, f"{count_batchnorms(net)} BatchNorm layers folded")]

    torch.save(net.state_dict(), out / "model.pt")
    scripted = _write_torchscript(fused, out / "model.ts")
    checks.append(compare_outputs("torchscript vs pytorch", _torch_out(scripted, xs), want, cfg.check.atol,
                                  cfg.check.rtol, "torch.jit.load of model.ts"))
    onnx_bytes = export_onnx(fused, shape)
    (out / "model.onnx").write_bytes(onnx_bytes)
    onnx_check, onnx_info = _check_onnx(out / "model.onnx", xs, want, shape, num_classes, cfg.check)
    checks.append(onnx_check)
    runtimes: dict[str, dict[str, Any]] = {}  # only those asked for (runtimes=[...])
    ov_check = lite_check = None
    if "openvino" in cfg.runtimes:
        ov_check, runtimes["openvino"] = _export_openvino(out / "model.onnx", xs, want, shape, num_classes,
                                                          cfg.check)
    if "litert" in cfg.runtimes:
        lite_check, runtimes["litert"] = _export_litert(fused, out / "model.tflite", xs, want, shape, num_classes,
                                                        cfg.check)
    checks += [c for c in (ov_check, lite_check) if c is not None]
    if trt is not None:
        engine_bytes, engine = _build_engine(trt, onnx_bytes, shape, out, data_cfg)
        checks.append(_check_engine(trt, engine_bytes, xs, want, cfg.check))

    nets = {"unfused": net, "fused": fused}
    log(f"export: measuring the latency ({backend}, {cfg.latency.rounds} round(s) of the unfused and the fused "
        "network" + (f" and the anchor {anchor}" if anchor else "")
        + (", then eager PyTorch" if backend != "torch" else "") + ")")
    latency = _measure(backend, shape, options, measure, num_classes, arch, nets, cfg.latency.rounds, anchor)
    if backend != "torch":
        # Runtimes that compile a graph fold BatchNorm themselves; eager PyTorch does not.
        slot = {"slot": options["slot"]} if "slot" in options else {}
        latency["torch_eager"] = _measure("torch", shape, slot, measure, num_classes, arch, nets, cfg.latency.rounds)

    with torch.device("meta"):
        meta = build(arch, num_classes=num_classes, in_chans=shape[1])
    load = {
        "model.pt": "nas.export.load_exported(folder), or: search_spaces.build(Arch.decode(arch), "
                    "num_classes, in_chans).load_state_dict(torch.load(...))",
        "model.ts": "torch.jit.load('model.ts')  # Conv+BN fused",
        "model.onnx": "onnxruntime.InferenceSession('model.onnx')  # Conv+BN fused",
    }
    if runtimes.get("openvino", {}).get("written"):
        load["model.xml"] = "openvino.Core().read_model('model.xml')  # Conv+BN fused, weights in model.bin"
    if runtimes.get("litert", {}).get("written"):
        load["model.tflite"] = "ai_edge_litert.interpreter.Interpreter(model_path='model.tflite')  # Conv+BN fused"
    arch_info = {
        "arch": arch.encode(), "arch_id": arch.arch_id,
        "space": space.name if space else (cand.search.space if cand.search else None),
        "decisions": space.to_decisions(arch) if space else (cand.candidate.decisions if cand.candidate else None),
        "input_shape": list(shape),
        "input_name": INPUT_NAME, "output_name": OUTPUT_NAME, "layout": "NCHW", "dtype": "float32",
        "num_classes": num_classes,
        "preprocessing": training["preprocessing"] if training else (init["preprocessing"] if init else None),
        "weights": _weights_note(training, cfg.seed, init),
        "load": load,
    }
    report = {
        "arch": arch.encode(), "arch_id": arch.arch_id,
        "candidate": {"origin": cand.origin, "run_id": cand.candidate.run_id if cand.candidate else None,
                      "parent_run_id": cand.search.run_id if cand.search else None,
                      "search": cand.search.name if cand.search else None, "space": arch_info["space"]},
        "params": count_params(meta), "macs": count_macs(meta, shape), "num_classes": num_classes,
        "search": {"metrics": cand.search_figures,
                   "latency_source": (latency_provenance(cand.candidate) or None) if cand.candidate else None,
                   # the precision its search figures (latency, and the accuracy the reward used) are at
                   "precision": (cand.candidate.precision or None) if cand.candidate else None,
                   "tags": cand.search_tags},
        "training": training, "init": init, "weights": arch_info["weights"],
        "fusion": {
            "batchnorms_before": count_batchnorms(net), "batchnorms_after": count_batchnorms(fused),
            "onnx_batchnorm_nodes_unfused": _onnx_batchnorm_nodes(export_onnx(net, shape)),
        },
        "checks": [asdict(c) for c in checks], "onnx": onnx_info, "runtimes": runtimes, "engine": engine,
        "latency": latency,
        "files": [n for n in ARTIFACTS if (out / n).exists() or n in ("arch.json", "report.json", "report.md")],
        "export_seconds": time.perf_counter() - t_start,
    }
    (out / "arch.json").write_text(report_json(arch_info))
    _write_reports(out, report)
    failed = [c for c in checks if not c.passed]
    if failed:
        names = ", ".join(f"{c.name} (max |diff| {c.max_abs_diff:.3g}, {c.scaled_diff:.3g} of the largest logit)"
                          for c in failed)
        raise ExportError(f"exported model(s) differ from PyTorch beyond atol={cfg.check.atol:g}, "
                          f"rtol={cfg.check.rtol:g}: {names}; see {out / 'report.md'}")
    return ExportResult(out, report)


def _onnx_batchnorm_nodes(model: bytes) -> int:
    return sum(n.op_type == "BatchNormalization" for n in onnx.load_from_string(model).graph.node)


def _write_reports(out: Path, report: dict[str, Any]) -> None:
    (out / "report.json").write_text(report_json(report))
    (out / "report.md").write_text(render_report(report))


def _weights_note(training: dict[str, Any] | None, seed: int, init: dict[str, Any] | None = None) -> str:
    if init is not None:
        start = (f"the supernet's weights ({init['checkpoint']}, {init['epochs']} epochs), BatchNorm recalibrated on "
                 f"{init['bn_recalibration']['images']} training images (validation accuracy {init['accuracy']:.4f})")
        if training is None:
            return start
        return f"{start}, then fine-tuned {training['epochs']} epochs"
    if training is None:
        return (f"untrained: the builder's initialisation (seed {seed}); pass train.epochs=N to train "
                "before export")
    ds = training["dataset"]
    return (f"trained {training['epochs']} epochs on {dataset_label(ds)} ({ds['train']} images, {ds['classes']} "
            "classes)")


def report_json(obj: Any) -> str:
    """``obj`` as indented JSON text: numpy scalars as numbers, paths as strings, and a non-finite
    float as null (strict JSON, which readers other than Python's take too).

    Raises:
        TypeError: a value JSON cannot hold.
    """
    return json.dumps(_plain(obj), indent=2, allow_nan=False) + "\n"


def _plain(o: Any) -> Any:
    if isinstance(o, dict):
        return {k: _plain(v) for k, v in o.items()}
    if isinstance(o, list | tuple):
        return [_plain(v) for v in o]
    if isinstance(o, np.generic):
        o = o.item()
    if isinstance(o, Path):
        return str(o)
    if isinstance(o, float) and not math.isfinite(o):
        return None
    return o


# ---------------------------------------------------------------------- finding the candidate

ARCH_ID_RE = re.compile(r"[0-9a-f]{12}")


def _from_run(reader: StoreReader, run_id: str, origin: str) -> ExportTarget:
    cand, search = reader.candidate(run_id)
    return ExportTarget(Arch.decode(cand.arch), origin, cand, search)


def _best(reader: StoreReader, search: str | None) -> ExportTarget:
    record = reader.find_search(search)
    done = [c for c in reader.candidates(record.run_id) if c.status == COMPLETED and math.isfinite(c.reward)]
    if not done:
        raise ExportError(f"search {record.name!r} ({record.run_id}) has no completed candidate to export")
    # Among equal rewards, the one the search itself named best (its parent's best_arch_id tag).
    tied = [c for c in done if c.reward == done[0].reward]
    named = [c for c in tied if c.arch_id == record.best_arch_id]
    best = (named or tied)[0]
    return ExportTarget(Arch.decode(best.arch), "best", best, record)


def resolve_candidate(cfg: ExportConfig) -> tuple[ExportTarget, StoreReader | None]:
    """Turn ``cfg.candidate`` into an :class:`ExportTarget` (and the store it came from, if any).

    ``best`` and 12-hex-digit arch_ids are looked up in ``cfg.search`` (default: the latest search
    for ``best``, every search of the experiment for an arch_id); a 32-hex-digit string is a run
    id; anything else is a reference name or an architecture string.

    Raises:
        TrackingError: the store, experiment, search or run does not exist, or a run without an
            architecture.
        ExportError: no candidate by that arch_id, no completed candidate in the search.
        SearchSpaceError: a malformed architecture string (naming the token).
    """
    text = cfg.candidate.strip()
    if text == "best":
        reader = StoreReader(cfg.tracking.uri, cfg.tracking.experiment)
        return _best(reader, cfg.search), reader
    if RUN_ID_RE.fullmatch(text):
        reader = StoreReader(cfg.tracking.uri, cfg.tracking.experiment)
        return _from_run(reader, text, "run"), reader
    if ARCH_ID_RE.fullmatch(text):
        reader = StoreReader(cfg.tracking.uri, cfg.tracking.experiment)
        parent = reader.find_search(cfg.search) if cfg.search else None
        runs = reader.find_arch_id(text, parent.run_id if parent else None)
        if not runs:
            where = f"search {parent.name!r}" if parent else f"experiment {reader.experiment!r}"
            raise ExportError(f"no candidate with arch_id {text!r} in {where} of {reader.uri}")
        done = [r for r in runs if r.tags.get("status") == COMPLETED]
        return _from_run(reader, (done or runs)[0].run_id, "arch_id"), reader
    if text in REFERENCES:
        return ExportTarget(resolve_arch(text), "reference"), None
    try:
        return ExportTarget(Arch.decode(text), "arch_string"), None
    except SearchSpaceError as err:
        raise ExportError(
            f"candidate={text!r} is not 'best', an arch_id (12 hex digits), an MLflow run id (32 hex digits), "
            f"a reference network ({', '.join(sorted(REFERENCES))}) or a valid architecture string: {err}"
        ) from None


# ---------------------------------------------------------------------- MLflow


def log_to_mlflow(result: ExportResult, cand: ExportTarget, cfg: ExportConfig, reader: StoreReader | None) -> None:
    """Log the export as a run nested under the candidate's search, with the ONNX model; register it if asked.

    The run id, model URI and registered version are added to the report files before they are uploaded.
    """
    if reader is None:  # a network from outside the store: the store is created when missing
        writer = StoreWriter(cfg.tracking.uri or default_tracking_uri(), cfg.tracking.experiment)
    else:
        writer = StoreWriter(reader.uri, reader.experiment, create=False)
    r = result.report
    parent_run_id = cand.search.run_id if cand.search else None
    run_id = writer.create_export_run(r["arch_id"], parent_run_id, cand.candidate.run_id if cand.candidate else None,
                                      cand.search.name if cand.search else None)
    shape = tuple(r["latency"]["input_shape"])
    x = sample_input(shape).numpy()
    session = OnnxRuntimeBackend(shape, slot=False, num_classes=r["num_classes"]).create_session(
        (result.folder / "model.onnx").read_bytes())
    y = session.run([OUTPUT_NAME], {INPUT_NAME: x})[0]
    model_uri, version = writer.log_onnx_model(run_id, result.folder / "model.onnx", x, y, cfg.register)
    r["mlflow"] = {"tracking_uri": writer.uri, "run_id": run_id, "model_uri": model_uri,
                   "registered_name": cfg.register, "registered_version": version, "parent_run_id": parent_run_id}
    _write_reports(result.folder, r)
    lat = r["latency"]
    metrics = {
        "latency_p50": lat["fused"]["p50_ms"], "latency_p90": lat["fused"]["p90_ms"],
        "latency_p99": lat["fused"]["p99_ms"], "latency_p50_unfused": lat["unfused"]["p50_ms"],
        "params": r["params"], "macs": r["macs"],
    }
    if r["training"]:
        metrics.update(accuracy=r["training"]["accuracy"], val_loss=r["training"]["val_loss"])
    writer.finish_export_run(run_id, result.folder, metrics)
    result.mlflow_run_id = run_id


def run_export(cfg: ExportConfig, log: Callable[[str], None] = print) -> ExportResult:
    """Find the candidate, export it, and log it to MLflow where asked (see :class:`ExportConfig`).

    ``log`` gets the lines that say what the export does (see :func:`export_candidate`).

    Raises:
        NASError: the candidate cannot be found or exported, or MLflow refused a write.
        SearchSpaceError: a malformed architecture string, or one outside the given space.
        LatencyError: the latency backend is unavailable here.
    """
    validate_export(cfg)
    cand, reader = resolve_candidate(cfg)
    if cfg.register and cfg.log_model is False:
        raise ExportError("register needs the model logged to MLflow: drop log_model=false")
    result = export_candidate(cand, cfg, log)
    to_mlflow = cfg.log_model if cfg.log_model is not None else (reader is not None or cfg.register is not None)
    if to_mlflow:
        log_to_mlflow(result, cand, cfg, reader)
    return result


def summary(result: ExportResult) -> str:
    """What the command prints about an export: where it went, the checks, the latency, the engine."""
    r = result.report
    lat = r["latency"]
    lines = [f"Exported {r['arch_id']} to {result.folder}"]
    for c in r["checks"]:
        lines.append(f"  check  {c['name']}: max |diff| {c['max_abs_diff']:.2g}, {c['scaled_diff']:.2g} of the "
                     f"largest logit (atol {c['atol']:g}, rtol {c['rtol']:g}) {'passed' if c['passed'] else 'FAILED'}")
    if r["training"]:
        t = r["training"]
        lines.append(f"  trained {t['epochs']} epoch(s) on {dataset_label(t['dataset'])}: validation accuracy "
                     f"{t['accuracy']:.4f}")
        warning = training_warning(t)
        if warning:
            lines.append(f"  warning: {warning}")
    lines.append(f"  latency {lat['backend']} p50 {lat['unfused']['p50_ms']:.3f} ms unfused, "
                 f"{lat['fused']['p50_ms']:.3f} ms Conv+BN fused; search: "
                 f"{fmt_num(r['search']['metrics'].get('latency_p50'))} ms, "
                 f"{r['search']['latency_source'] or 'source not known'}")
    for name, rt in r["runtimes"].items():
        lines.append(f"  {name} {', '.join(rt['files']) if rt['written'] else 'not written: ' + rt['reason']}")
    e = r["engine"]
    lines.append(f"  engine {'model.engine (' + e['precision'] + ')' if e['built'] else 'not built: ' + e['reason']}")
    if "mlflow" in r:
        m = r["mlflow"]
        reg = f", registered as {m['registered_name']} v{m['registered_version']}" if m["registered_version"] else ""
        lines.append(f"  mlflow run {m['run_id']} ({m['model_uri']}){reg}")
    lines.append(f"  report {result.folder / 'report.md'}")
    return "\n".join(lines)
