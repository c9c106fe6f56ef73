"""One check per config group: the ranges and the combinations :func:`~nas.core.config.fields.check_choices` cannot see.

Each check takes its group (``check_data(cfg.data)``) and raises
:class:`~nas.core.errors.ConfigError` on the first bad value, naming its full key
(``data.val_fraction``); a check that depends on another group's value takes that value as an
argument (:func:`check_accuracy` the data's name, :func:`check_search_alg` the estimator and the
epochs). The commands' validators (:func:`nas.core.config.validate`,
:func:`~nas.core.config.validate_supernet`, ...) call the checks of the groups they take. The
allowed values of a choice are checked by :func:`~nas.core.config.fields.check_choices`, which a
validator runs over its whole config.
"""

from __future__ import annotations

import itertools
import math
import re

from latency_predictor.errors import ConfigError as LatencyConfigError
from latency_predictor.measurement.preprocess import Preprocessing
from latency_predictor.measurement.scenario import check_scenario
from nas.core.config.fields import anchor_network, in_range, int_at_least, positive
from nas.core.config.groups import (
    ZERO_COST_ESTIMATORS,
    AccuracyConfig,
    DataConfig,
    ExportLatencyConfig,
    LatencyConfig,
    RayConfig,
    RungConfig,
    SearchAlgConfig,
    SupernetEstimateConfig,
    TrackingConfig,
    TrainConfig,
)
from nas.core.errors import ConfigError

_DEVICE_RE = re.compile(r"auto|cpu|cuda(:\d+)?")

FUNCTION_REF = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")
"""A user's function: ``module:function`` (a dotted module path, then a dotted attribute path)."""


def _user_function(group: str, fn: str | None, kind: str) -> None:
    """``<group>.fn``: set exactly when ``<group>=custom``, and shaped ``module:function``."""
    key = f"{group}.fn"
    chosen = kind == "custom"
    if chosen and not fn:
        example = "my_pkg.my_module:evaluate" if group == "accuracy" else "my_pkg.my_module:datasets"
        raise ConfigError(key, f"{group}=custom calls your function: set {key}={example} (module:function, "
                          "importable from the folder the search starts in, or installed)")
    if fn and not chosen:
        raise ConfigError(key, f"is called by {group}=custom only, not {group}={kind}: add {group}=custom or "
                          f"drop {key}")
    if fn and not FUNCTION_REF.fullmatch(fn):
        raise ConfigError(key, f"{fn!r} is not module:function (e.g. my_pkg.my_module:evaluate)")


def check_space(space: object, example: str) -> None:
    """A command that works on a search space has one (``example``: a space the message suggests).

    Raises:
        ConfigError: naming ``space`` and how to choose one.
    """
    if space is None:
        raise ConfigError("space", f"no search space chosen; add +space=<name> (e.g. +space={example})")


def check_latency(lat: LatencyConfig) -> None:
    """The ``latency`` group: the final pass, the server scenario, the input shape and preprocessing.

    The backend's name, options and precision are checked by the backend registry when it is
    built; the anchor by :func:`check_anchor`.

    Raises:
        ConfigError: naming the key.
    """
    int_at_least("latency.final_pass_top_k", lat.final_pass_top_k, 0)
    if lat.scenario == "server":
        try:
            check_scenario(lat.scenario, lat.batch_sizes)
        except LatencyConfigError as err:
            raise ConfigError("latency.batch_sizes", str(err)) from None
        if lat.throughput_goal is None:
            raise ConfigError("latency.throughput_goal", "the server scenario needs the images per second to sustain, "
                              "e.g. latency.throughput_goal=500")
        positive("latency.throughput_goal", lat.throughput_goal)
        if lat.backend == "predictor":
            raise ConfigError("latency.scenario", "server measures every batch size; a predictor predicts batch 1: "
                              "measure (latency=onnxruntime, ...)")
    if len(lat.input_shape) != 4 or any(d < 1 for d in lat.input_shape):
        raise ConfigError(
            "latency.input_shape", f"must be [N, C, H, W] with every dimension >= 1, got {lat.input_shape}"
        )
    if lat.preprocessing is not None:
        try:
            Preprocessing.create(lat.preprocessing, lat.source_size, lat.input_shape)
        except LatencyConfigError as err:
            raise ConfigError("latency.preprocessing", str(err)) from None
        if lat.backend in ("predictor", "remote"):
            raise ConfigError("latency.preprocessing", f"is measured on this machine, but latency={lat.backend} "
                              "gives another device's latency: measure the candidates here, or leave it null")
        if lat.scenario == "server":
            raise ConfigError("latency.preprocessing", "is added to one request at a time (scenario=single_stream); "
                              "the server scenario times batches of the network alone")


