"""The config groups: one dataclass per Hydra group (``latency``, ``data``, ``train``, ``accuracy``,
``search``, ``ray``, ``tracking``), and the blocks several commands share.

The search takes every group; the other commands take some of them (``data``, ``train`` and
``tracking`` most of all) beside settings of their own (:mod:`nas.core.config.supernet`,
:mod:`nas.core.config.fidelity`, ...). A group's YAML files (``conf/<group>/*.yaml``) merge into
these. :class:`RungConfig` is an item of ``search.rungs`` and of the fidelity study's ``rungs``;
:class:`SupernetEstimateConfig` is the ``supernet`` block of ``nas.export`` and ``nas.fidelity``;
:class:`ExportLatencyConfig` is the ``latency`` block of ``nas.export`` and ``nas.optimize``.
Their checks are in :mod:`nas.core.config.checks`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from latency_predictor.measurement.scenario import SCENARIOS
from latency_predictor.measurement.statistic import TARGET_STATS
from nas.core.config.fields import one_of
from nas.core.reward import REWARDS

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
        channels_last: ``auto`` (on CUDA, and on an x86-64 CPU whose oneDNN is held below AVX-512:
            ``nas.accuracy.training.channels_last_on``), ``on`` or ``off``.
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
            accuracy of the candidate's subnet of a trained supernet, :mod:`nas.oneshot.subnet`) or a
            training-free score used in place of accuracy by the reward: ``naswot`` (Mellor et al.
            2021), ``synflow``, ``grad_norm`` or ``jacob_cov`` (see :mod:`nas.accuracy.zero_cost`), or
            ``custom``: your own evaluator, ``fn``.
        batch_size: images a training-free score looks at; with ``supernet``, images per batch of
            the BatchNorm recalibration.
        checkpoint: ``supernet``: the supernet checkpoint (``python -m nas.supernet``'s
            ``supernet.pt``), readable where the trials run.
        bn_batches: ``supernet``: training batches each subnet's BatchNorm statistics are
            recalibrated on before it is validated.
        calibration_samples: with ``latency.precision=int8`` and ``train``: training images the
            int8 network whose accuracy the reward uses is calibrated on (:mod:`nas.accuracy.precision`).
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
            history (TPE's model, evolution's first population) and never proposes them again. With
            ``search.rungs`` and ASHA they are never stopped early: each reaches the top rung, so the
            winner is never below the best of them by the search's own figures. A reference member
            (``resnet20@1.5``, ``mobilenetv2_100@0.35``; see :func:`search_spaces.references.member`) is
            taken in its 32x32 layout for inputs up to 64 pixels.
        latency_screen: evolution: each new proposal's latency is measured (or predicted) by the
            driver before it trains, and one over this many times the target is not trained (the
            sampler draws another; see :mod:`nas.driver.screen`); None: every proposal trains. The
            ``start`` architectures are not screened.
        latency_floor: evolution: a proposal measured under this many times the target (0.6: 60%)
            is not trained either, so that the search spends its trials on networks that use the
            budget; None: no floor. Measured as ``latency_screen`` measures (the two may be given
            together, or either alone).
        max_refused: evolution with a screen: proposals the screen may refuse in a row before the
            search ends, saying so (the space holds little within the bounds).
        fill_mutate_after: evolution with a screen: once the screen has refused this many uniform
            draws in a row while the first population is filling, the next proposals are mutations of
            the members so far (the ``start`` among them), so a space mostly over the target is
            explored near the networks that met it instead of ending the search; None: the first
            population is filled by uniform draws only (Real et al.).
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
    latency_screen: float | None = None
    latency_floor: float | None = None
    max_refused: int = 50
    fill_mutate_after: int | None = None


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


@dataclass
class ExportLatencyConfig:
    """How latency is re-measured at export (the ``latency`` key); unset values come from the search.

    ``nas.optimize`` times its variants with the same block (unset values: the export's), and
    takes no anchor.

    Attributes:
        backend: a measuring backend, ``onnxruntime``, ``torch``, ``tensorrt``, ``openvino`` or
            ``litert``; None: the search's measuring backend (ONNX Runtime when the search
            predicted latency or is not known).
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


GROUP_SCHEMAS: dict[str, type] = {
    "latency": LatencyConfig,
    "data": DataConfig,
    "train": TrainConfig,
    "accuracy": AccuracyConfig,
    "search": SearchAlgConfig,
    "ray": RayConfig,
    "tracking": TrackingConfig,
}
"""The schema of each of the search's Hydra groups, by group name (``conf/<group>/*.yaml`` merge into it)."""
