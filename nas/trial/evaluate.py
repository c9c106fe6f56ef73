"""What one trial does, independent of Ray: the trial boundary.

decode the architecture string -> build -> count parameters and MACs at the deployment shape ->
measure (or predict) latency through the :class:`~latency_predictor.LatencyEstimator`, which
takes the device's measurement slot itself -> estimate accuracy (brief training, one report
per epoch, or a training-free score) -> reward -> report.

Latency is measured before training so that every per-epoch report already carries the
reward: an early-stopping scheduler (ASHA) then acts on the same number the sampler optimises.

Below fp32 (``latency.precision``) the candidate is timed at that precision, the figures the reward
uses, and in fp32 by the same backend (``latency_p50_fp32``, ...: :func:`fp32_config`), logged beside
them; after its training its accuracy is that of the network quantised (int8) by the deploying
runtime and run by it on the validation images (:mod:`nas.accuracy.precision`), the float figure kept
as ``accuracy_fp32``. The int8 latency is the int8 graph's, timed before training: the kernels a
runtime picks, and their speed, depend on the graph, not on the weights or the calibrated scales.

Expected failures (:data:`nas.core.errors.USER_ERRORS`: the typed errors of :mod:`nas`,
:mod:`search_spaces` and :mod:`latency_predictor`) end the trial with a FAILED report that names
the error; so do running out of memory (``torch.OutOfMemoryError``, ``MemoryError``, or the CPU
allocator's failure, reported as :class:`~nas.core.errors.TrialOutOfMemoryError`) and running
past ``search.trial_timeout_s`` (:class:`~nas.core.errors.TrialTimeoutError`, checked between
training steps and around the measurement). Any other exception is a bug and propagates.

The latency estimator is used through its protocol only (``measure``, then ``final_latency`` once
the candidate's objective is known): a measuring backend, a predictor and hybrid mode look alike.
With an anchor network (``latency.anchor``, ``target_anchor``) the anchor is measured right after
the candidate, with the same estimator's measuring part: a trial cannot pair them in rounds, so its
``x_anchor`` compares the candidate's figure with the anchor's from the nearest measurement (the
final latency pass pairs them properly).

Faults injected for tests (:mod:`nas.trial.faults`, off unless ``$LATNAS_FAULTS`` is set) act here too.
"""

from __future__ import annotations

import gc
import json
import math
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any, cast

import torch

from latency_predictor import LatencyEstimator, LatencyResult
from latency_predictor.estimators import make_latency_estimator, measuring_part
from latency_predictor.measurement.paired import anchor_figures, pair
from latency_predictor.measurement.preprocess import Preprocessing, add_preprocessing, measure_preprocessing
from latency_predictor.measurement.protocol import LatencyStats
from latency_predictor.measurement.scenario import check_scenario
from latency_predictor.measurement.slot import device_work
from latency_predictor.measurement.statistic import check_runs, protocol_for, stat_value
from nas.accuracy.precision import PrecisionEvaluator, precision_evaluator
from nas.accuracy.training import EpochResult, channels_last_on, evaluate, resolve_device, train_briefly
from nas.accuracy.zero_cost import zero_cost_score
from nas.core.config import AccuracyConfig, LatencyConfig, RungConfig, TrainConfig
from nas.core.errors import USER_ERRORS, TrialOutOfMemoryError, TrialTimeoutError
from nas.core.objective import Objective
from nas.core.record import COMPLETED, FAILED, RUNNING
from nas.data import ProxyData, TaskData
from nas.oneshot.subnet import SubnetResult, SupernetTarget, load_supernet, recalibrated_subnet, subnet_accuracy
from nas.trial.custom import EvalContext, Evaluator, candidate_network, in_chans, user_figures
from nas.trial.faults import FaultPlan
from nas.trial.rungs import RUNG_STEP, RungCheckpoints, fingerprint, milestone
from search_spaces import Arch, SearchSpace, anchor_network, build, count_macs, count_params

Report = Callable[[dict[str, Any]], None]

_ESTIMATORS: dict[str, LatencyEstimator] = {}


