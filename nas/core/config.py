"""The configuration of every command: one dataclass schema per Hydra config group, one per command.

Each group (``latency``, ``data``, ``train``, ``accuracy``, ``search``, ``ray``, ``tracking``)
has a schema here. :mod:`nas.cli` (the Hydra adapter; this module does not import Hydra)
registers each command's whole schema in Hydra's ConfigStore (``base_config`` for the search,
``<command>_schema`` for the others), not one per group: the groups' YAML files under
``conf/<group>/`` merge into that typed config, so a misspelt key or a wrong type fails when the
config is composed, naming the key. The ``space`` group holds search-space YAML in the format of
:mod:`search_spaces` (the built-in spaces, ``search_spaces/spaces/*.yaml``, registered as its
options) and has no default: its schema is a loose mapping here and
:meth:`search_spaces.SearchSpace.from_dict` validates it. Ranges and choices are checked by
:func:`validate` before any work starts.

Library code receives plain dataclasses (``OmegaConf.to_object``), never a DictConfig.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from latency_predictor.errors import ConfigError as LatencyConfigError
from latency_predictor.measurement.preprocess import Preprocessing
from latency_predictor.measurement.scenario import SCENARIOS, check_scenario
from latency_predictor.measurement.statistic import TARGET_STATS
from nas.core.errors import ConfigError
from nas.core.record import SORT_KEYS
from nas.core.reward import REWARDS
from search_spaces import SearchSpaceError
from search_spaces.references import parse_anchor

DATASETS = ("digits", "cifar10", "image_folder", "custom")
STREAM_MODES = ("auto", "always", "never")
OPTIMIZERS = ("sgd", "adam")
LR_SCHEDULES = ("cosine", "constant")
AUGMENTS = ("auto", "none", "crop", "crop_flip", "resized_crop", "resized_crop_flip")
AMP_MODES = ("auto", "off", "bf16", "fp16")
CHANNELS_LAST = ("auto", "on", "off")
ZERO_COST_ESTIMATORS = ("naswot", "synflow", "grad_norm", "jacob_cov")
ESTIMATORS = ("train", "supernet", *ZERO_COST_ESTIMATORS, "custom")
SAMPLERS = ("tpe", "random", "nsga2", "evolution")
SCHEDULERS = ("fifo", "asha")
LATENCY_PRECISIONS = ("fp32", "fp16", "bf16", "int8")
_DEVICE_RE = re.compile(r"auto|cpu|cuda(:\d+)?")

CHOICES = "choices"
"""The metadata key of a field's allowed values (:func:`one_of`)."""
HIDDEN = "hidden"
"""The metadata key of a field the command line sets itself, left out of a command's help."""


def one_of(allowed: Iterable[str], default: Any = None, *, default_factory: Callable[[], Any] | None = None) -> Any:
    """A field whose value (or each item of a list value) must be one of ``allowed``.

    The allowed values live on the field: :func:`check_choices` refuses any other value and a
    command's ``--help`` lists them, so the two cannot differ. None means "not set" and passes.
    """
    metadata = {CHOICES: tuple(allowed)}
    if default_factory is not None:
        return field(default_factory=default_factory, metadata=metadata)
    return field(default=default, metadata=metadata)


def check_choices(cfg: Any, prefix: str = "") -> None:
    """Check every :func:`one_of` field of the config dataclass ``cfg`` and of the configs nested in it.

    Raises:
        ConfigError: naming the first key whose value is not allowed, and the allowed values.
    """
    for f in dataclasses.fields(cfg):
        value = getattr(cfg, f.name)
        allowed = f.metadata.get(CHOICES)
        if allowed is not None and value is not None:
            for item in value if isinstance(value, list) else [value]:
                _choice(prefix + f.name, item, allowed)
        elif dataclasses.is_dataclass(value) and not isinstance(value, type):
            check_choices(value, f"{prefix}{f.name}.")


@dataclass
class LatencyConfig:
    """How a candidate's latency is obtained (the ``latency`` group).

    Attributes:
        backend: the estimator's registry name (``onnxruntime``, ``torch``, ``tensorrt``, ...).
        input_shape: the deployment input shape, batch first.
        precision: the deployment precision: ``fp32``, ``fp16``, ``bf16`` or ``int8``, as the
            backend can run it (ONNX Runtime on the CPU: fp32, int8; TensorRT: fp32, fp16, int8;
            torch: fp32, bf16, and fp16 on CUDA); a learned predictor must have been trained at it.
        options: backend-specific settings, passed to the backend, which checks them
            (e.g. ``provider``, ``intra_op_threads`` for ONNX Runtime).
        measure: measurement protocol settings (warm-up and timed runs, stability threshold).
        target_stat: the statistic the target bounds, ``p50`` (default), ``p90``, ``p95`` or
            ``p99``: the reward, "meets target", the Pareto front and the final pass use it; the
            protocol then times at least the runs it needs (1,000 for a p99; see
            :mod:`latency_predictor.measurement.statistic`), and a predictor must have been trained for it
            (``python -m latency_predictor.train --statistic p99``; one of another statistic is
            refused).
        scenario: ``single_stream`` (one image at a time: the target bounds its latency) or
            ``server``: each candidate is measured at every size of ``batch_sizes``, the target
            bounds a batch's latency, and the reward's efficiency term is the throughput within
            that bound against ``throughput_goal`` (see :mod:`latency_predictor.measurement.scenario` and
            :func:`nas.core.reward.throughput_reward`).
        batch_sizes: the server scenario's batch sizes.
        throughput_goal: images per second the server scenario asks for (required there).
        final_pass_top_k: after the trials, the driver measures again the top ``k`` candidates by
            reward and the whole Pareto front, with no trial running, and the final table,
            leaderboard and export use those figures (the in-search ones stay in MLflow as
            ``latency_in_search_*``); 0: off (see :mod:`nas.driver.final_pass`).
        preprocessing: end-to-end latency: ``jpeg``, ``png`` or ``raw`` (what arrives) adds the
            cost of decoding it, resizing it to the input shape and normalising it, measured once
            by the driver with the same protocol (:mod:`latency_predictor.measurement.preprocess`); None
            (default): the network alone.
        source_size: ``[height, width]`` of the arriving image (``preprocessing``).
        anchor: an anchor network, ``<reference>[@<width>]`` (e.g. ``mobilenetv2_100@0.35``; the
            references of :mod:`search_spaces.references`, widths 0.25 to 1.4, in their 32x32 layout
            for inputs up to 64 pixels): measured back to back with the candidates (in each trial
            right after its candidate; in alternating rounds in the final pass, the leaderboard's
            and the export's re-measurements), so that every measured candidate also gets
            ``x_anchor``, its latency over the anchor's at ``target_stat`` (the median over the
            rounds), which a drifting host does not move; None: no anchor. ``target_anchor`` sets it.
        anchor_rounds: rounds of that pairing wherever candidates are measured side by side.
    """

    backend: str = "onnxruntime"
    input_shape: list[int] = field(default_factory=lambda: [1, 3, 224, 224])
    precision: str = one_of(LATENCY_PRECISIONS, "fp32")
    options: dict[str, Any] = field(default_factory=dict)
    measure: dict[str, Any] = field(default_factory=dict)
    target_stat: str = one_of(TARGET_STATS, "p50")
    scenario: str = one_of(SCENARIOS, "single_stream")
    batch_sizes: list[int] = field(default_factory=lambda: [1, 2, 4, 8, 16, 32])
    throughput_goal: float | None = None
    final_pass_top_k: int = 5
    preprocessing: str | None = None
    source_size: list[int] = field(default_factory=lambda: [480, 640])
    anchor: str | None = None
    anchor_rounds: int = 3


