"""The command lines of ``python -m latency_predictor.measure``, ``.collect`` and ``.train``.

Each command module is a thin entry point that calls one function here (:func:`measure_main`,
:func:`collect_main`, :func:`train_main`); the work is done in :mod:`latency_predictor.measurement`
and :mod:`latency_predictor.prediction`. Expected errors (bad options, unavailable devices,
malformed architectures) print one line and exit with status 2.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from latency_predictor.agent.wire import TOKEN_ENV
from latency_predictor.errors import ConfigError, LatencyError
from latency_predictor.estimators import make_remote_estimator
from latency_predictor.measurement.backends import BACKENDS, DEFAULT_BACKEND, MeasuredBackend, make_estimator
from latency_predictor.measurement.breakdown import Breakdown
from latency_predictor.measurement.export import DEFAULT_INPUT_SHAPE, parse_shape
from latency_predictor.measurement.protocol import LatencyEstimator, LatencyResult
from latency_predictor.measurement.statistic import TARGET_STATS, protocol_for
from latency_predictor.measurement.timing import MeasureConfig
from latency_predictor.prediction.collection import collect, default_out
from latency_predictor.prediction.dataset import COMBINE, DEFAULT_MIN_CPU_SHARE, Dataset
from latency_predictor.prediction.predictor import PredictorEstimator, read_predictor
from latency_predictor.prediction.target import PredictorTarget
from latency_predictor.prediction.training import TrainReport, train_predictor
from latency_predictor.prediction.transfer import TransferReport, adapt_predictor
from search_spaces import Arch, SearchSpaceError, load_space, resolve_arch


def key_value_args(argv: Sequence[str], flags: Sequence[str] = ()) -> list[str]:
    """Turn ``key=value`` / ``+key=value`` arguments into ``--key value`` (``_`` becomes ``-``).

    This accepts the Hydra-style form the search uses (``+space=mobile latency=onnxruntime``)
    without depending on Hydra. ``flags`` are boolean options: ``key=true`` becomes ``--key``,
    ``key=false`` is dropped.

    Raises:
        ConfigError: a flag given a value other than true/false.
    """
    out: list[str] = []
    for arg in argv:
        key, sep, value = arg.partition("=")
        if not sep or arg.startswith("-"):
            out.append(arg)
            continue
        name = key.lstrip("+")
        opt = "--" + name.replace("_", "-")
        if name in flags:
            if value.lower() in ("true", "1", "yes"):
                out.append(opt)
            elif value.lower() not in ("false", "0", "no"):
                raise ConfigError(f"{name} takes true or false, got {value!r}")
        else:
            out += [opt, value]
    return out


PROTOCOL_ARGS: tuple[str, ...] = ("warmup_runs", "warmup_s", "min_runs", "min_time_s", "max_time_s")
"""The measurement-protocol options every measuring command takes (``--warmup-runs`` ...)."""


def add_protocol_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``--warmup-runs``, ``--warmup-s``, ``--min-runs``, ``--min-time-s``, ``--max-time-s``,
    defaulting to :class:`~latency_predictor.measurement.timing.MeasureConfig`'s values."""
    d = MeasureConfig()
    for name in PROTOCOL_ARGS:
        default = getattr(d, name)
        parser.add_argument("--" + name.replace("_", "-"), type=type(default), default=default)


def protocol_from_args(args: argparse.Namespace, **more: Any) -> MeasureConfig:
    """The :class:`MeasureConfig` of parsed :func:`add_protocol_arguments` options, plus ``more``."""
    return MeasureConfig(**{name: getattr(args, name) for name in PROTOCOL_ARGS}, **more)


THREADS_OPTION: dict[str, str] = {
    "onnxruntime": "intra_op_threads", "torch": "threads", "openvino": "intra_op_threads", "litert": "intra_op_threads",
}
"""The backend option a command's ``--threads`` sets."""


# ---------------------------------------------------------------------- python -m latency_predictor.measure