@dataclass(frozen=True)
class TrialContext:
    """Everything a trial needs besides its architecture; shipped once to the workers.

    Attributes:
        space: the search space (the architecture must belong to it).
        data: the proxy task.
        train: brief-training settings.
        accuracy: which accuracy estimator to use.
        latency: the latency estimator's settings.
        target_ms: the latency target in ms; with a target relative to the anchor network, what it
            came to when the search started (``target_x`` times the anchor's figure then; hybrid mode
            confirms candidates near it), NaN when not measured.
        reward: the reward's name (see :data:`nas.core.reward.REWARDS`).
        threads: torch threads per trial.
        trial_timeout_s: the trial's time limit in seconds (None: none).
        faults: faults to inject (tests only; None: none).
        preprocessing: the input pipeline's measured cost (``latency.preprocessing``), added to
            every latency the trial obtains; None: the network alone.
        rungs: multi-fidelity rungs (``search.rungs``; empty: one training of ``train.epochs``).
        reduction_factor: ASHA's reduction factor (the rungs' milestones, :mod:`nas.trial.rungs`).
        checkpoints: where finished rungs are saved (None: not saved).
        workdir: the folder of the candidates' own folders (``accuracy=custom``: ``context.workdir``);
            None: none.
        anchor: the anchor network measured beside each candidate (``<reference>[@<width>]``; None: none).
        target_x: the target relative to the anchor (the most ``x_anchor`` that meets it); None:
            ``target_ms`` is the target.
    """

    space: SearchSpace
    data: TaskData
    train: TrainConfig
    accuracy: AccuracyConfig
    latency: LatencyConfig
    target_ms: float
    reward: str
    threads: int
    trial_timeout_s: float | None = None
    faults: FaultPlan | None = None
    preprocessing: LatencyStats | None = None
    rungs: tuple[RungConfig, ...] = ()
    reduction_factor: int = 2
    checkpoints: RungCheckpoints | None = None
    workdir: Path | None = None
    anchor: str | None = None
    target_x: float | None = None


@dataclass(frozen=True)
class Deadline:
    """A trial's time limit, checked at safe points (between steps, around the measurement).

    Attributes:
        limit_s: seconds allowed (None: no limit).
        started: ``time.perf_counter()`` when the trial started.
    """

    limit_s: float | None
    started: float

    def check(self, stage: str) -> None:
        """Raise when the trial has run past its limit.

        Raises:
            TrialTimeoutError: naming the limit, the time taken and ``stage``.
        """
        if self.limit_s is None:
            return
        elapsed = time.perf_counter() - self.started
        if elapsed > self.limit_s:
            raise TrialTimeoutError(
                f"the trial took {elapsed:.1f} s, past search.trial_timeout_s={self.limit_s:g}, at {stage}; "
                "raise the limit if candidates this size are meant to finish"
            )


def _out_of_memory(err: BaseException) -> TrialOutOfMemoryError | None:
    """The typed failure for an allocation failure (None: ``err`` is something else)."""
    if isinstance(err, torch.OutOfMemoryError | MemoryError):
        kind = "CUDA" if isinstance(err, torch.OutOfMemoryError) else "host"
    elif isinstance(err, RuntimeError) and "DefaultCPUAllocator: can't allocate memory" in str(err):
        kind = "host"  # torch's CPU allocator raises a plain RuntimeError
    else:
        return None
    first_line = (str(err).strip().splitlines() or [type(err).__name__])[0]
    return TrialOutOfMemoryError(
        f"out of {kind} memory: {first_line[:300]}; lower train.batch_size or latency.input_shape, or give "
        "trials more memory"
    )


def latency_estimator(
    cfg: LatencyConfig, num_classes: int, space: SearchSpace | None = None, target_ms: float | None = None
) -> LatencyEstimator:
    """The latency estimator ``cfg`` describes, for networks with ``num_classes`` outputs.

    Raises:
        LatencyError: unknown backend or option, invalid value, backend not available here.
    """
    measure = dict(cfg.measure)
    if cfg.scenario == "server":  # every batch size timed, each with its own percentiles
        measure["throughput_batch_sizes"] = list(check_scenario(cfg.scenario, cfg.batch_sizes))
    return make_latency_estimator(cfg.backend, cfg.input_shape, cfg.options, measure, num_classes, space,
                                  target_ms, cfg.precision, cfg.target_stat)


def preprocessing_spec(cfg: LatencyConfig, mean: Sequence[float] | None = None,
                       std: Sequence[float] | None = None) -> Preprocessing | None:
    """The input pipeline ``latency.preprocessing`` asks for (None: the network alone)."""
    if cfg.preprocessing is None:
        return None
    return Preprocessing.create(cfg.preprocessing, cfg.source_size, cfg.input_shape, mean, std)


