"""``python -m nas.optimize``: an exported candidate's deployment variants, each verified, in one table.

Everything that can be wrong with the request is checked before any work: the export folder, the
precisions (each must be one the latency backend runs: the backend is built at each), the
dataset and its normalisation (it must be the one the candidate was trained with), the
calibration set (shape and number of images), and each pruning ratio (in (0, 1), and reachable).

Then, in ``<export>/optimized/``:

1. the FP32 network's variant at each precision (:class:`nas.deploy.variants.Maker`), and TensorRT
   FP16/INT8 engines where TensorRT and a GPU are present (``engines``);
2. for each pruning ratio, the pruned network (:mod:`nas.deploy.prune`) as an export of its own
   (``model.pt``, ``arch.json`` with its architecture string, ``model.onnx`` checked against
   PyTorch), and its variants at each precision;
3. every variant run on the validation images (accuracy, agreement with the FP32 network, largest
   logit difference) and timed with the measurement protocol on the same backend, all variants
   alternately for ``latency.rounds`` rounds, each keeping its fastest;
4. the regression check (:func:`nas.deploy.report.check_variant`): a failed variant's files are
   removed and its row says ``FAILED``;
5. ``report.json`` and ``report.md``, logged to MLflow: one run per variant nested under the
   candidate's export run, and the report on the export run.

A failed variant fails the command (:class:`~nas.core.errors.OptimizeError`) after the report is written.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from latency_predictor import LatencyError, LatencyResult
from latency_predictor.measurement.backends import MeasuredBackend, TensorRTBackend, make_estimator
from latency_predictor.measurement.export import export_onnx
from latency_predictor.measurement.quantize import CalibrationData, QuantizeSettings
from nas.accuracy.training import resolve_device
from nas.adapters.mlflow_writer import StoreWriter
from nas.core.config import DataConfig, OptimizeConfig, validate_optimize
from nas.core.errors import ConfigError, OptimizeError
from nas.data import ProxyData, load_dataset
from nas.deploy.calibration import calibration_set, to_input, validation_batches
from nas.deploy.candidate import ExportedCandidate, find_export, read_export
from nas.deploy.export import LatencySettings, compare_outputs, merged_latency_settings, report_json
from nas.deploy.fuse import fuse_conv_bn
from nas.deploy.prune import (
    MacCounter,
    PruneResult,
    max_prunable_share,
    prune_progressively,
    pruning_units,
    sensitivity,
)
from nas.deploy.report import FAILED, PASSED, SKIPPED, VariantRow, check_variant, render
from nas.deploy.variants import Artefact, Maker, Network, judge, run_all, trt_calibration
from search_spaces import SearchSpaceError, count_params, load_space
from search_spaces.builder import Net

EXTRA_PRECISIONS = ("int8", "fp16", "bf16")
OUT = "optimized"


@dataclass
class OptimizeResult:
    """Where the variants went and what the table says."""

    folder: Path
    report: dict[str, Any]
    rows: list[VariantRow]
    run_ids: dict[str, str]

    @property
    def failed(self) -> list[VariantRow]:
        """The variants that failed their check."""
        return [r for r in self.rows if r.status == FAILED]


# ---------------------------------------------------------------------- settings, checked before work


def latency_settings(cand: ExportedCandidate, cfg: OptimizeConfig) -> LatencySettings:
    """Backend, input shape, options and protocol settings: the export's (its precision aside: each
    variant has its own), overridden by ``cfg.latency`` (:func:`~nas.deploy.export.merged_latency_settings`).

    Raises:
        ConfigError: a precision among the options.
        LatencyError: an invalid input shape.
    """
    lat = cand.report.get("latency") or {}
    exported = {"backend": lat.get("backend"),
                "options": {k: v for k, v in (lat.get("options") or {}).items() if k != "precision"}}
    if "precision" in cfg.latency.options:
        raise ConfigError("latency.options.precision", "variants are made at each of precisions=[...]; remove it")
    return merged_latency_settings(exported, cfg.latency, list(cand.input_shape))


def estimators(backend: str, shape: tuple[int, ...], options: dict[str, Any], measure: dict[str, Any],
               num_classes: int, precisions: list[str] | None, calibration: CalibrationData,
               ) -> tuple[dict[str, MeasuredBackend], dict[str, str]]:
    """The backend at fp32 and at each precision to make; and why each other precision is not made.

    ``precisions`` None: every precision the backend runs here (bf16 on a CPU only when asked for:
    eager bf16 convolutions on a CPU are far slower than fp32).

    Raises:
        LatencyError: (a precision that was asked for) the backend cannot run it here, naming what it runs.
    """
    def build(precision: str) -> MeasuredBackend:
        opts = dict(options)
        if precision == "int8" and backend in ("tensorrt", "onnxruntime", "openvino"):
            opts.setdefault("calibration_data", calibration)
        return make_estimator(backend, input_shape=list(shape), measure=dict(measure), num_classes=num_classes,
                              precision=precision, **opts)

    ests = {"fp32": build("fp32")}
    skipped: dict[str, str] = {}
    for p in (precisions if precisions is not None else list(EXTRA_PRECISIONS)):
        if precisions is None and p == "bf16" and ests["fp32"].device == "cpu":
            skipped[p] = ("not made by default on the CPU, where eager bf16 convolutions run far slower than fp32 "
                          "(ask for it with precisions=[bf16])")
            continue
        try:
            ests[p] = build(p)
        except LatencyError as err:
            if precisions is not None:
                raise
            skipped[p] = str(err)
    return ests, skipped


def data_config(cand: ExportedCandidate, cfg: OptimizeConfig) -> DataConfig:
    """The dataset: ``data=...``, else the one the export was trained on.

    Raises:
        ConfigError: neither is known.
    """
    if cfg.data is not None:
        return cfg.data
    recorded = cand.data_config
    if recorded is not None:
        return DataConfig(**recorded)
    raise ConfigError(
        "data", f"the export {cand.folder.name} does not record its training data (untrained, or exported before "
        "LatNAS recorded it): name the dataset, e.g. +data=cifar10_jpeg data.path=/path/to/archive"
    )


def check_normalisation(cand: ExportedCandidate, data: ProxyData) -> None:
    """The dataset must normalise as the candidate's training did.

    Raises:
        ConfigError: its mean or standard deviation differ from the export's (another dataset).
    """
    pre = cand.preprocessing
    if pre is None:
        return
    for key, have in (("mean", data.mean), ("std", data.std)):
        want = [float(v) for v in pre.get(key, [])]
        if want and not np.allclose(want, have, atol=2e-3):
            raise ConfigError(
                "data", f"the candidate was trained on data with {key} {np.round(want, 4).tolist()}, this dataset has "
                f"{np.round(have, 4).tolist()}: pass the dataset it was trained on"
            )


# ---------------------------------------------------------------------- the work


def _fp32_network(cand: ExportedCandidate, shape: tuple[int, ...], out: Path) -> Network:
    net = cand.network()
    fused = fuse_conv_bn(net)
    if tuple(shape) == cand.input_shape:
        return Network("fp32", cand.arch, net, fused, cand.onnx_path.read_bytes(), cand.onnx_path, out)
    path = out / "fp32" / "model.onnx"  # another deployment shape than the export's
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx = export_onnx(fused, shape)
    path.write_bytes(onnx)
    return Network("fp32", cand.arch, net, fused, onnx, path, out)


def _write_pruned(result: PruneResult, name: str, cand: ExportedCandidate, shape: tuple[int, ...], out: Path,
                  cfg: OptimizeConfig) -> tuple[Network, dict[str, Any]]:
    """The pruned network as an export of its own: ``model.pt``, ``model.onnx`` (checked), ``arch.json``."""
    folder = out / name
    folder.mkdir(parents=True, exist_ok=True)
    net = result.net.eval()
    fused = fuse_conv_bn(net)
    torch.save(net.state_dict(), folder / "model.pt")
    onnx = export_onnx(fused, shape)
    (folder / "model.onnx").write_bytes(onnx)
    xs = [torch.randn(shape, generator=torch.Generator().manual_seed(100 + i)) for i in range(2)]
    with torch.no_grad():
        want = np.concatenate([net(x).numpy() for x in xs])
        got_fused = np.concatenate([fused(x).numpy() for x in xs])
    import onnxruntime as ort

    session = ort.InferenceSession(onnx, providers=["CPUExecutionProvider"])
    got_onnx = np.concatenate([session.run(None, {session.get_inputs()[0].name: x.numpy()})[0] for x in xs])
    checks = [compare_outputs("fused vs unfused (pytorch)", got_fused, want, cfg.check.atol, cfg.check.rtol),
              compare_outputs("onnxruntime vs pytorch", got_onnx, want, cfg.check.atol, cfg.check.rtol)]
    bad = [c for c in checks if not c.passed]
    if bad:
        raise OptimizeError(f"the pruned network {name}'s exported model differs from PyTorch: "
                            + ", ".join(f"{c.name} (max |diff| {c.max_abs_diff:.3g})" for c in bad))
    space_name = cand.info.get("space")
    in_space = False
    if space_name:
        try:
            in_space = load_space(str(space_name)).contains(net.arch)
        except SearchSpaceError:
            in_space = False
    info = {
        **{k: v for k, v in cand.info.items() if k not in ("arch", "arch_id", "decisions", "weights")},
        "arch": net.arch.encode(), "arch_id": net.arch.arch_id, "pruned_from": cand.arch.encode(),
        "space": space_name, "in_space": in_space, "macs_removed": result.removed_share,
        "weights": f"{cand.arch.arch_id} pruned to {result.removed_share:.1%} fewer MACs and fine-tuned",
        "checks": [dataclasses.asdict(c) for c in checks],
    }
    (folder / "arch.json").write_text(json.dumps(info, indent=2) + "\n")
    return Network(name, net.arch, net, fused, onnx, folder / "model.onnx", out), info


def _timed(rows: dict[str, VariantRow], artefacts: list[Artefact], rounds: int,
           log: Callable[[str], None]) -> None:
    """Time every artefact ``rounds`` times, alternately; each row keeps its fastest round."""
    results: dict[str, list[LatencyResult]] = {a.name: [] for a in artefacts}
    for k in range(rounds):
        for a in artefacts:
            results[a.name].append(a.time())
        log(f"  timing round {k + 1}/{rounds}: " + ", ".join(
            f"{a.name} {results[a.name][-1].latency_ms:.3f} ms" for a in artefacts))
    for a in artefacts:
        best = min(results[a.name], key=lambda r: r.stats.p50)
        if best.precision != a.precision:  # the estimator records what it ran: never another precision
            raise OptimizeError(f"{a.name} was timed at {best.precision}, not {a.precision}")
        rows[a.name].latency = {
            "p50_ms": best.stats.p50, "p90_ms": best.stats.p90, "p99_ms": best.stats.p99, "stable": best.stable,
            "runs": best.stats.n, "round_p50_ms": [r.stats.p50 for r in results[a.name]],
            "cpu_per_wall": best.extra.get("cpu_per_wall"), "graph_precision": best.extra.get("graph_precision"),
            "precision": best.precision, "device": best.device,
        }


def run_optimize(cfg: OptimizeConfig, log: Callable[[str], None] = print) -> OptimizeResult:
    """Make, verify, time and report the deployment variants of an exported candidate (see the module).

    Raises:
        ConfigError: a bad setting, found before any work (the key is named).
        LatencyError: a precision the backend cannot run (before any work), or a variant that could not be
            made or timed.
        OptimizeError: a variant failed its regression check (after the report is written), or the export
            folder is incomplete.
        DataError: the dataset cannot be read.
    """
    t_start = time.perf_counter()
    validate_optimize(cfg)
    folder = find_export(str(cfg.candidate), cfg.exports_dir)
    cand = read_export(folder)
    backend, shape, options, measure = latency_settings(cand, cfg)
    calibration_holder: dict[str, np.ndarray] = {}

    def calibration_source(count: int, input_shape: tuple[int, ...]) -> np.ndarray:
        return trt_calibration(calibration_holder["images"])(count, input_shape)

    ests, skipped = estimators(backend, shape, options, measure, cand.num_classes, cfg.precisions,
                               calibration_source)
    engines, engine_reason = _engines(cfg, ests, shape, measure, cand.num_classes, calibration_source)
    data_cfg = data_config(cand, cfg)
    data = load_dataset(data_cfg)
    check_normalisation(cand, data)
    calibration_holder["images"] = calibration_set(cfg.calibration, data, shape)
    macs = MacCounter(shape, cand.num_classes)
    units = pruning_units(cand.arch, cfg.prune)
    if cfg.prune.ratios:
        most = max_prunable_share(cand.arch, units, cfg.prune, macs) if units else 0.0
        too_far = [r for r in cfg.prune.ratios if r > most]
        if too_far:
            raise ConfigError("prune.ratios", f"{too_far} cannot be reached: with prune.sensitivity_ratios="
                              f"{cfg.prune.sensitivity_ratios} and prune.multiple={cfg.prune.multiple} at most "
                              f"{most:.0%} of {cand.arch.arch_id}'s MACs can be removed")
    settings = QuantizeSettings(cfg.calibration.per_channel, cfg.calibration.activation_type,
                                cfg.calibration.method)
    note = (f"{len(calibration_holder['images'])} images from {cfg.calibration.path}" if cfg.calibration.path else
            f"{len(calibration_holder['images'])} training images of {data_cfg.name} (seed {cfg.calibration.seed}), "
            "normalised as in training")
    maker = Maker(ests, calibration_holder["images"], settings, note)

    # ---- the work starts here
    out = folder / OUT
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    base = _fp32_network(cand, shape, out)
    limit = cfg.check.val_samples

    def batches() -> Any:
        return validation_batches(data, shape, limit)

    def torch_batches() -> Any:  # PyTorch takes any batch size: larger batches, same images
        return validation_batches(data, shape, limit, batch=256)

    def torch_run(net: nn.Module) -> Callable[[np.ndarray], np.ndarray]:
        def run(x: np.ndarray) -> np.ndarray:
            with torch.no_grad():
                return net(torch.from_numpy(x)).numpy()
        return run

    reference, labels = run_all(torch_run(base.net), torch_batches)
    fp32_accuracy = float((reference.argmax(1) == labels).mean())
    log(f"  {cand.arch.arch_id}: FP32 accuracy {fp32_accuracy:.4f} on {len(labels)} validation images; "
        f"backend {backend} at {', '.join(ests)}")
    networks: dict[str, Network] = {"fp32": base}
    source_logits: dict[str, np.ndarray] = {"fp32": reference}
    artefacts: list[Artefact] = []
    rows: dict[str, VariantRow] = {}
    pruning: dict[str, Any] = {}

    def add(network: Network, a: Artefact) -> None:
        t0 = time.perf_counter()
        row = VariantRow(a.name, a.precision, a.source, a.backend, arch=network.arch.encode(),
                         files=[str(f.relative_to(folder)) for f in a.files],
                         size_bytes=sum(f.stat().st_size for f in a.files), macs=macs(network.arch), notes=a.notes)
        logits, _ = run_all(a.run, batches)
        fig = judge(logits, labels, reference)
        src = judge(logits, labels, source_logits[network.name])
        row.accuracy, row.agreement, row.max_abs_diff = fig.accuracy, fig.agreement, fig.max_abs_diff
        row.source_agreement, row.source_max_abs_diff = src.agreement, src.max_abs_diff
        row.notes["made_s"] = round(time.perf_counter() - t0, 2)
        rows[a.name] = row
        artefacts.append(a)
        log(f"  {a.name}: accuracy {fig.accuracy:.4f}, agreement {fig.agreement:.4f} with fp32 "
            f"({src.agreement:.4f} with {network.name}), max |diff| {fig.max_abs_diff:.3g}")

    def all_precisions(network: Network) -> None:
        for p in ests:
            add(network, maker.make(network, p))
        for p, trt in engines.items():
            add(network, maker.tensorrt(network, p, trt, extra=True))

    all_precisions(base)
    if cfg.prune.ratios:
        device = resolve_device(cfg.train.device)
        sens_x, sens_y = data.sample_train(cfg.prune.sensitivity_samples, cfg.calibration.seed + 1)
        sens_inputs = to_input(sens_x, data, shape)

        def evaluate(net: nn.Module) -> float:
            net.eval()
            dev = next(net.parameters()).device
            with torch.no_grad():
                preds = torch.cat([net(sens_inputs[i:i + 256].to(dev)).argmax(1).cpu()
                                   for i in range(0, len(sens_inputs), 256)])
            return float((preds == sens_y).float().mean())

        base_net: Net = base.net  # type: ignore[assignment]
        log(f"  sensitivity of {len(units)} units at ratios {cfg.prune.sensitivity_ratios}")
        base_acc, points = sensitivity(base_net, units, cfg.prune, evaluate, macs)
        pruning = {"units": [dataclasses.asdict(u) for u in units], "base_accuracy": base_acc,
                   "sensitivity": [dataclasses.asdict(p) for p in points], "results": []}
        for ratio in sorted(cfg.prune.ratios):
            name = f"pruned-{ratio:g}"
            log(f"  pruning {ratio:.0%} of the MACs in {cfg.prune.steps} steps")
            pruned = prune_progressively(base_net, ratio, units, points, cfg.prune, cfg.train, data, shape, device,
                                         macs, evaluate, log)
            network, info = _write_pruned(pruned, name, cand, shape, out, cfg)
            networks[name] = network
            source_logits[name], _ = run_all(torch_run(network.net), torch_batches)
            pruning["results"].append({
                "ratio": ratio, "name": name, "arch": network.arch.encode(), "arch_id": network.arch.arch_id,
                "removed_share": pruned.removed_share, "macs": pruned.macs, "base_macs": pruned.base_macs,
                "params": count_params(network.net), "in_space": info["in_space"], "space": info["space"],
                "state": pruned.state, "steps": [dataclasses.asdict(s) for s in pruned.steps],
                "checks": info["checks"], "distill": {"on": cfg.prune.distill, "alpha": cfg.prune.alpha,
                                                      "temperature": cfg.prune.temperature},
            })
            all_precisions(network)
            rows[name].files = sorted(str(p.relative_to(folder)) for p in (out / name).glob("*") if p.is_file())
    _timed(rows, artefacts, cfg.latency.rounds, log)
    for p, why in {**skipped, **({"tensorrt engines": engine_reason} if engine_reason else {})}.items():
        rows[p] = VariantRow(p, p if p in EXTRA_PRECISIONS else "-", "fp32", backend, SKIPPED, why)
    for r in rows.values():
        check_variant(r, cfg.check.min_agreement, cfg.check.min_agreement_pruned)
    for r in rows.values():
        src = rows.get(r.source)
        if r.status == PASSED and src is not None and src is not r and src.status == FAILED:
            r.status, r.reason = FAILED, f"made from {r.source}, which failed its check ({src.reason})"
    for r in rows.values():
        if r.status == FAILED:
            _remove(folder, r)
    est = ests["fp32"]
    report = {
        "arch": cand.arch.encode(), "arch_id": cand.arch.arch_id, "export": str(folder),
        "latency": {"backend": backend, "options": _plain(options), "input_shape": list(shape),
                    "rounds": cfg.latency.rounds, "device_name": est.environment().get("device_name", "?"),
                    "environment": est.environment()},
        "validation": {"dataset": data_cfg.name, "images": len(labels), "fp32_accuracy": fp32_accuracy,
                       "data": data.summary()},
        "calibration": note, "quantization": settings.describe(),
        "checks": {"min_agreement": cfg.check.min_agreement, "min_agreement_pruned": cfg.check.min_agreement_pruned},
        "variants": [r.to_dict() for r in rows.values()], "pruning": pruning,
        "failed": [r.variant for r in rows.values() if r.status == FAILED],
        "seconds": round(time.perf_counter() - t_start, 1),
    }
    row_list = list(rows.values())
    _write(out, report, row_list)
    result = OptimizeResult(out, report, row_list, {})
    if cfg.log is not False and cand.export_run_id:
        result.run_ids = _log(cand, cfg, result)
        report["mlflow"] = {"export_run_id": cand.export_run_id, "variant_runs": result.run_ids}
        _write(out, report, row_list)
    elif cfg.log is True:
        raise OptimizeError(f"log=true but the export {folder.name} has no MLflow run: export it with log_model=true")
    if result.failed:
        raise OptimizeError(
            "variant(s) failed the regression check and were not kept: "
            + "; ".join(f"{r.variant}: {r.reason}" for r in result.failed) + f"; see {out / 'report.md'}"
        )
    return result


def _engines(cfg: OptimizeConfig, ests: dict[str, MeasuredBackend], shape: tuple[int, ...], measure: dict[str, Any],
             num_classes: int, calibration: Callable[[int, tuple[int, ...]], np.ndarray],
             ) -> tuple[dict[str, TensorRTBackend], str]:
    """TensorRT FP16 and INT8 builders beside another backend's variants, or why there are none."""
    if cfg.engines is False or ests["fp32"].name == "tensorrt":
        return {}, ""
    out: dict[str, TensorRTBackend] = {}
    try:
        for p in ("fp16", "int8"):
            out[p] = TensorRTBackend(shape, precision=p, measure=measure, num_classes=num_classes,
                                     calibration_data=calibration if p == "int8" else None)
    except LatencyError as err:
        if cfg.engines is True:
            raise ConfigError("engines", f"engines=true but no TensorRT engine can be built here: {err}") from None
        return {}, f"no TensorRT engines: {err}"
    return out, ""