@dataclass
class DataConfig:
    """The proxy task accuracy is estimated on (the ``data`` group).

    Attributes:
        name: ``digits`` (scikit-learn's, shipped with it: a demonstration proxy),
            ``image_folder`` (``<path>/<class>/<image>``, a folder or a ``.tar``/``.tar.gz``
            archive of one), ``cifar10`` (the CIFAR-10 python pickle folder) or ``custom`` (the
            training and validation datasets your function ``fn`` returns; docs/custom.md).
        label: what the data is called in logs, the MLflow record (param ``data.label``, tag
            ``dataset``) and reports, e.g. ``cifar10_jpeg`` for CIFAR-10 read as an
            ``image_folder``; None: ``name``. ``name`` stays the loader.
        path: local folder or archive (``image_folder``, ``cifar10``); never downloaded.
        resolution: images are resized to ``resolution`` x ``resolution`` (3 channels).
        val_fraction: share of the images held out for validation (seeded, stratified by class);
            a search never validates on a test split.
        max_train_samples: use at most this many training images (None: all).
        max_val_samples: use at most this many validation images (None: all).
        seed: seed of the train/validation split and of subsampling.
        mirror_invariant: a mirrored image shows the same class (horizontal flips are a valid
            augmentation); false for digits and text.
        cache_dir: where decoded image folders are cached (None: ``$LATNAS_CACHE_DIR/datasets``
            or ``~/.cache/latnas/datasets``).
        workers: processes decoding an image folder (None: the usable CPUs).
        max_bad_fraction: the largest share of files that may be skipped as unreadable images.
        stream: ``auto`` (stream image folders larger than ``stream_above_mb`` decoded), ``always``
            (stream from disk) or ``never`` (load into memory).
        stream_above_mb: ``stream=auto`` streams a dataset whose decoded images would take more.
        loader_workers: DataLoader processes per trial when streaming.
        fn: ``custom``: your function as ``module:function`` (e.g. ``my_pkg.my_module:datasets``),
            returning the training and validation datasets (``torch.utils.data.Dataset``s of
            ``(input, target)`` pairs) as a pair or a mapping with ``train`` and ``val``; it is
            called with ``options`` as keyword arguments, once by the driver and once in each trial
            process, and must return the same split every time.
        options: ``custom``: keyword arguments of ``fn`` (a new key with ``+``: ``+data.options.n=512``).
        num_classes: ``custom``: the candidates' outputs (classes, or regression targets); None:
            the ``num_classes`` a mapping returned by ``fn`` gives, else the length of the training
            dataset's ``classes`` attribute.
    """

    name: str = one_of(DATASETS, "digits")
    label: str | None = None
    path: str | None = None
    resolution: int = 32
    val_fraction: float = 0.2
    max_train_samples: int | None = None
    max_val_samples: int | None = None
    seed: int = 0
    mirror_invariant: bool = True
    cache_dir: str | None = None
    workers: int | None = None
    max_bad_fraction: float = 0.01
    stream: str = one_of(STREAM_MODES, "auto")
    stream_above_mb: float = 4096.0
    loader_workers: int = 2
    fn: str | None = None
    options: dict[str, Any] = field(default_factory=dict)
    num_classes: int | None = None

    @property
    def display_name(self) -> str:
        """What the data is called: ``label``, else ``name``."""
        return self.label or self.name


@dataclass
class TrainConfig:
    """Training of each candidate on the proxy task (the ``train`` group): the recipe.

    Attributes:
        epochs: training epochs per candidate.
        batch_size: minibatch size.
        optimizer: ``sgd`` (with Nesterov momentum) or ``adam`` (AdamW when weight decay is set).
        lr: peak learning rate.
        momentum: SGD momentum.
        weight_decay: weight decay (L2 for SGD, decoupled for AdamW).
        no_decay_norm_bias: no weight decay on normalisation layers and biases.
        lr_schedule: ``cosine`` (annealed to zero over all steps after the warm-up) or ``constant``.
        warmup_epochs: linear learning-rate warm-up, in epochs (fractions allowed).
        label_smoothing: label smoothing of the training loss (0: none).
        augment: ``auto`` (padded random crop for images up to 64 pixels, random resized crop
            above; with horizontal flips when the data is mirror-invariant), ``none``, ``crop``,
            ``crop_flip``, ``resized_crop`` or ``resized_crop_flip``.
        amp: mixed precision on CUDA: ``auto`` (bf16 where supported, else fp16 with loss
            scaling; off on the CPU), ``bf16``, ``fp16`` or ``off``.
        channels_last: ``auto`` (on CUDA), ``on`` or ``off``.
        dropout: dropout before the classifier.
        seed: seed of weight initialisation, batch order and augmentation (the same for every
            candidate).
        device: ``auto`` (CUDA when a GPU is visible to the trial, else CPU), ``cpu``, ``cuda``
            or ``cuda:N``.
    """

    epochs: int = 2
    batch_size: int = 64
    optimizer: str = one_of(OPTIMIZERS, "sgd")
    lr: float = 0.05
    momentum: float = 0.9
    weight_decay: float = 5e-5
    no_decay_norm_bias: bool = True
    lr_schedule: str = one_of(LR_SCHEDULES, "cosine")
    warmup_epochs: float = 0.2
    label_smoothing: float = 0.1
    augment: str = one_of(AUGMENTS, "auto")
    amp: str = one_of(AMP_MODES, "auto")
    channels_last: str = one_of(CHANNELS_LAST, "auto")
    dropout: float = 0.0
    seed: int = 0
    device: str = "auto"