def measure_preprocessing_cost(cfg: LatencyConfig, mean: Sequence[float] | None = None,
                               std: Sequence[float] | None = None) -> LatencyStats | None:
    """The input pipeline's cost, timed with the latency protocol (at the target's statistic), or None."""
    spec = preprocessing_spec(cfg, mean, std)
    if spec is None:
        return None
    return measure_preprocessing(spec, protocol_for(cfg.target_stat, cfg.measure))


def with_preprocessing(lat: LatencyResult, cfg: LatencyConfig, cost: LatencyStats | None) -> LatencyResult:
    """``lat`` with the input pipeline's cost added (as it is when there is none)."""
    if cost is None:
        return lat
    spec = preprocessing_spec(cfg)
    return add_preprocessing(lat, cost, spec.describe() if spec is not None else "")


def _estimator(
    cfg: LatencyConfig, num_classes: int, space: SearchSpace, target_ms: float | None = None
) -> LatencyEstimator:
    # Built once per worker process: with reuse_actors the same process serves many trials.
    key = json.dumps(
        [cfg.backend, cfg.input_shape, cfg.precision, cfg.options, cfg.measure, num_classes, space.name, target_ms,
         cfg.target_stat, cfg.scenario, cfg.batch_sizes],
        sort_keys=True,
    )
    if key not in _ESTIMATORS:
        _ESTIMATORS[key] = latency_estimator(cfg, num_classes, space, target_ms)
    return _ESTIMATORS[key]


def fp32_config(cfg: LatencyConfig) -> LatencyConfig | None:
    """The latency settings that time a candidate in fp32 beside ``cfg``'s lower precision (the same
    backend, options and protocol); None at fp32, and for a learned predictor (it knows one precision)."""
    if cfg.precision == "fp32" or cfg.backend == "predictor":
        return None
    return replace(cfg, precision="fp32")


def fp32_metrics(lat: LatencyResult) -> dict[str, float]:
    """The fp32 latency fields of a trial report, beside the figures at ``latency.precision``."""
    return {"latency_p50_fp32": lat.stats.p50, "latency_p90_fp32": lat.stats.p90,
            "latency_p95_fp32": lat.stats.p95, "latency_p99_fp32": lat.stats.p99}


def beside_anchor(lat: LatencyResult, estimator: LatencyEstimator, ctx: TrialContext) -> LatencyResult:
    """``lat`` paired with the anchor network measured right after it by ``estimator``'s measuring part
    (:func:`latency_predictor.measurement.paired.pair`, one round), at the target's statistic; ``lat``
    as it is without an anchor."""
    measurer = measuring_part(estimator) if ctx.anchor is not None else None
    if measurer is None or ctx.anchor is None:  # a predictor alone is refused with an anchor before any trial
        return lat
    anchor = anchor_network(ctx.anchor, max(ctx.latency.input_shape[2:]))
    theirs = with_preprocessing(measurer.measure(anchor), ctx.latency, ctx.preprocessing)
    return pair([lat], [theirs], ctx.latency.target_stat, ctx.anchor)


def profile_arch(arch: Arch, num_classes: int, input_shape: list[int]) -> tuple[int, int]:
    """Trainable parameters (with ``num_classes`` outputs) and MACs at ``input_shape``."""
    with torch.device("meta"):
        net = build(arch, num_classes=num_classes, in_chans=input_shape[1])
    return count_params(net), count_macs(net, tuple(input_shape))


def latency_metrics(lat: LatencyResult) -> dict[str, Any]:
    """The latency fields of a trial report."""
    return {
        "latency_ms": lat.latency_ms,
        "latency_p90": lat.stats.p90,
        "latency_p95": lat.stats.p95,
        "latency_p99": lat.stats.p99,
        "latency_source": lat.source,
        "latency_backend": lat.backend,
        "latency_device": lat.device,
        "latency_precision": lat.precision,
        "latency_stable": lat.stable,
        "latency_json": json.dumps(lat.to_dict()),
        # end-to-end latency: the network's own p50 and the input pipeline's, which the figures above add up
        **({"latency_model_p50": lat.extra["model_stats"]["p50"],
            "latency_preprocessing_p50": lat.extra["preprocessing"]["p50"]} if "preprocessing" in lat.extra else {}),
        # hybrid predictor mode: the prediction a confirming measurement replaced, and why
        **({"latency_predicted_ms": lat.extra["predicted_ms"], "latency_confirm_reason": lat.extra["confirm_reason"]}
           if "confirm_reason" in lat.extra else {}),
        # beside an anchor network: the candidate's figure over the anchor's, and the anchor's
        **({"x_anchor": fig.x_anchor, "anchor_latency_ms": fig.anchor_ms}
           if (fig := anchor_figures(lat)) is not None else {}),
    }


