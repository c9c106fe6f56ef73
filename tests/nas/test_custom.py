"""The user's own evaluator and data (``accuracy=custom``, ``data=custom``), without Ray: the settings,
finding and calling the functions, one trial of each kind, the record, and the driver's check
before any trial. The searches on Ray are in ``test_custom_search.py``."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from nas.core.config import AccuracyConfig, DataConfig, LatencyConfig, RungConfig, TrainConfig, validate
from nas.core.errors import ConfigError, TrialTimeoutError, UserCodeError
from nas.core.record import COMPLETED, FAILED, RUNNING, candidate_from_reports, metric_name_problem
from nas.core.reward import squared_penalty
from nas.data import UserData, load_task
from nas.runtime import plugins
from nas.trial.evaluate import TrialContext, evaluate_candidate
from search_spaces import SearchSpace, build, load_space
from search_spaces.space import SPACES_DIR
from tests.nas.configs import compose_config, stored_config

FAST_MEASURE = {"warmup_runs": 2, "warmup_s": 0.0, "min_runs": 10, "min_time_s": 0.0, "max_time_s": 1.0,
                "max_repeats": 1}
MODULE = "tests.nas.user_code"


def _ctx(data: Any, fn: str = "constant", epochs: int = 2, space: SearchSpace | None = None,
         channels: int = 3, **extra: Any) -> TrialContext:
    return TrialContext(
        space=space or load_space("tiny"), data=data, train=TrainConfig(epochs=epochs, batch_size=32),
        accuracy=AccuracyConfig(estimator="custom", fn=f"{MODULE}:{fn}"), target_ms=0.5, reward="squared",
        threads=1, latency=LatencyConfig(input_shape=[1, channels, 32, 32], options={"intra_op_threads": 1},
                                         measure=FAST_MEASURE), **extra,
    )


def _trial(ctx: TrialContext, seed: int = 0) -> list[dict[str, Any]]:
    reports: list[dict[str, Any]] = []
    evaluate_candidate(ctx.space.sample(np.random.default_rng(seed)).encode(), ctx, reports.append)
    return reports


@pytest.fixture(scope="module")
def digits() -> Any:
    return load_task(DataConfig(resolution=16, max_train_samples=64, max_val_samples=32))


@pytest.fixture(scope="module")
def blobs() -> UserData:
    data = load_task(DataConfig(name="custom", fn=f"{MODULE}:regression", loader_workers=0))
    assert isinstance(data, UserData)
    return data


# ---------------------------------------------------------------------- settings


def test_custom_settings_compose_from_the_command_line_and_pass_the_checks() -> None:
    cfg = compose_config("+space=tiny", "target_ms=1", "accuracy=custom", f"accuracy.fn={MODULE}:constant",
                         "+accuracy.options.lr=0.01", "data=custom", f"data.fn={MODULE}:regression",
                         "+data.options.n_train=32", "data.num_classes=2")
    validate(cfg)
    assert (cfg.accuracy.estimator, cfg.accuracy.fn, cfg.accuracy.options) == ("custom", f"{MODULE}:constant",
                                                                             {"lr": 0.01})
    assert (cfg.data.name, cfg.data.fn, cfg.data.options, cfg.data.num_classes) == (
        "custom", f"{MODULE}:regression", {"n_train": 32}, 2)
    assert cfg.data.loader_workers == 0 and cfg.ray.ship_code


@pytest.mark.parametrize(("overrides", "match"), [
    (["accuracy=custom"], r"accuracy\.fn: accuracy=custom calls your function: set accuracy\.fn="),
    (["accuracy=custom", "accuracy.fn=evaluate"], r"accuracy\.fn: 'evaluate' is not module:function"),
    (["accuracy.fn=m:f"], r"accuracy\.fn: is called by accuracy=custom only, not accuracy=train"),
    (["+accuracy.options.lr=1"], r"accuracy\.options: are settings of accuracy\.fn \(accuracy=custom\)"),
    (["data=custom"], r"data\.fn: data=custom calls your function"),
    (["+data.options.n=1"], r"data\.options: are keyword arguments of data\.fn \(data=custom\), not of data=digits"),
    (["data=custom", "data.fn=m:f", "data.num_classes=0"], r"data\.num_classes: must be an integer >= 1"),
    (["data=custom", "data.fn=m:f", "accuracy=naswot"], r"accuracy: naswot is a training-free score"),
    (["data=custom", "data.fn=m:f", "accuracy=supernet", "accuracy.checkpoint=x.pt"], r"accuracy: supernet"),
    (["ray.py_modules=['']"], r"ray\.py_modules\[0\]: must name a module or a path"),
])
def test_bad_custom_settings_are_refused_naming_the_key(overrides: list[str], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        validate(compose_config("+space=tiny", "target_ms=1", *overrides))


def test_a_custom_evaluator_may_be_stopped_early_and_trained_in_rungs() -> None:
    validate(compose_config("+space=tiny", "target_ms=1", "accuracy=custom", "accuracy.fn=m:f",
                            "search.scheduler=asha", "train.epochs=3"))
    validate(compose_config("+space=tiny", "target_ms=1", "accuracy=custom", "accuracy.fn=m:f",
                            "search.scheduler=asha", "+search.rungs=[{train_images:100,epochs:1},"
                            "{train_images:200,epochs:2}]"))


# ---------------------------------------------------------------------- finding and calling the user's functions


def _module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, text: str) -> None:
    (tmp_path / f"{name}.py").write_text(text)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, name, raising=False)


def test_a_module_that_cannot_be_found_or_imported_is_named_with_the_cause(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(UserCodeError, match=r"accuracy\.fn=no_such_mod:f: no module named 'no_such_mod' here"):
        plugins.load_function("accuracy.fn", "no_such_mod:f")
    _module(tmp_path, monkeypatch, "broken_mod", "x = 1\nraise RuntimeError('broken on purpose')\n")
    with pytest.raises(UserCodeError, match=r"importing it raised RuntimeError: broken on purpose "
                                            r"\(at broken_mod\.py:2 in <module>\)"):
        plugins.load_function("accuracy.fn", "broken_mod:f")
    _module(tmp_path, monkeypatch, "needs_mod", "import not_installed_pkg\n")
    with pytest.raises(UserCodeError, match=r"ModuleNotFoundError: No module named 'not_installed_pkg'.*install "
                                            r"that package where the trials run"):
        plugins.load_function("data.fn", "needs_mod:f")


def test_a_missing_or_uncallable_function_lists_what_the_module_has() -> None:
    with pytest.raises(UserCodeError, match=r"has no 'evaluat'; it has: .*constant.*fit_regression"):
        plugins.load_function("accuracy.fn", f"{MODULE}:evaluat")
    with pytest.raises(UserCodeError, match=r"'NOT_A_FUNCTION' is a int, not a function"):
        plugins.load_function("accuracy.fn", f"{MODULE}:NOT_A_FUNCTION")


def test_what_the_function_raises_is_the_users_but_timeouts_and_memory_pass_through() -> None:
    def boom() -> None:
        raise KeyError("head")

    with pytest.raises(UserCodeError, match=r"m:f: raised KeyError: 'head' \(at test_custom\.py:\d+ in boom\)"):
        plugins.call("accuracy.fn", "m:f", boom)

    def late() -> None:
        raise TrialTimeoutError("past the limit")

    with pytest.raises(TrialTimeoutError):
        plugins.call("accuracy.fn", "m:f", late)

    def oom() -> None:
        raise RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate 1 TB")

    with pytest.raises(RuntimeError, match="DefaultCPUAllocator"):  # the trial boundary reports it as out of memory
        plugins.call("accuracy.fn", "m:f", oom)


def test_metric_names_latnas_records_itself_are_refused() -> None:
    for name in ("reward", "accuracy", "latency_p50", "latency_in_search_p50", "accuracy_rung1", "naswot_score",
                 "params", "bad name!"):
        assert metric_name_problem(name), name
    for name in ("mse", "val_iou", "train_loss", "val_loss", "map_0.5"):
        assert not metric_name_problem(name), name


# ---------------------------------------------------------------------- one trial


def test_a_custom_score_is_weighed_against_latency_like_an_accuracy(digits: Any) -> None:
    reports = _trial(_ctx(digits, "constant"))
    assert [r["status"] for r in reports] == [COMPLETED]
    last = reports[0]
    assert last["accuracy"] == 0.5 and last["accuracy_estimator"] == "custom"
    assert last["reward"] == squared_penalty(0.5, last["latency_ms"], 0.5)


def test_reports_are_steps_and_the_returned_metrics_are_recorded_under_their_names(digits: Any) -> None:
    reports = _trial(_ctx(digits, "with_reports", epochs=3))
    assert [(r["status"], r["epoch"], r["accuracy"]) for r in reports] == [
        (RUNNING, 1, 0.2), (RUNNING, 2, 0.3), (COMPLETED, 2, 0.4)]
    for r in reports:
        assert r["reward"] == squared_penalty(r["accuracy"], r["latency_ms"], 0.5)
    cand = candidate_from_reports("t", reports[-1]["arch"], reports, {}, 0.0, 1.0)
    assert cand.status == COMPLETED and cand.accuracy == 0.4
    assert cand.metrics["seen"] == 3.0 and cand.metrics["budget_epochs"] == 3.0
    assert [(h["epoch"], h["accuracy"], h["seen"]) for h in cand.history] == [(1.0, 0.2, 1.0), (2.0, 0.4, 3.0)]


@pytest.mark.parametrize(("fn", "reason"), [
    ("raises", r"accuracy\.fn=tests\.nas\.user_code:raises: raised ValueError: the head does not fit "
               r"\(at user_code\.py:\d+ in raises\)"),
    ("returns_nan", r"the returned score must be finite, got nan"),
    ("returns_text", r"the returned score must be a number, got a str: 'good'"),
    ("returns_negative", r"the returned score is -0\.25, below 0: the reward multiplies the score"),
    ("reserved_metric", r"metric 'reward': LatNAS records a metric of that name"),
    ("no_score", r"returned a mapping without 'score' \(it has mse\)"),
    ("reports_nan", r"the score given to context\.report must be finite"),
    ("missing", r"has no 'missing'"),
])
def test_a_bad_evaluator_fails_the_candidate_with_the_reason(digits: Any, fn: str, reason: str) -> None:
    reports = _trial(_ctx(digits, fn))
    last = reports[-1]
    assert last["status"] == FAILED and last["failure_type"] == "UserCodeError", last.get("failure_reason")
    assert re.search(reason, last["failure_reason"]), last["failure_reason"]
    assert math.isnan(last["reward"]) and last["latency_ms"] > 0  # the latency side ran: it is recorded


def test_a_tensor_score_is_taken_as_its_number(digits: Any) -> None:
    assert _trial(_ctx(digits, "tensor_score"))[-1]["accuracy"] == 0.75


def test_a_regression_on_the_users_data_trains_the_one_channel_network(blobs: UserData) -> None:
    assert (blobs.num_classes, blobs.input_shape, blobs.n_train, blobs.n_val) == (2, (1, 16, 16), 64, 32)
    reports = _trial(_ctx(blobs, "fit_regression", epochs=2, channels=1))
    assert [r["status"] for r in reports] == [RUNNING, RUNNING, COMPLETED], reports[-1].get("failure_reason")
    metrics = json.loads(reports[-1]["user_metrics"])
    assert 0 < reports[-1]["accuracy"] <= 1 and metrics["val_mse"] > 0 and metrics["train_items"] == 64
    assert reports[-1]["accuracy"] == pytest.approx(1 / (1 + metrics["val_mse"]))


def test_a_features_only_space_hands_the_evaluator_the_backbone(digits: Any) -> None:
    import yaml

    raw = {**yaml.safe_load((SPACES_DIR / "tiny.yaml").read_text()), "features_only": True}
    space = SearchSpace.from_dict(raw)
    assert space.features_only
    last = _trial(_ctx(digits, "feature_map", space=space))[-1]
    assert last["status"] == COMPLETED, last.get("failure_reason")
    metrics = json.loads(last["user_metrics"])
    arch = space.decode(last["arch"])
    assert metrics["out_ndim"] == 4.0 and metrics["out_chs"] == build(arch, features_only=True).feature_chs


def test_each_rung_calls_the_evaluator_with_its_budget_on_the_same_network(digits: Any) -> None:
    rungs = (RungConfig(train_images=16, epochs=1), RungConfig(train_images=48, epochs=2))
    reports = _trial(_ctx(digits, "per_rung", rungs=rungs))
    ends = [r for r in reports if r["status"] == COMPLETED]
    assert [r["rung"] for r in ends] == [0, 1] and [r["accuracy"] for r in ends] == [0.2, pytest.approx(0.3)]
    assert [json.loads(r["user_metrics"])["seen_items"] for r in ends] == [16.0, 48.0]
    assert ends[-1]["accuracy_rung0"] == 0.2 and ends[-1]["epoch"] == 3


def test_the_workdir_is_the_candidates_own_folder(digits: Any, tmp_path: Path) -> None:
    from nas.trial.custom import EvalContext

    seen: list[Path] = []

    def fn(model: torch.nn.Module, context: EvalContext) -> float:
        seen.append(context.workdir)
        return 1.0

    import tests.nas.user_code as mod

    setattr(mod, "record_workdir", fn)  # noqa: B010  # a function of the user's module, found by name
    try:
        reports = _trial(_ctx(digits, "record_workdir", workdir=tmp_path / "trials"))
    finally:
        delattr(mod, "record_workdir")
    assert reports[-1]["status"] == COMPLETED
    assert seen == [tmp_path / "trials" / reports[-1]["arch_id"]] and seen[0].is_dir()


# ---------------------------------------------------------------------- the user's data


def test_uint8_images_are_standardised_and_classes_come_from_the_dataset() -> None:
    data = load_task(DataConfig(name="custom", fn=f"{MODULE}:classes", max_train_samples=48))
    assert isinstance(data, UserData)
    assert (data.num_classes, data.classes, data.n_train, data.n_val) == (4, ("a", "b", "c", "d"), 48, 32)
    assert data.input_dtype == "uint8" and data.mean is not None and len(data.mean) == 3
    x, y = data.sample_train(48, 0)
    z = data.normalise(x)
    assert z.dtype == torch.float32 and abs(float(z.mean())) < 0.2 and y.dtype == torch.int64


def test_the_built_in_recipe_trains_on_the_users_classes() -> None:
    data = load_task(DataConfig(name="custom", fn=f"{MODULE}:classes"))
    ctx = dataclasses.replace(_ctx(data), accuracy=AccuracyConfig())
    reports = _trial(ctx)
    assert [r["status"] for r in reports] == [RUNNING, COMPLETED], reports[-1].get("failure_reason")
    assert 0 <= reports[-1]["accuracy"] <= 1 and reports[-1]["val_loss"] > 0


@pytest.mark.parametrize(("body", "match"), [
    ("return TensorDataset(x, y)", r"returned a TensorDataset; return the training and validation datasets"),
    ("return {'train': TensorDataset(x, y)}", r"returned a mapping without val"),
    ("return TensorDataset(x[:0], y[:0]), TensorDataset(x, y)", r"the training dataset is empty"),
    ("return TensorDataset(x[:, 0], y), TensorDataset(x[:, 0], y)",
     r"train\[0\]: an input must have 3 dimensions \(C, H, W\)"),
    ("return TensorDataset(x, y), TensorDataset(x[:, :, :4], y)", r"training inputs are \(1, 8, 8\) but validation"),
    ("return 5, TensorDataset(x, y)", r"the training dataset is a int, not a map-style"),
    ("return [1, 2], TensorDataset(x, y)", r"train\[0\] is a int; each item must be an \(input, target\) pair"),
    ("return TensorDataset(x, y), TensorDataset(x, y)", r"the number of outputs is not known: set data\.num_classes"),
])
def test_bad_datasets_are_refused_in_the_driver_with_the_reason(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, body: str, match: str) -> None:
    _module(tmp_path, monkeypatch, "my_data", "import torch\nfrom torch.utils.data import TensorDataset\n"
            "def datasets():\n    x = torch.zeros(4, 1, 8, 8)\n    y = torch.zeros(4)\n    " + body + "\n")
    with pytest.raises(UserCodeError, match=r"data\.fn=my_data:datasets: " + match):
        load_task(DataConfig(name="custom", fn="my_data:datasets"))


def test_a_data_function_that_changes_its_split_fails_the_trial(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, digits: Any) -> None:
    _module(tmp_path, monkeypatch, "drifting", "import torch\nfrom torch.utils.data import TensorDataset\n"
            "CALLS = [0]\ndef datasets():\n    CALLS[0] += 1\n    n = 8 * CALLS[0]\n"
            "    return TensorDataset(torch.zeros(n, 3, 8, 8), torch.zeros(n, dtype=torch.long)), "
            "TensorDataset(torch.zeros(4, 3, 8, 8), torch.zeros(4, dtype=torch.long))\n")
    data = load_task(DataConfig(name="custom", fn="drifting:datasets", num_classes=2))
    from nas.data import custom

    monkeypatch.setattr(custom, "_LOADED", {})  # as in a trial process that has not called the function yet
    with pytest.raises(UserCodeError, match=r"returned 16 training and 4 validation items here but 8 and 4 in the "
                                            r"driver; it must return the same split every time"):
        data.datasets()


# ---------------------------------------------------------------------- the driver's check before any trial


def _refused(tmp_path: Path, *overrides: str) -> None:
    from nas.driver import run_search

    cfg = stored_config(tmp_path, "+space=tiny", "target_ms=1", "latency.input_shape=[1,3,32,32]",
                        "data.max_train_samples=64", "data.max_val_samples=32", "progress=false", *overrides)
    try:
        run_search(cfg)
    finally:  # refused before anything was created: no store, no search folder
        assert not (tmp_path / "mlflow.db").exists() and not (tmp_path / "out").exists()


@pytest.mark.parametrize(("fn", "match"), [
    ("raises", r"accuracy\.fn=tests\.nas\.user_code:raises: raised ValueError: the head does not fit"),
    ("returns_nan", r"the returned score must be finite"),
    ("no_such", r"has no 'no_such'"),
])
def test_a_broken_evaluator_stops_the_search_before_any_trial(tmp_path: Path, fn: str, match: str) -> None:
    with pytest.raises(UserCodeError, match=match):
        _refused(tmp_path, "accuracy=custom", f"accuracy.fn={MODULE}:{fn}")


def test_a_module_missing_in_the_starting_folder_stops_the_search(tmp_path: Path) -> None:
    with pytest.raises(UserCodeError, match=r"no module named 'my_eval' here"):
        _refused(tmp_path, "accuracy=custom", "accuracy.fn=my_eval:evaluate")


def test_settings_that_do_not_fit_the_users_data_or_space_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"latency\.input_shape: \[1, 3, 32, 32\] has 3 channels but data\.fn's "
                                          r"inputs have 1 .*latency\.input_shape=\[1,1,32,32\]"):
        _refused(tmp_path, "data=custom", f"data.fn={MODULE}:regression")
    with pytest.raises(UserCodeError, match=r"train\[0\]'s target is .*needs a class index: .*accuracy=custom"):
        _refused(tmp_path, "data=custom", f"data.fn={MODULE}:regression", "latency.input_shape=[1,1,32,32]")
    space = tmp_path / "space"
    space.mkdir()
    import yaml

    (space / "backbone.yaml").write_text(yaml.safe_dump(
        {**yaml.safe_load((SPACES_DIR / "tiny.yaml").read_text()), "name": "backbone", "features_only": True}))
    from nas.driver import run_search

    cfg = stored_config(tmp_path, "+space=tiny", "target_ms=1", "progress=false")
    cfg.space = yaml.safe_load((space / "backbone.yaml").read_text())
    with pytest.raises(ConfigError, match=r"accuracy: space 'backbone' is features_only .*accuracy=custom"):
        run_search(cfg)


# ---------------------------------------------------------------------- what is sent to the workers


def test_the_users_module_or_package_is_sent_and_installed_packages_are_not(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _module(tmp_path, monkeypatch, "lone_mod", "def f(m, c):\n    return 1.0\n")
    pkg = tmp_path / "my_pkg" / "sub"
    pkg.mkdir(parents=True)
    (tmp_path / "my_pkg" / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "evals.py").write_text("def f(m, c):\n    return 1.0\n")
    helper = tmp_path / "helper.py"
    helper.write_text("X = 1\n")
    paths = plugins.ship_paths({"accuracy.fn": "my_pkg.sub.evals:f", "data.fn": "lone_mod:f"}, [str(helper)])
    assert paths == [(tmp_path / "my_pkg").resolve(), (tmp_path / "lone_mod.py").resolve(), helper.resolve()]
    assert plugins.ship_paths({"accuracy.fn": "numpy.linalg:norm", "data.fn": "nas.cli:conf_dir"}, []) == []
    with pytest.raises(UserCodeError, match=r"ray\.py_modules\[0\]=nowhere_mod: is neither a path nor a module"):
        plugins.ship_paths({}, ["nowhere_mod"])
    monkeypatch.setattr(plugins, "SHIP_LIMIT_MB", 1e-6)
    with pytest.raises(UserCodeError, match=r"accuracy\.fn=my_pkg\.sub\.evals:f: .*my_pkg holds 0 MiB; what is sent"):
        plugins.ship_paths({"accuracy.fn": "my_pkg.sub.evals:f"}, [])



# ---------------------------------------------------------------------- the Python API


def test_the_api_names_functions_as_the_trials_import_them() -> None:
    from nas.api import compose, function_ref
    from tests.nas import user_code

    assert function_ref(user_code.constant, "evaluator") == f"{MODULE}:constant"
    with pytest.raises(ConfigError, match=r"evaluator: .*not a module-level function"):
        function_ref(lambda m, c: 1.0, "evaluator")
    cfg = compose("tiny", 2.5, evaluator=user_code.constant, data=user_code.regression,
                  evaluator_options={"lr": 0.1}, data_options={"n_train": 8}, overrides=["train.epochs=1"], name="x")
    assert (cfg.accuracy.estimator, cfg.accuracy.fn, cfg.accuracy.options) == ("custom", f"{MODULE}:constant",
                                                                             {"lr": 0.1})
    assert (cfg.data.name, cfg.data.fn, cfg.data.options) == ("custom", f"{MODULE}:regression", {"n_train": 8})
    assert (cfg.target_ms, cfg.train.epochs, cfg.name) == (2.5, 1, "x")
    assert cfg.space_source == "search_spaces/spaces/tiny.yaml"
    mapping = {"name": "mine", "stem_chs": [8], "block": {}, "stages": []}
    builtin = compose(mapping, 1.0, data="cifar10_jpeg")
    assert builtin.space == mapping and builtin.data.label == "cifar10_jpeg"
    with pytest.raises(TypeError, match=r"unexpected keyword argument\(s\) overide; the options are .*overrides"):
        compose("tiny", 1.0, overide=["train.epochs=1"])  # type: ignore[call-arg]  # a typo is not a setting left out


def test_a_script_that_searches_when_imported_is_told_to_guard_the_call(tmp_path: Path) -> None:
    import subprocess

    (tmp_path / "unguarded.py").write_text(
        "from nas.api import search\n\n\ndef evaluate(model, context):\n    return 1.0\n\n\n"
        f"search('tiny', 1.0, evaluator=evaluate, overrides=['tracking.uri=sqlite:///{tmp_path / 'mlflow.db'}'])\n")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    proc = subprocess.run([sys.executable, "unguarded.py"], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode != 0
    assert "UserCodeError: accuracy.fn=unguarded:evaluate: importing it raised ConfigError" in proc.stderr
    assert "put the call under `if __name__ == \"__main__\":`" in proc.stderr
    assert not (tmp_path / "mlflow.db").exists()
