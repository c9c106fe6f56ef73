"""The GPU smoke check: on a machine without a GPU it runs and says plainly what it skipped; its verdicts."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from benchmarks import gpu_check
from benchmarks.common import ROOT
from benchmarks.gpu_check import (
    CHECKS,
    Check,
    CheckFailed,
    Context,
    clock_agreement,
    half_gpu_consistent,
    junit_counts,
    run_checks,
)

ISSUE_CHECKS = {
    "versions", "pytest_gpu", "pytest_tensorrt", "ort_tensorrt_fp32", "ort_tensorrt_fp16", "ort_cuda_no_cpu_fallback",
    "tensorrt_outputs_fp32", "tensorrt_outputs_fp16", "clocks_torch_eager", "clocks_torch_graphs", "clocks_tensorrt",
    "graph_not_slower_than_eager", "graph_replay_after_empty_cache", "engine_cache_fused_after_unfused",
    "ray_half_gpu_tasks", "search_gpus_per_trial_1", "optimize_tensorrt", "optimize_torch_half",
    "int8_search_trial_tensorrt",
}


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU: the checks would run")
def test_without_a_gpu_the_command_runs_and_says_what_it_skipped(tmp_path: Path) -> None:
    out = tmp_path / "gpu_check.json"
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "gpu_check.py"), "--out", str(out)],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    rec = json.loads(out.read_text())
    status = {c["name"]: c for c in rec["checks"]}
    assert set(status) == ISSUE_CHECKS == {c.name for c in CHECKS}
    assert status["versions"]["status"] == "passed" and "torch" in status["versions"]["figures"]
    for name in ISSUE_CHECKS - {"versions"}:
        assert status[name]["status"] == "skipped" and "no GPU" in status[name]["detail"], name
    assert rec["has_gpu"] is False and "every GPU check was skipped" in rec["summary"]
    assert "every GPU check was skipped" in proc.stdout


def test_a_failed_check_fails_the_run_and_an_exhausted_budget_skips_the_rest(tmp_path: Path) -> None:
    def broken(ctx: Context) -> dict[str, object]:
        raise CheckFailed("the replay timed nothing", {"p50_ms": 0.0})

    def crashing(ctx: Context) -> dict[str, object]:
        raise RuntimeError("CUDA error: an illegal memory access")

    ctx = Context(tmp_path, has_gpu=True, has_tensorrt=False, ort_providers=[])
    checks = [Check("broken", (), broken), Check("crashing", (), crashing), Check("needs_trt", ("tensorrt",), broken)]
    outcomes = run_checks(ctx, checks, budget_s=60, log=lambda _: None)
    assert [(o.name, o.status) for o in outcomes] == [("broken", "failed"), ("crashing", "failed"),
                                                       ("needs_trt", "skipped")]
    assert outcomes[0].figures == {"p50_ms": 0.0} and "illegal memory access" in outcomes[1].detail
    assert "TensorRT is not installed" in outcomes[2].detail
    late = run_checks(ctx, [Check("slow", (), lambda c: {}), Check("next", (), broken)], budget_s=-1,
                      log=lambda _: None)
    assert all(o.status == "skipped" and "time budget" in o.detail for o in late)
    rec = gpu_check.record(ctx, outcomes, "python scripts/gpu_check.py", 1.0)
    assert rec["counts"] == {"passed": 0, "failed": 2, "skipped": 1}


def test_event_and_wall_clock_must_agree_and_time_something() -> None:
    assert clock_agreement(1.0, 1.2)["relative_difference"] == pytest.approx(1 / 6)
    with pytest.raises(CheckFailed, match="differ by 50%"):
        clock_agreement(0.5, 1.0)  # events on a stream that ran part of the work
    with pytest.raises(CheckFailed, match="nothing was timed"):
        clock_agreement(0.002, 0.012)  # a graph replay that captured nothing


def test_pytest_counts_come_from_its_junit_report(tmp_path: Path) -> None:
    (tmp_path / "test_sample.py").write_text(
        "import pytest\n\ndef test_ok():\n    pass\n\n@pytest.mark.skip(reason='no GPU')\n"
        "def test_skip():\n    pass\n\ndef test_bad():\n    assert False\n"
    )
    xml = tmp_path / "report.xml"
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={xml}",
                    "-o", "addopts=", str(tmp_path / "test_sample.py")], capture_output=True, cwd=tmp_path, timeout=120)
    assert junit_counts(xml) == {"tests": 3, "failures": 1, "errors": 0, "skipped": 1}


UUID = "GPU-8f0e1c2a-77b4-4d0e-9a51-0c2d7e1f3b6a"


def _task(visible: str, ids: list[str], key: str) -> dict[str, object]:
    return {"visible": visible, "gpu_ids": ids, "slot_key": key}


def test_half_gpu_tasks_must_share_one_gpu_and_name_its_slot_by_uuid() -> None:
    good = [_task("0", ["0"], f"cuda-{UUID}")] * 2
    assert half_gpu_consistent(good, UUID)["uuid"] == UUID
    with pytest.raises(CheckFailed, match="share one GPU"):
        half_gpu_consistent([_task("0", ["0"], f"cuda-{UUID}"), _task("1", ["1"], f"cuda-{UUID}")], UUID)
    with pytest.raises(CheckFailed, match="is not the accelerator ids"):
        half_gpu_consistent([_task("1", ["0"], f"cuda-{UUID}")] * 2, UUID)
    with pytest.raises(CheckFailed, match="both tasks must hold"):
        half_gpu_consistent([_task("0", ["0"], "cuda-0")] * 2, UUID)  # keyed by index, not UUID


@pytest.mark.slow
def test_two_half_gpu_ray_tasks_on_a_logical_gpu() -> None:
    # Ray's bookkeeping only (no CUDA here): each task sees the GPU Ray gave it, both the same one,
    # and both name the same slot. In its own process: the tests may hold a Ray cluster already.
    code = ("import json; from benchmarks.gpu_check import half_gpu_task_reports as r; "
            "reports, uuid = r(); print(json.dumps([reports, uuid]))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    reports, uuid = json.loads(proc.stdout.strip().splitlines()[-1])
    if uuid is None:  # no CUDA in this torch: the key is the index Ray gave
        assert {r["slot_key"] for r in reports} == {f"cuda-{reports[0]['gpu_ids'][0]}"}
    half_gpu_consistent(reports, uuid)