def evaluate_candidate(
    arch_text: str, ctx: TrialContext, report: Report, front: list[list[float]] | None = None
) -> None:
    """Evaluate one architecture and report its figures (one report per epoch when training).

    ``front``: in hybrid predictor mode, the ``[latency_ms, accuracy]`` Pareto front of the
    candidates finished when this one started; a candidate whose predicted latency and final
    accuracy could join it is measured for real before its final report.

    Every report carries ``status``: ``RUNNING`` after an intermediate epoch, ``COMPLETED`` on
    the last, ``FAILED`` (with ``failure_type`` and ``failure_reason``) when an expected error
    ended the trial. A FAILED report has ``reward`` NaN. ``trial_seconds`` is the time spent
    in this function up to the report.

    Raises:
        Exception: anything that is not an expected (typed) error: a bug, which must not be
            mistaken for a bad candidate.
    """
    started = time.perf_counter()
    torch.set_num_threads(ctx.threads)
    epochs = sum(r.epochs for r in ctx.rungs) if ctx.rungs else ctx.train.epochs
    base: dict[str, Any] = {"arch": arch_text, "accuracy_estimator": ctx.accuracy.estimator, "epochs": epochs}

    def timed_report(metrics: dict[str, Any]) -> None:
        report({**metrics, "trial_seconds": time.perf_counter() - started})

    deadline = Deadline(ctx.trial_timeout_s, started)
    try:
        try:
            _evaluate(arch_text, ctx, base, timed_report, deadline, front)
        except (MemoryError, RuntimeError) as err:
            oom = _out_of_memory(err)
            if oom is None:
                raise
            raise oom from err
    except USER_ERRORS as err:
        if isinstance(err, TrialOutOfMemoryError):
            _release_memory()
        timed_report({
            **base, "status": FAILED, "reward": math.nan, "failure_type": type(err).__name__,
            "failure_reason": str(err),
        })


