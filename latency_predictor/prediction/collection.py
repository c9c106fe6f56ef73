"""Measure architectures that cover a search space and store them as a latency dataset.

The command line is ``python -m latency_predictor.collect`` (:func:`latency_predictor.cli.collect_main`).
A remote estimator measures on another device, through the measurement agents running there
(:mod:`latency_predictor.agent`); the dataset is then that device's, fingerprint included.

Which architectures (:func:`coverage_plan`): first the space's corner networks
(:meth:`~search_spaces.SearchSpace.extremes`); then a stream in which, out of every ten, two
push one axis (depth, width, kernel size, expansion, SE, block type) to its smallest or largest
value with every other decision random, one is a single mutation of an earlier architecture
(neighbours teach the model what one decision costs), and seven are uniform samples.

For a new device, with ``adapt_from`` (``--adapt-from PREDICTOR``, another device's predictor),
the ``n`` architectures are instead those most informative for adapting that predictor
(:func:`informative_plan`), measured most informative first; ``train --adapt-from`` then fits
the new device's predictor from them (:mod:`latency_predictor.prediction.transfer`).

Resumable: the dataset folder keeps every measurement; a re-run adds ``n`` architectures that
are not in it yet (the same seed replays the same stream, skipping what was measured) and
measures none twice. A measurement disturbed by other work on the machine (see
:mod:`latency_predictor.prediction.dataset`) is kept and the architecture measured again at the end of the
run, up to ``retries`` times. ``repeats`` architectures are measured a second time in a new
session, so the training report can estimate the session-to-session noise.

For a predictor of the tail (``train --statistic p99``), ``--statistic p99`` times each network
with the runs a p99 needs (:func:`~latency_predictor.measurement.statistic.protocol_for`: ``min_runs``
raised to 1,000, the per-attempt time cap lifted), and :func:`collect` refuses, before it is
stored, a measurement with fewer runs (an agent with its own protocol, say). Such a dataset
serves a p50 predictor too.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from latency_predictor.errors import ConfigError
from latency_predictor.measurement.protocol import LatencyEstimator
from latency_predictor.measurement.statistic import check_runs, check_stat
from latency_predictor.prediction.dataset import DEFAULT_MIN_CPU_SHARE, Dataset
from latency_predictor.prediction.features import FeatureExtractor
from latency_predictor.prediction.predictor import PredictorEstimator
from latency_predictor.prediction.target import PredictorTarget
from latency_predictor.prediction.transfer import informative_order
from search_spaces import Arch, SearchSpace

AXES: tuple[str, ...] = ("depth", "out_chs", "kernel_size", "exp_ratio", "se_ratio", "block_type")
_MAX_DUPLICATES = 10_000


def _random_decisions(space: SearchSpace, rng: np.random.Generator) -> dict[str, Any]:
    return {d.name: d.options[int(rng.integers(len(d.options)))] for d in space.choices()}


def coverage_plan(space: SearchSpace, seed: int = 0) -> Iterator[tuple[Arch, str]]:
    """An endless, reproducible stream of ``(arch, origin)`` covering ``space`` (module docstring).

    Architectures may repeat; the collector skips those already measured.
    """
    rng = np.random.default_rng(seed)
    for arch in space.extremes():
        yield arch, "extreme"
    choices = space.choices()
    axes = [ax for ax in AXES if any(d.name.split(".")[-1] == ax for d in choices)]
    seen: list[Arch] = []
    i = 0
    while True:
        slot = i % 10
        if axes and slot in (0, 5):
            k = i // 5
            axis, pick = axes[k % len(axes)], (min, max)[(k // len(axes)) % 2]
            d = _random_decisions(space, rng)
            for dec in choices:
                if dec.name.split(".")[-1] == axis:
                    # block_type: the first / last listed type; numbers: smallest / largest
                    d[dec.name] = dec.options[0 if pick is min else -1] if axis == "block_type" else pick(dec.options)
            arch, origin = space.from_decisions(d), "axis"
        elif slot == 9 and seen and choices:
            arch, origin = space.mutate(seen[int(rng.integers(len(seen)))], rng), "mutation"
        else:
            arch, origin = space.sample(rng), "uniform"
        seen.append(arch)
        i += 1
        yield arch, origin


@dataclass(frozen=True)
class CollectSummary:
    """What a collection run did.

    Attributes:
        path: the dataset folder.
        measured: measurements made in this run (new architectures, retries and repeats).
        new_archs: architectures measured for the first time.
        retried: re-measurements of disturbed architectures.
        repeated: second measurements for the noise estimate.
        still_disturbed: architectures whose every measurement so far was disturbed.
        total_archs: architectures in the dataset now.
    """

    path: Path
    measured: int
    new_archs: int
    retried: int
    repeated: int
    still_disturbed: int
    total_archs: int


def collect(
    space: SearchSpace,
    estimator: LatencyEstimator,
    out: str | Path,
    n: int,
    *,
    seed: int = 0,
    retries: int = 2,
    repeats: int | None = None,
    min_cpu_share: float = DEFAULT_MIN_CPU_SHARE,
    progress: bool = True,
    adapt_from: PredictorEstimator | None = None,
    pool: int = 2000,
    statistic: str = "p50",
) -> CollectSummary:
    """Measure ``n`` architectures of ``space`` not yet in the dataset at ``out`` and append them.

    Args:
        space: the search space.
        estimator: a measuring backend (:func:`latency_predictor.measurement.backends.make_estimator`).
        out: the dataset folder (created if missing; an existing one must match the setting).
        n: new architectures to measure in this run.
        seed: seed of the coverage stream (keep it to resume the same stream).
        retries: re-measurements per disturbed architecture, at the end of the run.
        repeats: architectures measured again for the noise estimate (default ``n // 10``).
        min_cpu_share: CPU share under which a CPU measurement counts as disturbed.
        progress: show a progress bar on stderr.
        adapt_from: another device's predictor to adapt to this one: the ``n`` architectures are
            then those most informative for adapting it (:func:`informative_plan`), most
            informative first, instead of the coverage stream.
        pool: candidates (from the coverage stream) the informative ones are chosen from.
        statistic: the statistic the dataset is for: every measurement must have the timed runs
            it needs (:data:`~latency_predictor.measurement.statistic.MIN_RUNS`; make ``estimator`` with
            :func:`~latency_predictor.measurement.statistic.protocol_for`).

    Raises:
        ConfigError: negative counts, an unknown ``statistic``.
        PredictorMismatchError: the dataset at ``out`` was measured for another setting.
        MeasurementError: a measurement with fewer timed runs than ``statistic`` needs (not stored).
        LatencyError: a measurement failed (the records made before it are kept).
    """
    check_stat(statistic)
    for name, value in (("n", n), ("retries", retries), ("repeats", repeats if repeats is not None else 0)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ConfigError(f"{name} must be an integer >= 0, got {value!r}")
    repeats = n // 10 if repeats is None else repeats
    dataset = Dataset.open_or_create(out, PredictorTarget.create(space, estimator))
    extractor = FeatureExtractor(dataset.target.input_shape, dataset.target.num_classes)
    known = dataset.measured_archs()
    if adapt_from is not None:
        plan = informative_plan(space, adapt_from, extractor, n, known, seed, pool)
    else:
        plan = _new_archs(coverage_plan(space, seed), n, known)
    bar = tqdm(total=len(plan) + repeats, desc=f"collect {space.name}", unit="arch", disable=not progress,
               file=sys.stderr)

    def measure(arch: Arch, origin: str) -> bool:
        result = estimator.measure(arch)
        check_runs(result, statistic)
        rec = dataset.add(result, origin, extractor(arch), min_cpu_share)
        bar.update(1)
        bar.set_postfix(disturbed=sum(r.disturbed is not None for r in dataset.records), refresh=False)
        return rec.disturbed is None

    with bar:
        for arch, origin in plan:
            measure(arch, origin)
        # retry every architecture (from this run or an earlier one) without an undisturbed record
        retried = 0
        for _ in range(retries):
            pending = sorted(dataset.measured_archs() - dataset.undisturbed_archs())
            bar.total += len(pending)
            for key in pending:
                measure(Arch.decode(key), "retry")
                retried += 1
        # second measurements, for the session-to-session noise
        counts: dict[str, int] = {}
        for r in dataset.records:
            if r.disturbed is None:
                counts[r.arch] = counts.get(r.arch, 0) + 1
        once = sorted(a for a, c in counts.items() if c == 1)
        rng = np.random.default_rng(seed + 1)
        chosen = [once[i] for i in rng.permutation(len(once))[:repeats]]
        bar.total -= repeats - len(chosen)
        for key in chosen:
            measure(Arch.decode(key), "repeat")
    return CollectSummary(
        path=dataset.path, measured=len(plan) + retried + len(chosen), new_archs=len(plan), retried=retried,
        repeated=len(chosen), still_disturbed=len(dataset.measured_archs() - dataset.undisturbed_archs()),
        total_archs=len(dataset.measured_archs()),
    )


def _new_archs(stream: Iterator[tuple[Arch, str]], n: int, known: set[str]) -> list[tuple[Arch, str]]:
    """The first ``n`` architectures of ``stream`` not in ``known`` (fewer if the space runs out)."""
    plan: list[tuple[Arch, str]] = []
    seen = set(known)
    duplicates = 0
    while len(plan) < n and duplicates < _MAX_DUPLICATES:
        arch, origin = next(stream)
        key = arch.encode()
        if key in seen:
            duplicates += 1
            continue
        seen.add(key)
        duplicates = 0
        plan.append((arch, origin))
    return plan


def informative_plan(
    space: SearchSpace, source: PredictorEstimator, extractor: FeatureExtractor, n: int, known: set[str],
    seed: int = 0, pool: int = 2000,
) -> list[tuple[Arch, str]]:
    """The ``n`` architectures most informative for adapting ``source`` to a new device, best first.

    They are chosen (:func:`latency_predictor.prediction.transfer.informative_order`) from the first ``pool``
    architectures of the coverage stream not yet measured, given those already measured (``known``).

    Raises:
        ConfigError: ``pool`` smaller than ``n``.
    """
    if pool < n:
        raise ConfigError(f"pool ({pool}) must be at least n ({n}): the architectures are chosen from the pool")
    candidates = [a for a, _ in _new_archs(coverage_plan(space, seed), pool, known)]
    order = informative_order(source.model, extractor, candidates, min(n, len(candidates)),
                              measured=[Arch.decode(a) for a in sorted(known)])
    return [(candidates[i], "informative") for i in order]


def default_out(space: SearchSpace, target: PredictorTarget) -> Path:
    """``.latnas/datasets/<space>-<backend>-<shape>-<fingerprint>``: one folder per setting."""
    shape = "x".join(map(str, target.input_shape))
    return Path(".latnas") / "datasets" / f"{space.name}-{target.backend}-{shape}-{target.fingerprint.digest[:8]}"