def _measure_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m latency_predictor.measure",
        description="Measure the latency of architectures (strings or reference names).",
    )
    p.add_argument("arch", nargs="*", help="architecture string or reference name")
    p.add_argument("--space", help="sample architectures from this space (name or YAML path)")
    p.add_argument("--sample", type=int, default=0, metavar="N", help="how many to sample from --space")
    p.add_argument("--seed", type=int, default=0, help="sampling seed (default 0)")
    p.add_argument("--backend", default=DEFAULT_BACKEND, help=f"one of {sorted(BACKENDS)} (default {DEFAULT_BACKEND})")
    shape = "x".join(map(str, DEFAULT_INPUT_SHAPE))
    p.add_argument("--input-shape", default=shape, help=f"N,C,H,W or NxCxHxW (default {shape})")
    p.add_argument("--precision", help="fp32 (default), fp16, bf16 or int8, as the backend allows")
    p.add_argument("--threads", type=int, help="intra-op threads (onnxruntime) or torch threads (default 1)")
    p.add_argument("--inter-op-threads", type=int, help="onnxruntime inter-op threads (default 1)")
    p.add_argument("--provider", help="onnxruntime provider: cpu (default), cuda or tensorrt")
    p.add_argument("--device", help="torch/tensorrt device: cpu or cuda:N")
    p.add_argument("--cuda-graphs", action="store_true", help="torch on CUDA: time a CUDA-graph replay")
    p.add_argument("--cache-dir", help="tensorrt engine cache directory")
    add_protocol_arguments(p)
    d = MeasureConfig()
    p.add_argument("--max-repeats", type=int, default=d.max_repeats)
    p.add_argument("--stability-threshold", type=float, default=d.stability_threshold, help="largest IQR/median")
    p.add_argument("--min-cpu-share", type=float, default=d.min_cpu_share,
                   help="CPU runtimes: smallest share of CPU time per busy thread while timing (0: no check)")
    p.add_argument("--batch-sizes", default=",".join(map(str, d.throughput_batch_sizes)),
                   help="throughput batch sizes, comma separated (default 1)")
    p.add_argument("--no-slot", action="store_true", help="do not queue for the device's measurement slot")
    p.add_argument("--slot-dir", help="directory of the measurement slot lock files")
    p.add_argument("--breakdown", action="store_true", help="also print the time per block")
    p.add_argument("--breakdown-runs", type=int, default=50, help="profiled runs for --breakdown (default 50)")
    p.add_argument("--json", type=Path, metavar="PATH", help="write the full records to PATH")
    return p


def _measure_options(args: argparse.Namespace) -> dict[str, Any]:
    try:
        batch_sizes = tuple(int(b) for b in args.batch_sizes.split(","))
    except ValueError:
        raise ConfigError(f"--batch-sizes must be integers separated by commas, got {args.batch_sizes!r}") from None
    measure = protocol_from_args(
        args, max_repeats=args.max_repeats, stability_threshold=args.stability_threshold,
        min_cpu_share=args.min_cpu_share, throughput_batch_sizes=batch_sizes,
    )
    opts: dict[str, Any] = {"input_shape": parse_shape(args.input_shape), "measure": measure}
    threads_key = THREADS_OPTION.get(args.backend, "threads")
    given = {
        "precision": args.precision, threads_key: args.threads, "inter_op_threads": args.inter_op_threads,
        "provider": args.provider, "device": args.device, "cache_dir": args.cache_dir, "slot_dir": args.slot_dir,
        "cuda_graphs": True if args.cuda_graphs else None, "slot": False if args.no_slot else None,
    }
    opts.update({k: v for k, v in given.items() if v is not None})
    return opts


def _architectures(args: argparse.Namespace) -> list[Arch]:
    archs = [resolve_arch(a) for a in args.arch]
    if args.space:
        if args.sample < 1:
            raise ConfigError("--space needs --sample N with N >= 1")
        space = load_space(args.space)
        rng = np.random.default_rng(args.seed)
        archs += [space.sample(rng) for _ in range(args.sample)]
    elif args.sample:
        raise ConfigError("--sample needs --space")
    if not archs:
        raise ConfigError("nothing to measure: give ARCH (a string or reference name) or --space NAME --sample N")
    return archs


def _label(arch: str, names: dict[str, str]) -> str:
    return names.get(arch) or (arch if len(arch) <= 40 else arch[:37] + "...")


