"""``python -m nas.supernet``: :class:`SupernetConfig`, training a weight-sharing supernet, and
:func:`validate_supernet`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from nas.core.config.checks import check_data, check_space, check_tracking, check_train
from nas.core.config.fields import HIDDEN, check_choices, int_at_least, one_of, positive, run_name
from nas.core.config.groups import DataConfig, TrackingConfig, TrainConfig

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
    """Check a supernet training's settings before any work: its own keys, then the ``data``,
    ``train`` and ``tracking`` groups as the search checks them.

    Raises:
        ConfigError: naming the key and what is allowed.
    """
    check_space(cfg.space, "mobile_cifar")
    run_name(cfg.name)
    int_at_least("random_subnets", cfg.random_subnets, 0)
    int_at_least("bn_batches", cfg.bn_batches, 1)
    check_choices(cfg)
    positive("distributed.timeout_s", cfg.distributed.timeout_s)
    check_data(cfg.data)
    check_train(cfg.train)
    check_tracking(cfg.tracking)
