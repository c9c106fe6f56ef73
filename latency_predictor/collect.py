"""Measure architectures that cover a search space and store them as a latency dataset.

Usage::

    python -m latency_predictor.collect --space mobile --backend onnxruntime --n 300 --out DIR
    python -m latency_predictor.collect +space=mobile latency=onnxruntime n=300     # key=value form
    python -m latency_predictor.collect +space=mobile latency=remote url=http://127.0.0.1:8765 n=300
    python -m latency_predictor.collect --space mobile --n 300 --statistic p99 --out DIR   # for a p99 predictor

``latency=remote`` (``--backend remote --url URL``) measures on another device, through the
measurement agents running there (:mod:`latency_predictor.agent`; the token in
``$LATNAS_AGENT_TOKEN``); the dataset is then that device's, fingerprint included.

Which architectures (:func:`coverage_plan`): first the space's corner networks
(:meth:`~search_spaces.SearchSpace.extremes`); then a stream in which, out of every ten, two
push one axis (depth, width, kernel size, expansion, SE, block type) to its smallest or largest
value with every other decision random, one is a single mutation of an earlier architecture
(neighbours teach the model what one decision costs), and seven are uniform samples.

For a new device, with ``adapt_from`` (``--adapt-from PREDICTOR``, another device's predictor),
the ``n`` architectures are instead those most informative for adapting that predictor
(:func:`informative_plan`), measured most informative first; ``train --adapt-from`` then fits
the new device's predictor from them (:mod:`latency_predictor.transfer`).

Resumable: the dataset folder keeps every measurement; a re-run adds ``n`` architectures that
are not in it yet (the same seed replays the same stream, skipping what was measured) and
measures none twice. A measurement disturbed by other work on the machine (see
:mod:`latency_predictor.dataset`) is kept and the architecture measured again at the end of the
run, up to ``retries`` times. ``repeats`` architectures are measured a second time in a new
session, so the training report can estimate the session-to-session noise.

For a predictor of the tail (``train --statistic p99``), ``--statistic p99`` times each network
with the runs a p99 needs (:func:`~latency_predictor.statistic.protocol_for`: ``min_runs``
raised to 1,000, the per-attempt time cap lifted), and :func:`collect` refuses, before it is
stored, a measurement with fewer runs (an agent with its own protocol, say). Such a dataset
serves a p50 predictor too.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from latency_predictor.agent.wire import TOKEN_ENV
from latency_predictor.backends import BACKENDS, DEFAULT_BACKEND, make_estimator
from latency_predictor.cliargs import add_protocol_arguments, key_value_args, protocol_from_args
from latency_predictor.configure import make_remote_estimator
from latency_predictor.dataset import DEFAULT_MIN_CPU_SHARE, Dataset
from latency_predictor.errors import ConfigError, LatencyError
from latency_predictor.export import DEFAULT_INPUT_SHAPE, parse_shape
from latency_predictor.features import FeatureExtractor
from latency_predictor.predictor import PredictorEstimator, read_predictor
from latency_predictor.protocol import LatencyEstimator
from latency_predictor.statistic import TARGET_STATS, check_runs, check_stat, protocol_for
from latency_predictor.target import PredictorTarget
from latency_predictor.transfer import informative_order
from search_spaces import Arch, SearchSpace, SearchSpaceError, load_space

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
        estimator: a measuring backend (:func:`latency_predictor.backends.make_estimator`).
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
            it needs (:data:`~latency_predictor.statistic.MIN_RUNS`; make ``estimator`` with
            :func:`~latency_predictor.statistic.protocol_for`).

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

    They are chosen (:func:`latency_predictor.transfer.informative_order`) from the first ``pool``
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


# ---------------------------------------------------------------------- command line

def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m latency_predictor.collect",
        description="Measure architectures covering a search space into a (resumable) latency dataset.",
        epilog="Options may also be given as key=value: +space=mobile latency=onnxruntime n=300.",
    )
    p.add_argument("--space", required=True, help="search space name (search_spaces/spaces/) or YAML path")
    p.add_argument("--backend", "--latency", dest="backend", default=DEFAULT_BACKEND,
                   help=f"one of {sorted(BACKENDS)}, or remote: measured by agents on another device "
                        f"(default {DEFAULT_BACKEND})")
    p.add_argument("--url", action="append", default=[],
                   help="remote: an agent's http://HOST:PORT (repeat, or separate with commas, for a pool)")
    p.add_argument("--agent-backend", default=DEFAULT_BACKEND,
                   help=f"remote: the backend the agents measure with (default {DEFAULT_BACKEND})")
    p.add_argument("--token-env", default=TOKEN_ENV, help=f"remote: variable holding the agents' token ({TOKEN_ENV})")
    p.add_argument("--token-file", help="remote: file holding the agents' token")
    p.add_argument("--n", type=int, default=300, help="new architectures to measure (default 300)")
    p.add_argument("--out", help="dataset folder (default .latnas/datasets/<space>-<backend>-<shape>-<device>)")
    p.add_argument("--seed", type=int, default=0, help="coverage stream seed (default 0)")
    p.add_argument("--adapt-from", metavar="PREDICTOR",
                   help="another device's predictor: measure the --n architectures most informative for adapting "
                        "it to this device, most informative first (then: train --adapt-from)")
    p.add_argument("--pool", type=int, default=2000,
                   help="with --adapt-from: candidates the architectures are chosen from (default 2000)")
    p.add_argument("--retries", type=int, default=2, help="re-measurements of a disturbed architecture (default 2)")
    p.add_argument("--repeats", type=int, help="architectures measured twice for the noise estimate (default n/10)")
    p.add_argument("--min-cpu-share", type=float, default=DEFAULT_MIN_CPU_SHARE,
                   help="CPU share per runtime thread under which a measurement is disturbed (default 0.9)")
    shape = "x".join(map(str, DEFAULT_INPUT_SHAPE))
    p.add_argument("--input-shape", default=shape, help=f"N,C,H,W or NxCxHxW (default {shape})")
    p.add_argument("--threads", type=int, default=1, help="runtime threads (default 1)")
    p.add_argument("--num-classes", type=int, default=1000,
                   help="classifier width of the measured networks; match the search's data (digits: 10) "
                        "(default 1000)")
    p.add_argument("--precision", help="fp32 (default) or what the backend allows")
    p.add_argument("--provider", help="onnxruntime provider: cpu (default), cuda or tensorrt")
    p.add_argument("--device", help="torch/tensorrt device: cpu or cuda:N")
    add_protocol_arguments(p)
    p.add_argument("--statistic", choices=TARGET_STATS, default="p50",
                   help="the statistic the dataset is for: p90/p95/p99 raise --min-runs to 100/200/1000 and lift "
                        "--max-time-s, for a predictor trained with the same --statistic (default p50)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    return p


def backend_options(args: argparse.Namespace) -> dict[str, Any]:
    """The measuring backend's options from parsed arguments (with ``--backend remote``: the agents' backend's)."""
    measure = protocol_from_args(args)
    raised = protocol_for(args.statistic, {"min_runs": measure.min_runs, "max_time_s": measure.max_time_s})
    measure = dataclasses.replace(measure, **raised)
    backend = args.agent_backend if args.backend == "remote" else args.backend
    threads_key = {"onnxruntime": "intra_op_threads", "torch": "threads"}.get(backend)
    opts: dict[str, Any] = {"input_shape": parse_shape(args.input_shape), "measure": measure,
                            "num_classes": args.num_classes}
    if threads_key:
        opts[threads_key] = args.threads
    given = {"precision": args.precision, "provider": args.provider, "device": args.device}
    opts.update({k: v for k, v in given.items() if v is not None})
    return opts