def latency_table(results: Sequence[LatencyResult], names: dict[str, str] | None = None) -> str:
    """A readable table of results, one row per architecture (times in ms)."""
    names = names or {}
    head = (f"{'architecture':<40} {'p50':>8} {'p90':>8} {'p99':>8} {'mean':>8} {'std':>7} {'cv':>6} "
            f"{'iqr/med':>7} {'stable':>6} {'tries':>5}")
    lines = [head, "-" * len(head)]
    for r in results:
        s = r.stats
        lines.append(
            f"{_label(r.arch, names):<40} {s.p50:>8.3f} {s.p90:>8.3f} {s.p99:>8.3f} {s.mean:>8.3f} {s.std:>7.3f} "
            f"{s.cv:>6.1%} {s.iqr_rel:>7.1%} {'yes' if r.stable else 'NO':>6} {r.attempts:>5}"
        )
    if results:
        r = results[0]
        env = r.environment
        threads = env.get("intra_op_threads") or env.get("torch_threads") or "-"
        lines.append(
            f"{r.backend} on {r.device} ({env.get('device_name', '?')}), {r.precision}, input "
            f"{'x'.join(map(str, r.input_shape))}, threads {threads}; times in ms"
        )
    return "\n".join(lines)


def run_measure(argv: Sequence[str] | None = None) -> int:
    """Parse ``argv``, measure, print, write JSON; returns the exit status.

    Raises:
        LatencyError, SearchSpaceError: expected errors (:func:`measure_main` turns them into one line).
    """
    args = _measure_parser().parse_args(argv)
    if args.backend not in BACKENDS:
        raise ConfigError(f"unknown latency backend {args.backend!r}; known: {sorted(BACKENDS)}")
    opts = _measure_options(args)
    archs = _architectures(args)
    estimator: MeasuredBackend = make_estimator(args.backend, **opts)
    names = {resolve_arch(a).encode(): a for a in args.arch if a != resolve_arch(a).encode()}
    results: list[LatencyResult] = []
    breakdowns: list[Breakdown] = []
    progress = tqdm(archs, desc="measuring", unit="arch", disable=len(archs) < 2, file=sys.stderr)
    for arch in progress:
        results.append(estimator.measure(arch))
        if args.breakdown:
            breakdowns.append(_breakdown(estimator, arch, args.breakdown_runs))
    print(latency_table(results, names))
    for bd in breakdowns:
        print(f"\nper-block time of {_label(bd.arch, names)}:")
        print(bd.format_table())
    if args.json:
        record = {
            "command": ["python", "-m", "latency_predictor.measure", *(sys.argv[1:] if argv is None else argv)],
            "created": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "results": [r.to_dict() for r in results],
            "breakdowns": [b.to_dict() for b in breakdowns],
        }
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(record, indent=2) + "\n")
        print(f"wrote {args.json}")
    return 0


def _breakdown(estimator: MeasuredBackend, arch: Arch, runs: int) -> Breakdown:
    if not estimator.has_breakdown:
        supported = sorted(n for n, cls in BACKENDS.items() if cls.has_breakdown)
        raise ConfigError(f"--breakdown is available with the {supported} backends, not {estimator.name!r}")
    return estimator.breakdown(arch, runs=runs)


