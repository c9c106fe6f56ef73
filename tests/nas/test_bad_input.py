"""Bad input is refused before the first trial, with a message that names the key and the fix.

Complements tests/nas/test_config.py (range checks of every group, missing dataset, unreachable
MLflow store and Ray address, bad latency option): the keys of reliability (time limit,
retries, resume), the output folder, the latency protocol's settings, fault-injection specs and
searches that already exist.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hydra.errors import ConfigCompositionException, MissingConfigException
from mlflow import MlflowClient

from latency_predictor import BackendUnavailableError
from latency_predictor import ConfigError as LatencyConfigError
from latency_predictor.measurement.environment import usable_cpus
from nas.core.config import SearchConfig, validate
from nas.core.errors import ConfigError, FaultSpecError
from nas.driver import run_search
from nas.trial.faults import ENV_VAR
from tests.nas.configs import compose_config

FAST = ("+space=tiny", "target_ms=5", "progress=false", "accuracy=naswot", "data.max_train_samples=64",
        "data.max_val_samples=32", "data.resolution=16", "latency.input_shape=[1,3,32,32]",
        "latency.measure.min_runs=10", "latency.measure.min_time_s=0.05", "latency.measure.max_time_s=0.3",
        "latency.measure.max_repeats=1")


_compose = compose_config


def _config(tmp_path: Path, *overrides: str) -> SearchConfig:
    return _compose(*FAST, f"tracking.uri=sqlite:///{tmp_path / 'mlflow.db'}", f"output_dir={tmp_path / 'out'}",
                    *overrides)


def _n_runs(tmp_path: Path) -> int:
    db = tmp_path / "mlflow.db"
    if not db.exists():
        return 0
    client = MlflowClient(f"sqlite:///{db}")
    return sum(len(client.search_runs([e.experiment_id])) for e in client.search_experiments())


@pytest.mark.parametrize(
    ("override", "named"),
    [
        ("train.epoch=3", "epoch"),  # unknown key in a group
        ("n_trials=5", "n_trials"),  # a group's key given at the top level
        ("search.n_trials=ten", "search.n_trials"),  # wrong type
        ("search.trial_timeout_s=soon", "search.trial_timeout_s"),
        ("search.max_retries=1.5", "search.max_retries"),
        ("resume=perhaps", "resume"),
        ("latency.input_shape=abc", "latency.input_shape"),
    ],
)
def test_composition_names_the_key(override: str, named: str) -> None:
    with pytest.raises(ConfigCompositionException) as err:
        _compose("+space=tiny", "target_ms=5", override)
    text = f"{err.value} {err.value.__cause__}"
    assert named.rsplit(".", 1)[-1] in text, text


def test_unknown_option_lists_the_options() -> None:
    with pytest.raises(MissingConfigException) as err:
        _compose("+space=tiny", "target_ms=5", "search=bayes")
    assert "search/bayes" in str(err.value) and "default" in str(err.value)


@pytest.mark.parametrize(
    ("overrides", "key", "fix"),
    [
        (("search.trial_timeout_s=0",), "search.trial_timeout_s", "> 0"),
        (("search.trial_timeout_s=-3",), "search.trial_timeout_s", "> 0"),
        (("search.max_retries=-1",), "search.max_retries", ">= 0"),
        (("resume=true",), "resume", "name="),
    ],
)
def test_range_checks_of_the_reliability_keys(overrides: tuple[str, ...], key: str, fix: str) -> None:
    with pytest.raises(ConfigError) as err:
        validate(_compose("+space=tiny", "target_ms=5", *overrides))
    assert err.value.key == key and fix in str(err.value)


def test_an_output_dir_that_cannot_be_written_fails_before_trials(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder\n")
    cfg = _config(tmp_path, f"output_dir={blocker / 'out'}")
    problem = r"^output_dir: cannot write .*is a file, not a folder; choose a folder you can write"
    with pytest.raises(ConfigError, match=problem) as err:
        run_search(cfg)
    assert err.value.key == "output_dir" and _n_runs(tmp_path) == 0


def test_bad_latency_protocol_settings_name_the_group(tmp_path: Path) -> None:
    cfg = _config(tmp_path, "latency.measure.min_time_s=2", "latency.measure.max_time_s=1")
    with pytest.raises(LatencyConfigError, match=r"^latency \(backend 'onnxruntime'\): .*max_time_s.*latency\.measure"):
        run_search(cfg)
    assert _n_runs(tmp_path) == 0


@pytest.mark.skipif(importlib.util.find_spec("openvino") is None,
                    reason="OpenVINO not installed: pip install 'latnas[openvino]'")
def test_a_runtime_setting_the_machine_cannot_give_fails_before_trials(tmp_path: Path) -> None:
    cfg = _config(tmp_path, "latency=openvino", f"latency.options.intra_op_threads={usable_cpus() + 1}")
    with pytest.raises(LatencyConfigError, match=rf"^latency \(backend 'openvino'\): intra_op_threads="
                       rf"{usable_cpus() + 1} is more than the {usable_cpus()} CPU"):
        run_search(cfg)
    assert _n_runs(tmp_path) == 0


@pytest.mark.parametrize(("backend", "module"), [("openvino", "openvino"), ("litert", "ai_edge_litert")])
def test_a_runtime_that_is_not_installed_names_its_extra_before_trials(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, backend: str, module: str,
) -> None:
    monkeypatch.setitem(sys.modules, module, None)  # what its import meets where it is not installed
    with pytest.raises(BackendUnavailableError, match=rf"pip install 'latnas\[{backend}\]'"):
        run_search(_config(tmp_path, f"latency={backend}"))
    assert _n_runs(tmp_path) == 0


def test_a_malformed_fault_spec_fails_before_trials(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_VAR, "measure@20%")
    with pytest.raises(FaultSpecError, match=ENV_VAR):
        run_search(_config(tmp_path))
    assert _n_runs(tmp_path) == 0


@pytest.mark.parametrize(
    ("overrides", "key", "says"),
    [
        (("target_anchor=mobilenetv2_100@0.35",), "target_anchor",
         "target_ms and target_anchor are two targets: give one"),
        (("target_ms=null", "target_anchor=resnet50@0.5"), "target_anchor",
         r"unknown reference network 'resnet50'.*\['efficientnet_b0', 'mnasnet_b1', 'mobilenetv2_100'\]"),
        (("target_ms=null", "target_anchor=mobilenetv2_100@2"), "target_anchor", "must be a number from 0.25 to 1.4"),
        (("latency.anchor=mnasnet_b1@0.1",), "latency.anchor", "must be a number from 0.25 to 1.4"),
        (("target_ms=null", "target_anchor=mobilenetv2_100", "target_x=0"), "target_x", "finite number > 0"),
        (("target_ms=null", "target_anchor=mobilenetv2_100", "target_x=-1.5"), "target_x", "finite number > 0"),
        (("target_x=1.2",), "target_x", "scales target_anchor, which is not set"),
        (("target_ms=null", "target_anchor=mobilenetv2_100@0.5", "latency.anchor=mobilenetv2_100@0.35"),
         "latency.anchor", "is not the network of target_anchor"),
        (("target_ms=null", "target_anchor=mobilenetv2_100@0.35", "latency=predictor",
          "latency.options.path=/nonexistent/predictor.json"), "target_anchor",
         "latency=predictor predicts them and measures nothing to pair it with: add latency.options.hybrid=true"),
        (("latency.anchor=efficientnet_b0", "latency=predictor", "latency.options.path=/nonexistent/predictor.json"),
         "latency.anchor", "measures nothing to pair it with"),
        (("target_ms=null",), "target_ms", "target_anchor=mobilenetv2_100@0.35"),
    ],
)
def test_a_bad_anchor_or_relative_target_fails_before_anything_is_created(
    tmp_path: Path, overrides: tuple[str, ...], key: str, says: str,
) -> None:
    if "latency=predictor" in overrides:  # its group has no protocol settings of its own to shorten
        cfg = _compose("+space=tiny", "target_ms=5", f"tracking.uri=sqlite:///{tmp_path / 'mlflow.db'}",
                       f"output_dir={tmp_path / 'out'}", *overrides)
    else:
        cfg = _config(tmp_path, *overrides)
    with pytest.raises(ConfigError, match=says) as err:
        run_search(cfg)
    assert err.value.key == key
    assert _n_runs(tmp_path) == 0 and not (tmp_path / "out").exists()


def test_resuming_a_search_that_does_not_exist(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"^resume: no search named 'ghost'.*check name= and tracking\.uri="):
        run_search(_config(tmp_path, "name=ghost", "resume=true"))
    assert _n_runs(tmp_path) == 0


@pytest.mark.slow
@pytest.mark.usefixtures("ray_cluster")
def test_an_existing_search_is_resumed_only_on_request_and_with_its_settings(tmp_path: Path) -> None:
    first = run_search(_config(tmp_path, "name=once", "search.n_trials=1"))
    assert first.status == "FINISHED" and _n_runs(tmp_path) == 2
    with pytest.raises(ConfigError, match=r"^name: a search named 'once' is already recorded.*resume=true"):
        run_search(_config(tmp_path, "name=once", "search.n_trials=1"))
    with pytest.raises(ConfigError, match=r"^resume: .*target_ms=5\.0 \(now 7\.0\).*another name") as err:
        run_search(_config(tmp_path, "name=once", "resume=true", "target_ms=7", "search.n_trials=1"))
    assert "search.n_trials" not in str(err.value)
    assert _n_runs(tmp_path) == 2
    # With its settings, a finished search resumes to nothing left to run, under the same parent run.
    again = run_search(_config(tmp_path, "name=once", "resume=true", "search.n_trials=1"))
    assert again.parent_run_id == first.parent_run_id and again.resumed == 1 and again.ray_trials == 0
    assert again.status == "FINISHED" and _n_runs(tmp_path) == 2


@pytest.mark.slow
@pytest.mark.ci
def test_cli_resume_without_a_name(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HYDRA_")}
    proc = subprocess.run([sys.executable, "-m", "nas.search", "+space=tiny", "target_ms=5", "resume=true"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 2
    assert "error: resume: resume=true continues a named search: add name=<the search's name>" in proc.stderr
    assert not (tmp_path / "mlflow.db").exists()
