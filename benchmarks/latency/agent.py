"""Benchmark of the measurement agent's overhead: the same networks timed here and through an agent.

Usage::

    python -m benchmarks.latency.agent [--rounds 5] [--sampled 5] [--out benchmarks/latency/records/agent.json]

An agent (``python -m latency_predictor.agent``) is started on 127.0.0.1 with a fresh token. Each
network (the three reference networks and ``--sampled`` architectures of the ``mobile`` space) is
measured ``--rounds`` times locally, in this process, and through the agent, with the same backend
(ONNX Runtime on the CPU, one thread, 1x3x224x224) and protocol; the two alternate, and which
goes first alternates by round, so a drift of the machine's load hits both alike. Both queue for
the same measurement slot, so they never overlap.

Figures:

* the ratio of the p50 measured through the agent to the p50 measured here, per network (median
  over the rounds of the ratio within a round) and over all networks; goal: <= 1.02 (the agent
  times the network exactly as a local measurement does, so only noise should separate them);
* the round-trip cost per candidate: the client's wall time for the request minus the time the
  agent spent on it (HTTP, JSON, queueing in the server), and the client's wall time for a
  candidate against a local measurement's (build, export, session and timing included).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
import secrets
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.common import header, spread, write_record
from latency_predictor.agent.client import RemoteEstimator
from latency_predictor.measurement.backends import make_estimator
from latency_predictor.measurement.export import parse_shape
from latency_predictor.measurement.timing import MeasureConfig
from search_spaces import REFERENCES, Arch, load_space, resolve_arch

GOAL_P50_RATIO = 1.02
SHAPE = (1, 3, 224, 224)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=5, help="measurements per network and side (default 5)")
    p.add_argument("--sampled", type=int, default=5, help="mobile architectures besides the references (default 5)")
    p.add_argument("--references", default=",".join(REFERENCES),
                   help=f"reference networks, comma separated (default {','.join(REFERENCES)}; '' for none)")
    p.add_argument("--input-shape", default="1x3x224x224", help="N,C,H,W or NxCxHxW (default 1x3x224x224)")
    p.add_argument("--min-runs", type=int, default=100, help="timed runs per measurement (default 100)")
    p.add_argument("--min-time-s", type=float, default=1.0, help="least timed seconds per measurement (default 1)")
    p.add_argument("--seed", type=int, default=0, help="seed of the sampled architectures (default 0)")
    p.add_argument("--out", type=Path, default=Path("benchmarks/latency/records/agent.json"),
                   help="JSON record to write")
    return p


def start_agent(token: str, slot_dir: str | None) -> tuple[subprocess.Popen[str], str]:
    """An agent on 127.0.0.1 and a free port; returns once it serves."""
    env = {**os.environ, "LATNAS_AGENT_TOKEN": token}
    cmd = [sys.executable, "-m", "latency_predictor.agent", "--port", "0", "--log-level", "warning"]
    if slot_dir is not None:
        cmd += ["--slot-dir", slot_dir]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env,
                            start_new_session=True)
    line = proc.stdout.readline() if proc.stdout is not None else ""
    match = re.search(r"listening on (http://\S+)", line)
    if match is None:
        proc.kill()
        raise RuntimeError(f"the agent did not start: {line!r}")
    return proc, match.group(1)


def run(archs: dict[str, Arch], rounds: int, shape: tuple[int, ...], measure: MeasureConfig,
        slot_dir: str | None = None) -> dict[str, Any]:
    """Time every network ``rounds`` times here and through a fresh agent; the figures."""
    token = secrets.token_urlsafe(24)
    proc, url = start_agent(token, slot_dir)
    try:
        local = make_estimator("onnxruntime", input_shape=shape, intra_op_threads=1, measure=measure,
                               slot_dir=slot_dir)
        remote = RemoteEstimator([url], token=token, backend="onnxruntime", backend_options={"intra_op_threads": 1},
                                 input_shape=shape, measure=dataclasses.asdict(measure))
        remote.environment()  # the agent's backend is built once before anything is timed
        rows = []
        for name, arch in archs.items():
            here: list[dict[str, float]] = []
            there: list[dict[str, float]] = []
            for k in range(rounds):
                sides = ("local", "agent") if k % 2 == 0 else ("agent", "local")
                for side in sides:
                    t0 = time.perf_counter()
                    r = (local if side == "local" else remote).measure(arch)
                    wall = time.perf_counter() - t0
                    entry = {"p50_ms": r.stats.p50, "wall_s": wall, "stable": float(r.stable)}
                    if side == "agent":
                        entry.update(agent_s=r.extra["agent_s"], round_trip_s=r.extra["round_trip_s"],
                                     transport_s=r.extra["round_trip_s"] - r.extra["agent_s"])
                        there.append(entry)
                    else:
                        here.append(entry)
            ratios = [b["p50_ms"] / a["p50_ms"] for a, b in zip(here, there, strict=True)]
            row: dict[str, Any] = {
                "network": name, "arch": arch.encode(), "local_p50_ms": float(np.median([a["p50_ms"] for a in here])),
                "agent_p50_ms": float(np.median([b["p50_ms"] for b in there])), "p50_ratio": float(np.median(ratios)),
                "ratios": ratios, "transport_s": spread([b["transport_s"] for b in there]),
                "local_wall_s": float(np.median([a["wall_s"] for a in here])),
                "agent_wall_s": float(np.median([b["wall_s"] for b in there])),
                "unstable": int(sum(1 - e["stable"] for e in here + there)),
            }
            print(f"  {name:<18} here {row['local_p50_ms']:8.3f} ms, through the agent {row['agent_p50_ms']:8.3f} ms, "
                  f"ratio {row['p50_ratio']:.4f}; transport {row['transport_s']['median'] * 1e3:.1f} ms per "
                  f"candidate; wall {row['local_wall_s']:.2f} s here, {row['agent_wall_s']:.2f} s through the agent",
                  flush=True)
            rows.append(row)
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    ratio = float(np.median([r["p50_ratio"] for r in rows]))
    return {
        "rows": rows, "p50_ratio_median": ratio,
        "p50_ratio_range": [min(r["p50_ratio"] for r in rows), max(r["p50_ratio"] for r in rows)],
        "transport_s_median": float(np.median([r["transport_s"]["median"] for r in rows])),
        "wall_ratio_median": float(np.median([r["agent_wall_s"] / r["local_wall_s"] for r in rows])),
        "goal_p50_ratio": GOAL_P50_RATIO, "met": ratio <= GOAL_P50_RATIO,
    }


def render(rec: dict[str, Any]) -> str:
    """The section of a record of this benchmark on its area's page (docs/benchmarks/<area>.md)."""
    from benchmarks.render import _f, table
    f, st = rec["figures"], rec["settings"]
    rows = [[r["network"], _f(r["local_p50_ms"], 3), _f(r["agent_p50_ms"], 3), _f(r["p50_ratio"], 4),
             f"{_f(r['transport_s']['median'] * 1e3, 1)} ms", f"{_f(r['local_wall_s'])} / {_f(r['agent_wall_s'])}"]
            for r in f["rows"]]
    shape = "x".join(map(str, st["input_shape"]))
    return f"""The same networks timed here and through a measurement agent on 127.0.0.1
(`python -m latency_predictor.agent`; ONNX Runtime on the CPU, one thread, {shape}), {st['rounds']} times each,
alternating which goes first. The ratio is the p50 through the agent over the p50 here (median over the
rounds); the transport is the client's wall time for a request minus the agent's own time for it (HTTP,
JSON, the server); the wall times are a whole candidate (build, export, session, timing) here and through the agent.

{table(['network', 'p50 here ms', 'p50 agent ms', 'ratio', 'transport', 'wall s here / agent'], rows)}

p50 ratio, median over the networks: **{_f(f['p50_ratio_median'], 4)}** (range {_f(f['p50_ratio_range'][0], 4)} -
{_f(f['p50_ratio_range'][1], 4)}; goal <= {f['goal_p50_ratio']}: {'met' if f['met'] else 'missed'}); transport
{_f(f['transport_s_median'] * 1e3, 1)} ms per candidate; a candidate's wall time through the agent over here:
{_f(f['wall_ratio_median'], 3)}."""


