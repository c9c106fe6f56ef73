"""The verdicts of the tests on a real GPU, and where they write their figures: on the CPU.

No marker: these run in the fast set; the logical-GPU Ray test in the slow set.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from tests.gpu.checks import clock_agreement, half_gpu_consistent, half_gpu_task_reports_apart, scaled_diff
from tests.gpu.figures import FIGURES_ENV, write_figures


def test_event_and_wall_clock_must_agree_and_time_something() -> None:
    assert clock_agreement(1.0, 1.2)["relative_difference"] == pytest.approx(1 / 6)
    with pytest.raises(AssertionError, match="differ by 50%"):
        clock_agreement(0.5, 1.0)  # events on a stream that ran part of the work
    with pytest.raises(AssertionError, match="nothing was timed"):
        clock_agreement(0.002, 0.012)  # a graph replay that captured nothing


def test_output_differences_are_fractions_of_the_largest_logit() -> None:
    assert scaled_diff(np.array([1.0, -3.9], dtype=np.float32), np.array([1.2, -4.0])) == pytest.approx(0.05)


UUID = "GPU-8f0e1c2a-77b4-4d0e-9a51-0c2d7e1f3b6a"


def _task(visible: str, ids: list[str], key: str) -> dict[str, object]:
    return {"visible": visible, "gpu_ids": ids, "slot_key": key}


def test_half_gpu_tasks_must_share_one_gpu_and_name_its_slot_by_uuid() -> None:
    good = [_task("0", ["0"], f"cuda-{UUID}")] * 2
    assert half_gpu_consistent(good, UUID)["uuid"] == UUID
    with pytest.raises(AssertionError, match="share one GPU"):
        half_gpu_consistent([_task("0", ["0"], f"cuda-{UUID}"), _task("1", ["1"], f"cuda-{UUID}")], UUID)
    with pytest.raises(AssertionError, match="is not the accelerator ids"):
        half_gpu_consistent([_task("1", ["0"], f"cuda-{UUID}")] * 2, UUID)
    with pytest.raises(AssertionError, match="both tasks must hold"):
        half_gpu_consistent([_task("0", ["0"], "cuda-0")] * 2, UUID)  # keyed by index, not UUID


@pytest.mark.slow
def test_two_half_gpu_ray_tasks_on_a_logical_gpu() -> None:
    # Ray's bookkeeping only (no CUDA here): each task sees the GPU Ray gave it, both the same one,
    # and both name the same slot.
    reports, uuid = half_gpu_task_reports_apart()
    if uuid is None:  # no CUDA in this torch: the key is the index Ray gave
        assert {r["slot_key"] for r in reports} == {f"cuda-{reports[0]['gpu_ids'][0]}"}
    half_gpu_consistent(reports, uuid)


def test_figures_go_to_the_file_the_environment_names_and_nowhere_without_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, figures: Callable[..., None],
        request: pytest.FixtureRequest) -> None:
    monkeypatch.delenv(FIGURES_ENV, raising=False)
    write_figures("t", {"p50_ms": 1.0})  # nowhere to go: nothing written, no error
    out = tmp_path / "figures.jsonl"
    monkeypatch.setenv(FIGURES_ENV, str(out))
    write_figures("t", {"shape": (1, 3)})
    figures(p50_ms=0.5)
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert lines == [{"test": "t", "figures": {"shape": [1, 3]}},
                     {"test": request.node.nodeid, "figures": {"p50_ms": 0.5}}]
