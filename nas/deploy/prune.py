"""Structured channel pruning to a share of the MACs: sensitivity, allocation, the progressive schedule.

1. **Sensitivity analysis** (:func:`sensitivity`): each prunable unit of the network (a width
   group or an MBConv expansion: :func:`search_spaces.prune.prune_units`) is pruned alone, by each
   of ``prune.sensitivity_ratios``, keeping its most important channels, and the network's
   accuracy is measured without retraining, on training images (the validation images stay
   unseen until the variants are judged). A unit whose accuracy falls fast is sensitive.
2. **Allocation** (:func:`allocate`): starting from the unpruned network, the step that costs the
   least accuracy per MAC removed (read off the sensitivity curves) is taken, one unit one step at
   a time, until the network's MACs reach ``(1 - ratio)`` of the original. The MACs are computed
   exactly for each candidate step (:class:`latency_predictor.prediction.features.FeatureExtractor`).
3. **Progressive schedule** (:func:`prune_progressively`): the ratio is reached in ``prune.steps``
   steps (ratio/steps, 2 ratio/steps, ...; later allocations continue from earlier ones, so a
   unit only ever narrows). Each step prunes the current network, re-estimates its BatchNorm
   statistics on training batches (:func:`recalibrate_on_training_batches`: the statistics of the channels
   that remain change when others go) and fine-tunes it with the ``train`` recipe, with knowledge
   distillation from the un-pruned FP32 network when ``prune.distill`` is on.

The result is a network of an ordinary :class:`~search_spaces.Arch` (its ``arch`` attribute).
"""

from __future__ import annotations

import copy
import dataclasses
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn

from latency_predictor.prediction.features import FEATURE_NAMES, FeatureExtractor
from nas.accuracy.training import EpochResult, recalibrate_batchnorm, train_briefly
from nas.core.config import PruneConfig, TrainConfig
from nas.core.errors import OptimizeError
from nas.data import ProxyData
from nas.deploy.calibration import to_input
from nas.deploy.distill import distillation_loss_fn
from search_spaces import Arch
from search_spaces.builder import Net
from search_spaces.prune import PruneUnit, prune_net, prune_units, pruned_arch, widths

_MACS = FEATURE_NAMES.index("total.macs")


class MacCounter:
    """Exact MACs of architectures at one input shape (as :func:`search_spaces.count_macs`), fast and cached."""

    def __init__(self, input_shape: tuple[int, ...], num_classes: int) -> None:
        self._fx = FeatureExtractor(input_shape, num_classes)

    def __call__(self, arch: Arch) -> int:
        return round(float(self._fx(arch)[_MACS]) * 1e6)