def main() -> int:
    """Run the benchmark; returns 0 (a goal missed is reported, not turned into a failure)."""
    args = _parser().parse_args()
    shape = parse_shape(args.input_shape)
    archs = {name: resolve_arch(name) for name in args.references.split(",") if name}
    rng = np.random.default_rng(args.seed)
    space = load_space("mobile")
    for i in range(args.sampled):
        archs[f"mobile sample {i + 1}"] = space.sample(rng)
    measure = MeasureConfig(warmup_runs=10, warmup_s=0.2, min_runs=args.min_runs, min_time_s=args.min_time_s,
                            max_time_s=max(10.0, args.min_time_s))
    load_before = os.getloadavg()
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="latnas-agent-bench-") as slots:
        figures = run(archs, args.rounds, shape, measure, slot_dir=slots)
    wall = time.perf_counter() - t0
    print(f"p50 through the agent / here: median {figures['p50_ratio_median']:.4f} over {len(archs)} networks "
          f"(range {figures['p50_ratio_range'][0]:.4f}-{figures['p50_ratio_range'][1]:.4f}); goal <= "
          f"{GOAL_P50_RATIO}: {'met' if figures['met'] else 'MISSED'}; transport "
          f"{figures['transport_s_median'] * 1e3:.1f} ms per candidate; {wall:.0f} s in all")
    record = {
        **header("agent", "full", ["python", "-m", "benchmarks.latency.agent", *sys.argv[1:]], ("fastapi", "uvicorn")),
        "settings": {"input_shape": list(shape), "backend": "onnxruntime", "intra_op_threads": 1,
                     "rounds": args.rounds, "measure": dataclasses.asdict(measure)},
        "load_average_before": load_before[0], "load_average_after": os.getloadavg()[0], "wall_seconds": wall,
        "figures": figures,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_record(args.out, record)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