@dataclass
class AccuracyConfig:
    """How a candidate's accuracy is estimated (the ``accuracy`` group).

    Attributes:
        estimator: ``train`` (brief training, validation accuracy), ``supernet`` (the validation
            accuracy of the candidate's subnet of a trained supernet, :mod:`nas.trial.subnet`) or a
            training-free score used in place of accuracy by the reward: ``naswot`` (Mellor et al.
            2021), ``synflow``, ``grad_norm`` or ``jacob_cov`` (see :mod:`nas.trial.zero_cost`), or
            ``custom``: your own evaluator, ``fn``.
        batch_size: images a training-free score looks at; with ``supernet``, images per batch of
            the BatchNorm recalibration.
        checkpoint: ``supernet``: the supernet checkpoint (``python -m nas.supernet``'s
            ``supernet.pt``), readable where the trials run.
        bn_batches: ``supernet``: training batches each subnet's BatchNorm statistics are
            recalibrated on before it is validated.
        calibration_samples: with ``latency.precision=int8`` and ``train``: training images the
            int8 network whose accuracy the reward uses is calibrated on (:mod:`nas.trial.precision`).
        fn: ``custom``: your evaluator as ``module:function`` (e.g. ``my_pkg.my_module:evaluate``):
            it gets the candidate network and a context (device, seed, budget, data, a report
            function for early stopping, a working folder) and returns a score, higher is better,
            >= 0 (the reward multiplies it), or a mapping with ``score`` and further metrics
            (:mod:`nas.trial.custom`, docs/custom.md).
        options: ``custom``: settings handed to ``fn`` as ``context.options`` (a new key with ``+``:
            ``+accuracy.options.lr=0.01``).
    """

    estimator: str = one_of(ESTIMATORS, "train")
    batch_size: int = 64
    checkpoint: str | None = None
    bn_batches: int = 10
    calibration_samples: int = 256
    fn: str | None = None
    options: dict[str, Any] = field(default_factory=dict)


@dataclass
class RungConfig:
    """One rung of a multi-fidelity search (an item of ``search.rungs``).

    A candidate that reaches this rung trains ``epochs`` more epochs on ``train_images`` images
    (nested subsets: a rung's images include the rung below's), starting from the weights it
    ended the rung below with, under a fresh warm-up and cosine schedule; its accuracy and reward
    at the rung are measured then.

    Attributes:
        train_images: training images of this rung (at most the training split's size).
        epochs: epochs trained at this rung.
    """

    train_images: int = 0
    epochs: int = 0

    @property
    def label(self) -> str:
        """``<images>x<epochs>``, as the rung is shown next to an accuracy."""
        return f"{self.train_images}x{self.epochs}"


@dataclass
class SearchAlgConfig:
    """The search algorithm (the ``search`` group).

    Attributes:
        sampler: ``tpe`` (Optuna's TPE), ``random``, ``nsga2`` (multi-objective: accuracy
            up, latency down) or ``evolution`` (regularised evolution on the reward).
        n_trials: distinct architectures to evaluate.
        max_concurrent: trials running at once.
        seed: seed of the sampler.
        reward: ``squared`` (default), ``mnas_soft`` or ``mnas_hard`` (see :mod:`nas.core.reward`).
        scheduler: ``fifo`` (every trial runs all epochs) or ``asha`` (early stopping).
        grace_period: ASHA: epochs before a trial may be stopped.
        reduction_factor: ASHA: the halving rate.
        n_startup_trials: TPE: random trials before the model is used.
        population_size: NSGA-II and evolution: the population size.
        tournament_size: evolution: members compared to pick each parent.
        storage: an Optuna storage URL (e.g. ``sqlite:////abs/optuna.db``) where the study
            persists, named after the search (``optuna-dashboard <url>`` shows it; a resumed
            search continues it); None: in memory. Not for ``evolution``.
        max_duplicates: consecutive already-evaluated suggestions after which the space is
            taken as exhausted and the search ends.
        trial_timeout_s: wall-clock limit of one trial in seconds (None: no limit); checked
            between training steps and around the latency measurement, a trial past it is
            FAILED with ``TrialTimeoutError``.
        max_retries: times a trial whose process died (killed, lost node) is started again
            before it is recorded as FAILED.
        rungs: multi-fidelity selection (empty: off): every candidate is trained at the first
            rung, and with ``scheduler=asha`` the best ``1/reduction_factor`` of those recorded at
            a rung go on to the next, continuing from their weights, up to the last rung (the
            deployment budget). ``train.epochs`` and ``data.max_train_samples`` then no longer
            size a trial: the rungs do (see :class:`RungConfig`, docs/fidelity.md). ``+rungs=cifar10_cpu``
            or ``+rungs=cifar10_gpu`` picks a set of rungs for CIFAR-10 (``conf/rungs/``).
        start: architectures evaluated first, in order (canonical strings, members of the space),
            for example known designs reshaped into the space; the sampler then learns from them as
            history (TPE's model, evolution's first population) and never proposes them again.
    """

    sampler: str = one_of(SAMPLERS, "tpe")
    n_trials: int = 20
    max_concurrent: int = 2
    seed: int = 0
    reward: str = one_of(sorted(REWARDS), "squared")
    scheduler: str = one_of(SCHEDULERS, "fifo")
    grace_period: int = 1
    reduction_factor: int = 2
    n_startup_trials: int = 8
    population_size: int = 8
    tournament_size: int = 3
    storage: str | None = None
    max_duplicates: int = 200
    trial_timeout_s: float | None = None
    max_retries: int = 2
    rungs: list[RungConfig] = field(default_factory=list)
    start: list[str] = field(default_factory=list)


