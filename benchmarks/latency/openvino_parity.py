"""``latency=openvino`` against OpenVINO's own ``benchmark_app``: the same ONNX file, the same settings.

Usage::

    python -m benchmarks.latency.openvino_parity [--networks mobilenetv2_100,...] [--rounds 3] [--seconds 5]
        [--input-shape 1x3x224x224] [--threads 1] [--out benchmarks/latency/records/openvino_parity.json]

For each network (built with fixed weights, exported once to ONNX), rounds alternate between

* LatNAS: :class:`~latency_predictor.measurement.backends.OpenVinoBackend` measuring the network
  with its protocol (``PERFORMANCE_HINT=LATENCY``, one stream, ``--threads`` threads, f32); its p50;
* ``benchmark_app`` (the console script of the ``openvino`` wheel) on the same ONNX file:
  ``-d CPU -hint latency -load_config <config> -t <seconds>``, the config setting
  ``INFERENCE_NUM_THREADS=N``, ``NUM_STREAMS=1`` and ``INFERENCE_PRECISION_HINT=f32``; the median
  of its "Latency" block. benchmark_app refuses ``-nthreads`` beside ``-hint latency`` (a rule of
  its command line), so the thread count goes through ``-load_config``, and the properties it
  prints for the compiled model are checked. f32 because the plugin would otherwise run the fp32
  network in bf16 on a CPU with bf16 instructions, as LatNAS never does at fp32.

so that load drifting on a shared host moves both alike. Each round's ratio is LatNAS's p50 over
benchmark_app's median; a network agrees when the median of its rounds' ratios is within 5% of 1.
The record holds every round, the load average before and after, and the commands.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch

from benchmarks.common import Headline, header, machine_and_load, write_record
from latency_predictor.measurement.backends import make_estimator
from latency_predictor.measurement.export import build_eval_net, export_onnx, parse_shape
from search_spaces import resolve_arch

NETWORKS = ("mobilenetv2_100", "mnasnet_b1", "efficientnet_b0", "mobilenetv2_100@0.5", "mnasnet_b1@0.5")
TOLERANCE = 0.05
MEDIAN = re.compile(r"Median:\s+([0-9.]+)\s*ms")


def benchmark_app_p50(onnx_path: Path, threads: int, seconds: float) -> tuple[float, list[str]]:
    """``benchmark_app``'s median latency (ms) of ``onnx_path``, and the command that gave it.

    Raises:
        RuntimeError: benchmark_app is not installed, failed, printed no median, or compiled the
            model with other settings than asked.
    """
    exe = shutil.which("benchmark_app")
    if exe is None:
        raise RuntimeError("benchmark_app not found: it comes with the openvino wheel (pip install 'latnas[openvino]')")
    config = onnx_path.with_name("benchmark_app.json")
    config.write_text(json.dumps({"CPU": {"INFERENCE_NUM_THREADS": str(threads), "NUM_STREAMS": "1",
                                          "INFERENCE_PRECISION_HINT": "f32"}}))
    cmd = [exe, "-m", str(onnx_path), "-d", "CPU", "-hint", "latency", "-load_config", str(config),
           "-t", f"{seconds:g}"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    found = MEDIAN.search(proc.stdout)
    if proc.returncode != 0 or found is None:
        raise RuntimeError(f"benchmark_app failed (exit {proc.returncode}):\n{(proc.stdout + proc.stderr)[-2000:]}")
    for prop in (f"INFERENCE_NUM_THREADS: {threads}", "NUM_STREAMS: 1", "PERFORMANCE_HINT: LATENCY", "float32"):
        if prop not in proc.stdout:
            raise RuntimeError(f"benchmark_app's compiled model does not show {prop!r}:\n{proc.stdout[-2000:]}")
    shown = ["benchmark_app", "-m", "<network>.onnx", *cmd[3:8], "<config>", *cmd[9:]]
    return float(found.group(1)), shown


def run(networks: list[str], rounds: int, seconds: float, input_shape: tuple[int, ...], threads: int) -> dict[str, Any]:
    """Time each of ``networks`` with LatNAS and with benchmark_app in ``rounds`` alternating rounds."""
    measure = {"min_time_s": seconds, "max_time_s": 2 * seconds, "min_runs": 100, "warmup_s": 0.5}
    est = make_estimator("openvino", input_shape=input_shape, intra_op_threads=threads, measure=measure)
    load_before = machine_and_load()["load_average"]
    rows = []
    app_command: list[str] = []
    with tempfile.TemporaryDirectory(prefix="latnas-openvino-parity-") as tmp:
        for name in networks:
            arch = resolve_arch(name)
            torch.manual_seed(0)
            net = build_eval_net(arch, in_chans=input_shape[1])
            onnx_path = Path(tmp) / "network.onnx"
            onnx_path.write_bytes(export_onnx(net, input_shape))
            latnas, app = [], []
            for _ in range(rounds):
                latnas.append(est.measure(arch, net=net).stats.p50)
                p50, app_command = benchmark_app_p50(onnx_path, threads, seconds)
                app.append(p50)
            ratios = [a / b for a, b in zip(latnas, app, strict=True)]
            ratio = statistics.median(ratios)
            rows.append({"network": name, "latnas_p50_ms": latnas, "benchmark_app_median_ms": app,
                         "ratios": ratios, "median_ratio": ratio, "within_5pct": abs(ratio - 1) <= TOLERANCE})
            print(f"  {name}: LatNAS p50 {statistics.median(latnas):.3f} ms, benchmark_app median "
                  f"{statistics.median(app):.3f} ms, ratio {ratio:.3f} (rounds: "
                  f"{', '.join(f'{r:.3f}' for r in ratios)})", flush=True)
    load_after = machine_and_load()["load_average"]
    agree = sum(bool(r["within_5pct"]) for r in rows)
    print(f"  {agree} of {len(rows)} networks within 5%; load average {load_before} before, {load_after} after")
    return {
        "input_shape": list(input_shape), "threads": threads, "rounds": rounds, "seconds_per_run": seconds,
        "benchmark_app_command": " ".join(app_command),
        "benchmark_app_config": {"INFERENCE_NUM_THREADS": str(threads), "NUM_STREAMS": "1",
                                 "INFERENCE_PRECISION_HINT": "f32"},
        "latnas_settings": est.environment(),
        "networks": rows, "within_5pct": agree, "load_average_before": load_before,
        "load_average_after": load_after,
    }


def headline(rec: dict[str, Any]) -> Headline:
    """The record's row of the results table: networks within 5% of benchmark_app."""
    f = rec["figures"]
    n, agree = len(f["networks"]), f["within_5pct"]
    ratios = [r["median_ratio"] for r in f["networks"]]
    return Headline(
        "Latency agreement with a vendor's tool (OpenVINO)",
        f"{agree} of {n} networks within {TOLERANCE:.0%} (LatNAS / benchmark_app p50 {min(ratios):.3f}-"
        f"{max(ratios):.3f})",
        "OpenVINO's own benchmark_app on the same ONNX files, alternating rounds",
        f"every network within {TOLERANCE:.0%}", agree == n)


