"""Data-parallel training over processes with ``torch.distributed``, as ``torchrun`` starts them.

``torchrun --nproc_per_node=N -m nas.supernet ...`` starts N processes (on each of several nodes
with ``--nnodes`` and a rendezvous endpoint) and sets ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK`` and
the rendezvous address; a plain ``python -m nas.supernet`` is a world of one. Every process holds
the whole supernet and trains on its shard of the training images; every process draws the same
subnets each step (the same seed), so the same parameters have gradients everywhere, and after
the step's backward passes the gradients are averaged with one all-reduce over a flat buffer, so
every process takes the same optimiser step. After each epoch the processes compare a checksum
of their weights: processes that drifted apart are an error, not a silent average.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from nas.accuracy.training import resolve_device
from nas.core.config import DistributedConfig
from nas.core.errors import ConfigError, SupernetError


@dataclass(frozen=True)
class World:
    """This process's place among the training processes.

    Attributes:
        rank: its index (0: the one that writes checkpoints and the MLflow record).
        size: the number of processes.
        local_rank: its index on its node (its GPU there).
        backend: ``gloo`` or ``nccl`` (None for a single process).
    """

    rank: int = 0
    size: int = 1
    local_rank: int = 0
    backend: str | None = None

    @property
    def main(self) -> bool:
        """Whether this is the process that writes."""
        return self.rank == 0


def _env_int(name: str) -> int:
    try:
        return int(os.environ[name])
    except (KeyError, ValueError):
        raise ConfigError("distributed", f"${name} is missing or not an integer: start distributed training with "
                          "torchrun, which sets RANK, LOCAL_RANK and WORLD_SIZE") from None


def start(cfg: DistributedConfig, device_spec: str) -> tuple[World, torch.device]:
    """Join the other processes (when started by ``torchrun``) and choose this process's device.

    Under ``torchrun`` with ``train.device`` ``auto`` or ``cuda``, each process trains on GPU
    ``LOCAL_RANK``; on the CPU each process uses the threads ``torchrun`` gives it.

    Raises:
        ConfigError: NCCL asked for on the CPU, or a malformed ``torchrun`` environment.
        TrainingError: CUDA asked for where there is no GPU.
    """
    size = int(os.environ.get("WORLD_SIZE", "1") or "1")
    if size <= 1:
        return World(), resolve_device(device_spec)
    rank, local_rank = _env_int("RANK"), _env_int("LOCAL_RANK")
    device = resolve_device(device_spec)
    if device.type == "cuda":
        device = torch.device("cuda", local_rank if device_spec in ("auto", "cuda") else device.index or 0)
        torch.cuda.set_device(device)
    backend = cfg.backend if cfg.backend != "auto" else ("nccl" if device.type == "cuda" else "gloo")
    if backend == "nccl" and device.type != "cuda":
        raise ConfigError("distributed.backend", "nccl needs CUDA devices; on the CPU use gloo (or auto)")
    dist.init_process_group(backend, timeout=timedelta(seconds=cfg.timeout_s))
    return World(rank, size, local_rank, backend), device


def stop(world: World) -> None:
    """Leave the process group."""
    if world.size > 1 and dist.is_initialized():
        dist.destroy_process_group()


def barrier(world: World) -> None:
    """Wait for every process."""
    if world.size > 1:
        dist.barrier()


def all_gather(world: World, value: Any) -> list[Any]:
    """Every process's ``value`` (picklable), in rank order."""
    if world.size == 1:
        return [value]
    out: list[Any] = [None] * world.size
    dist.all_gather_object(out, value)
    return out


def average_gradients(params: list[nn.Parameter], world: World) -> None:
    """Replace each gradient with its mean over the processes (one all-reduce of a flat buffer).

    Only parameters with a gradient take part; every process has the same ones, because every
    process ran the same subnets."""
    if world.size == 1:
        return
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat)
    flat.div_(world.size)
    offset = 0
    for g in grads:
        n = g.numel()
        g.copy_(flat[offset : offset + n].view_as(g))
        offset += n


def sum_over(world: World, values: torch.Tensor) -> torch.Tensor:
    """``values`` summed over the processes."""
    if world.size > 1:
        values = values.clone()
        dist.all_reduce(values)
    return values


def check_in_step(net: nn.Module, world: World) -> list[float]:
    """A checksum of ``net``'s parameters on every process; they must be equal.

    Raises:
        SupernetError: the processes' weights differ.
    """
    with torch.no_grad():
        local = float(sum(p.detach().double().sum().item() for p in net.parameters()))
    sums = all_gather(world, local)
    if any(s != sums[0] for s in sums):
        raise SupernetError(f"the training processes' weights differ (checksums {sums}); their gradients were not "
                            "averaged alike")
    return sums
