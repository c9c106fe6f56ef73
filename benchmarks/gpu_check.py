"""The GPU check: LatNAS's tests on a real GPU, with the versions and devices they ran on, in one record.

    python scripts/gpu_check.py --out gpu_check.json [--only gpu|tensorrt ...] [-k EXPRESSION] [--budget-s 480]

It runs the tests that need a GPU as two sets, each a pytest process of its own (``--junitxml``),
so that every such test runs once:

* ``pytest_gpu``: ``python -m pytest -m "gpu and not tensorrt" tests``;
* ``pytest_tensorrt``: ``python -m pytest -m tensorrt tests``;

and writes one JSON record, with the header of every benchmark record (machine, versions, date,
command) and:

* ``versions``: the GPUs (``nvidia-smi``: driver, name, UUID, MIG mode, memory), torch's CUDA and
  cuDNN, ONNX Runtime's providers and CUDA build, TensorRT, Ray; it fails when torch's and ONNX
  Runtime's CUDA majors differ;
* each set: ``passed``, ``failed`` (a test failed or errored, nothing ran, or pytest was stopped)
  or ``skipped``, with why, pytest's command, exit status, counts and the tail of its output;
* each test the sets ran: its outcome, seconds, message and the figures it measured (the tests
  under ``tests/gpu/`` write theirs, e.g. p50s and differences from PyTorch, to the file
  ``$LATNAS_GPU_FIGURES`` names: :func:`tests.gpu.figures.write_figures`).

The correctness checks themselves are tests: ``tests/gpu/test_runtimes.py`` (ONNX Runtime's GPU
providers, TensorRT engines, CUDA-event clocks, CUDA graphs, the engine cache) and
``tests/gpu/test_search.py`` (half-GPU Ray tasks, a search with one GPU per trial, ``nas.optimize``,
an INT8 search trial), beside the other tests marked ``gpu`` or ``tensorrt``.

On a machine without a GPU it records the versions and says plainly that both sets were skipped
(none of their tests can run there); the ``tensorrt`` set is skipped where TensorRT is not
installed. The sets run within ``--budget-s`` (8 minutes by default): a test that would start
after it is skipped, saying so (``tests/gpu/budget.py``); a set still running a minute past it is
stopped, and fails. Exit status 1 when a check failed, else 0.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import xml.etree.ElementTree as ET
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from benchmarks.common import ROOT, header, write_record
from latency_predictor.measurement.environment import package_version
from tests.gpu.budget import BUDGET_SPENT, DEADLINE_ENV
from tests.gpu.checks import NO_CUDA, NO_TENSORRT, nvidia_smi
from tests.gpu.figures import FIGURES_ENV

DEFAULT_BUDGET_S = 480.0
GRACE_S = 60.0
"""How long past the budget a set may go on (the test running at the budget) before it is stopped."""
PASSED, FAILED, SKIPPED = "passed", "failed", "skipped"
EXTRA_VERSIONS = ("onnxruntime-gpu", "tensorrt")


@dataclass(frozen=True)
class MarkedSet:
    """A test set: its name in the record, its pytest ``-m`` expression, and what it needs."""

    name: str
    marker: str
    needs: tuple[str, ...]


SETS: tuple[MarkedSet, ...] = (
    MarkedSet("gpu", "gpu and not tensorrt", ("gpu",)),
    MarkedSet("tensorrt", "tensorrt", ("gpu", "tensorrt")),
)


@dataclass
class Outcome:
    """One check's result, as written to the record."""

    name: str
    status: str
    detail: str
    seconds: float = 0.0
    figures: dict[str, Any] = field(default_factory=dict)


@dataclass
class Context:
    """What the machine can run, and a scratch folder."""

    work: Path
    has_gpu: bool
    has_tensorrt: bool
    ort_providers: list[str]

    @classmethod
    def detect(cls, work: Path) -> Context:
        import onnxruntime as ort

        return cls(work, torch.cuda.is_available(), importlib.util.find_spec("tensorrt") is not None,
                   list(ort.get_available_providers()))

    def missing(self, needs: Sequence[str]) -> str | None:
        """Why a set needing ``needs`` cannot run here, or None."""
        reasons = {
            "gpu": (self.has_gpu, NO_CUDA),
            "tensorrt": (self.has_tensorrt, NO_TENSORRT),
        }
        for need in needs:
            ok, why = reasons[need]
            if not ok:
                return why
        return None


