"""``python -m nas.optimize``: :class:`OptimizeConfig`, the deployment variants of an exported
candidate (INT8/FP16, structured pruning), and :func:`validate_optimize`."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from nas.core.config.checks import check_data, check_tracking, check_train
from nas.core.config.fields import check_choices, in_range, int_at_least, one_of, positive
from nas.core.config.groups import LATENCY_PRECISIONS, DataConfig, ExportLatencyConfig, TrackingConfig, TrainConfig
from nas.core.errors import ConfigError

CALIBRATION_METHODS = ("minmax", "entropy", "percentile")
ACTIVATION_TYPES = ("uint8", "int8")


@dataclass
class CalibrationConfig:
    """INT8 calibration of ``python -m nas.optimize`` (the ``calibration`` key).

    Attributes:
        samples: images the activation ranges are calibrated on.
        min_samples: the fewest images accepted (fewer give unreliable ranges: an error).
        path: a ``.npy`` array ``(N, C, H, W)`` of float32 images, normalised as the network's
            inputs; None: ``samples`` training images of the candidate's dataset (normalised as in
            training, resized to the input shape).
        seed: seed of the training images' choice.
        method: ``minmax``, ``entropy`` or ``percentile`` (ONNX Runtime's calibrators).
        per_channel: one weight scale per output channel.
        activation_type: ``uint8`` (the fast kernels on x86 CPUs without VNNI) or ``int8``.
    """

    samples: int = 512
    min_samples: int = 100
    path: str | None = None
    seed: int = 0
    method: str = one_of(CALIBRATION_METHODS, "minmax")
    per_channel: bool = True
    activation_type: str = one_of(ACTIVATION_TYPES, "uint8")


@dataclass
class PruneConfig:
    """Structured channel pruning of ``python -m nas.optimize`` (the ``prune`` key).

    Attributes:
        ratios: shares of the network's MACs to remove, one pruned variant each, each in (0, 1);
            empty: no pruning.
        steps: the progressive schedule: the ratio is reached in this many steps, each one pruning,
            recalibrating BatchNorm and fine-tuning (``train.epochs`` per step).
        sensitivity_ratios: the share of each unit's channels removed, one at a time, in the
            sensitivity analysis (each in (0, 1)).
        sensitivity_samples: training images each sensitivity point is evaluated on.
        multiple: channel counts stay multiples of this (SIMD kernels favour multiples of 8).
        recalibration_batches: training batches BatchNorm statistics are re-estimated on after each step.
        distill: fine-tune with knowledge distillation from the un-pruned FP32 network.
        alpha: the weight of the soft (teacher) loss; ``1 - alpha`` weighs the hard (label) loss.
        temperature: the softmax temperature of the soft loss (weighted by its square).
    """

    ratios: list[float] = field(default_factory=list)
    steps: int = 3
    sensitivity_ratios: list[float] = field(default_factory=lambda: [0.25, 0.5, 0.75])
    sensitivity_samples: int = 1000
    multiple: int = 8
    recalibration_batches: int = 50
    distill: bool = True
    alpha: float = 0.7
    temperature: float = 4.0


@dataclass
class OptimizeCheckConfig:
    """The regression checks of ``python -m nas.optimize`` (the ``check`` key).

    Attributes:
        min_agreement: the least top-1 agreement of a quantised or half-precision variant with the
            FP32 network it came from, on the validation images; below it the variant FAILS.
        min_agreement_pruned: the least top-1 agreement of a pruned variant with the candidate's
            FP32 network.
        val_samples: validation images the variants are evaluated on (None: all).
        atol: tolerance of the pruned network's ONNX model against its PyTorch network (as ``nas.export``).
        rtol: relative tolerance of the same check.
    """

    min_agreement: float = 0.98
    min_agreement_pruned: float = 0.85
    val_samples: int | None = None
    atol: float = 1e-4
    rtol: float = 1e-3


@dataclass
class OptimizeConfig:
    """Everything ``python -m nas.optimize`` takes.

    Attributes:
        candidate: the exported candidate: its arch_id (the folder ``<exports_dir>/<arch_id>/``
            written by ``python -m nas.export``) or the folder's path.
        exports_dir: where arch_ids are looked up; None: ``<home>/exports`` (``nas.export``'s default).
        precisions: the precisions to produce besides fp32 (``int8``, ``fp16``, ``bf16``); each must
            be one the latency backend runs; None: every one it runs.
        engines: TensorRT FP16 and INT8 engines besides the backend's variants: None builds them
            where TensorRT and a GPU are present; true requires them; false skips them.
        latency: how variants are timed (unset values: the export's backend, shape and options).
        calibration: INT8 calibration.
        prune: structured pruning.
        train: the fine-tuning recipe of each pruning step (``epochs`` per step).
        data: the dataset (validation accuracy, calibration, fine-tuning); None: the one the export
            was trained on, else the search's.
        check: the regression checks.
        log: log to MLflow under the candidate's export run; None: when the export has one.
        tracking: the MLflow store (None: the export's).
    """

    candidate: str | None = None
    exports_dir: str | None = None
    precisions: list[str] | None = one_of([p for p in LATENCY_PRECISIONS if p != "fp32"])
    engines: bool | None = None
    latency: ExportLatencyConfig = field(default_factory=ExportLatencyConfig)
    calibration: CalibrationConfig = field(default_factory=CalibrationConfig)
    prune: PruneConfig = field(default_factory=PruneConfig)
    train: TrainConfig = field(default_factory=lambda: TrainConfig(epochs=1, lr=0.01, warmup_epochs=0.0))
    data: DataConfig | None = None
    check: OptimizeCheckConfig = field(default_factory=OptimizeCheckConfig)
    log: bool | None = None
    tracking: TrackingConfig = field(default_factory=TrackingConfig)



def validate_optimize(cfg: OptimizeConfig) -> None:
    """Check ``python -m nas.optimize``'s values before any work: its own keys, then the ``data``
    (when given), ``train`` and ``tracking`` groups as the search checks them.

    Raises:
        ConfigError: naming the key and what is allowed.
    """
    if not cfg.candidate:
        raise ConfigError("candidate", "name the exported candidate: candidate=<arch_id> or the export folder")
    check_choices(cfg)
    cal = cfg.calibration
    int_at_least("calibration.min_samples", cal.min_samples, 1)
    int_at_least("calibration.samples", cal.samples, cal.min_samples)
    pr = cfg.prune
    for r in pr.ratios:
        _in_open_unit("prune.ratios", r)
    if len(set(pr.ratios)) != len(pr.ratios):
        raise ConfigError("prune.ratios", f"each ratio once, got {pr.ratios}")
    for r in pr.sensitivity_ratios:
        _in_open_unit("prune.sensitivity_ratios", r)
    if not pr.sensitivity_ratios:
        raise ConfigError("prune.sensitivity_ratios", "at least one ratio is needed for the sensitivity analysis")
    int_at_least("prune.steps", pr.steps, 1)
    int_at_least("prune.sensitivity_samples", pr.sensitivity_samples, 1)
    int_at_least("prune.multiple", pr.multiple, 1)
    int_at_least("prune.recalibration_batches", pr.recalibration_batches, 1)
    in_range("prune.alpha", pr.alpha, 0.0, 1.0 + 1e-12, "[0, 1]")
    positive("prune.temperature", pr.temperature)
    ch = cfg.check
    in_range("check.min_agreement", ch.min_agreement, 0.0, 1.0 + 1e-12, "[0, 1]")
    in_range("check.min_agreement_pruned", ch.min_agreement_pruned, 0.0, 1.0 + 1e-12, "[0, 1]")
    if ch.val_samples is not None:
        int_at_least("check.val_samples", ch.val_samples, 1)
    for key in ("atol", "rtol"):
        in_range(f"check.{key}", getattr(ch, key), 0.0, math.inf, "[0, inf)")
    int_at_least("latency.rounds", cfg.latency.rounds, 1)
    if cfg.latency.anchor is not None:
        raise ConfigError("latency.anchor", "nas.optimize times its variants against each other; an anchor network "
                          "is timed beside a candidate by nas.export (latency.anchor there)")
    int_at_least("train.epochs", cfg.train.epochs, 0)
    if cfg.data is not None:
        check_data(cfg.data)
    check_train(cfg.train)
    check_tracking(cfg.tracking)


def _in_open_unit(key: str, value: float) -> None:
    if not math.isfinite(value) or not 0.0 < value < 1.0:
        raise ConfigError(key, f"each ratio must be in (0, 1): the share removed, got {value!r}")
