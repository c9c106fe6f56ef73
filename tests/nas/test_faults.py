"""The fault-injection facility: parsing, deterministic selection, off by default."""

from __future__ import annotations

from pathlib import Path

import pytest

from nas.core.errors import FaultSpecError
from nas.trial.faults import ENV_VAR, FaultPlan


def test_off_unless_the_variable_is_set() -> None:
    assert FaultPlan.from_env({}) is None
    assert FaultPlan.from_env({ENV_VAR: "  "}) is None
    plan = FaultPlan.from_env({ENV_VAR: "measure@0.2, hang:3@0.5,seed=7"})
    assert plan is not None and plan.seed == 7
    assert [(f.kind, f.rate, f.arg) for f in plan.faults] == [("measure", 0.2, None), ("hang", 0.5, 3.0)]


@pytest.mark.parametrize(
    ("spec", "match"),
    [
        ("explode@0.2", "kind"),
        ("measure", "kind"),
        ("measure@x", "numbers"),
        ("measure@1.5", r"\[0, 1\]"),
        ("hang@0.1", "seconds"),
        ("kill:3@0.1", "no argument"),
        ("nan@0.1,nan@0.2", "twice"),
        ("seed=abc,nan@0.1", "seed"),
        ("seed=1", "no fault"),
    ],
)
def test_malformed_specs_are_typed_errors(spec: str, match: str) -> None:
    with pytest.raises(FaultSpecError, match=match) as err:
        FaultPlan.parse(spec)
    assert ENV_VAR in str(err.value)


def test_selection_is_deterministic_and_near_the_rate() -> None:
    plan = FaultPlan.parse("measure@0.2,seed=1")
    ids = [f"{i:08x}" for i in range(2000)]
    hit = [a for a in ids if plan.hits("measure", a)]
    assert hit == [a for a in ids if FaultPlan.parse("measure@0.2,seed=1").hits("measure", a)]
    assert 0.17 < len(hit) / len(ids) < 0.23
    assert hit != [a for a in ids if FaultPlan.parse("measure@0.2,seed=2").hits("measure", a)]
    assert not any(plan.hits("nan", a) for a in ids)  # a kind not in the plan hits nothing
    assert all(plan.expected_failure(a) == ("MeasurementError" if a in hit else None) for a in ids)


def test_hang_is_a_failure_only_past_the_time_limit() -> None:
    plan = FaultPlan.parse("hang:2@1.0")
    assert plan.expected_failure("abc") is None
    assert plan.expected_failure("abc", trial_timeout_s=5.0) is None
    assert plan.expected_failure("abc", trial_timeout_s=1.0) == "TrialTimeoutError"


def test_kill_needs_its_marker_folder(tmp_path: Path) -> None:
    plan = FaultPlan.parse("kill@1.0")
    with pytest.raises(FaultSpecError, match="marker"):
        plan.before_measure("abc", lambda stage: None)
    marked = plan.with_marker_dir(tmp_path / "faults")
    (tmp_path / "faults" / "kill-abc").write_text("1\n")  # as after a first attempt
    marked.before_measure("abc", lambda stage: None)  # the retry runs on
