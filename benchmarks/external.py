"""The benchmark scripts of the other parts (latency measurement, predictor, few-shot transfer,
measurement agent, search overhead, and contention or reliability where those scripts exist), run
as subprocesses.

Each script writes its own JSON record; in quick mode it runs with smaller settings and writes
under its area's ``records/quick/``, so a quick run never replaces a full record. The suite's record of
such a benchmark holds the script's command, its output's tail and the script's own record.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from benchmarks.common import ROOT, record_path


@dataclass(frozen=True)
class Script:
    """A benchmark script: its module (run as ``python -m``), record name, summary, quick and full
    arguments, minutes (quick, full)."""

    module: str
    record: str
    summary: str
    quick_args: tuple[str, ...]
    full_args: tuple[str, ...]
    minutes: tuple[float, float]
    in_quick: bool = True


SCRIPTS: dict[str, Script] = {
    "latency": Script("benchmarks.latency.latency", "latency.json",
                      "latency measurement: repeatability, overhead, backend agreement, GPU modes",
                      ("--processes", "3"), (), (0.5, 2)),
    "openvino_parity": Script("benchmarks.latency.openvino_parity", "openvino_parity.json",
                              "latency=openvino against OpenVINO's benchmark_app on 5 networks, alternating rounds",
                              ("--rounds", "3", "--seconds", "2"), ("--rounds", "5", "--seconds", "5"), (1.5, 5),
                              in_quick=False),
    "runtimes": Script("benchmarks.latency.runtimes", "runtimes.json",
                       "the same 100 networks on ONNX Runtime, OpenVINO and LiteRT: rankings and Kendall tau",
                       ("--n", "10"), (), (1, 15), in_quick=False),
    "spread": Script("benchmarks.latency.spread", "spread.json",
                     "latency across searches: the same networks in separate searches, in-search and final pass",
                     ("--searches", "2", "--trials", "3"), (), (3, 9), in_quick=False),
    "tail": Script("benchmarks.latency.tail", "tail.json",
                   "tail latency: p50 and p99 with intervals, throughput within a p99 bound, p99 predictor, p99 search",
                   ("--predictor-n", "30", "--search-trials", "3", "--remeasure", "1"), (), (6, 15), in_quick=False),
    "tail_predictor": Script("benchmarks.prediction.tail_predictor", "tail_predictor.json",
                             "the p99 predictor on 300 networks at 32x32, read against the p99's repeatability",
                             ("--n", "20", "--repeats", "2", "--retries", "1", "--splits", "2", "--data",
                              ".latnas/datasets/quick-tail-p99-mobile_cifar-32"), (), (2, 60), in_quick=False),
    "predictor": Script("benchmarks.prediction.predictor", "predictor.json",
                        "latency predictor: held-out accuracy, splits, throughput",
                        # quick: a fresh machine collects 60 architectures (an existing dataset is used as it is)
                        ("--n", "60", "--repeats", "6", "--splits", "2", "--throughput-n", "2000"), (), (0.5, 25)),
    "transfer": Script("benchmarks.prediction.transfer", "transfer.json",
                       "a predictor for a new device from 10-30 measurements: adapted vs from scratch vs 300",
                       ("--devices", "ort1,ort2", "--n-full", "30", "--n-test", "15", "--shots", "10,20", "--splits",
                        "2", "--reps", "3"), (), (6, 60), in_quick=False),
    "transfer_runtimes": Script("benchmarks.prediction.transfer_runtimes", "transfer_runtimes.json",
                                "a predictor for a new runtime (OpenVINO, LiteRT) from 10 measurements, from the "
                                "runtimes benchmark's record", ("--splits", "2", "--reps", "2"), (), (0.5, 2)),
    "agent": Script("benchmarks.latency.agent", "agent.json",
                    "measurement agent on 127.0.0.1: p50 against a local measurement, round-trip cost",
                    ("--rounds", "2", "--sampled", "1", "--references", "mobilenetv2_100", "--min-runs", "20",
                     "--min-time-s", "0.3"), (), (1, 5), in_quick=False),
    "search": Script("benchmarks.search.search", "search.json",
                     "search: quickstart wall time, framework overhead per trial",
                     ("--skip-quickstart", "--trials", "4", "--epochs", "4"), (), (0.5, 6)),
    "contention": Script("benchmarks.latency.contention", "contention.json",
                         "measurement alone and during a busy search (with and without the slot)",
                         ("--rounds", "3", "--settle", "10"), (), (3, 6), in_quick=False),
    "reliability": Script("benchmarks.reliability.reliability", "reliability.json",
                          "fault injection: trials failed, retried, recovered", ("--n-trials", "12"), (), (2.5, 5),
                          in_quick=False),
}


def run(name: str, quick: bool, log: Callable[[str], None] = print) -> dict[str, Any]:
    """Run the script of benchmark ``name`` (quick or full) and return its record and command.

    Raises:
        RuntimeError: the script failed (its output's tail is in the message).
    """
    s = SCRIPTS[name]
    out = record_path(s.record.removesuffix(".json"), "quick" if quick else "full")
    args = [*(s.quick_args if quick else s.full_args), "--out", str(out.relative_to(ROOT))]
    if quick and name == "predictor":
        # the predictor saved by a full run (which the search benchmarks load) stays as it is
        args += ["--predictor", ".latnas/predictors/quick-mobile-onnxruntime-cpu.json"]
    out.parent.mkdir(parents=True, exist_ok=True)
    before = out.stat().st_mtime if out.exists() else None
    proc = subprocess.run([sys.executable, "-m", s.module, *args], cwd=ROOT, capture_output=True, text=True)
    for line in proc.stdout.splitlines():
        log(f"  {line}")
    written = out.exists() and out.stat().st_mtime != before
    if not written:
        raise RuntimeError(f"{s.module} wrote no record (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    if proc.returncode != 0:  # e.g. the reliability checks failed: the record says which
        log(f"  {s.module} exited {proc.returncode}; its record was written")
    return {"script_command": " ".join(["python", "-m", s.module, *args]), "record": out.name,
            "exit_status": proc.returncode, "script_record": json.loads(out.read_text())}