def check_anchor(lat: LatencyConfig, target_anchor: str | None, target_x: float) -> None:
    """The anchor network: ``latency.anchor`` and ``latency.anchor_rounds``, with the search's
    ``target_anchor`` and ``target_x``: known networks, widths in range, and a backend that
    measures something to pair the anchor with.

    Raises:
        ConfigError: naming the key.
    """
    positive("target_x", target_x)
    if target_anchor is None and target_x != 1.0:
        raise ConfigError("target_x", f"scales target_anchor, which is not set (target_x={target_x:g}); with "
                          "target_ms, state the target in milliseconds")
    int_at_least("latency.anchor_rounds", lat.anchor_rounds, 1)
    named = {}
    for key, spec in (("target_anchor", target_anchor), ("latency.anchor", lat.anchor)):
        if spec is not None:
            named[key] = anchor_network(key, spec)
    if len(named) == 2 and named["target_anchor"] != named["latency.anchor"]:
        raise ConfigError("latency.anchor", f"{lat.anchor!r} is not the network of target_anchor="
                          f"{target_anchor!r}, which is the anchor: leave latency.anchor unset")
    if not named:
        return
    key = next(iter(named))
    if lat.backend == "predictor" and not lat.options.get("hybrid"):
        raise ConfigError(key, "the anchor is measured back to back with the candidates, but latency=predictor "
                          "predicts them and measures nothing to pair it with: add latency.options.hybrid=true (its "
                          "measuring backend then measures the anchor), or measure (latency=onnxruntime, ...)")
    if lat.scenario == "server":
        raise ConfigError(key, "compares one image's latency with the anchor's; the server scenario bounds a batch's "
                          "latency: use target_ms there")


def check_data(data: DataConfig) -> None:
    """The ``data`` group: sizes and shares, ``data.fn`` and ``data.options`` with ``data=custom``,
    and ``data.path`` for the data read from disk (whether it exists is checked when it is loaded).

    Raises:
        ConfigError: naming the key.
    """
    if data.label is not None and not data.label.strip():
        raise ConfigError("data.label", "must name the data (e.g. cifar10_jpeg), or be null to use data.name")
    int_at_least("data.resolution", data.resolution, 8)
    in_range("data.val_fraction", data.val_fraction, 0.01, 0.9, "[0.01, 0.9)")
    if data.max_train_samples is not None:
        int_at_least("data.max_train_samples", data.max_train_samples, 1)
    if data.max_val_samples is not None:
        int_at_least("data.max_val_samples", data.max_val_samples, 1)
    _user_function("data", data.fn, data.name)
    if data.num_classes is not None:
        int_at_least("data.num_classes", data.num_classes, 1)
    if data.options and data.name != "custom":
        raise ConfigError("data.options", f"are keyword arguments of data.fn (data=custom), not of data={data.name}")
    if data.name not in ("digits", "custom") and not data.path:
        what = "a local folder or .tar/.tar.gz archive" if data.name == "image_folder" else "a local folder"
        raise ConfigError("data.path", f"data={data.display_name} reads {what}: set data.path=/path/to/it")
    in_range("data.max_bad_fraction", data.max_bad_fraction, 0.0, 1.0, "[0, 1)")
    positive("data.stream_above_mb", data.stream_above_mb)
    int_at_least("data.loader_workers", data.loader_workers, 0)
    if data.workers is not None:
        int_at_least("data.workers", data.workers, 1)


def check_train(tr: TrainConfig) -> None:
    """The ``train`` group: the recipe's ranges (at least one epoch) and the device.

    Raises:
        ConfigError: naming the key.
    """
    int_at_least("train.epochs", tr.epochs, 1)
    int_at_least("train.batch_size", tr.batch_size, 1)
    positive("train.lr", tr.lr)
    in_range("train.momentum", tr.momentum, 0.0, 1.0, "[0, 1)")
    in_range("train.weight_decay", tr.weight_decay, 0.0, math.inf, "[0, inf)")
    in_range("train.dropout", tr.dropout, 0.0, 1.0, "[0, 1)")
    in_range("train.warmup_epochs", tr.warmup_epochs, 0.0, math.inf, "[0, inf)")
    in_range("train.label_smoothing", tr.label_smoothing, 0.0, 1.0, "[0, 1)")
    if not _DEVICE_RE.fullmatch(tr.device):
        raise ConfigError("train.device", f"must be auto, cpu, cuda or cuda:<index>, got {tr.device!r}")