# ---------------------------------------------------------------------- the versions


def check_versions(ctx: Context) -> Outcome:
    """Driver, GPUs and library versions; failed when torch's and ONNX Runtime's CUDA majors differ."""
    import onnxruntime as ort

    figures: dict[str, Any] = {
        "gpus": nvidia_smi(), "torch": torch.__version__, "torch_cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if ctx.has_gpu else None,
        "onnxruntime": ort.__version__, "onnxruntime_providers": ctx.ort_providers,
        "onnxruntime_cuda": _ort_cuda_version(), "tensorrt": package_version("tensorrt") if ctx.has_tensorrt else None,
        "ray": package_version("ray"),
    }
    if ctx.has_gpu:
        figures["torch_devices"] = [
            {"index": i, "name": torch.cuda.get_device_name(i),
             "capability": ".".join(map(str, torch.cuda.get_device_capability(i)))}
            for i in range(torch.cuda.device_count())
        ]
    majors = {k: str(figures[k]).split(".")[0] for k in ("torch_cuda", "onnxruntime_cuda") if figures[k]}
    if len(majors) == 2 and len(set(majors.values())) == 2:
        return Outcome("versions", FAILED, f"torch is built for CUDA {figures['torch_cuda']}, ONNX Runtime for "
                       f"{figures['onnxruntime_cuda']}: they need the same CUDA major", figures=figures)
    return Outcome("versions", PASSED, "", figures=figures)


def _ort_cuda_version() -> str | None:
    try:
        from onnxruntime.capi import build_and_package_info as info
    except ImportError:
        return None
    return getattr(info, "cuda_version", None) or None


# ---------------------------------------------------------------------- pytest's reports


def junit_counts(path: Path) -> dict[str, int]:
    """Tests, failures, errors and skips from a JUnit XML report (pytest's ``--junitxml``)."""
    root = ET.parse(path).getroot()
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    keys = ("tests", "failures", "errors", "skipped")
    return {k: sum(int(s.get(k, 0)) for s in suites) for k in keys}


def junit_cases(path: Path) -> list[dict[str, Any]]:
    """Each test of a JUnit XML report (``junit_family=xunit1``): its pytest node id, outcome
    (``passed``, ``failed``, ``error`` or ``skipped``), seconds and message."""
    cases = []
    for case in ET.parse(path).getroot().iter("testcase"):
        classname, name, file = case.get("classname", ""), case.get("name", ""), case.get("file")
        if file:  # file.py::Class::test from the module's dotted name and the classes after it
            module = file.removesuffix(".py").replace("/", ".")
            classes = classname[len(module) + 1:].split(".") if classname.startswith(module + ".") else []
            nodeid = "::".join([file, *classes, name])
        else:
            nodeid = f"{classname}::{name}"
        outcome, message = PASSED, ""
        for tag, status in (("failure", FAILED), ("error", "error"), ("skipped", SKIPPED)):
            found = case.find(tag)
            if found is not None:
                outcome, message = status, found.get("message", "")
                break
        cases.append({"test": nodeid, "outcome": outcome, "seconds": float(case.get("time", 0.0)),
                      "message": message[:1000]})
    return cases


def read_figures(path: Path) -> dict[str, dict[str, Any]]:
    """The figures the tests wrote (:func:`tests.gpu.figures.write_figures`), by test, later ones updating earlier."""
    found: dict[str, dict[str, Any]] = {}
    if path.is_file():
        for line in path.read_text().splitlines():
            with contextlib.suppress(ValueError):  # a line cut short by a stopped process
                entry = json.loads(line)
                found.setdefault(entry["test"], {}).update(entry["figures"])
    return found


# ---------------------------------------------------------------------- the sets