def _release_memory() -> None:
    # What the failed candidate held is unreachable now; give it back before the next trial.
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def _evaluate(
    arch_text: str, ctx: TrialContext, base: dict[str, Any], report: Report, deadline: Deadline,
    front: list[list[float]] | None,
) -> None:
    arch = ctx.space.decode(arch_text)
    base["arch_id"] = arch.arch_id
    params, macs = profile_arch(arch, ctx.data.num_classes, ctx.latency.input_shape)
    base.update(params=params, macs=macs)

    if ctx.faults is not None:
        ctx.faults.before_measure(arch.arch_id, deadline.check)
    deadline.check("the start of the latency measurement")
    t0 = time.perf_counter()
    estimator = _estimator(ctx.latency, ctx.data.num_classes, ctx.space,
                           None if math.isnan(ctx.target_ms) else ctx.target_ms)
    lat = with_preprocessing(estimator.measure(arch), ctx.latency, ctx.preprocessing)
    check_runs(lat, ctx.latency.target_stat)
    lat = beside_anchor(lat, estimator, ctx)
    as_fp32 = fp32_config(ctx.latency)
    if as_fp32 is not None:  # logged beside the figures the reward uses, never used by it
        deadline.check("the start of the fp32 latency measurement")
        base.update(fp32_metrics(with_preprocessing(
            _estimator(as_fp32, ctx.data.num_classes, ctx.space).measure(arch), ctx.latency, ctx.preprocessing)))
    scoring = Objective.of(ctx.latency, ctx.target_ms, ctx.reward, ctx.target_x, ctx.anchor)
    base["measure_seconds"] = time.perf_counter() - t0
    deadline.check("the end of the latency measurement")
    anchored = {"latency_anchor": ctx.anchor} if ctx.anchor else {}
    if ctx.target_x is not None:
        anchored["target_anchor"] = str(ctx.anchor)
    base.update(latency_metrics(lat), latency_target_stat=ctx.latency.target_stat,
                latency_scenario=ctx.latency.scenario, **anchored, **scoring.figures(lat))

    def final_latency(objective: float) -> LatencyResult:
        # Now that the objective is known, the estimator may settle the latency (hybrid mode
        # measures a predicted candidate that could join the Pareto front); returns the latency
        # record the final reward uses.
        nonlocal lat
        if front is None:
            return lat
        deadline.check("the start of the final latency")
        t1 = time.perf_counter()
        final = with_preprocessing(estimator.final_latency(arch, lat, objective, front), ctx.latency,
                                   ctx.preprocessing)
        if final is not lat:
            lat = beside_anchor(final, estimator, ctx)
            base["measure_seconds"] += time.perf_counter() - t1
            base.update(latency_metrics(lat), **scoring.figures(lat))
        return lat

    device = resolve_device(ctx.train.device)
    guard = _work_guard(ctx.latency, device)
    if ctx.accuracy.estimator == "train" or (ctx.accuracy.estimator == "supernet" and ctx.rungs):
        base["train_memory_format"] = "channels_last" if channels_last_on(ctx.train, device) else "nchw"
    if ctx.accuracy.estimator == "custom":
        _custom(arch, ctx, base, report, deadline, device, guard, scoring, final_latency, lambda: lat)
        return
    if ctx.accuracy.estimator == "supernet" and ctx.rungs:  # the supernet's estimate is the bottom rung
        at_precision = precision_evaluator(ctx.latency.precision, ctx.latency.backend, ctx.data, device,
                                           ctx.accuracy.calibration_samples, ctx.train.seed, ctx.threads)
        with guard():
            net, normed, res = _supernet_start(arch, ctx, device)
        deadline.check("the end of the supernet evaluation")
        _train_rungs(arch, net, ctx, base, report, deadline, guard, at_precision, scoring, final_latency,
                     lambda: lat, normed, _recipe_rungs(net, ctx, device, guard, deadline), res)
        return
    if ctx.accuracy.estimator == "supernet":  # one-shot: the subnet of a trained supernet
        t0 = time.perf_counter()
        with guard():
            res = _supernet_accuracy(arch, ctx, device)
        deadline.check("the end of the supernet evaluation")
        settled = final_latency(res.accuracy)
        report({
            **base, "status": COMPLETED, "epoch": 0, "accuracy": res.accuracy, "val_loss": res.val_loss,
            "train_seconds": time.perf_counter() - t0, "reward": scoring.score(res.accuracy, settled),
        })
        return
    torch.manual_seed(ctx.train.seed)
    model = build(arch, num_classes=ctx.data.num_classes, in_chans=in_chans(ctx.data), dropout=ctx.train.dropout)
    if ctx.faults is not None:
        ctx.faults.before_training(arch.arch_id, model, device)
    t0 = time.perf_counter()
    if ctx.accuracy.estimator != "train":  # a training-free score (built-in images only: validate() says so)
        name = ctx.accuracy.estimator
        with guard():
            score = zero_cost_score(name, model, cast(ProxyData, ctx.data), ctx.accuracy.batch_size, device,
                                    ctx.train.seed)
        deadline.check(f"the end of the {name} score")
        train_seconds = time.perf_counter() - t0
        settled = final_latency(score)
        report({
            **base, "status": COMPLETED, "epoch": 0, "accuracy": score, f"{name}_score": score,
            "train_seconds": train_seconds, "reward": scoring.score(score, settled),
        })
        return

    at_precision = precision_evaluator(ctx.latency.precision, ctx.latency.backend, ctx.data, device,
                                       ctx.accuracy.calibration_samples, ctx.train.seed, ctx.threads)
    if ctx.rungs:
        _train_rungs(arch, model, ctx, base, report, deadline, guard, at_precision, scoring, final_latency,
                     lambda: lat, ctx.data, _recipe_rungs(model, ctx, device, guard, deadline))
        return

    def on_epoch(e: EpochResult) -> None:
        last = e.epoch == ctx.train.epochs
        accuracy, figures = _deployed_accuracy(e, last, model, ctx, at_precision, guard, deadline)
        train_seconds = time.perf_counter() - t0
        settled = final_latency(accuracy) if last else lat
        report({
            **base, **figures, "status": COMPLETED if last else RUNNING, "epoch": e.epoch,
            "accuracy": accuracy, "val_loss": e.val_loss, "train_loss": e.train_loss,
            "train_seconds": train_seconds, "reward": scoring.score(accuracy, settled),
        })

    train_briefly(model, ctx.data, ctx.train, device, on_epoch, step_guard=guard,
                  step_check=lambda: deadline.check("a training step"))