def check_accuracy(acc: AccuracyConfig, data_name: str) -> None:
    """The ``accuracy`` group, with the data it estimates on (``data.name``: ``data=custom`` takes
    neither a training-free score nor a supernet).

    Raises:
        ConfigError: naming the key.
    """
    int_at_least("accuracy.batch_size", acc.batch_size, 2)
    int_at_least("accuracy.bn_batches", acc.bn_batches, 1)
    if acc.estimator == "supernet" and not acc.checkpoint:
        raise ConfigError("accuracy.checkpoint", "accuracy=supernet needs the supernet's checkpoint: "
                          "accuracy.checkpoint=/path/to/supernet.pt (made by python -m nas.supernet)")
    int_at_least("accuracy.calibration_samples", acc.calibration_samples, 1)
    _user_function("accuracy", acc.fn, acc.estimator)
    if acc.options and acc.estimator != "custom":
        raise ConfigError("accuracy.options", f"are settings of accuracy.fn (accuracy=custom), not of "
                          f"accuracy={acc.estimator}")
    if data_name == "custom" and acc.estimator in ZERO_COST_ESTIMATORS:
        raise ConfigError("accuracy", f"{acc.estimator} is a training-free score of image classifiers on the built-in "
                          "data; with data=custom use accuracy=train or accuracy=custom")
    if data_name == "custom" and acc.estimator == "supernet":
        raise ConfigError("accuracy", "supernet checkpoints are trained on the built-in image data; with data=custom "
                          "use accuracy=train, a training-free score or accuracy=custom")


def check_search_alg(s: SearchAlgConfig, estimator: str, train_epochs: int) -> None:
    """The ``search`` group (the algorithm), with the accuracy estimator (``accuracy.estimator``)
    and the epochs of a trial (``train.epochs``) that ASHA and the rungs depend on.

    Raises:
        ConfigError: naming the key.
    """
    int_at_least("search.n_trials", s.n_trials, 1)
    int_at_least("search.max_concurrent", s.max_concurrent, 1)
    int_at_least("search.grace_period", s.grace_period, 1)
    int_at_least("search.reduction_factor", s.reduction_factor, 2)
    int_at_least("search.n_startup_trials", s.n_startup_trials, 0)
    int_at_least("search.population_size", s.population_size, 2)
    if not 1 <= s.tournament_size <= s.population_size:
        raise ConfigError("search.tournament_size", f"must be in 1..search.population_size ({s.population_size}), "
                          f"got {s.tournament_size}")
    if s.latency_screen is not None and not s.latency_screen >= 1:  # NaN too
        raise ConfigError("search.latency_screen", f"must be at least 1 (the target itself), got "
                          f"{s.latency_screen}: a proposal is not trained when it is over this many times the target")
    if s.latency_floor is not None and not 0 < s.latency_floor < 1:  # NaN too
        raise ConfigError("search.latency_floor", f"must be between 0 and 1 (a share of the target), got "
                          f"{s.latency_floor}: a proposal is not trained when it is under this many times the target")
    for key in ("latency_screen", "latency_floor"):
        if getattr(s, key) is not None and s.sampler != "evolution":
            raise ConfigError(f"search.{key}", f"screens regularised evolution's proposals, not {s.sampler}'s: add "
                              "search.sampler=evolution (an Optuna study would have to record every refused "
                              "proposal as a trial)")
    int_at_least("search.max_refused", s.max_refused, 1)
    if s.fill_mutate_after is not None:
        int_at_least("search.fill_mutate_after", s.fill_mutate_after, 1)
        if s.sampler != "evolution" or (s.latency_screen is None and s.latency_floor is None):
            raise ConfigError("search.fill_mutate_after", "counts the uniform draws that regularised evolution's "
                              "latency screen refused: add search.sampler=evolution and search.latency_screen "
                              "(or search.latency_floor)")
    if s.storage is not None and s.sampler == "evolution":
        raise ConfigError("search.storage", "is an Optuna study's storage; search.sampler=evolution keeps no study")
    int_at_least("search.max_duplicates", s.max_duplicates, 1)
    if s.trial_timeout_s is not None:
        positive("search.trial_timeout_s", s.trial_timeout_s)
    int_at_least("search.max_retries", s.max_retries, 0)
    if s.scheduler == "asha":
        if estimator not in ("train", "custom") and not (s.rungs and estimator == "supernet"):
            raise ConfigError("search.scheduler", "asha stops trials between epochs: it needs accuracy=train, "
                              "accuracy=custom (reporting with context.report) or accuracy=supernet with search.rungs")
        if s.sampler == "nsga2":
            raise ConfigError("search.scheduler", "asha ranks trials by reward; nsga2 is multi-objective: use fifo")
        if not s.rungs and s.grace_period >= train_epochs:
            raise ConfigError(
                "search.grace_period", f"must be below train.epochs ({train_epochs}) for asha to stop anything"
            )
    if s.rungs:
        check_rungs(s.rungs, s.scheduler, estimator)


