"""Benchmarks of the latency measurement itself: repeatability, overhead, agreement, GPU modes.

Usage::

    python -m benchmarks.latency.latency [--arch mobilenetv2_100] [--processes 5]
        [--out benchmarks/latency/records/latency.json]

Sections (figures are printed, and written with the machine, versions, date and command to --out):

* repeatability: the same network measured by the CLI in N separate processes, one after the
  other, with default settings (ONNX Runtime, CPU, 1 thread); max/min of their p50s.
* overhead: network build, ONNX export and session creation against the measurement itself.
* agreement: ONNX Runtime CPU against eager PyTorch CPU, one thread each, on the reference networks.
* gpu: torch CUDA eager against CUDA graphs, only where a CUDA device exists (else recorded as skipped).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch

from benchmarks.common import ROOT, Headline, header, record_path, write_record
from latency_predictor.measurement.backends import make_estimator
from search_spaces import REFERENCES, resolve_arch


def repeatability(arch: str, processes: int, input_shape: str) -> dict[str, Any]:
    """p50 of ``arch`` measured by the CLI in ``processes`` fresh processes, one after the other."""
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(processes):
            out = Path(tmp) / f"{i}.json"
            cmd = [sys.executable, "-m", "latency_predictor.measure", arch, "--input-shape", input_shape,
                   "--json", str(out)]
            subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True, text=True)
            r = json.loads(out.read_text())["results"][0]
            runs.append({"p50_ms": r["stats"]["p50"], "min_ms": r["stats"]["min"], "cv": r["stats"]["cv"],
                         "iqr_rel": r["stats"]["iqr_rel"], "stable": r["stable"], "attempts": r["attempts"],
                         "cpu_per_wall": r["extra"]["cpu_per_wall"], "slot_wait_s": r["extra"]["slot_wait_s"]})
            print(f"  process {i + 1}: p50 {r['stats']['p50']:.3f} ms, min {r['stats']['min']:.3f} ms, iqr/median "
                  f"{r['stats']['iqr_rel']:.1%}, cpu/wall {r['extra']['cpu_per_wall']:.2f}, attempts "
                  f"{r['attempts']}, stable {r['stable']}", flush=True)
    p50s = [r["p50_ms"] for r in runs]
    mins = [r["min_ms"] for r in runs]
    stable = [r["p50_ms"] for r in runs if r["stable"]]
    figures = {
        "max_over_min_p50": max(p50s) / min(p50s),
        "max_over_min_p50_stable_only": max(stable) / min(stable) if len(stable) > 1 else None,
        "stable_processes": len(stable),
        "max_over_min_min": max(mins) / min(mins),
    }
    print(f"  max/min of p50 over {processes} processes: {figures['max_over_min_p50']:.3f} (target <= 1.10)")
    if figures["max_over_min_p50_stable_only"] is not None:
        print(f"  the same over the {len(stable)} stable ones: {figures['max_over_min_p50_stable_only']:.3f}")
    print(f"  max/min of the fastest run (min): {figures['max_over_min_min']:.3f}")
    return {"arch": arch, "input_shape": input_shape, "processes": runs, **figures}


def overhead(arch: str, repeats: int = 2) -> dict[str, Any]:
    """Preparation (build, export, session) against measurement time, first call and warm calls."""
    est = make_estimator("onnxruntime")
    rows = []
    for i in range(repeats):
        r = est.measure(resolve_arch(arch))
        e = r.extra
        setup = e["build_s"] + e["export_s"] + e["session_s"]
        rows.append({"build_s": e["build_s"], "export_s": e["export_s"], "session_s": e["session_s"],
                     "measure_s": e["measure_s"], "setup_over_measure": setup / e["measure_s"]})
        label = "first in process" if i == 0 else "warm"
        print(f"  {label:>16}: build {e['build_s']:.3f} s, export {e['export_s']:.3f} s, session "
              f"{e['session_s']:.3f} s; measurement {e['measure_s']:.3f} s "
              f"(setup/measure {setup / e['measure_s']:.2f})")
    return {"arch": arch, "calls": rows}


def agreement(archs: list[str]) -> dict[str, Any]:
    """p50 of ONNX Runtime CPU and eager torch CPU (1 thread each) on the same networks."""
    ort_est, torch_est = make_estimator("onnxruntime"), make_estimator("torch")
    rows = []
    for name in archs:
        arch = resolve_arch(name)
        o, t = ort_est.measure(arch), torch_est.measure(arch)
        rows.append({"arch": name, "onnxruntime_p50_ms": o.latency_ms, "torch_p50_ms": t.latency_ms,
                     "torch_over_onnxruntime": t.latency_ms / o.latency_ms, "stable": o.stable and t.stable})
        print(f"  {name:<18} onnxruntime {o.latency_ms:8.3f} ms   torch {t.latency_ms:8.3f} ms   "
              f"torch/onnxruntime {t.latency_ms / o.latency_ms:.2f}")
    return {"rows": rows}


def gpu(arch: str) -> dict[str, Any]:
    """torch CUDA eager against CUDA graphs (fp32 and fp16), where a CUDA device exists."""
    if not torch.cuda.is_available():
        print("  skipped: no CUDA device on this machine")
        return {"skipped": "no CUDA device"}
    rows = []
    for precision in ("fp32", "fp16"):
        eager = make_estimator("torch", device="cuda:0", precision=precision).measure(resolve_arch(arch))
        graphs = make_estimator("torch", device="cuda:0", precision=precision, cuda_graphs=True).measure(
            resolve_arch(arch))
        rows.append({"precision": precision, "eager_p50_ms": eager.latency_ms, "graphs_p50_ms": graphs.latency_ms,
                     "eager_over_graphs": eager.latency_ms / graphs.latency_ms,
                     "stable": eager.stable and graphs.stable})
        print(f"  {precision}: eager {eager.latency_ms:.3f} ms, CUDA graphs {graphs.latency_ms:.3f} ms, "
              f"eager/graphs {eager.latency_ms / graphs.latency_ms:.2f}")
    return {"arch": arch, "device_name": torch.cuda.get_device_name(0), "rows": rows}


REPEATABILITY_GOAL = 1.10
"""The goal for max/min of the p50s of the same network measured in separate processes."""


def headline(rec: dict[str, Any]) -> Headline:
    """The record's row of the results table: repeatability across processes."""
    r = rec["repeatability"]
    ratio = r["max_over_min_p50"]
    return Headline(
        "Latency measurement: repeatability",
        f"max/min p50 over {len(r['processes'])} fresh processes: {ratio:.3f} ({r['arch']}, ONNX Runtime CPU, "
        "1 thread)",
        "the same network measured again in separate processes, one after the other",
        f"<= {REPEATABILITY_GOAL:.2f}", ratio <= REPEATABILITY_GOAL)