def _custom(
    arch: Arch, ctx: TrialContext, base: dict[str, Any], report: Report, deadline: Deadline, device: torch.device,
    guard: Callable[[], AbstractContextManager[Any]], scoring: Objective,
    final_latency: Callable[[float], LatencyResult], latency_now: Callable[[], LatencyResult],
) -> None:
    """``accuracy=custom``: the user's evaluator scores the candidate (:mod:`nas.trial.custom`).

    Each ``context.report`` is a RUNNING report at the next step (an early-stopping scheduler acts
    on it); the score returned is the COMPLETED one, at the last step reported. The call holds the
    device's measurement slot shared, as training does, so no latency measurement overlaps it.
    """
    evaluator = Evaluator.load(cast(str, ctx.accuracy.fn), ctx.accuracy.options)
    model = candidate_network(arch, ctx.space, ctx.data, ctx.train.seed, ctx.train.dropout)
    if ctx.faults is not None:
        ctx.faults.before_training(arch.arch_id, model, device)
    if ctx.rungs:
        _train_rungs(arch, model, ctx, base, report, deadline, guard, None, scoring, final_latency, latency_now,
                     ctx.data, _custom_rungs(evaluator, model, ctx, device, guard, deadline, arch, latency_now))
        return

    def on_step(steps: int, score: float, metrics: dict[str, float], seconds: float) -> None:
        report({**base, **user_figures(metrics), "status": RUNNING, "epoch": steps, "accuracy": score,
                "train_seconds": seconds, "reward": scoring.score(score, latency_now())})

    score, metrics, steps, t0 = _call_evaluator(evaluator, model, ctx, device, guard, deadline, arch, latency_now,
                                                (ctx.train.epochs, None, ctx.data), on_step)
    settled = final_latency(score)
    report({**base, **user_figures(metrics), "status": COMPLETED, "epoch": steps, "accuracy": score,
            "accuracy_precision": "fp32", "train_seconds": time.perf_counter() - t0,
            "reward": scoring.score(score, settled)})


def _call_evaluator(
    evaluator: Evaluator, model: torch.nn.Module, ctx: TrialContext, device: torch.device,
    guard: Callable[[], AbstractContextManager[Any]], deadline: Deadline, arch: Arch,
    latency_now: Callable[[], LatencyResult], budget: tuple[int, int | None, TaskData],
    on_step: Callable[[int, float, dict[str, float], float], None],
) -> tuple[float, dict[str, float], int, float]:
    """The user's evaluator called on ``model`` with the ``(epochs, rung, data)`` of ``budget``, holding
    the measurement slot shared (``guard``) and the trial's time limit at each ``context.report``,
    which calls ``on_step(steps so far, score, metrics, seconds since the start)``.

    Returns:
        The score and metrics it returned, the steps it reported, and when it started (``perf_counter``).
    """
    epochs, rung, data = budget
    t0 = time.perf_counter()
    steps = 0

    def on_report(score: float, metrics: dict[str, float]) -> None:
        nonlocal steps
        deadline.check("a report of accuracy.fn")
        steps += 1
        on_step(steps, score, metrics, time.perf_counter() - t0)

    context = EvalContext(
        device=device, seed=ctx.train.seed, epochs=epochs, rung=rung, data=data, options=ctx.accuracy.options,
        arch=arch.encode(), arch_id=arch.arch_id, latency_ms=stat_value(latency_now(), ctx.latency.target_stat),
        threads=ctx.threads, _report=on_report, _workdir=ctx.workdir,
    )
    with guard():
        score, metrics = evaluator(model, context)
    deadline.check("the end of accuracy.fn")
    return score, metrics, steps, t0


RungEpoch = Callable[[EpochResult, bool, dict[str, Any]], None]
"""Called with each epoch's figures at a rung, whether it is the rung's last, and further report fields."""
RungTrainer = Callable[[int, RungConfig, TaskData, RungEpoch], None]
"""Trains the network for one rung ``(k, rung, data, on_epoch)``, calling ``on_epoch`` as it goes."""


def _recipe_rungs(model: torch.nn.Module, ctx: TrialContext, device: torch.device,
                  guard: Callable[[], AbstractContextManager[Any]], deadline: Deadline) -> RungTrainer:
    """Each rung trained with the ``train`` group's recipe for the rung's epochs."""

    def train_rung(k: int, rung: RungConfig, data: TaskData, on_epoch: RungEpoch) -> None:
        train_briefly(model, data, replace(ctx.train, epochs=rung.epochs), device,
                      lambda e: on_epoch(e, e.epoch == rung.epochs, {}), step_guard=guard,
                      step_check=lambda: deadline.check("a training step"))

    return train_rung


