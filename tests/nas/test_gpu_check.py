"""The GPU check (``scripts/gpu_check.py``): on a machine without a GPU it runs and says plainly what it
skipped; how it runs a test set, reads its report and figures, and keeps to its time budget.

The GPU tests it runs are under ``tests/gpu/`` (and elsewhere, marked ``gpu`` or ``tensorrt``);
their verdicts that need no GPU are tested in ``tests/gpu/test_checks.py``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from benchmarks import gpu_check
from benchmarks.common import ROOT
from benchmarks.gpu_check import SETS, Context, junit_counts, run_checks, run_set
from tests.gpu.budget import BUDGET_SPENT


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU: the test sets would run")
def test_without_a_gpu_the_command_runs_and_says_what_it_skipped(tmp_path: Path) -> None:
    out = tmp_path / "gpu_check.json"
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "gpu_check.py"), "--out", str(out)],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    rec = json.loads(out.read_text())
    assert rec["benchmark"] == "gpu_check" and "tensorrt" in rec["versions"] and rec["machine"]["python"]
    status = {c["name"]: c for c in rec["checks"]}
    assert set(status) == {"versions", "pytest_gpu", "pytest_tensorrt"}
    assert status["versions"]["status"] == "passed" and "torch" in status["versions"]["figures"]
    for name in ("pytest_gpu", "pytest_tensorrt"):
        assert status[name]["status"] == "skipped" and "no GPU" in status[name]["detail"], name
    assert rec["has_gpu"] is False and rec["tests"] == []
    assert "the gpu and tensorrt test sets were skipped" in rec["summary"]
    assert "none of the GPU tests ran" in proc.stdout


SAMPLE = '''
import pytest

from tests.gpu.figures import write_figures

pytestmark = pytest.mark.gpu


def test_ok(request):
    write_figures(request.node.nodeid, {"p50_ms": 1.5})


@pytest.mark.skip(reason="no GPU: torch sees no CUDA device")
def test_skipped():
    pass


class TestEngine:
    @pytest.mark.parametrize("precision", ["fp16"])
    def test_bad(self, precision, request):
        write_figures(request.node.nodeid, {"scaled_diff_vs_torch": 0.5})
        assert False, "engine outputs differ from PyTorch"


@pytest.mark.tensorrt
def test_in_the_other_set():
    pass
'''


def test_a_set_reports_each_test_with_its_figures_and_fails_when_one_failed(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gpu_check, "GRACE_S", 600.0)  # however slow pytest starts on a loaded machine
    (tmp_path / "test_sample.py").write_text(SAMPLE)
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    gpu: a GPU\n    tensorrt: TensorRT\n")
    ctx = Context(tmp_path, has_gpu=True, has_tensorrt=False, ort_providers=[])
    gpu_set = next(s for s in SETS if s.name == "gpu")
    outcome, tests = run_set(gpu_set, ctx, time.time() + 300, paths=["test_sample.py"], cwd=tmp_path)
    assert outcome.name == "pytest_gpu" and outcome.status == "failed", outcome
    assert "1 passed, 1 failed, 0 errors, 1 skipped" in outcome.detail
    assert outcome.figures["skip_reasons"] == {"no GPU: torch sees no CUDA device": 1}
    by_id = {t["test"]: t for t in tests}
    assert set(by_id) == {"test_sample.py::test_ok", "test_sample.py::test_skipped",
                          "test_sample.py::TestEngine::test_bad[fp16]"}  # the tensorrt test is the other set's
    assert by_id["test_sample.py::test_ok"]["outcome"] == "passed"
    assert by_id["test_sample.py::test_ok"]["figures"] == {"p50_ms": 1.5}
    bad = by_id["test_sample.py::TestEngine::test_bad[fp16]"]
    assert bad["outcome"] == "failed" and "engine outputs differ" in bad["message"]
    assert bad["figures"] == {"scaled_diff_vs_torch": 0.5}  # written before it failed

    # the budget spent before the set started: every test skipped, saying so
    outcome, tests = run_set(gpu_set, ctx, time.time() - 1, paths=["test_sample.py"], cwd=tmp_path)
    assert outcome.status == "skipped" and BUDGET_SPENT in outcome.detail, outcome
    assert {t["outcome"] for t in tests} == {"skipped"}


def test_pytest_counts_come_from_its_junit_report(tmp_path: Path) -> None:
    xml = tmp_path / "report.xml"
    xml.write_text('<testsuites><testsuite tests="3" failures="1" errors="0" skipped="1">'
                   '<testcase classname="t" name="a"/></testsuite></testsuites>')
    assert junit_counts(xml) == {"tests": 3, "failures": 1, "errors": 0, "skipped": 1}


@pytest.mark.slow  # a window wide enough for pytest to start and reach the slow test on a loaded machine
def test_a_set_still_running_past_its_budget_is_stopped_with_its_report(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "test_sample.py").write_text(
        "import time\n\nimport pytest\n\nfrom tests.gpu.figures import write_figures\n\n\n"
        "@pytest.mark.gpu\ndef test_fast(request):\n    write_figures(request.node.nodeid, {'p50_ms': 1.0})\n\n\n"
        "@pytest.mark.gpu\ndef test_slow():\n    time.sleep(600)\n")
    ctx = Context(tmp_path, has_gpu=True, has_tensorrt=False, ort_providers=[])
    monkeypatch.setattr(gpu_check, "GRACE_S", -480.0)  # stopped 120 s in, though tests may start for 600 s
    t0 = time.perf_counter()
    outcome, tests = run_set(SETS[0], ctx, time.time() + 600, paths=["test_sample.py"], cwd=tmp_path)
    assert time.perf_counter() - t0 < 300
    assert outcome.status == "failed" and "past the time budget" in outcome.detail, outcome
    fast = next(t for t in tests if t["test"] == "test_sample.py::test_fast")
    assert fast["outcome"] == "passed" and fast["figures"] == {"p50_ms": 1.0}  # the report pytest wrote when stopped


def test_a_stopped_command_is_interrupted_first_and_takes_the_processes_it_started_with_it(tmp_path: Path) -> None:
    # started from a background job (as CI and `nohup ... &` do), the command inherits SIGINT ignored;
    # it must still get KeyboardInterrupt at the timeout, so pytest can write its report
    code = ("import subprocess, sys, time\n"
            "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'])\n"
            "print(p.pid, flush=True)\n"
            "try:\n    time.sleep(120)\nexcept KeyboardInterrupt:\n    print('interrupted', flush=True)\n")
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        _, output, stopped = gpu_check._run([sys.executable, "-c", code], tmp_path, dict(os.environ), timeout=5)
    finally:
        signal.signal(signal.SIGINT, previous)
    assert stopped and "interrupted" in output, output
    child = int(output.split()[0])
    time.sleep(0.5)
    state = Path(f"/proc/{child}/status")
    assert not state.exists() or "zombie" in state.read_text(), "the command's own child process was left running"


def test_a_set_the_machine_cannot_run_or_the_budget_leaves_no_time_for_is_skipped(tmp_path: Path) -> None:
    ctx = Context(tmp_path, has_gpu=True, has_tensorrt=False, ort_providers=[])
    outcomes, tests = run_checks(ctx, SETS[1:], budget_s=60, log=lambda _: None)
    assert [(o.name, o.status) for o in outcomes] == [("versions", "passed"), ("pytest_tensorrt", "skipped")]
    assert "TensorRT is not installed" in outcomes[1].detail and tests == []
    outcomes, _ = run_checks(ctx, SETS[:1], budget_s=-1, log=lambda _: None)
    assert outcomes[1].status == "skipped" and "time budget" in outcomes[1].detail
    rec = gpu_check.record(ctx, outcomes, [], "python scripts/gpu_check.py", 1.0)
    assert rec["counts"] == {"passed": 1, "failed": 0, "skipped": 1} and rec["benchmark"] == "gpu_check"