def render(rec: dict[str, Any]) -> str:
    """The section of a record of this benchmark on its area's page (docs/benchmarks/<area>.md)."""
    from benchmarks.render import _f, _pct, table
    r, o, a = rec["repeatability"], rec["overhead"], rec["agreement"]
    procs = r["processes"]
    rows = [[str(i + 1), _f(p["p50_ms"]), _f(p["min_ms"]), _pct(p["iqr_rel"]), _f(p["cpu_per_wall"]),
             str(p["attempts"]), _f(p["stable"])] for i, p in enumerate(procs)]
    rep = table(["process", "p50 ms", "min ms", "IQR/median", "CPU share", "attempts", "stable"], rows)
    ov = table(["call", "build s", "ONNX export s", "session s", "measurement s", "setup / measurement"],
               [["first in the process" if i == 0 else "next", _f(c["build_s"]), _f(c["export_s"]),
                 _f(c["session_s"]), _f(c["measure_s"]), _f(c["setup_over_measure"])]
                for i, c in enumerate(o["calls"])])
    ag = table(["network", "ONNX Runtime p50 ms", "torch p50 ms", "torch / ONNX Runtime"],
               [[x["arch"], _f(x["onnxruntime_p50_ms"]), _f(x["torch_p50_ms"]), _f(x["torch_over_onnxruntime"])]
                for x in a["rows"]])
    gpu = rec.get("gpu", {})
    gpu_s = (f"**GPU**: skipped ({gpu['skipped']})." if "skipped" in gpu else
             "**GPU** (torch CUDA eager against CUDA graphs):\n\n" + table(
                 ["precision", "eager p50 ms", "graphs p50 ms", "eager / graphs"],
                 [[x["precision"], _f(x["eager_p50_ms"]), _f(x["graphs_p50_ms"]), _f(x["eager_over_graphs"])]
                  for x in gpu.get("rows", [])]))
    stable = r.get("max_over_min_p50_stable_only")
    return f"""The measurement protocol's own quality: the same network (`{r['arch']}`, {r['input_shape']}, ONNX Runtime
CPU, one thread) measured by `python -m latency_predictor.measure` in {len(procs)} fresh processes one after
the other; what preparing a measurement costs against the measurement itself; and how ONNX Runtime and
eager PyTorch disagree on the same networks. On a shared machine, processes that did not get the CPU
(CPU share under 0.9) are flagged unstable and repeated; read the figures with the load in mind.

**Repeatability**: max/min of p50 over all processes **{_f(r['max_over_min_p50'], 3)}**; over the
{r['stable_processes']} stable ones {_f(stable, 3)}; max/min of the fastest run (min) {_f(r['max_over_min_min'], 3)}.

{rep}

**Overhead** ({o['arch']}, in one process):

{ov}

**Agreement** (both one thread, same network). They should not be expected to agree: ONNX Runtime folds
BatchNorm, fuses activations and runs blocked-layout kernels; eager PyTorch runs every module. Compare
candidates on one backend, the one you deploy with.

{ag}

{gpu_s}"""


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--arch", default="mobilenetv2_100", help="network of the repeatability/overhead/GPU sections")
    p.add_argument("--processes", type=int, default=5)
    p.add_argument("--input-shape", default="1x3x224x224")
    p.add_argument("--out", type=Path, default=record_path("latency", "full"))
    args = p.parse_args()
    load_before = os.getloadavg()
    record: dict[str, Any] = {
        **header("latency", "full", ["python", "-m", "benchmarks.latency.latency", *sys.argv[1:]]),
    }
    print(f"repeatability ({args.arch}, {args.processes} processes):", flush=True)
    record["repeatability"] = repeatability(args.arch, args.processes, args.input_shape)
    print(f"overhead ({args.arch}, onnxruntime CPU):", flush=True)
    record["overhead"] = overhead(args.arch)
    print("agreement (CPU, 1 thread):", flush=True)
    record["agreement"] = agreement(sorted(REFERENCES))
    print("gpu (torch CUDA eager vs CUDA graphs):", flush=True)
    record["gpu"] = gpu(args.arch)
    record["load_average_before_after"] = [list(load_before), list(os.getloadavg())]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_record(args.out, record)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