def _custom_rungs(evaluator: Evaluator, model: torch.nn.Module, ctx: TrialContext, device: torch.device,
                  guard: Callable[[], AbstractContextManager[Any]], deadline: Deadline, arch: Arch,
                  latency_now: Callable[[], LatencyResult]) -> RungTrainer:
    """Each rung scored by the user's evaluator, given the rung's budget and the same network."""

    def train_rung(k: int, rung: RungConfig, data: TaskData, on_epoch: RungEpoch) -> None:
        def on_step(steps: int, score: float, metrics: dict[str, float], seconds: float) -> None:
            on_epoch(EpochResult(steps, score, math.nan, math.nan, seconds), False, user_figures(metrics))

        score, metrics, _, t0 = _call_evaluator(evaluator, model, ctx, device, guard, deadline, arch, latency_now,
                                                (rung.epochs, k, data), on_step)
        on_epoch(EpochResult(rung.epochs, score, math.nan, math.nan, time.perf_counter() - t0), True,
                 user_figures(metrics))

    return train_rung


def _deployed_accuracy(
    e: EpochResult, last: bool, model: torch.nn.Module, ctx: TrialContext,
    at_precision: PrecisionEvaluator | None, guard: Callable[[], AbstractContextManager[Any]],
    deadline: Deadline,
) -> tuple[float, dict[str, Any]]:
    """The accuracy an epoch's report carries, and which precision it is at.

    At the end of a training the reward weighs the deployed network: its accuracy at the precision
    its latency is for (``latency.precision``), quantised and run by ``accuracy_runtime``; the float
    figure is kept as ``accuracy_fp32``. The epochs before report the fp32 figure.
    """
    if not last:
        return e.accuracy, {}
    if at_precision is None:
        return e.accuracy, {"accuracy_precision": "fp32"}
    with guard():
        accuracy = at_precision(model)
    deadline.check(f"the end of the {ctx.latency.precision} evaluation")
    return accuracy, {"accuracy_fp32": e.accuracy, "accuracy_precision": at_precision.precision,
                      "accuracy_runtime": at_precision.runtime}


def _train_rungs(
    arch: Arch, model: torch.nn.Module, ctx: TrialContext, base: dict[str, Any], report: Report, deadline: Deadline,
    guard: Callable[[], AbstractContextManager[Any]],
    at_precision: PrecisionEvaluator | None, scoring: Objective,
    final_latency: Callable[[float], LatencyResult], latency_now: Callable[[], LatencyResult], task: TaskData,
    train_rung: RungTrainer, supernet: SubnetResult | None = None,
) -> None:
    """Train rung after rung (:mod:`nas.trial.rungs`) with ``train_rung`` (the recipe, or the user's
    evaluator), reporting each epoch and each rung's end.

    A rung's last report is ``COMPLETED`` with the figures at that rung (``rung``, its size, and
    ``accuracy_rung<k>``/``reward_rung<k>`` of every rung so far); ASHA may stop the trial there.
    With ``supernet`` (``accuracy=supernet``), rung 0 is the subnet's estimate and ``model`` the
    subnet with the supernet's weights, which the training rungs above it continue from; ``task``
    is the data as the model expects it (normalised like the supernet's training, then).
    """
    rf = ctx.reduction_factor
    rungs: list[RungConfig | None] = [None, *ctx.rungs] if supernet is not None else list(ctx.rungs)
    key = fingerprint(arch.encode(), ctx.rungs, ctx.train,
                      {**task.summary(), "supernet": ctx.accuracy.checkpoint if supernet is not None else None})
    done: list[dict[str, Any]] = []
    first, offset = 0, 0
    saved = ctx.checkpoints.load(arch.arch_id, key) if ctx.checkpoints is not None else None
    if saved is not None:  # continue where an earlier trial of this candidate stopped
        model.load_state_dict(saved.state)
        # Only the last saved rung's end is reported again (it carries every earlier rung's figures):
        # replaying the lower rungs would let the scheduler, whose cut-offs have moved since, stop the
        # candidate at a rung below the one it already reached and record that lower figure.
        report({**saved.reports[-1], "resumed_rungs": saved.rung + 1})
        done, first = list(saved.reports), saved.rung + 1
        offset = sum(r.epochs for r in rungs[:first] if r is not None)
    t0 = time.perf_counter()

    def rung_end(k: int, row: dict[str, Any]) -> None:
        accuracy, reward = row["accuracy"], row["reward"]
        earlier = {f"{m}_rung{j}": r[m] for j, r in enumerate(done) for m in ("accuracy", "reward")}
        end = {**row, **earlier, f"accuracy_rung{k}": accuracy, f"reward_rung{k}": reward,
               "status": COMPLETED, RUNG_STEP: milestone(k, rf)}
        done.append(end)
        if ctx.checkpoints is not None:  # saved before the report: the scheduler may stop the trial at it
            ctx.checkpoints.save(arch.arch_id, key, k, model, done)
        report(end)

    for k in range(first, len(rungs)):
        rung = rungs[k]
        if rung is None and supernet is not None:  # the supernet's estimate: no training
            settled = final_latency(supernet.accuracy)
            rung_end(0, {**base, "rung": 0, "rung_train_images": 0, "rung_epochs": 0, "epoch": 0,
                         "accuracy": supernet.accuracy, "val_loss": supernet.val_loss,
                         "train_seconds": supernet.seconds, "accuracy_precision": "fp32",
                         "reward": scoring.score(supernet.accuracy, settled)})
            continue
        assert rung is not None  # only the supernet's rung has no training budget
        data = task.take_train(rung.train_images, ctx.train.seed)
        figures = {"rung": k, "rung_train_images": rung.train_images, "rung_epochs": rung.epochs,
                   **({"resumed_rungs": first} if first else {})}

        def on_epoch(e: EpochResult, last: bool, fields: dict[str, Any], k: int = k,
                     figures: dict[str, Any] = figures, offset: int = offset) -> None:
            accuracy, extra = _deployed_accuracy(e, last, model, ctx, at_precision, guard, deadline)
            settled = final_latency(accuracy) if last else latency_now()
            reward = scoring.score(accuracy, settled)
            row = {
                **base, **figures, **extra, "epoch": offset + e.epoch, "accuracy": accuracy, "val_loss": e.val_loss,
                "train_loss": e.train_loss, **fields, "train_seconds": time.perf_counter() - t0, "reward": reward,
            }
            if not last:
                report({**row, "status": RUNNING, RUNG_STEP: milestone(k - 1, rf) if k else 0})
                return
            rung_end(k, row)

        train_rung(k, rung, data, on_epoch)
        offset += rung.epochs