@dataclass
class RayConfig:
    """Where trials run (the ``ray`` group).

    Attributes:
        address: None starts a local Ray cluster on this machine (or joins ``$RAY_ADDRESS``
            when set, as under ``ray job submit``); ``auto`` or ``host:port`` joins an existing
            one (Ray Client ``ray://`` addresses are refused: see docs/cluster.md).
        num_cpus: CPUs of the local cluster (None: all of this machine's).
        cpus_per_trial: CPUs reserved per trial (also torch's thread count in the trial).
        gpus_per_trial: GPUs reserved per trial; None: ``visible GPUs / max_concurrent`` on a
            local cluster (0 when there are none), 0 on an existing cluster.
        ship_code: send the modules of ``accuracy.fn`` and ``data.fn`` (the top-level package,
            or the single file) and ``py_modules`` to every trial with Ray's runtime environment
            (``py_modules``), so nodes that do not have them can run them; false: they must be
            importable on every node already (installed there). Installed packages are never sent.
        py_modules: further modules your functions import that are not installed on the nodes:
            module names (``helpers``) or paths (a ``.py`` file or a package folder), sent the same way.
    """

    address: str | None = None
    num_cpus: int | None = None
    cpus_per_trial: float = 1.0
    gpus_per_trial: float | None = None
    ship_code: bool = True
    py_modules: list[str] = field(default_factory=list)


@dataclass
class TrackingConfig:
    """Where results are recorded (the ``tracking`` group).

    Attributes:
        uri: MLflow tracking URI; None: ``sqlite:///<home>/mlflow.db`` (:mod:`nas.core.paths`).
        experiment: MLflow experiment name.
    """

    uri: str | None = None
    experiment: str = "latnas"