def run_set(s: MarkedSet, ctx: Context, deadline: float, keyword: str | None = None,
            paths: Sequence[str] = ("tests",), cwd: Path = ROOT) -> tuple[Outcome, list[dict[str, Any]]]:
    """Run ``s`` with pytest until ``deadline`` (``time.time()``; tests that would start after it are
    skipped, and the run is stopped :data:`GRACE_S` after it): its outcome, and each test's."""
    check = f"pytest_{s.name}"
    xml, figures_file = ctx.work / f"pytest-{s.name}.xml", ctx.work / f"figures-{s.name}.jsonl"
    xml.unlink(missing_ok=True)  # an earlier run's report and figures are not this run's
    figures_file.unlink(missing_ok=True)
    cmd = [sys.executable, "-m", "pytest", "-m", s.marker, "-q", "-rs", "-p", "no:cacheprovider",
           "-p", "tests.gpu.budget", "-o", "junit_family=xunit1", f"--junitxml={xml}",
           *(["-k", keyword] if keyword else []), *paths]
    env = {**os.environ, FIGURES_ENV: str(figures_file), DEADLINE_ENV: repr(deadline),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    t0 = time.perf_counter()
    exit_status, output, stopped = _run(cmd, cwd, env, max(deadline + GRACE_S - time.time(), 1.0))
    seconds = time.perf_counter() - t0
    counts = junit_counts(xml) if xml.is_file() else {}
    tests = [{**c, "set": s.name} for c in junit_cases(xml)] if xml.is_file() else []
    figures = read_figures(figures_file)
    for t in tests:
        t["figures"] = figures.pop(t["test"], {})
    tests += [{"test": nodeid, "set": s.name, "outcome": "unknown", "seconds": None,
               "message": "no report: pytest stopped before it wrote one", "figures": f}
              for nodeid, f in figures.items()]
    skips = Counter(t["message"] for t in tests if t["outcome"] == SKIPPED)
    ran = counts.get("tests", 0) - counts.get("skipped", 0)
    shown = " ".join(cmd[1:]).replace(str(ctx.work), "DIR")
    out = {"command": shown, "exit_status": exit_status, **counts, "ran": ran, "skip_reasons": dict(skips),
           "tail": output[-3000:]}
    failed = counts.get("failures", 0) + counts.get("errors", 0)
    tally = (f"{ran - failed} passed, {counts.get('failures', 0)} failed, {counts.get('errors', 0)} errors, "
             f"{counts.get('skipped', 0)} skipped")
    if stopped:
        status, detail = FAILED, f"stopped {GRACE_S:g} s past the time budget: " + (
            f"{tally} by then" if xml.is_file() else "no report; the tests that wrote figures are listed")
    elif not xml.is_file():
        status, detail = FAILED, f"pytest exited {exit_status} without a report"
    elif failed or exit_status not in (0, 5):
        status, detail = FAILED, f"pytest exited {exit_status}: {tally}"
    elif ran <= 0 and keyword and exit_status == 5:
        status, detail = SKIPPED, f"no test of this set matches -k {keyword!r}"
    elif ran <= 0 and skips.get(BUDGET_SPENT):
        status, detail = SKIPPED, f"{BUDGET_SPENT} before any test of this set started"
    elif ran <= 0:
        why = "; ".join(f"{n} {reason}" for reason, n in skips.most_common()) or "none collected"
        status, detail = FAILED, f"no test ran although this machine has what the set needs ({why})"
    else:
        status, detail = PASSED, tally
    if skips.get(BUDGET_SPENT) and status != SKIPPED:
        detail += f"; {skips[BUDGET_SPENT]} not started: {BUDGET_SPENT}"
    return Outcome(check, status, detail, seconds, out), tests


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _run(cmd: list[str], cwd: Path, env: dict[str, str], timeout: float) -> tuple[int | None, str, bool]:
    """Run ``cmd`` in a process group of its own: exit status, output, and whether it was stopped.

    At ``timeout`` the command gets SIGINT (pytest then ends the session and writes its report),
    then its group SIGTERM and SIGKILL while it has not ended. When it has ended, whatever it
    started and left running is killed (a Ray process left by one set would hold the GPU during
    the next).
    """
    # SIGINT back to its default in the command: started from a background job (`nohup ... &`, a CI
    # runner) it inherits SIGINT ignored, and Python then never raises KeyboardInterrupt, so pytest
    # would not stop and write its report at the timeout
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True, preexec_fn=_default_sigint)
    lines: list[str] = []

    def read() -> None:  # read as it comes, so a full pipe never blocks the command
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    stopped = False
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        stopped = True
        for sig, wait in ((signal.SIGINT, 30), (signal.SIGTERM, 15), (signal.SIGKILL, 15)):
            with contextlib.suppress(ProcessLookupError):
                if sig == signal.SIGINT:
                    os.kill(proc.pid, sig)
                else:
                    os.killpg(proc.pid, sig)
            try:
                proc.wait(timeout=wait)
                break
            except subprocess.TimeoutExpired:
                continue
    with contextlib.suppress(ProcessLookupError):  # what the command started and left running
        os.killpg(proc.pid, signal.SIGKILL)
    reader.join(timeout=30)
    return proc.returncode, "".join(lines), stopped


