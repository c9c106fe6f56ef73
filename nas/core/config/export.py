"""``python -m nas.export``: :class:`ExportConfig` and :func:`validate_export`."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from nas.core.config.checks import check_export_latency, check_supernet_estimate
from nas.core.config.fields import check_choices, in_range, int_at_least, one_of
from nas.core.config.groups import DataConfig, ExportLatencyConfig, SupernetEstimateConfig, TrackingConfig, TrainConfig

INITS = ("random", "supernet")
ENGINE_PRECISIONS = ("fp32", "fp16", "int8")
EXPORT_RUNTIMES = ("openvino", "litert")
"""The runtimes whose files ``nas.export`` can write beside ``model.onnx`` (``runtimes``)."""


@dataclass
class CheckConfig:
    """Tolerance of the output checks (the ``check`` key).

    Outputs match when ``|a - b| <= atol + rtol * |b|`` for every logit (``numpy.allclose``),
    with ``b`` the unfused PyTorch network's output. A TensorRT engine's logits must be within
    ``engine_rtol`` of the largest logit (None: by precision, 1e-2 fp32, 5e-2 fp16, 0.25 int8).

    Attributes:
        atol: the absolute tolerance of every logit.
        rtol: the tolerance relative to the unfused network's logit.
        batches: seeded random input batches (of the export's input shape) the outputs are compared on.
        engine_rtol: a TensorRT engine's largest logit difference, relative to the largest logit;
            None: by precision.
    """

    atol: float = 1e-4
    rtol: float = 1e-3
    batches: int = 2
    engine_rtol: float | None = None


@dataclass
class ExportConfig:
    """Everything ``python -m nas.export`` takes.

    Attributes:
        candidate: ``best``, an arch_id (12 hex digits), an MLflow run id (32 hex digits), a
            reference network name or an architecture string.
        search: the search ``best`` and arch_ids are looked up in: its name or parent run id;
            None: the latest search of the experiment.
        space: space name or YAML path for ``arch.json``'s decisions; None: the search's space.
        output_dir: the export lands in ``<output_dir>/<arch_id>/``; None: ``<home>/exports``
            (:mod:`nas.core.paths`).
        num_classes: classifier width; None: the training data's, else the search's, else 1000.
        seed: seed of the weight initialisation (and of training).
        engine: TensorRT engine: None builds one when TensorRT and a GPU are present (else a
            note says how); true requires it (an error where it cannot be built); false skips it.
        engine_precision: ``fp32``, ``fp16`` or ``int8`` for the engine.
        runtimes: the other runtimes' files written beside ``model.onnx``, each checked against
            PyTorch: ``openvino`` (``model.xml`` + ``model.bin``) and ``litert`` (``model.tflite``); a
            runtime that is not installed gets a note naming its extra; ``[]`` writes neither.
        init: the weights the export starts from: ``random`` (the builder's initialisation) or
            ``supernet`` (the candidate's subnet of ``supernet.checkpoint``, its BatchNorm statistics
            recalibrated on the training images), then trained for ``train.epochs``.
        supernet: the supernet checkpoint (``init=supernet``) and its recalibration.
        log_model: log the export to MLflow; None: when the candidate came from the store.
        register: register the logged model under this name in MLflow's model registry.
        latency: latency re-measurement settings.
        train: training before export (``train.epochs=0``: none, the weights stay initialised).
        train_samples: training images of that training, the deployment training; None: the
            whole training split of ``data``. A search's ``data.max_train_samples`` is its proxy
            budget and does not apply to the export (nor does a ``data.max_train_samples`` given
            here): this is the export's own size.
        val_samples: validation images; None: the whole validation split (``data.max_val_samples``
            does not apply either).
        data: the training dataset; None: the search's (digits when not known), its split
            (``val_fraction``, ``seed``) included.
        check: tolerances of the output checks.
        tracking: the MLflow store and experiment (``tracking.uri`` None: ``sqlite:///<home>/mlflow.db``,
            :mod:`nas.core.paths`).
    """

    candidate: str = "best"
    search: str | None = None
    space: str | None = None
    output_dir: str | None = None
    num_classes: int | None = None
    seed: int = 0
    engine: bool | None = None
    engine_precision: str = one_of(ENGINE_PRECISIONS, "fp16")
    runtimes: list[str] = one_of(EXPORT_RUNTIMES, default_factory=lambda: list(EXPORT_RUNTIMES))
    init: str = one_of(INITS, "random")
    supernet: SupernetEstimateConfig = field(default_factory=SupernetEstimateConfig)
    log_model: bool | None = None
    register: str | None = None
    latency: ExportLatencyConfig = field(default_factory=ExportLatencyConfig)
    train: TrainConfig = field(default_factory=lambda: TrainConfig(epochs=0))
    train_samples: int | None = None
    val_samples: int | None = None
    data: DataConfig | None = None
    check: CheckConfig = field(default_factory=CheckConfig)
    tracking: TrackingConfig = field(default_factory=TrackingConfig)



def validate_export(cfg: ExportConfig) -> None:
    """Check the export settings that are not checked where they are used.

    Raises:
        ConfigError: naming the key and what is allowed.
    """
    check_choices(cfg)
    check_export_latency(cfg.latency)
    int_at_least("check.batches", cfg.check.batches, 1)
    for key in ("atol", "rtol"):
        in_range(f"check.{key}", getattr(cfg.check, key), 0.0, math.inf, "[0, inf)")
    if cfg.check.engine_rtol is not None:
        in_range("check.engine_rtol", cfg.check.engine_rtol, 0.0, math.inf, "[0, inf)")
    int_at_least("train.epochs", cfg.train.epochs, 0)
    for key in ("train_samples", "val_samples"):
        if getattr(cfg, key) is not None:
            int_at_least(key, getattr(cfg, key), 1)
    if cfg.num_classes is not None:
        int_at_least("num_classes", cfg.num_classes, 1)
    check_supernet_estimate(cfg.supernet, required=cfg.init == "supernet", why="init=supernet")