def check_rungs(rungs: list[RungConfig], scheduler: str, estimator: str) -> None:
    """``search.rungs``: at least two (the supernet's estimate counts as one), each larger than the
    one below, promoted by ASHA.

    The size of the last rung against the data is checked once the data is loaded
    (:func:`check_top_rung`).

    Raises:
        ConfigError: naming ``search.rungs`` and what is wrong.
    """
    if estimator not in ("train", "supernet", "custom"):
        raise ConfigError("search.rungs", f"train candidates for longer at each rung: they need accuracy=train, "
                          f"accuracy=custom (or accuracy=supernet as the bottom rung), not {estimator}")
    least = 1 if estimator == "supernet" else 2  # the supernet's estimate is a rung of its own
    if len(rungs) < least:
        raise ConfigError("search.rungs", f"needs at least two rungs to promote between, got {len(rungs)}"
                          + (" and the supernet's" if estimator == "supernet" else ""))
    if scheduler != "asha":
        raise ConfigError("search.rungs", f"are promoted by search.scheduler=asha; {scheduler} runs every "
                          "candidate to the end: set search.scheduler=asha")
    for i, r in enumerate(rungs):
        if r.train_images < 1 or r.epochs < 1:
            raise ConfigError(f"search.rungs[{i}]", f"train_images and epochs must be >= 1, got {r.label}")
    for i, (lo, hi) in enumerate(itertools.pairwise(rungs), 1):
        if hi.train_images < lo.train_images or hi.train_images * hi.epochs <= lo.train_images * lo.epochs:
            raise ConfigError(f"search.rungs[{i}]", f"{hi.label} does not increase on rung {i - 1} ({lo.label}): "
                              "each rung needs at least as many images and more images x epochs")


def check_top_rung(rungs: list[RungConfig], n_train: int) -> None:
    """The last rung fits the training split that was loaded (``n_train`` images).

    Raises:
        ConfigError: the last rung asks for more images than there are.
    """
    if rungs and rungs[-1].train_images > n_train:
        raise ConfigError(f"search.rungs[{len(rungs) - 1}]",
                          f"asks for {rungs[-1].train_images} training images but the data has {n_train} "
                          "(after the validation split and data.max_train_samples): lower the rung or raise "
                          "data.max_train_samples (null: all)")


def check_ray(r: RayConfig) -> None:
    """The ``ray`` group: an address the search can join, CPUs and GPUs per trial, the modules shipped.

    Raises:
        ConfigError: naming the key.
    """
    if r.address is not None and r.address.startswith("ray://"):
        raise ConfigError(
            "ray.address",
            f"{r.address!r} is a Ray Client address, which runs Ray Tune's driver loop on the head node, away "
            "from the MLflow record; run the search on a cluster node with ray.address=auto (or host:port), or "
            "submit it with `ray job submit` (docs/cluster.md)",
        )
    if r.address is not None and not (r.address == "auto" or re.fullmatch(r"[^:/\s]+:\d+", r.address)):
        raise ConfigError("ray.address", f"must be 'auto' or 'host:port' (the head node's GCS port), got {r.address!r}")
    if r.num_cpus is not None:
        int_at_least("ray.num_cpus", r.num_cpus, 1)
    positive("ray.cpus_per_trial", r.cpus_per_trial)
    if r.gpus_per_trial is not None:
        in_range("ray.gpus_per_trial", r.gpus_per_trial, 0.0, math.inf, "[0, inf)")
    if r.address is None and r.num_cpus is not None and r.cpus_per_trial > r.num_cpus:
        raise ConfigError("ray.cpus_per_trial", f"{r.cpus_per_trial} exceeds ray.num_cpus ({r.num_cpus})")
    for i, module in enumerate(r.py_modules):
        if not str(module).strip():
            raise ConfigError(f"ray.py_modules[{i}]", "must name a module or a path, got an empty string")


def check_tracking(tracking: TrackingConfig) -> None:
    """The ``tracking`` group: an experiment name (the store is checked when it is opened).

    Raises:
        ConfigError: naming the key.
    """
    if not tracking.experiment.strip():
        raise ConfigError("tracking.experiment", "must be a non-empty name")


def check_supernet_estimate(cfg: SupernetEstimateConfig, required: bool, why: str) -> None:
    """A ``supernet`` block (``required``: a checkpoint must be named, because of ``why``).

    Raises:
        ConfigError: naming the key.
    """
    if required and not cfg.checkpoint:
        raise ConfigError("supernet.checkpoint", f"{why} needs the supernet's checkpoint: "
                          "supernet.checkpoint=/path/to/supernet.pt (made by python -m nas.supernet)")
    int_at_least("supernet.bn_batches", cfg.bn_batches, 1)
    int_at_least("supernet.batch_size", cfg.batch_size, 2)


def check_export_latency(lat: ExportLatencyConfig) -> None:
    """``nas.export``'s ``latency`` block: its rounds and its anchor network.

    Raises:
        ConfigError: naming the key.
    """
    int_at_least("latency.rounds", lat.rounds, 1)
    if lat.anchor is not None:
        anchor_network("latency.anchor", lat.anchor)
