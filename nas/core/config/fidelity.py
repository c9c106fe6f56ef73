"""``python -m nas.fidelity``: :class:`FidelityConfig`, a study of which cheap accuracy estimates rank
networks like real training does, and :func:`validate_fidelity`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from nas.core.config.checks import (
    check_data,
    check_rungs,
    check_space,
    check_supernet_estimate,
    check_tracking,
    check_train,
)
from nas.core.config.fields import HIDDEN, check_choices, int_at_least, one_of, run_name
from nas.core.config.groups import (
    ZERO_COST_ESTIMATORS,
    DataConfig,
    RungConfig,
    SupernetEstimateConfig,
    TrackingConfig,
    TrainConfig,
)
from nas.core.errors import ConfigError


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
    """Check a fidelity study's settings before any training: its own keys, then the ``data``,
    ``train`` and ``tracking`` groups as the search checks them.

    Raises:
        ConfigError: naming the key and what is allowed.
    """
    check_space(cfg.space, "mobile_cifar")
    int_at_least("k", cfg.k, 4)
    int_at_least("reference.train_samples", cfg.reference.train_samples, 1)
    int_at_least("reference.epochs", cfg.reference.epochs, 1)
    int_at_least("cheap_train_samples", cfg.cheap_train_samples, 1)
    for e in cfg.cheap_epochs:
        int_at_least("cheap_epochs", e, 1)
    seeds = [cfg.train.seed, *cfg.reference.extra_seeds]
    if len(set(seeds)) != len(seeds):
        raise ConfigError("reference.extra_seeds", f"must differ from each other and from train.seed "
                          f"({cfg.train.seed}), got {cfg.reference.extra_seeds}")
    if cfg.rungs:
        check_rungs(cfg.rungs, "asha", "train")
    check_choices(cfg)
    int_at_least("zero_cost_batch", cfg.zero_cost_batch, 2)
    int_at_least("bootstrap", cfg.bootstrap, 100)
    int_at_least("workers", cfg.workers, 1)
    check_supernet_estimate(cfg.supernet, required=False, why="")
    run_name(cfg.name)
    check_data(cfg.data)
    check_train(cfg.train)
    check_tracking(cfg.tracking)