@dataclass
class SearchConfig:
    """The whole configuration of one search.

    Attributes:
        space: the search-space mapping (``+space=<name>`` loads ``search_spaces/spaces/<name>.yaml``).
        space_source: where ``space`` came from, for error messages.
        target_ms: the latency target in milliseconds (or ``target_anchor``: one of the two).
        target_anchor: a latency target relative to a network, ``<reference>[@<width>]`` (e.g.
            ``mobilenetv2_100@0.35``: "no slower than MobileNetV2 x0.35 on this device"): that
            network is the anchor (``latency.anchor``), and the reward and "meets target" use each
            candidate's ``x_anchor`` against ``target_x`` in place of its milliseconds.
        target_x: the factor of ``target_anchor``: a candidate meets the target when its latency is
            at most ``target_x`` times the anchor's (1.0: no slower than it).
        name: the search's name (MLflow parent run name, Ray experiment name); None:
            ``<space>-<target>ms-<date>-<time>`` (a relative target: ``<space>-x<target_x>-<anchor>-...``).
        output_dir: absolute folder for this search's files (Ray Tune state, artifacts, log);
            None: ``<home>/searches/<name>`` (:mod:`nas.core.paths`).
        top_k: candidates shown in the final table.
        progress: show the search's progress (a bar on a terminal, a line per trial event otherwise).
        resume: continue the search called ``name`` recorded in the tracking store (its
            candidates are not evaluated again; the sampler's history is rebuilt from them).
    """

    space: dict[str, Any] | None = None
    space_source: str = field(default="<config>", metadata={HIDDEN: True})
    target_ms: float | None = None
    target_anchor: str | None = None
    target_x: float = 1.0
    name: str | None = None
    output_dir: str | None = None
    top_k: int = 10
    progress: bool = True
    resume: bool = False
    latency: LatencyConfig = field(default_factory=LatencyConfig)
    data: DataConfig = field(default_factory=DataConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    accuracy: AccuracyConfig = field(default_factory=AccuracyConfig)
    search: SearchAlgConfig = field(default_factory=SearchAlgConfig)
    ray: RayConfig = field(default_factory=RayConfig)
    tracking: TrackingConfig = field(default_factory=TrackingConfig)

    @property
    def anchor(self) -> str | None:
        """The anchor network the candidates are measured beside: ``target_anchor``, else ``latency.anchor``."""
        return self.target_anchor or self.latency.anchor


GROUP_SCHEMAS: dict[str, type] = {
    "latency": LatencyConfig,
    "data": DataConfig,
    "train": TrainConfig,
    "accuracy": AccuracyConfig,
    "search": SearchAlgConfig,
    "ray": RayConfig,
    "tracking": TrackingConfig,
}


# ---------------------------------------------------------------------- range checks


def _choice(key: str, value: str, allowed: tuple[str, ...] | list[str]) -> None:
    if value not in allowed:
        raise ConfigError(key, f"{value!r} is not one of {list(allowed)}")


def _run_name(name: str | None) -> None:
    """A run's ``name`` (its folder and MLflow run): letters, digits, '_', '.' and '-'."""
    if name is not None and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", name):
        raise ConfigError("name", f"use letters, digits, '_', '.' and '-' only, got {name!r}")


def _int_at_least(key: str, value: int | None, minimum: int) -> None:
    if value is None or value < minimum:
        raise ConfigError(key, f"must be an integer >= {minimum}, got {value!r}")


def _positive(key: str, value: float | None) -> None:
    if value is None or not math.isfinite(value) or value <= 0:
        raise ConfigError(key, f"must be a finite number > 0, got {value!r}")


def _in_range(key: str, value: float, low: float, high: float, text: str) -> None:
    if not math.isfinite(value) or not low <= value < high:
        raise ConfigError(key, f"must be in {text}, got {value!r}")


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


def _check_anchor(cfg: SearchConfig) -> None:
    """``target_anchor``, ``target_x`` and ``latency.anchor``: known networks, widths in range, and an
    estimator that measures something to pair the anchor with."""
    _positive("target_x", cfg.target_x)
    if cfg.target_anchor is None and cfg.target_x != 1.0:
        raise ConfigError("target_x", f"scales target_anchor, which is not set (target_x={cfg.target_x:g}); with "
                          "target_ms, state the target in milliseconds")
    lat = cfg.latency
    _int_at_least("latency.anchor_rounds", lat.anchor_rounds, 1)
    named = {}
    for key, spec in (("target_anchor", cfg.target_anchor), ("latency.anchor", lat.anchor)):
        if spec is not None:
            try:
                named[key] = parse_anchor(spec)
            except SearchSpaceError as err:
                raise ConfigError(key, str(err)) from None
    if len(named) == 2 and named["target_anchor"] != named["latency.anchor"]:
        raise ConfigError("latency.anchor", f"{lat.anchor!r} is not the network of target_anchor="
                          f"{cfg.target_anchor!r}, which is the anchor: leave latency.anchor unset")
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


def validate(cfg: SearchConfig) -> None:
    """Check every value's range and choice; raise on the first bad one.

    Paths are checked where they are used (the dataset, the tracking store) before trials start.

    Raises:
        ConfigError: naming the key, the value and what is allowed.
    """
    if cfg.space is None:
        raise ConfigError("space", "no search space chosen; add +space=<name> (e.g. +space=mobile)")
    if cfg.target_ms is not None and cfg.target_anchor is not None:
        raise ConfigError("target_anchor", "target_ms and target_anchor are two targets: give one, target_ms=<ms> "
                          "or target_anchor=<reference>[@<width>] (relative to that network, measured beside the "
                          "candidates)")
    if cfg.target_ms is None and cfg.target_anchor is None:
        raise ConfigError("target_ms", "the latency target is required, e.g. target_ms=50, or target_anchor="
                          "mobilenetv2_100@0.35 (no slower than that network on this device)")
    if cfg.target_ms is not None:
        _positive("target_ms", cfg.target_ms)
    _check_anchor(cfg)
    _run_name(cfg.name)
    _int_at_least("top_k", cfg.top_k, 1)
    if cfg.resume and cfg.name is None:
        raise ConfigError("resume", "resume=true continues a named search: add name=<the search's name>")
    check_choices(cfg)

    lat = cfg.latency
    # The backend name, options and precision are checked by the backend registry when it is built.
    _int_at_least("latency.final_pass_top_k", lat.final_pass_top_k, 0)
    if lat.scenario == "server":
        try:
            check_scenario(lat.scenario, lat.batch_sizes)
        except LatencyConfigError as err:
            raise ConfigError("latency.batch_sizes", str(err)) from None
        if lat.throughput_goal is None:
            raise ConfigError("latency.throughput_goal", "the server scenario needs the images per second to sustain, "
                              "e.g. latency.throughput_goal=500")
        _positive("latency.throughput_goal", lat.throughput_goal)
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

    data = cfg.data
    if data.label is not None and not data.label.strip():
        raise ConfigError("data.label", "must name the data (e.g. cifar10_jpeg), or be null to use data.name")
    _int_at_least("data.resolution", data.resolution, 8)
    _in_range("data.val_fraction", data.val_fraction, 0.01, 0.9, "[0.01, 0.9)")
    if data.max_train_samples is not None:
        _int_at_least("data.max_train_samples", data.max_train_samples, 1)
    if data.max_val_samples is not None:
        _int_at_least("data.max_val_samples", data.max_val_samples, 1)
    _user_function("data", data.fn, data.name)
    if data.num_classes is not None:
        _int_at_least("data.num_classes", data.num_classes, 1)
    if data.options and data.name != "custom":
        raise ConfigError("data.options", f"are keyword arguments of data.fn (data=custom), not of data={data.name}")
    if data.name not in ("digits", "custom") and not data.path:
        what = "a local folder or .tar/.tar.gz archive" if data.name == "image_folder" else "a local folder"
        raise ConfigError("data.path", f"data={data.display_name} reads {what}: set data.path=/path/to/it")
    _in_range("data.max_bad_fraction", data.max_bad_fraction, 0.0, 1.0, "[0, 1)")
    _positive("data.stream_above_mb", data.stream_above_mb)
    _int_at_least("data.loader_workers", data.loader_workers, 0)
    if data.workers is not None:
        _int_at_least("data.workers", data.workers, 1)

    tr = cfg.train
    _int_at_least("train.epochs", tr.epochs, 1)
    _int_at_least("train.batch_size", tr.batch_size, 1)
    _positive("train.lr", tr.lr)
    _in_range("train.momentum", tr.momentum, 0.0, 1.0, "[0, 1)")
    _in_range("train.weight_decay", tr.weight_decay, 0.0, math.inf, "[0, inf)")
    _in_range("train.dropout", tr.dropout, 0.0, 1.0, "[0, 1)")
    _in_range("train.warmup_epochs", tr.warmup_epochs, 0.0, math.inf, "[0, inf)")
    _in_range("train.label_smoothing", tr.label_smoothing, 0.0, 1.0, "[0, 1)")
    if not _DEVICE_RE.fullmatch(tr.device):
        raise ConfigError("train.device", f"must be auto, cpu, cuda or cuda:<index>, got {tr.device!r}")

    acc = cfg.accuracy
    _int_at_least("accuracy.batch_size", acc.batch_size, 2)
    _int_at_least("accuracy.bn_batches", acc.bn_batches, 1)
    if acc.estimator == "supernet" and not acc.checkpoint:
        raise ConfigError("accuracy.checkpoint", "accuracy=supernet needs the supernet's checkpoint: "
                          "accuracy.checkpoint=/path/to/supernet.pt (made by python -m nas.supernet)")
    _int_at_least("accuracy.calibration_samples", acc.calibration_samples, 1)
    _user_function("accuracy", acc.fn, acc.estimator)
    if acc.options and acc.estimator != "custom":
        raise ConfigError("accuracy.options", f"are settings of accuracy.fn (accuracy=custom), not of "
                          f"accuracy={acc.estimator}")
    if data.name == "custom" and acc.estimator in ZERO_COST_ESTIMATORS:
        raise ConfigError("accuracy", f"{acc.estimator} is a training-free score of image classifiers on the built-in "
                          "data; with data=custom use accuracy=train or accuracy=custom")
    if data.name == "custom" and acc.estimator == "supernet":
        raise ConfigError("accuracy", "supernet checkpoints are trained on the built-in image data; with data=custom "
                          "use accuracy=train, a training-free score or accuracy=custom")

    s = cfg.search
    _int_at_least("search.n_trials", s.n_trials, 1)
    _int_at_least("search.max_concurrent", s.max_concurrent, 1)
    _int_at_least("search.grace_period", s.grace_period, 1)
    _int_at_least("search.reduction_factor", s.reduction_factor, 2)
    _int_at_least("search.n_startup_trials", s.n_startup_trials, 0)
    _int_at_least("search.population_size", s.population_size, 2)
    if not 1 <= s.tournament_size <= s.population_size:
        raise ConfigError("search.tournament_size", f"must be in 1..search.population_size ({s.population_size}), "
                          f"got {s.tournament_size}")
    if s.storage is not None and s.sampler == "evolution":
        raise ConfigError("search.storage", "is an Optuna study's storage; search.sampler=evolution keeps no study")
    _int_at_least("search.max_duplicates", s.max_duplicates, 1)
    if s.trial_timeout_s is not None:
        _positive("search.trial_timeout_s", s.trial_timeout_s)
    _int_at_least("search.max_retries", s.max_retries, 0)
    if s.scheduler == "asha":
        if acc.estimator not in ("train", "custom") and not (s.rungs and acc.estimator == "supernet"):
            raise ConfigError("search.scheduler", "asha stops trials between epochs: it needs accuracy=train, "
                              "accuracy=custom (reporting with context.report) or accuracy=supernet with search.rungs")
        if s.sampler == "nsga2":
            raise ConfigError("search.scheduler", "asha ranks trials by reward; nsga2 is multi-objective: use fifo")
        if not s.rungs and s.grace_period >= tr.epochs:
            raise ConfigError(
                "search.grace_period", f"must be below train.epochs ({tr.epochs}) for asha to stop anything"
            )
    if s.rungs:
        check_rungs(s.rungs, s.scheduler, acc.estimator)

    r = cfg.ray
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
        _int_at_least("ray.num_cpus", r.num_cpus, 1)
    _positive("ray.cpus_per_trial", r.cpus_per_trial)
    if r.gpus_per_trial is not None:
        _in_range("ray.gpus_per_trial", r.gpus_per_trial, 0.0, math.inf, "[0, inf)")
    if r.address is None and r.num_cpus is not None and r.cpus_per_trial > r.num_cpus:
        raise ConfigError("ray.cpus_per_trial", f"{r.cpus_per_trial} exceeds ray.num_cpus ({r.num_cpus})")
    for i, module in enumerate(r.py_modules):
        if not str(module).strip():
            raise ConfigError(f"ray.py_modules[{i}]", "must name a module or a path, got an empty string")

    if not cfg.tracking.experiment.strip():
        raise ConfigError("tracking.experiment", "must be a non-empty name")


# ---------------------------------------------------------------------- a trained supernet


@dataclass
class SupernetEstimateConfig:
    """A trained supernet as the source of a subnet's weights (the ``supernet`` key of ``nas.export``
    and ``nas.fidelity``).

    Attributes:
        checkpoint: the supernet checkpoint (``python -m nas.supernet``'s ``supernet.pt``); None: none.
        bn_batches: training batches a subnet's BatchNorm statistics are recalibrated on.
        batch_size: images per recalibration batch.
    """

    checkpoint: str | None = None
    bn_batches: int = 10
    batch_size: int = 64


def validate_supernet_estimate(cfg: SupernetEstimateConfig, required: bool, why: str) -> None:
    """Check a ``supernet`` block (``required``: a checkpoint must be named, because of ``why``).

    Raises:
        ConfigError: naming the key.
    """
    if required and not cfg.checkpoint:
        raise ConfigError("supernet.checkpoint", f"{why} needs the supernet's checkpoint: "
                          "supernet.checkpoint=/path/to/supernet.pt (made by python -m nas.supernet)")
    _int_at_least("supernet.bn_batches", cfg.bn_batches, 1)
    _int_at_least("supernet.batch_size", cfg.batch_size, 2)


DIST_BACKENDS = ("auto", "gloo", "nccl")


@dataclass
class DistributedConfig:
    """Data-parallel training over several processes (the ``distributed`` key of ``nas.supernet``).

    Used when the command is started by ``torchrun`` (which sets ``WORLD_SIZE`` and the rendezvous);
    a plain ``python -m nas.supernet`` trains in one process.

    Attributes:
        backend: ``auto`` (NCCL on CUDA, gloo on the CPU), ``gloo`` or ``nccl``.
        timeout_s: how long a process waits for the others at a collective before failing.
    """

    backend: str = one_of(DIST_BACKENDS, "auto")
    timeout_s: float = 1800.0


@dataclass
class SupernetConfig:
    """Everything ``python -m nas.supernet`` takes: training a weight-sharing supernet.

    Attributes:
        space: the search space (``+space=<name>``).
        space_source: where ``space`` came from, for messages.
        name: the training's name (its folder and MLflow run); None: ``supernet-<space>-<data>``.
        output_dir: its folder (``supernet.pt``, ``history.json``); None: ``<home>/supernets/<name>``
            (the project home, ``$LATNAS_HOME`` or ``.latnas``). The same for every process of a distributed run.
        resume: continue from the folder's checkpoint when there is one (after a kill, or when
            ``torchrun`` restarts the processes); false: refuse to start over an existing checkpoint.
        random_subnets: random subnets per step, besides the sandwich's smallest network and the
            largest of each block type.
        distill: in-place distillation: every subnet but the largest learns the largest's soft
            predictions of the same batch (false: every subnet learns the labels).
        eval_subnets: after each epoch, validate the smallest and the largest subnet (BatchNorm
            recalibrated on ``bn_batches`` batches) and report their accuracy.
        bn_batches: training batches of that recalibration.
        progress: show a progress bar.
        data: the training data (validation is carved from it and never trained on).
        train: the recipe (``train.epochs``, batch size per process, learning rate, augmentation, AMP).
        distributed: data-parallel settings.
        tracking: the MLflow store and experiment.
    """

    space: dict[str, Any] | None = None
    space_source: str = field(default="<config>", metadata={HIDDEN: True})
    name: str | None = None
    output_dir: str | None = None
    resume: bool = True
    random_subnets: int = 2
    distill: bool = True
    eval_subnets: bool = True
    bn_batches: int = 10
    progress: bool = True
    data: DataConfig = field(default_factory=DataConfig)
    train: TrainConfig = field(default_factory=lambda: TrainConfig(epochs=10))
    distributed: DistributedConfig = field(default_factory=DistributedConfig)
    tracking: TrackingConfig = field(default_factory=TrackingConfig)


def validate_supernet(cfg: SupernetConfig) -> None:
    """Check a supernet training's settings before any work.

    Raises:
        ConfigError: naming the key and what is allowed.
    """
    if cfg.space is None:
        raise ConfigError("space", "no search space chosen; add +space=<name> (e.g. +space=mobile_cifar)")
    _run_name(cfg.name)
    _int_at_least("random_subnets", cfg.random_subnets, 0)
    _int_at_least("bn_batches", cfg.bn_batches, 1)
    check_choices(cfg)
    _positive("distributed.timeout_s", cfg.distributed.timeout_s)
    sub = SearchConfig(space=cfg.space, target_ms=1.0, data=cfg.data, train=cfg.train, tracking=cfg.tracking)
    validate(sub)  # the data, train and tracking groups, checked as the search checks them


# ---------------------------------------------------------------------- the review commands

LEADERBOARD_FORMATS = ("table", "csv", "json")
INITS = ("random", "supernet")
REFERENCE_MODES = ("logged", "measure", "none")
ENGINE_PRECISIONS = ("fp32", "fp16", "int8")


@dataclass
class LeaderboardConfig:
    """Everything ``python -m nas.leaderboard`` takes.

    Attributes:
        search: the search's name or parent run id; None: the latest search.
        top_k: candidates shown.
        sort: the ranking key (latency, params and MACs ascending, the rest descending).
        feasible: only candidates that meet the latency target.
        pareto: only the Pareto front (accuracy vs latency p50).
        failed: also list failed and pruned candidates with their reason.
        format: how the candidates are printed (or written to ``output``).
        output: write the CSV/JSON/table to this file instead of printing it.
        plot: save the Pareto plot and log it on the search's parent run.
        plot_path: where to save it; None: ``<home>/plots/pareto-<search>.png`` (:mod:`nas.core.paths`).
        references: reference networks on the plot: ``logged`` (those recorded on the parent run),
            ``measure`` (measure them now with the search's backend on this machine, which must be
            the search's device, and record them on the parent run) or ``none``.
        tracking: the MLflow store and experiment.
    """

    search: str | None = None
    top_k: int = 10
    sort: str = one_of(SORT_KEYS, "reward")
    feasible: bool = False
    pareto: bool = False
    failed: bool = False
    format: str = one_of(LEADERBOARD_FORMATS, "table")
    output: str | None = None
    plot: bool = True
    plot_path: str | None = None
    references: str = one_of(REFERENCE_MODES, "logged")
    tracking: TrackingConfig = field(default_factory=TrackingConfig)


def validate_leaderboard(cfg: LeaderboardConfig) -> None:
    """Check the leaderboard's choices and counts.

    Raises:
        ConfigError: naming the key and what is allowed.
    """
    check_choices(cfg)
    _int_at_least("top_k", cfg.top_k, 1)


@dataclass
class ExportLatencyConfig:
    """How latency is re-measured at export (the ``latency`` key); unset values come from the search.

    Attributes:
        backend: ``onnxruntime``, ``torch`` or ``tensorrt``; None: the search's measuring backend
            (ONNX Runtime when the search predicted latency or is not known).
        input_shape: deployment shape ``[N, C, H, W]``; None: the search's.
        options: backend options (e.g. ``provider``, ``intra_op_threads``), over the search's when
            the backend is the search's (else over the backend's defaults).
        measure: measurement protocol settings, over the search's.
        rounds: the unfused and fused networks are timed alternately this many times and each
            keeps its fastest round, so drifting background load does not favour either.
        anchor: an anchor network, ``<reference>[@<width>]``, timed right after the fused network in
            each round: the report gives the fused network's ``x_anchor`` (the median over the rounds
            of its p50 over the anchor's) and the anchor's ms; None: the search's anchor
            (``latency.anchor`` or ``target_anchor``), if it had one.
    """

    backend: str | None = None
    input_shape: list[int] | None = None
    options: dict[str, Any] = field(default_factory=dict)
    measure: dict[str, Any] = field(default_factory=dict)
    rounds: int = 3
    anchor: str | None = None


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
        tracking: the MLflow store and experiment (``tracking.uri`` None: ``sqlite:///<cwd>/mlflow.db``).
    """

    candidate: str = "best"
    search: str | None = None
    space: str | None = None
    output_dir: str | None = None
    num_classes: int | None = None
    seed: int = 0
    engine: bool | None = None
    engine_precision: str = one_of(ENGINE_PRECISIONS, "fp16")
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
    _int_at_least("latency.rounds", cfg.latency.rounds, 1)
    if cfg.latency.anchor is not None:
        try:
            parse_anchor(cfg.latency.anchor)
        except SearchSpaceError as err:
            raise ConfigError("latency.anchor", str(err)) from None
    _int_at_least("check.batches", cfg.check.batches, 1)
    for key in ("atol", "rtol"):
        _in_range(f"check.{key}", getattr(cfg.check, key), 0.0, math.inf, "[0, inf)")
    if cfg.check.engine_rtol is not None:
        _in_range("check.engine_rtol", cfg.check.engine_rtol, 0.0, math.inf, "[0, inf)")
    _int_at_least("train.epochs", cfg.train.epochs, 0)
    for key in ("train_samples", "val_samples"):
        if getattr(cfg, key) is not None:
            _int_at_least(key, getattr(cfg, key), 1)
    if cfg.num_classes is not None:
        _int_at_least("num_classes", cfg.num_classes, 1)
    validate_supernet_estimate(cfg.supernet, required=cfg.init == "supernet", why="init=supernet")


# ---------------------------------------------------------------------- proxy fidelity


@dataclass
class ReferenceBudget:
    """The training that stands for "real" accuracy in a fidelity study (the ``reference`` key).

    Attributes:
        train_samples: training images (a seeded subset of the training split).
        epochs: epochs over them, with the ``train`` group's recipe.
        extra_seeds: seeds of further reference trainings besides ``train.seed``'s (another
            initialisation, other images, another order); with any, the estimators are ranked
            against the mean of the runs, and the runs' agreement with each other gives the
            reference's noise ceiling.
    """

    train_samples: int = 10000
    epochs: int = 10
    extra_seeds: list[int] = field(default_factory=list)


@dataclass
class FidelityConfig:
    """Everything ``python -m nas.fidelity`` takes: which cheap accuracy estimates rank networks like
    real training does.

    Attributes:
        space: the search space (``+space=<name>``).
        space_source: where ``space`` came from, for messages.
        k: architectures sampled across the space (seeded; the smallest and largest by MACs
            included, the rest spread over the MACs range).
        seed: seed of the sample and of the bootstrap.
        reference: the reference training budget.
        cheap_train_samples: training images of the brief-training estimators.
        cheap_epochs: the brief-training estimators' epochs (one estimator each).
        rungs: multi-fidelity rungs to measure (``search.rungs``' format): estimator ``rung<k>``
            is a candidate's accuracy at the end of rung ``k``, trained rung after rung from the
            weights of the rung below, as a search trains it; its cost is that of reaching rung ``k``.
        zero_cost: the training-free scores to compare (``naswot``, ``synflow``, ``grad_norm``,
            ``jacob_cov``).
        zero_cost_batch: images a training-free score looks at.
        bootstrap: bootstrap resamples of the confidence intervals.
        workers: estimates computed at once, each in its own process (the CPUs are split between them).
        supernet: with ``supernet.checkpoint`` set, the ``supernet`` estimator too: each
            architecture's subnet of that trained supernet, BatchNorm recalibrated, validated.
        name: the study's name (its folder and MLflow run); None: ``<space>-<data>-k<k>``.
        output_dir: its folder (records, JSON, table, plot); None: ``<home>/fidelity/<name>``. A
            second run with the same folder resumes: nothing recorded is redone.
        data: the proxy task.
        train: the training recipe (its ``epochs`` is set per estimator).
        tracking: the MLflow store and experiment.
    """

    space: dict[str, Any] | None = None
    space_source: str = field(default="<config>", metadata={HIDDEN: True})
    k: int = 20
    seed: int = 0
    reference: ReferenceBudget = field(default_factory=ReferenceBudget)
    cheap_train_samples: int = 2500
    cheap_epochs: list[int] = field(default_factory=lambda: [1, 2, 3])
    rungs: list[RungConfig] = field(default_factory=list)
    zero_cost: list[str] = one_of(ZERO_COST_ESTIMATORS, default_factory=lambda: list(ZERO_COST_ESTIMATORS))
    zero_cost_batch: int = 64
    bootstrap: int = 1000
    workers: int = 1
    supernet: SupernetEstimateConfig = field(default_factory=SupernetEstimateConfig)
    name: str | None = None
    output_dir: str | None = None
    data: DataConfig = field(default_factory=DataConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    tracking: TrackingConfig = field(default_factory=TrackingConfig)


def validate_fidelity(cfg: FidelityConfig) -> None:
    """Check a fidelity study's settings before any training.

    Raises:
        ConfigError: naming the key and what is allowed.
    """
    if cfg.space is None:
        raise ConfigError("space", "no search space chosen; add +space=<name> (e.g. +space=mobile_cifar)")
    _int_at_least("k", cfg.k, 4)
    _int_at_least("reference.train_samples", cfg.reference.train_samples, 1)
    _int_at_least("reference.epochs", cfg.reference.epochs, 1)
    _int_at_least("cheap_train_samples", cfg.cheap_train_samples, 1)
    for e in cfg.cheap_epochs:
        _int_at_least("cheap_epochs", e, 1)
    seeds = [cfg.train.seed, *cfg.reference.extra_seeds]
    if len(set(seeds)) != len(seeds):
        raise ConfigError("reference.extra_seeds", f"must differ from each other and from train.seed "
                          f"({cfg.train.seed}), got {cfg.reference.extra_seeds}")
    if cfg.rungs:
        check_rungs(cfg.rungs, "asha", "train")
    check_choices(cfg)
    _int_at_least("zero_cost_batch", cfg.zero_cost_batch, 2)
    _int_at_least("bootstrap", cfg.bootstrap, 100)
    _int_at_least("workers", cfg.workers, 1)
    validate_supernet_estimate(cfg.supernet, required=False, why="")
    _run_name(cfg.name)
    sub = SearchConfig(space=cfg.space, target_ms=1.0, data=cfg.data, train=cfg.train, tracking=cfg.tracking)
    validate(sub)  # the data, train and tracking groups, checked as the search checks them


# ---------------------------------------------------------------------- deployment: precision and pruning

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
    """Check ``python -m nas.optimize``'s values before any work.

    Raises:
        ConfigError: naming the key and what is allowed.
    """
    if not cfg.candidate:
        raise ConfigError("candidate", "name the exported candidate: candidate=<arch_id> or the export folder")
    check_choices(cfg)
    cal = cfg.calibration
    _int_at_least("calibration.min_samples", cal.min_samples, 1)
    _int_at_least("calibration.samples", cal.samples, cal.min_samples)
    pr = cfg.prune
    for r in pr.ratios:
        _in_open_unit("prune.ratios", r)
    if len(set(pr.ratios)) != len(pr.ratios):
        raise ConfigError("prune.ratios", f"each ratio once, got {pr.ratios}")
    for r in pr.sensitivity_ratios:
        _in_open_unit("prune.sensitivity_ratios", r)
    if not pr.sensitivity_ratios:
        raise ConfigError("prune.sensitivity_ratios", "at least one ratio is needed for the sensitivity analysis")
    _int_at_least("prune.steps", pr.steps, 1)
    _int_at_least("prune.sensitivity_samples", pr.sensitivity_samples, 1)
    _int_at_least("prune.multiple", pr.multiple, 1)
    _int_at_least("prune.recalibration_batches", pr.recalibration_batches, 1)
    _in_range("prune.alpha", pr.alpha, 0.0, 1.0 + 1e-12, "[0, 1]")
    _positive("prune.temperature", pr.temperature)
    ch = cfg.check
    _in_range("check.min_agreement", ch.min_agreement, 0.0, 1.0 + 1e-12, "[0, 1]")
    _in_range("check.min_agreement_pruned", ch.min_agreement_pruned, 0.0, 1.0 + 1e-12, "[0, 1]")
    if ch.val_samples is not None:
        _int_at_least("check.val_samples", ch.val_samples, 1)
    for key in ("atol", "rtol"):
        _in_range(f"check.{key}", getattr(ch, key), 0.0, math.inf, "[0, inf)")
    _int_at_least("latency.rounds", cfg.latency.rounds, 1)
    if cfg.latency.anchor is not None:
        raise ConfigError("latency.anchor", "nas.optimize times its variants against each other; an anchor network "
                          "is timed beside a candidate by nas.export (latency.anchor there)")
    _int_at_least("train.epochs", cfg.train.epochs, 0)
    sub = SearchConfig(space={}, target_ms=1.0, train=cfg.train, tracking=cfg.tracking,
                       data=cfg.data or DataConfig())
    validate(sub)  # the train, data and tracking groups, checked as the search checks them


def _in_open_unit(key: str, value: float) -> None:
    if not math.isfinite(value) or not 0.0 < value < 1.0:
        raise ConfigError(key, f"each ratio must be in (0, 1): the share removed, got {value!r}")
