"""Measure architectures from the command line and print a table.

Usage::

    python -m latency_predictor.measure mobilenetv2_100
    python -m latency_predictor.measure 'act_relu-stem_c16-mb_k3_e4_c24_s2-head_c256' --backend torch
    python -m latency_predictor.measure --space mobile --sample 5 --json results.json
    python -m latency_predictor.measure efficientnet_b0 --breakdown

ARCH is a canonical architecture string or a reference name (``mobilenetv2_100``,
``efficientnet_b0``, ``mnasnet_b1``). Options a backend does not take are refused with the list
of those it does. Expected errors (bad options, unavailable devices, malformed architectures)
print one line and exit with status 2.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from latency_predictor.cliargs import add_protocol_arguments, protocol_from_args
from latency_predictor.errors import ConfigError, LatencyError
from latency_predictor.measurement.backends import BACKENDS, DEFAULT_BACKEND, MeasuredBackend, make_estimator
from latency_predictor.measurement.breakdown import Breakdown
from latency_predictor.measurement.export import DEFAULT_INPUT_SHAPE, parse_shape
from latency_predictor.measurement.protocol import LatencyResult
from latency_predictor.measurement.timing import MeasureConfig
from search_spaces import Arch, SearchSpaceError, load_space, resolve_arch


def _parser() -> argparse.ArgumentParser:
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


def _backend_options(args: argparse.Namespace) -> dict[str, Any]:
    try:
        batch_sizes = tuple(int(b) for b in args.batch_sizes.split(","))
    except ValueError:
        raise ConfigError(f"--batch-sizes must be integers separated by commas, got {args.batch_sizes!r}") from None
    measure = protocol_from_args(
        args, max_repeats=args.max_repeats, stability_threshold=args.stability_threshold,
        min_cpu_share=args.min_cpu_share, throughput_batch_sizes=batch_sizes,
    )
    opts: dict[str, Any] = {"input_shape": parse_shape(args.input_shape), "measure": measure}
    threads_key = {"onnxruntime": "intra_op_threads", "torch": "threads"}.get(args.backend, "threads")
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


def format_table(results: Sequence[LatencyResult], names: dict[str, str] | None = None) -> str:
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


def run(argv: Sequence[str] | None = None) -> int:
    """Parse ``argv``, measure, print, write JSON; returns the exit status.

    Raises:
        LatencyError, SearchSpaceError: expected errors (:func:`main` turns them into one line).
    """
    args = _parser().parse_args(argv)
    if args.backend not in BACKENDS:
        raise ConfigError(f"unknown latency backend {args.backend!r}; known: {sorted(BACKENDS)}")
    opts = _backend_options(args)
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
    print(format_table(results, names))
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
    method = getattr(estimator, "breakdown", None)
    if method is None:
        supported = sorted(n for n, cls in BACKENDS.items() if hasattr(cls, "breakdown"))
        raise ConfigError(f"--breakdown is available with the {supported} backends, not {estimator.name!r}")
    result: Breakdown = method(arch, runs=runs)
    return result


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point: expected errors become one line on stderr and status 2."""
    try:
        return run(argv)
    except (LatencyError, SearchSpaceError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