def run_checks(ctx: Context, sets: Sequence[MarkedSet], budget_s: float, keyword: str | None = None,
               log: Callable[[str], None] = print, **where: Any) -> tuple[list[Outcome], list[dict[str, Any]]]:
    """The versions, then each of ``sets`` that this machine can run within ``budget_s``: outcomes and tests."""
    deadline = time.time() + budget_s
    outcomes: list[Outcome] = []
    tests: list[dict[str, Any]] = []

    def done(o: Outcome) -> None:
        log(f"{o.status:7s} {o.name}" + (f": {o.detail}" if o.detail else ""))
        outcomes.append(o)

    done(check_versions(ctx))
    for s in sets:
        missing = ctx.missing(s.needs)
        if missing is not None:
            done(Outcome(f"pytest_{s.name}", SKIPPED, f"{missing}: its tests were not run"))
        elif time.time() >= deadline:
            done(Outcome(f"pytest_{s.name}", SKIPPED, f"time budget of {budget_s:g} s spent"))
        else:
            log(f"running  pytest -m {s.marker!r} ...")
            outcome, ran = run_set(s, ctx, deadline, keyword, **where)
            tests += ran
            done(outcome)
    return outcomes, tests


def record(ctx: Context, outcomes: list[Outcome], tests: list[dict[str, Any]], command: str,
           seconds: float) -> dict[str, Any]:
    """The JSON record: the common header, what the machine can run, every check, every test, and a summary."""
    counts = {s: sum(o.status == s for o in outcomes) for s in (PASSED, FAILED, SKIPPED)}
    test_counts = dict(Counter(t["outcome"] for t in tests))
    summary = f"{counts[PASSED]} passed, {counts[FAILED]} failed, {counts[SKIPPED]} skipped"
    if tests:
        summary += " (tests: " + ", ".join(f"{n} {k}" for k, n in sorted(test_counts.items())) + ")"
    if not ctx.has_gpu:
        summary += (": no GPU here, so the gpu and tensorrt test sets were skipped and none of the GPU tests ran; "
                    "run this on a machine with an NVIDIA GPU")
    return {
        **header("gpu_check", "full", command, EXTRA_VERSIONS), "summary": summary, "seconds": seconds,
        "has_gpu": ctx.has_gpu, "has_tensorrt": ctx.has_tensorrt, "onnxruntime_providers": ctx.ort_providers,
        "counts": counts, "test_counts": test_counts, "checks": [asdict(o) for o in outcomes], "tests": tests,
    }


def main(argv: Sequence[str] | None = None) -> int:
    """``python scripts/gpu_check.py``: the versions and the GPU test sets, one record; 1 if a check failed."""
    parser = argparse.ArgumentParser(prog="python scripts/gpu_check.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("gpu_check.json"), help="the JSON record (gpu_check.json)")
    parser.add_argument("--only", nargs="+", choices=[s.name for s in SETS], help="run these test sets only")
    parser.add_argument("-k", dest="keyword", metavar="EXPRESSION",
                        help="run only the tests whose names match (pytest's -k)")
    parser.add_argument("--budget-s", type=float, default=DEFAULT_BUDGET_S,
                        help="start no test after this many seconds (480)")
    args = parser.parse_args(argv)
    sets = [s for s in SETS if args.only is None or s.name in args.only]
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="latnas-gpu-check-") as tmp:
        ctx = Context.detect(Path(tmp))
        outcomes, tests = run_checks(ctx, sets, args.budget_s, args.keyword)
    command = " ".join(["python scripts/gpu_check.py", *(argv if argv is not None else sys.argv[1:])])
    rec = record(ctx, outcomes, tests, command, time.perf_counter() - t0)
    write_record(args.out, rec)
    print(f"{rec['summary']}; record: {args.out}")
    return 1 if rec["counts"][FAILED] else 0