def render(rec: dict[str, Any]) -> str:
    """The record's section on its area's page (docs/benchmarks/<area>.md): one row per network."""
    f = rec["figures"]
    lines = [f"LatNAS's `latency=openvino` against OpenVINO's `benchmark_app` on the same ONNX file, "
             f"{'x'.join(map(str, f['input_shape']))}, {f['threads']} thread(s), {f['rounds']} alternating rounds "
             f"(`{f['benchmark_app_command']}`, the config setting {f['threads']} thread(s), one stream, f32); "
             f"load average {f['load_average_before']} before, "
             f"{f['load_average_after']} after. {f['within_5pct']} of {len(f['networks'])} networks agree within 5%.",
             "", "| network | LatNAS p50 ms | benchmark_app median ms | ratio (median of rounds) | rounds' ratios |",
             "|---|---|---|---|---|"]
    for r in f["networks"]:
        lines.append(f"| {r['network']} | {statistics.median(r['latnas_p50_ms']):.3f} | "
                     f"{statistics.median(r['benchmark_app_median_ms']):.3f} | {r['median_ratio']:.3f} | "
                     f"{', '.join(f'{x:.3f}' for x in r['ratios'])} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--networks", default=",".join(NETWORKS), help="reference networks, [@width]")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--seconds", type=float, default=5.0, help="each timing's length, for both tools")
    p.add_argument("--input-shape", default="1x3x224x224")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--out", type=Path, default=Path("benchmarks/latency/records/openvino_parity.json"))
    argv = sys.argv[1:] if argv is None else argv
    args = p.parse_args(argv)
    mode = "quick" if "quick" in args.out.parts else "full"
    record = header("openvino_parity", mode, ["python", "-m", "benchmarks.latency.openvino_parity", *argv],
                    extra_versions=("openvino",))
    figures = run([n for n in args.networks.split(",") if n], args.rounds, args.seconds,
                  parse_shape(args.input_shape), args.threads)
    record["figures"] = figures
    print(f"wrote {write_record(args.out, record)}")


if __name__ == "__main__":
    main()