def measure_main(argv: Sequence[str] | None = None) -> int:
    """``python -m latency_predictor.measure``: expected errors become one line on stderr and status 2."""
    try:
        return run_measure(argv)
    except (LatencyError, SearchSpaceError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2


# ---------------------------------------------------------------------- python -m latency_predictor.collect

def _collect_parser() -> argparse.ArgumentParser:
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


def collect_options(args: argparse.Namespace) -> dict[str, Any]:
    """The measuring backend's options from parsed arguments (with ``--backend remote``: the agents' backend's)."""
    measure = protocol_from_args(args)
    raised = protocol_for(args.statistic, {"min_runs": measure.min_runs, "max_time_s": measure.max_time_s})
    measure = dataclasses.replace(measure, **raised)
    backend = args.agent_backend if args.backend == "remote" else args.backend
    threads_key = THREADS_OPTION.get(backend)
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
    opts = collect_options(args)
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


def collect_main(argv: Sequence[str] | None = None) -> int:
    """``python -m latency_predictor.collect``; returns the exit status (2 on expected errors)."""
    try:
        raw = key_value_args(sys.argv[1:] if argv is None else argv, ["no_progress"])
        args = _collect_parser().parse_args(raw)
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


# ---------------------------------------------------------------------- python -m latency_predictor.train

def _train_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m latency_predictor.train",
        description="Fit a latency predictor on a dataset; report accuracy on held-out architectures.",
        epilog="Options may also be given as key=value (data=DIR out=FILE test_fraction=0.2).",
    )
    p.add_argument("--data", required=True, help="dataset folder written by latency_predictor.collect")
    p.add_argument("--out", required=True, help="predictor file to write (JSON)")
    p.add_argument("--test-fraction", type=float, help="held-out share (default 0.2)")
    p.add_argument("--seed", type=int, default=0, help="split and bootstrap seed (default 0)")
    p.add_argument("--members", type=int, default=16, help="bootstrap ensemble size (default 16)")
    p.add_argument("--statistic", choices=TARGET_STATS,
                   help="the latency statistic the predictor learns: p50 (default), or p90/p95/p99 for a target "
                        "on the tail (records need 100/200/1000 timed runs: collect with --statistic); "
                        "with --adapt-from: the other predictor's")
    p.add_argument("--include-disturbed", action="store_true",
                   help="also use architectures whose every measurement was disturbed")
    p.add_argument("--combine", choices=COMBINE, default="median",
                   help="an architecture's latency from its records: their median, or min, the fastest session's "
                        "(for a dataset that measured every architecture twice on a shared host: collect n=0 "
                        "repeats=N) (default median)")
    p.add_argument("--json", nargs="?", const="-", metavar="PATH",
                   help="write the report as JSON to PATH (or stdout when no PATH is given)")
    few = p.add_argument_group(
        "a predictor for a new device from a few measurements",
        "start from another device's predictor and refit its per-group scales on --data (the new device)",
    )
    few.add_argument("--adapt-from", metavar="PREDICTOR", nargs="+",
                     help="the other device's predictor file; several (other devices'): each is adapted and the "
                          "predictor is their mix, weighted by leave-one-out error (the first is the one the report "
                          "compares with)")
    few.add_argument("--shots", type=int,
                     help="adapt with the first N usable architectures of --data (default: all of them)")
    few.add_argument("--test-data", metavar="DIR",
                     help="held-out measurements of the new device (default: those of --data after the first N)")
    few.add_argument("--full", metavar="PREDICTOR",
                     help="a predictor trained on many measurements of the new device, to compare against")
    few.add_argument("--padding", action="store_true",
                     help="also fit how the new device pays for the kernel taps that fall on the zero padding (for "
                          "another runtime: LiteRT computes them, ONNX Runtime's CPU kernels skip them); three "
                          "variants of the source adapted and mixed by leave-one-out error, three times the fitting")
    return p


def _adapt(args: argparse.Namespace) -> tuple[PredictorEstimator, TransferReport]:
    if args.test_fraction is not None:
        raise ConfigError("--test-fraction does not apply with --adapt-from: the held-out architectures are "
                          "those after the first --shots (or --test-data)")
    source, *others = (read_predictor(path) for path in args.adapt_from)
    test = Dataset.open(args.test_data) if args.test_data else None
    full = read_predictor(args.full) if args.full else None
    return adapt_predictor(source, Dataset.open(args.data), args.shots, test, full, args.members, args.seed,
                           args.include_disturbed, args.statistic, others, args.padding, args.combine)


def train_main(argv: Sequence[str] | None = None) -> int:
    """``python -m latency_predictor.train``; returns the exit status (2 on expected errors)."""
    args = _train_parser().parse_args(key_value_args(sys.argv[1:] if argv is None else argv, ["include_disturbed"]))
    report: TrainReport | TransferReport
    try:
        if args.adapt_from:
            predictor, report = _adapt(args)
        elif args.shots is not None or args.test_data or args.full or args.padding:
            raise ConfigError("--shots, --test-data, --full and --padding go with --adapt-from PREDICTOR")
        else:
            fraction = 0.2 if args.test_fraction is None else args.test_fraction
            predictor, report = train_predictor(Dataset.open(args.data), fraction, args.seed, args.members,
                                                args.include_disturbed, args.statistic or "p50", args.combine)
        path = predictor.save(args.out)
    except LatencyError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if args.json == "-" and isinstance(report, TrainReport) and report.warning:
        print(f"warning: {report.warning}", file=sys.stderr)  # the table, which carries it, is not printed
    if args.json == "-":
        print(json.dumps(report.to_dict(), indent=1))
    else:
        print(report.table())
        print(f"predictor written to {path}")
        if args.json:
            Path(args.json).write_text(json.dumps(report.to_dict(), indent=1) + "\n")
    return 0
