"""``python -m nas.supernet``: train a weight-sharing supernet over a search space.

Each step trains, on the same batch, the **sandwich** of subnets (BigNAS): the largest network
of each block type the space offers, the smallest network, and ``random_subnets`` networks drawn
uniformly from the space, their gradients summed before one optimiser step. With **in-place
distillation** the largest network learns the labels (with the recipe's label smoothing) and
every other subnet learns the largest network's predictions of the same batch, which costs no
extra forward pass. The recipe is the ``train`` group's (optimiser, warm-up and cosine schedule,
no weight decay on norms, biases and kernel transformations, augmentation on the device, mixed
precision and ``channels_last`` on CUDA), every random choice seeded by the epoch and step, so a
resumed run draws what an uninterrupted one would have.

After every epoch the checkpoint (``<output_dir>/supernet.pt``, :mod:`nas.oneshot.subnet`) is
replaced atomically, with ``history.json`` beside it; a run killed at any moment is continued from
its last finished epoch by the same command (``resume=true``, the default, which is also what
``torchrun`` restarts rely on). A checkpoint of other settings is refused, naming each one. At
the end the training is recorded in MLflow as one run (tag ``latnas.role=supernet``): its
settings, per-epoch losses and accuracies, and the checkpoint as an artifact.

Started by ``torchrun``, the processes train data-parallel (:mod:`nas.oneshot.distributed`):
``train.batch_size`` images per process and step, gradients averaged every step.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch
import torch.nn.functional as F
from tqdm import tqdm

from nas.accuracy.augment import make_augment
from nas.accuracy.training import amp_dtype, channels_last_on, lr_factor, make_optimizer
from nas.adapters.mlflow_writer import StoreWriter
from nas.core.config import SupernetConfig, validate_supernet
from nas.core.errors import ConfigError, SupernetError, TrainingError
from nas.core.paths import default_tracking_uri, project_home
from nas.data import ProxyData, load_dataset
from nas.oneshot import distributed
from nas.oneshot.distributed import World
from nas.oneshot.subnet import (
    CHECKPOINT_NAME,
    FORMAT,
    FORMAT_VERSION,
    SupernetTarget,
    check_target,
    evaluate_subnet,
    read_checkpoint,
    write_checkpoint,
)
from search_spaces import Arch, SearchSpace
from search_spaces.supernet import Supernet, sandwich_ends

HISTORY_NAME = "history.json"
_NOT_SETTINGS = ("device",)  # train keys that may change between a run and its resumption
_DATA_NOT_SETTINGS = ("cache_dir", "workers", "loader_workers", "stream", "stream_above_mb")


@dataclass
class SupernetResult:
    """What a training produced.

    Attributes:
        name: the training's name.
        folder: its folder.
        checkpoint: the checkpoint file.
        epochs: epochs trained in all (this run and the runs it resumed).
        resumed_from: the epoch this run started after (0: from scratch).
        history: one row per epoch (losses, accuracies, seconds, images).
        world_size: training processes.
        train_seconds: wall time of all epochs, over every run.
        run_id: the MLflow run (None in the processes that do not write).
    """

    name: str
    folder: Path
    checkpoint: Path
    epochs: int
    resumed_from: int
    history: list[dict[str, float]] = field(default_factory=list)
    world_size: int = 1
    train_seconds: float = 0.0
    run_id: str | None = None


def run_supernet(cfg: SupernetConfig, log: Callable[[str], None] = print) -> SupernetResult:
    """Train (or continue training) the supernet ``cfg`` describes; see the module's text.

    Raises:
        ConfigError: a bad setting (before any training).
        DataError: the dataset cannot be loaded.
        SupernetError: the folder's checkpoint cannot be read or was made with other settings.
        SupernetMismatchError: it was made for another space, classifier, resolution or split.
        TrainingError: the loss became NaN or infinite.
        TrackingError: the MLflow store cannot be reached or written.
    """
    validate_supernet(cfg)
    space = SearchSpace.from_dict(cast(dict[str, Any], cfg.space), source=cfg.space_source)
    world, device = distributed.start(cfg.distributed, cfg.train.device)
    try:
        return _Training(cfg, space, world, device, log if world.main else (lambda _s: None)).run()
    finally:
        distributed.stop(world)


def soft_cross_entropy(logits: torch.Tensor, target_probs: torch.Tensor) -> torch.Tensor:
    """Cross-entropy of ``logits`` against a distribution over the classes (in-place distillation)."""
    return -(target_probs * F.log_softmax(logits, dim=1)).sum(dim=1).mean()


def _settings(cfg: SupernetConfig, world: World) -> dict[str, Any]:
    """What decides a supernet's weights: a resumed run must have the same."""
    return {
        "train": {k: v for k, v in dataclasses.asdict(cfg.train).items() if k not in _NOT_SETTINGS},
        "data": {k: v for k, v in dataclasses.asdict(cfg.data).items() if k not in _DATA_NOT_SETTINGS},
        "random_subnets": cfg.random_subnets, "distill": cfg.distill, "world_size": world.size,
    }