def make_collect_estimator(args: argparse.Namespace) -> LatencyEstimator:
    """The measuring backend the arguments describe: a local one, or agents with ``--backend remote``.

    Raises:
        ConfigError: bad options; ``--url`` without ``--backend remote`` or the reverse.
        BackendUnavailableError: a local backend that cannot run here.
    """
    opts = backend_options(args)
    if args.backend != "remote":
        if args.url:
            raise ConfigError("--url is for --backend remote (measuring through agents)")
        return make_estimator(args.backend, **opts)
    urls = [u for given in args.url for u in given.split(",") if u]
    if not urls:
        raise ConfigError("--backend remote needs --url: the http://HOST:PORT of an agent "
                          "(python -m latency_predictor.agent)")
    shape, measure, num_classes = opts.pop("input_shape"), opts.pop("measure"), opts.pop("num_classes")
    remote = {"url": urls, "backend": args.agent_backend, "backend_options": opts, "token_env": args.token_env,
              "token_file": args.token_file}
    return make_remote_estimator(tuple(shape), remote, dataclasses.asdict(measure), num_classes)


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point; returns the exit status (2 on expected errors)."""
    try:
        raw = key_value_args(sys.argv[1:] if argv is None else argv, ["no_progress"])
        args = _parser().parse_args(raw)
        space = load_space(args.space)
        estimator = make_collect_estimator(args)
        out = Path(args.out) if args.out else default_out(space, PredictorTarget.create(space, estimator))
        source = read_predictor(args.adapt_from) if args.adapt_from else None
        s = collect(space, estimator, out, args.n, seed=args.seed, retries=args.retries, repeats=args.repeats,
                    min_cpu_share=args.min_cpu_share, progress=not args.no_progress, adapt_from=source,
                    pool=args.pool, statistic=args.statistic)
    except (LatencyError, SearchSpaceError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(f"{s.path}: measured {s.measured} ({s.new_archs} new, {s.retried} retries, {s.repeated} repeats); "
          f"{s.total_archs} architectures in the dataset, {s.still_disturbed} with only disturbed measurements")
    return 0


if __name__ == "__main__":
    sys.exit(main())