def _remove(folder: Path, row: VariantRow) -> None:
    """A failed variant is never left looking like a success: its folder under ``optimized/`` goes."""
    if row.variant != "fp32":  # the candidate's own export files stay; its row says FAILED
        shutil.rmtree(folder / OUT / row.variant, ignore_errors=True)
        row.notes["removed_files"] = row.files
        row.files = []


def _plain(options: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in options.items() if isinstance(v, str | int | float | bool) or v is None}


def _write(out: Path, report: dict[str, Any], rows: list[VariantRow]) -> None:
    (out / "report.json").write_text(report_json(report))
    (out / "report.md").write_text(render(report, rows))


def _log(cand: ExportedCandidate, cfg: OptimizeConfig, result: OptimizeResult) -> dict[str, str]:
    """One run per variant nested under the export run; the report on the export run."""
    uri = cfg.tracking.uri or cand.tracking_uri
    if uri is None:
        raise OptimizeError("no MLflow store to log to: set tracking.uri or log=false")
    writer = StoreWriter(uri, cfg.tracking.experiment, create=False)
    export_run = str(cand.export_run_id)
    ids = {}
    for r in result.rows:
        if r.status == SKIPPED:
            continue
        metrics = {"accuracy": r.accuracy, "agreement": r.agreement, "max_abs_diff": r.max_abs_diff,
                   "source_agreement": r.source_agreement, "size_bytes": float(r.size_bytes), "macs": float(r.macs)}
        if r.latency:
            metrics.update(latency_p50=r.latency["p50_ms"], latency_p90=r.latency["p90_ms"],
                           latency_p99=r.latency["p99_ms"])
        tags = {"variant": r.variant, "precision": r.precision, "backend": r.backend, "status": r.status,
                "check": r.reason, "arch_id": cand.arch.arch_id}
        files = [cand.folder / f for f in r.files]
        ids[r.variant] = writer.log_optimized_variant(
            export_run, f"{cand.arch.arch_id}-{r.variant}", {"arch": r.arch, "source": r.source}, metrics, tags,
            files, passed=r.status == PASSED)
    writer.log_artifacts(export_run, [result.folder / "report.json", result.folder / "report.md"], "optimized")
    return ids


def summary(result: OptimizeResult) -> str:
    """What the command prints: the table and where the files are."""
    from nas.deploy.report import table

    lines = [f"Deployment variants of {result.report['arch_id']} ({result.report['latency']['backend']}, "
             f"{result.report['validation']['images']} validation images):", "", *table(result.rows), ""]
    lines += [f"- {r.variant}: not made: {r.reason}" for r in result.rows if r.status == SKIPPED]
    lines.append(f"report: {result.folder / 'report.md'}")
    if result.run_ids:
        lines.append(f"mlflow: {len(result.run_ids)} variant runs under the export run "
                     f"{result.report['mlflow']['export_run_id']}")
    return "\n".join(lines)