def _differences(recorded: dict[str, Any], now: dict[str, Any], prefix: str = "") -> list[str]:
    out = []
    for key in sorted(set(recorded) | set(now)):
        a, b = recorded.get(key), now.get(key)
        if isinstance(a, dict) and isinstance(b, dict):
            out += _differences(a, b, f"{prefix}{key}.")
        elif a != b:
            out.append(f"{prefix}{key} {b!r} here, {a!r} in the checkpoint")
    return out


def _seed(*parts: int) -> int:
    return int(np.random.SeedSequence(list(parts)).generate_state(1)[0])


class _Training:
    """One run of a supernet training (in one process of the world)."""

    def __init__(self, cfg: SupernetConfig, space: SearchSpace, world: World, device: torch.device,
                 log: Callable[[str], None]) -> None:
        self.cfg, self.space, self.world, self.device, self.log = cfg, space, world, device, log
        self.name = cfg.name or f"supernet-{space.name}-{cfg.data.name}"
        self.folder = (Path(cfg.output_dir).expanduser().resolve() if cfg.output_dir
                       else project_home() / "supernets" / self.name)
        self.checkpoint = self.folder / CHECKPOINT_NAME
        self.writer: StoreWriter | None = None

    # ------------------------------------------------------------------ set-up
    def _prepare(self) -> ProxyData:
        cfg, world = self.cfg, self.world
        if world.main:
            try:
                self.folder.mkdir(parents=True, exist_ok=True)
            except OSError as err:
                raise ConfigError("output_dir", f"cannot create {str(self.folder)!r} ({err.strerror or err})") from None
            self.writer = StoreWriter(cfg.tracking.uri or default_tracking_uri(), cfg.tracking.experiment)
            self.log(f"supernet {self.name}: loading data ({cfg.data.display_name})")
            data = load_dataset(cfg.data)  # decoded and cached once, by this process
        distributed.barrier(world)
        if not world.main:
            data = load_dataset(cfg.data)
        if cfg.train.batch_size * world.size > data.n_train:
            raise ConfigError("train.batch_size", f"{cfg.train.batch_size} per process x {world.size} processes "
                              f"exceeds the {data.n_train} training images")
        return data

    def _resume_point(self, target: SupernetTarget, settings: dict[str, Any]) -> dict[str, Any] | None:
        exists = self.checkpoint.is_file()
        seen = distributed.all_gather(self.world, exists)
        if len(set(seen)) > 1:
            raise SupernetError(f"the training processes disagree on whether {self.checkpoint} exists ({seen}): "
                                "output_dir must be on storage every node reads and writes")
        if not exists:
            return None
        payload = read_checkpoint(self.checkpoint)
        if not self.cfg.resume:
            raise ConfigError("resume", f"{self.folder} holds a supernet checkpoint (epoch {payload['epoch']} of "
                              f"{payload['epochs']}); resume=true continues it, or choose another name or output_dir")
        check_target(payload, target, self.checkpoint)
        diffs = _differences(payload["settings"], settings)
        if diffs:
            raise SupernetError(f"{self.checkpoint} was trained with other settings: {'; '.join(diffs)}; continue "
                                "it with its settings, or choose another name or output_dir")
        return payload

    # ------------------------------------------------------------------ the run
    def run(self) -> SupernetResult:
        cfg, world, device = self.cfg, self.world, self.device
        data = self._prepare()
        target = SupernetTarget.of(self.space, data, cfg.data)
        settings = _settings(cfg, world)
        torch.manual_seed(cfg.train.seed)  # the same initial weights in every process
        net = Supernet(self.space, data.num_classes, 3, cfg.train.dropout).to(device)
        autocast = amp_dtype(cfg.train, device)
        channels_last = channels_last_on(cfg.train, device)
        if channels_last:
            net.to(memory_format=torch.channels_last)  # type: ignore[call-overload]
        # No weight decay on the kernel transformations (they start as the identity; decay would pull
        # them to zero), nor, as the recipe says, on norms and biases.
        decay: list[torch.nn.Parameter] = []
        no_decay: list[torch.nn.Parameter] = []
        for n, p in net.named_parameters():
            skip = "kernel_transform" in n or (cfg.train.no_decay_norm_bias and p.ndim <= 1)
            (no_decay if skip else decay).append(p)
        opt = make_optimizer([{"params": decay, "weight_decay": cfg.train.weight_decay},
                              {"params": no_decay, "weight_decay": 0.0}], cfg.train)
        scaler = torch.amp.GradScaler(device.type, enabled=autocast is torch.float16)

        payload = self._resume_point(target, settings)
        history: list[dict[str, float]] = []
        start, seconds_before, run_id = 0, 0.0, None
        if payload is not None:
            net.load_state_dict(payload["model"])
            opt.load_state_dict(payload["optimizer"])
            if payload["scaler"]:  # empty when saved without loss scaling (e.g. on the CPU)
                scaler.load_state_dict(payload["scaler"])
            start, history = int(payload["epoch"]), list(payload["history"])
            seconds_before, run_id = float(payload["train_seconds"]), payload.get("mlflow_run_id")
            self.log(f"supernet {self.name}: resuming from {self.checkpoint} after epoch {start} of "
                     f"{cfg.train.epochs}")
        distributed.check_in_step(net, world)

        smallest, largest = sandwich_ends(self.space, data.resolution)
        shard = data.shard(world.rank, world.size) if world.size > 1 else data
        batch = cfg.train.batch_size
        steps = data.n_train // (batch * world.size)
        total = steps * cfg.train.epochs
        warmup = min(total, round(cfg.train.warmup_epochs * steps))
        augment = make_augment(cfg.train.augment, data.resolution, data.mirror_invariant)
        params = [p for p in net.parameters() if p.requires_grad]
        if start >= cfg.train.epochs:
            self.log(f"supernet {self.name}: already trained ({start} epochs); {self.checkpoint}")
        else:
            self.log(f"supernet {self.name}: {self.space.name}, {data.n_train} training images, {world.size} "
                     f"process(es) x {batch} images x {steps} steps per epoch, epochs {start + 1}-{cfg.train.epochs}; "
                     f"each step: {len(largest)} largest, the smallest and {cfg.random_subnets} random subnet(s)"
                     f"{', in-place distillation' if cfg.distill else ''}; checkpoint {self.checkpoint}")
        for epoch in range(start + 1, cfg.train.epochs + 1):
            t0 = time.perf_counter()
            net.train()
            rng = np.random.default_rng(_seed(cfg.train.seed, epoch, world.rank))
            gen = torch.Generator(device=device).manual_seed(_seed(cfg.train.seed, epoch, world.rank, 1))
            sums = torch.zeros(3, dtype=torch.float64)  # loss of the largest, of the others, images
            bar = tqdm(total=steps, desc=f"epoch {epoch}/{cfg.train.epochs}", unit="step", file=sys.stderr,
                       dynamic_ncols=True, disable=not (cfg.progress and world.main), leave=False)
            for step, (xb, y) in zip(range(steps), shard.train_batches(batch, rng, device), strict=False):
                lr = cfg.train.lr * lr_factor((epoch - 1) * steps + step, total, warmup, cfg.train.lr_schedule)
                for g in opt.param_groups:
                    g["lr"] = lr
                x = augment(shard.normalise(xb), gen)
                if channels_last:
                    x = x.contiguous(memory_format=torch.channels_last)
                draw = np.random.default_rng(_seed(cfg.train.seed, epoch, step, 2))  # the same in every process
                archs = [*largest, smallest, *(self.space.sample(draw) for _ in range(cfg.random_subnets))]
                opt.zero_grad(set_to_none=True)
                losses = self._sandwich_step(net, x, y, archs, autocast, scaler, epoch, step)
                distributed.average_gradients(params, world)
                scaler.step(opt)
                scaler.update()
                sums += torch.tensor([losses[0] * len(y), float(np.mean(losses[1:])) * len(y), len(y)],
                                     dtype=torch.float64)
                bar.update(1)
                bar.set_postfix_str(f"loss {losses[0]:.3f} / {np.mean(losses[1:]):.3f}")
            bar.close()
            sums = distributed.sum_over(world, sums)
            distributed.check_in_step(net, world)
            row: dict[str, float] = {"epoch": epoch, "loss_largest": float(sums[0] / sums[2]),
                                     "loss_others": float(sums[1] / sums[2]), "images": float(sums[2]), "lr": lr}
            if cfg.eval_subnets and world.main:
                for role, arch in (("largest", largest[0]), ("smallest", smallest)):
                    res = evaluate_subnet(net, arch, data, cfg.bn_batches, batch, device, cfg.train.seed)
                    row[f"accuracy_{role}"] = res.accuracy
            distributed.barrier(world)
            row["seconds"] = time.perf_counter() - t0
            history.append(row)
            seconds = seconds_before + sum(r["seconds"] for r in history[start:])
            if world.main:
                write_checkpoint(self.checkpoint, self._payload(net, opt, scaler, target, settings, data, epoch,
                                                                history, seconds, run_id))
                self._write_history(history, epoch, seconds, run_id)
                accs = "".join(f", {k.removeprefix('accuracy_')} subnet accuracy {v:.3f}"
                               for k, v in row.items() if k.startswith("accuracy_"))
                self.log(f"epoch {epoch}/{cfg.train.epochs}: loss {row['loss_largest']:.3f} (largest), "
                         f"{row['loss_others']:.3f} (others){accs}; {row['seconds']:.0f} s; checkpoint written")
            distributed.barrier(world)

        seconds = seconds_before + sum(r["seconds"] for r in history[start:])
        result = SupernetResult(self.name, self.folder, self.checkpoint, cfg.train.epochs, start, history, world.size,
                                seconds, run_id)
        if world.main and run_id is None:
            result.run_id = self._record(result, data)
            payload = read_checkpoint(self.checkpoint)
            payload["mlflow_run_id"] = result.run_id
            write_checkpoint(self.checkpoint, payload)
            self._write_history(history, cfg.train.epochs, seconds, result.run_id)
        return result

    def _sandwich_step(self, net: Supernet, x: torch.Tensor, y: torch.Tensor, archs: list[Arch],
                       autocast: torch.dtype | None, scaler: torch.amp.GradScaler, epoch: int,
                       step: int) -> list[float]:
        """Forward and backward every subnet of the step on the batch; returns their losses."""
        soft: torch.Tensor | None = None
        losses = []
        for i, arch in enumerate(archs):
            with torch.autocast(self.device.type, dtype=autocast or torch.float32, enabled=autocast is not None):
                logits = net(x, arch).float()
            if soft is None:
                loss = F.cross_entropy(logits, y, label_smoothing=self.cfg.train.label_smoothing)
            else:
                loss = soft_cross_entropy(logits, soft)
            if i == 0 and self.cfg.distill:
                soft = logits.detach().softmax(dim=1)
            value = loss.detach().item()
            if not math.isfinite(value):
                raise TrainingError(f"supernet training loss became {value} at epoch {epoch}, step {step + 1} "
                                    f"(subnet {arch.arch_id}); try a lower train.lr (now {self.cfg.train.lr:g})")
            scaler.scale(loss).backward()
            losses.append(value)
        return losses

    # ------------------------------------------------------------------ files and record
    def _payload(self, net: Supernet, opt: torch.optim.Optimizer, scaler: torch.amp.GradScaler,
                 target: SupernetTarget, settings: dict[str, Any], data: ProxyData, epoch: int,
                 history: list[dict[str, float]], seconds: float, run_id: str | None) -> dict[str, Any]:
        return {
            "format": FORMAT, "format_version": FORMAT_VERSION, "target": target.to_dict(),
            "space_definition": self.cfg.space, "settings": settings,
            "data_config": dataclasses.asdict(self.cfg.data), "data": data.summary(),
            "normalisation": {"mean": [float(m) for m in data.mean], "std": [float(s) for s in data.std]},
            "epoch": epoch, "epochs": self.cfg.train.epochs, "history": history, "train_seconds": seconds,
            "world_size": self.world.size, "name": self.name, "mlflow_run_id": run_id,
            "model": net.state_dict(), "optimizer": opt.state_dict(), "scaler": scaler.state_dict(),
        }

    def _write_history(self, history: list[dict[str, float]], epoch: int, seconds: float,
                       run_id: str | None) -> None:
        path = self.folder / HISTORY_NAME
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"name": self.name, "epoch": epoch, "epochs": self.cfg.train.epochs,
                                   "train_seconds": seconds, "world_size": self.world.size,
                                   "checkpoint": str(self.checkpoint), "mlflow_run_id": run_id,
                                   "history": history}, indent=1) + "\n")
        os.replace(tmp, path)

    def _record(self, result: SupernetResult, data: ProxyData) -> str:
        assert self.writer is not None  # the main process opened the store before training
        params = {"space": self.space.name, "space_source": self.cfg.space_source, "data": data.summary(),
                  "epochs": result.epochs, "world_size": result.world_size, "random_subnets": self.cfg.random_subnets,
                  "distill": self.cfg.distill, "checkpoint": str(self.checkpoint),
                  **{f"train.{k}": v for k, v in dataclasses.asdict(self.cfg.train).items()}}
        # The per-epoch figures are the history (MLflow shows each one's last step as its value).
        metrics = {"train_seconds": result.train_seconds, "epochs": float(result.epochs)}
        return self.writer.log_finished_run(self.name, "supernet", params, metrics,
                                            [self.checkpoint, self.folder / HISTORY_NAME], history=result.history)