def _supernet_start(arch: Arch, ctx: TrialContext, device: torch.device) -> tuple[torch.nn.Module, ProxyData,
                                                                                   SubnetResult]:
    """The candidate's subnet with the supernet's weights (BatchNorm recalibrated), the data
    normalised as the supernet's training normalised it, and the subnet's validation figures."""
    acc = ctx.accuracy
    data = cast(ProxyData, ctx.data)  # a supernet is trained on built-in images: validate() refuses data=custom
    loaded = load_supernet(cast(str, acc.checkpoint), ctx.space, SupernetTarget.of(ctx.space, data), device)
    normed = loaded.normalised_like_training(data)
    t0 = time.perf_counter()
    net, n = recalibrated_subnet(loaded.net, arch, normed, acc.bn_batches, acc.batch_size, device, ctx.train.seed)
    accuracy, loss = evaluate(net, normed, device)
    return net, normed, SubnetResult(accuracy, loss, time.perf_counter() - t0, n)


def _supernet_accuracy(arch: Arch, ctx: TrialContext, device: torch.device) -> SubnetResult:
    # The supernet is loaded once per worker process (load_supernet keeps it); the search checked
    # the checkpoint against the space, the data and its split before the first trial.
    acc = ctx.accuracy
    data = cast(ProxyData, ctx.data)
    loaded = load_supernet(cast(str, acc.checkpoint), ctx.space, SupernetTarget.of(ctx.space, data), device)
    return subnet_accuracy(loaded, arch, data, acc.bn_batches, acc.batch_size, device, ctx.train.seed)


def _work_guard(latency: LatencyConfig, device: torch.device) -> Callable[[], AbstractContextManager[Any]]:
    """Training steps on ``device`` take its measurement slot shared (see latency_predictor.measurement.slot):
    no other trial's latency measurement of that device overlaps them. Off with
    ``latency.options.slot=false``, as for the measurements themselves."""
    if latency.options.get("slot", True) is False or device.type not in ("cpu", "cuda"):
        return nullcontext
    name = "cpu" if device.type == "cpu" else f"cuda:{device.index or 0}"
    return partial(device_work, name, latency.options.get("slot_dir"))