def option_values(unit: PruneUnit, ratios: list[float], multiple: int) -> list[tuple[float, int]]:
    """``(ratio, value)`` of each distinct narrower setting of ``unit`` the ratios give (widths round down
    to ``multiple``, never below the unit's minimum)."""
    out: dict[int, float] = {}
    for r in sorted(ratios):
        if unit.kind == "width":
            v = max(unit.minimum, int(unit.size * (1 - r)) // multiple * multiple)
        else:
            v = max(unit.minimum, round(unit.size * (1 - r)))
        if v < unit.size and v not in out:
            out[v] = r
    return [(r, v) for v, r in sorted(out.items(), reverse=True)]


@dataclass(frozen=True)
class SensitivityPoint:
    """The network's accuracy with one unit pruned alone.

    Attributes:
        unit: the unit's name.
        ratio: the share of the unit removed (asked for; ``value`` is what it rounds to).
        value: the unit's channel count (or expansion ratio) after pruning.
        macs: the network's MACs then.
        accuracy: its accuracy (no retraining) on the sensitivity images.
        drop: the unpruned network's accuracy minus ``accuracy``.
    """

    unit: str
    ratio: float
    value: int
    macs: int
    accuracy: float
    drop: float


def _split(arch: Arch, state: Mapping[str, int]) -> tuple[dict[str, int], dict[int, int]]:
    w = {k: v for k, v in state.items() if not k.startswith("expand.")}
    e = {int(k.split(".")[1]): v for k, v in state.items() if k.startswith("expand.")}
    return w, e


def apply(net: Net, state: Mapping[str, int], multiple: int) -> Net:
    """``net`` pruned to ``state`` (a value per unit), keeping the most important channels."""
    w, e = _split(net.arch, state)
    current = widths(net.arch)
    w = {k: min(v, current[k]) for k, v in w.items()}  # a unit only narrows
    e = {i: min(v, net.arch.blocks[i].exp_ratio) for i, v in e.items()}
    return prune_net(net, w, e, multiple)


def state_arch(arch: Arch, state: Mapping[str, int], multiple: int) -> Arch:
    """The architecture ``state`` gives."""
    w, e = _split(arch, state)
    return pruned_arch(arch, w, e, multiple)


def sensitivity(net: Net, units: list[PruneUnit], cfg: PruneConfig, evaluate: Callable[[nn.Module], float],
                macs: MacCounter) -> tuple[float, list[SensitivityPoint]]:
    """The unpruned accuracy and one :class:`SensitivityPoint` per unit and ratio (see the module)."""
    base = evaluate(net)
    points = []
    for u in units:
        for r, v in option_values(u, cfg.sensitivity_ratios, cfg.multiple):
            pruned = apply(net, {u.name: v}, cfg.multiple).eval()
            acc = evaluate(pruned)
            points.append(SensitivityPoint(u.name, r, v, macs(pruned.arch), acc, base - acc))
    return base, points


def max_prunable_share(arch: Arch, units: list[PruneUnit], cfg: PruneConfig, macs: MacCounter) -> float:
    """The largest share of MACs the sensitivity ratios can remove (every unit at its narrowest option)."""
    state = {u.name: min((v for _, v in option_values(u, cfg.sensitivity_ratios, cfg.multiple)), default=u.size)
             for u in units}
    return 1.0 - macs(state_arch(arch, state, cfg.multiple)) / macs(arch)


def allocate(arch: Arch, units: list[PruneUnit], points: list[SensitivityPoint], target_macs: int,
             macs: MacCounter, multiple: int, start: Mapping[str, int] | None = None) -> dict[str, int]:
    """A value per unit whose network has at most ``target_macs``, chosen greedily by accuracy lost per MAC saved.

    Args:
        arch: the unpruned network.
        units: its units.
        points: the sensitivity analysis.
        target_macs: the MACs to reach.
        macs: the MAC counter.
        multiple: channel counts stay multiples of this.
        start: a previous allocation to continue from (units only narrow further).

    Raises:
        OptimizeError: the target cannot be reached with the sensitivity ratios' options.
    """
    drop = {(p.unit, p.value): max(0.0, p.drop) for p in points}
    options = {u.name: sorted({p.value for p in points if p.unit == u.name}, reverse=True) for u in units}
    size = {u.name: u.size for u in units}
    state = {u.name: (start or {}).get(u.name, u.size) for u in units}
    current = macs(state_arch(arch, state, multiple))
    while current > target_macs:
        best: tuple[float, float, str, int, int] | None = None
        for name, opts in options.items():
            narrower = [v for v in opts if v < state[name]]
            if not narrower:
                continue
            v = narrower[0]
            trial = {**state, name: v}
            m = macs(state_arch(arch, trial, multiple))
            gain = current - m
            if gain <= 0:
                continue
            cost = drop[(name, v)] - (0.0 if state[name] == size[name] else drop.get((name, state[name]), 0.0))
            key = (max(cost, 0.0) / gain, -gain, name, v, m)
            if best is None or key < best:
                best = key
        if best is None:
            reached = 1 - current / macs(arch)
            raise OptimizeError(
                f"pruning cannot remove more than {reached:.0%} of the MACs with prune.sensitivity_ratios="
                f"{sorted({p.ratio for p in points})}; lower prune.ratios or add larger sensitivity ratios"
            )
        _, _, name, v, m = best
        state[name], current = v, m
    return state


def recalibrate_on_training_batches(net: nn.Module, data: ProxyData, input_shape: tuple[int, ...], batches: int,
                                    batch_size: int, device: torch.device, seed: int = 0) -> None:
    """Re-estimate every BatchNorm's running statistics on ``batches`` seeded training batches (no
    augmentation), as :func:`nas.accuracy.training.recalibrate_batchnorm` does for a subnet."""
    net.to(device)
    rng = np.random.default_rng(seed)
    stream = data.train_batches(batch_size, rng, device)
    first = zip(range(batches), stream, strict=False)
    recalibrate_batchnorm(net, (to_input(xb, data, input_shape) for _, (xb, _) in first))


@dataclass
class PruneStep:
    """One step of the schedule: the target, the architecture, the accuracy before and after fine-tuning."""

    step: int
    target_share: float
    arch: str
    macs: int
    accuracy_after_recalibration: float
    finetune: list[dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0


@dataclass
class PruneResult:
    """A pruned network and how it was reached."""

    ratio: float
    net: Net
    state: dict[str, int]
    macs: int
    base_macs: int
    steps: list[PruneStep]

    @property
    def removed_share(self) -> float:
        """The share of the MACs actually removed."""
        return 1 - self.macs / self.base_macs


def prune_progressively(
    teacher: Net, ratio: float, units: list[PruneUnit], points: list[SensitivityPoint], cfg: PruneConfig,
    train: TrainConfig, data: ProxyData, input_shape: tuple[int, ...], device: torch.device, macs: MacCounter,
    evaluate: Callable[[nn.Module], float], log: Callable[[str], None] = lambda s: None,
) -> PruneResult:
    """``teacher`` pruned to ``ratio`` of its MACs removed, by the progressive schedule (see the module).

    Raises:
        OptimizeError: the ratio cannot be reached.
        TrainingError: fine-tuning diverged.
    """
    base = macs(teacher.arch)
    net: Net = copy.deepcopy(teacher)
    state: dict[str, int] = {}
    steps = []
    for s in range(1, cfg.steps + 1):
        t0 = time.perf_counter()
        share = ratio * s / cfg.steps
        state = allocate(teacher.arch, units, points, math.floor(base * (1 - share)), macs, cfg.multiple, state)
        net = apply(net.to("cpu").eval(), state, cfg.multiple)
        recalibrate_on_training_batches(net, data, input_shape, cfg.recalibration_batches, train.batch_size, device,
                                        seed=s)
        step = PruneStep(s, share, net.arch.encode(), macs(net.arch), evaluate(net))
        if train.epochs > 0:
            loss = (distillation_loss_fn(copy.deepcopy(teacher), cfg.alpha, cfg.temperature, train.label_smoothing)
                    if cfg.distill else None)
            history: list[EpochResult] = train_briefly(net, data, dataclasses.replace(train, seed=train.seed + s),
                                                       device, loss_fn=loss)
            net.to("cpu").eval()
            step.finetune = [dataclasses.asdict(e) for e in history]
        step.seconds = time.perf_counter() - t0
        steps.append(step)
        log(f"    step {s}/{cfg.steps}: {share:.0%} of the MACs removed, {step.arch}; accuracy after BatchNorm "
            f"recalibration {step.accuracy_after_recalibration:.4f}"
            + (f", after fine-tuning {step.finetune[-1]['accuracy']:.4f}" if step.finetune else ""))
    return PruneResult(ratio, net.eval(), state, macs(net.arch), base, steps)


def pruning_units(arch: Arch, cfg: PruneConfig) -> list[PruneUnit]:
    """The units pruning works on (those with at least one narrower option)."""
    return [u for u in prune_units(arch, cfg.multiple) if option_values(u, cfg.sensitivity_ratios, cfg.multiple)]
