"""Configuration: composition with Hydra, range checks, and errors before any trial starts."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from hydra.errors import ConfigCompositionException, MissingConfigException

from nas.core.config import SearchConfig, validate
from nas.core.errors import ClusterError, ConfigError, DataError, TrackingError
from nas.driver import run_search
from search_spaces import SearchSpace, SpaceConfigError, available_spaces
from search_spaces.space import SPACES_DIR
from tests.nas.configs import compose_config

ROOT = Path(__file__).resolve().parents[2]


def _compose(*overrides: str) -> SearchConfig:
    return compose_config(*overrides, space_source=None)


def _tiny(tmp_path: Path, **changes: Any) -> SearchConfig:
    cfg = _compose("+space=tiny", "target_ms=20")
    cfg.output_dir = str(tmp_path / "out")
    cfg.tracking.uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    cfg.progress = False
    for key, value in changes.items():
        group, _, field = key.partition("__")
        if field:
            setattr(getattr(cfg, group), field, value)
        else:
            setattr(cfg, key, value)
    return cfg


def test_defaults_compose_into_the_schema() -> None:
    cfg = _compose("+space=mobile", "target_ms=50")
    validate(cfg)
    assert cfg.target_ms == 50.0
    assert cfg.latency.backend == "onnxruntime"
    assert cfg.latency.input_shape == [1, 3, 224, 224]
    assert cfg.latency.options["intra_op_threads"] == 1
    assert cfg.data.name == "digits"
    assert (cfg.search.sampler, cfg.search.scheduler, cfg.search.reward) == ("tpe", "fifo", "squared")
    assert cfg.ray.address is None and cfg.tracking.uri is None


def test_space_group_passes_the_yaml_through_unchanged() -> None:
    cfg = _compose("+space=mobile", "target_ms=50")
    raw = yaml.safe_load((SPACES_DIR / "mobile.yaml").read_text())
    assert cfg.space == raw
    space = SearchSpace.from_dict(cfg.space, source="search_spaces/spaces/mobile.yaml")
    assert space.name == "mobile"


def test_group_options_switch() -> None:
    cfg = _compose("+space=tiny", "target_ms=5", "accuracy=naswot", "data=cifar10", "latency=torch",
                   "search.sampler=nsga2", "search.scheduler=fifo")
    assert cfg.accuracy.estimator == "naswot"
    assert cfg.data.name == "cifar10" and cfg.data.max_train_samples == 10000
    assert cfg.latency.backend == "torch"
    with pytest.raises(ConfigError, match=r"data\.path.*data=cifar10"):
        validate(cfg)


def test_cifar10_jpeg_is_loaded_as_an_image_folder_and_called_cifar10_jpeg() -> None:
    cfg = _compose("+space=tiny", "target_ms=5", "data=cifar10_jpeg")
    assert (cfg.data.name, cfg.data.label, cfg.data.display_name) == ("image_folder", "cifar10_jpeg", "cifar10_jpeg")
    with pytest.raises(ConfigError, match=r"data\.path: data=cifar10_jpeg reads"):
        validate(cfg)
    plain = _compose("+space=tiny", "target_ms=5", "data=image_folder")
    assert plain.data.label is None and plain.data.display_name == "image_folder"
    with pytest.raises(ConfigError, match=r"data\.label"):
        validate(_compose("+space=tiny", "target_ms=5", "data.label= "))


def test_cifar10_jpeg_searches_with_the_cpu_rungs_unless_told_otherwise() -> None:
    # The README's CIFAR-10 command: multi-fidelity by default, one key raises the top rung, and a
    # user's own n_trials or ~data_rungs still wins.
    def rungs(cfg: SearchConfig) -> list[tuple[int, int]]:
        return [(r.train_images, r.epochs) for r in cfg.search.rungs]

    cpu = _compose("+space=mobile_cifar", "target_ms=5", "data=cifar10_jpeg")
    assert (cpu.search.scheduler, cpu.search.reduction_factor, cpu.search.n_trials) == ("asha", 3, 9)
    assert rungs(cpu) == [(10000, 3), (20000, 8)] and cpu.data.max_train_samples is None
    gpu = _compose("+space=mobile_cifar", "target_ms=5", "data=cifar10_jpeg", "+rungs=cifar10_gpu")
    assert rungs(gpu)[:2] == rungs(cpu) and rungs(gpu)[-1] == (45000, 30) and gpu.search.n_trials == 27
    mine = _compose("+space=mobile_cifar", "target_ms=5", "data=cifar10_jpeg", "search.n_trials=4")
    assert mine.search.n_trials == 4 and rungs(mine) == rungs(cpu)
    off = _compose("+space=mobile_cifar", "target_ms=5", "data=cifar10_jpeg", "~data_rungs")
    assert (off.search.scheduler, off.search.rungs, off.search.n_trials) == ("fifo", [], 20)


def test_unknown_group_option_lists_the_options() -> None:
    with pytest.raises(MissingConfigException, match=r"data/imagenet") as err:
        _compose("+space=tiny", "target_ms=5", "data=imagenet")
    assert "digits" in str(err.value) and "cifar10" in str(err.value)


def test_unknown_space_lists_the_spaces() -> None:
    with pytest.raises(MissingConfigException, match=r"space/huge") as err:
        _compose("+space=huge", "target_ms=5")
    assert "mobile" in str(err.value) and "tiny" in str(err.value)


def test_wrong_type_and_unknown_key_name_the_key() -> None:
    with pytest.raises(ConfigCompositionException) as err:
        _compose("+space=tiny", "target_ms=abc")
    assert "target_ms" in str(err.value.__cause__) or "target_ms" in str(err.value)
    with pytest.raises(ConfigCompositionException) as err:
        _compose("+space=tiny", "target_ms=5", "train.epoch=3")
    assert "epoch" in str(err.value) + str(err.value.__cause__)


@pytest.mark.parametrize(
    ("group", "field", "value", "key"),
    [
        (None, "target_ms", 0.0, "target_ms"),
        (None, "target_ms", -5.0, "target_ms"),
        (None, "target_ms", float("nan"), "target_ms"),
        (None, "target_ms", None, "target_ms"),
        (None, "top_k", 0, "top_k"),
        (None, "name", "has space", "name"),
        ("search", "n_trials", 0, "search.n_trials"),
        ("search", "max_concurrent", 0, "search.max_concurrent"),
        ("search", "sampler", "cmaes", "search.sampler"),
        ("latency", "target_stat", "p42", "latency.target_stat"),
        ("latency", "scenario", "batched", "latency.scenario"),
        ("latency", "final_pass_top_k", -1, "latency.final_pass_top_k"),
        ("latency", "preprocessing", "gif", "latency.preprocessing"),
        ("search", "reward", "cubic", "search.reward"),
        ("search", "scheduler", "hyperband", "search.scheduler"),
        ("train", "epochs", 0, "train.epochs"),
        ("train", "lr", -0.1, "train.lr"),
        ("train", "optimizer", "lion", "train.optimizer"),
        ("train", "lr_schedule", "step", "train.lr_schedule"),
        ("train", "device", "tpu", "train.device"),
        ("train", "momentum", 1.0, "train.momentum"),
        ("data", "name", "imagenet", "data.name"),
        ("data", "resolution", 4, "data.resolution"),
        ("data", "val_fraction", 0.0, "data.val_fraction"),
        ("accuracy", "estimator", "zen", "accuracy.estimator"),
        ("latency", "input_shape", [1, 3, 224], "latency.input_shape"),
        ("ray", "address", "not an address", "ray.address"),
        ("ray", "cpus_per_trial", 0.0, "ray.cpus_per_trial"),
        ("ray", "gpus_per_trial", -1.0, "ray.gpus_per_trial"),
        ("ray", "num_cpus", 0, "ray.num_cpus"),
        ("tracking", "experiment", " ", "tracking.experiment"),
    ],
)
def test_range_checks_name_the_key(group: str | None, field: str, value: Any, key: str) -> None:
    cfg = _compose("+space=tiny", "target_ms=5")
    setattr(getattr(cfg, group) if group else cfg, field, value)
    with pytest.raises(ConfigError) as err:
        validate(cfg)
    assert err.value.key == key
    assert str(err.value).startswith(f"{key}:")


def test_asha_needs_training_and_room_to_stop() -> None:
    cfg = _compose("+space=tiny", "target_ms=5", "search.scheduler=asha", "train.epochs=4")
    validate(cfg)
    cfg.accuracy.estimator = "naswot"
    with pytest.raises(ConfigError, match="needs accuracy=train"):
        validate(cfg)
    cfg = _compose("+space=tiny", "target_ms=5", "search.scheduler=asha", "train.epochs=1")
    with pytest.raises(ConfigError, match="grace_period"):
        validate(cfg)


def test_no_space_is_a_config_error() -> None:
    cfg = SearchConfig(target_ms=5.0)
    with pytest.raises(ConfigError, match=r"\+space=<name>"):
        validate(cfg)


# ---------------------------------------------------------------------- before any trial


def _no_runs(tmp_path: Path) -> bool:
    from mlflow import MlflowClient

    db = tmp_path / "mlflow.db"
    if not db.exists():
        return True
    client = MlflowClient(f"sqlite:///{db}")
    return all(not client.search_runs([e.experiment_id]) for e in client.search_experiments())


def test_invalid_space_values_fail_with_the_source(tmp_path: Path) -> None:
    cfg = _tiny(tmp_path, space_source="search_spaces/spaces/tiny.yaml")
    assert cfg.space is not None
    cfg.space["stem_chs"] = [0]
    with pytest.raises(SpaceConfigError, match=r"search_spaces/spaces/tiny\.yaml.*stem_chs"):
        run_search(cfg)
    assert _no_runs(tmp_path)


def test_missing_data_path_fails_before_trials(tmp_path: Path) -> None:
    cfg = _tiny(tmp_path)
    cfg.data = dataclasses.replace(cfg.data, name="cifar10", path=str(tmp_path / "nowhere"))
    with pytest.raises(DataError, match=r"nowhere.*does not exist"):
        run_search(cfg)
    assert _no_runs(tmp_path)


def test_unreachable_tracking_uri_fails_before_trials(tmp_path: Path) -> None:
    cfg = _tiny(tmp_path)
    cfg.tracking.uri = "http://127.0.0.1:9"
    with pytest.raises(TrackingError, match=r"tracking\.uri.*cannot reach the MLflow server at 127\.0\.0\.1:9"):
        run_search(cfg)
    cfg.tracking.uri = f"sqlite:///{tmp_path / 'missing_dir' / 'mlflow.db'}"
    with pytest.raises(TrackingError, match="does not exist"):
        run_search(cfg)


def test_unreachable_ray_address_fails_before_trials(tmp_path: Path) -> None:
    cfg = _tiny(tmp_path)
    cfg.ray.address = "127.0.0.1:9"
    with pytest.raises(ClusterError, match=r"ray\.address.*cannot reach a Ray cluster at 127\.0\.0\.1:9"):
        run_search(cfg)
    assert _no_runs(tmp_path)


def test_bad_latency_option_fails_before_trials(tmp_path: Path) -> None:
    from latency_predictor import LatencyError

    cfg = _tiny(tmp_path)
    cfg.latency.options["warp_speed"] = True
    with pytest.raises(LatencyError, match="warp_speed"):
        run_search(cfg)
    assert _no_runs(tmp_path)


# ---------------------------------------------------------------------- the command line


def _cli(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HYDRA_")}
    return subprocess.run(
        [sys.executable, "-m", "nas.search", *args], cwd=tmp_path, capture_output=True, text=True, timeout=120,
        env=env,
    )


@pytest.mark.slow
def test_cli_without_space_lists_spaces(tmp_path: Path) -> None:
    proc = _cli(tmp_path)
    assert proc.returncode == 2
    assert "+space=<name>" in proc.stderr
    assert "python -m nas.search +space=mobile target_ms=50" in proc.stderr
    assert f"available spaces: {', '.join(available_spaces())}" in proc.stderr and "mobile_cifar" in proc.stderr


@pytest.mark.slow
@pytest.mark.ci
def test_cli_bad_input_exits_non_zero_with_a_clear_message(tmp_path: Path) -> None:
    proc = _cli(tmp_path, "+space=tiny", "target_ms=0")
    assert proc.returncode == 2
    assert "error: target_ms: must be a finite number > 0, got 0.0" in proc.stderr
    assert not (tmp_path / "mlflow.db").exists()
    proc = _cli(tmp_path, "+space=tiny", "target_ms=5", "search=bogus")
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == ["error: search=bogus: no such option; search has default"]


@pytest.mark.parametrize(("overrides", "key", "words"), [
    (["latency.scenario=server"], "latency.throughput_goal", "images per second"),
    (["latency.scenario=server", "latency.throughput_goal=100", "latency.batch_sizes=[]"], "latency.batch_sizes",
     "at least one batch size"),
    (["latency.scenario=server", "latency.throughput_goal=100", "latency.batch_sizes=[1,-2]"], "latency.batch_sizes",
     "got -2"),
    (["latency.scenario=server", "latency.throughput_goal=0"], "latency.throughput_goal", r"> 0, got 0\.0"),
    (["latency=predictor", "latency.scenario=server", "latency.throughput_goal=100"], "latency.scenario",
     "a predictor predicts batch 1"),
])
def test_the_server_scenario_is_checked_before_any_trial(overrides: list[str], key: str, words: str) -> None:
    cfg = _compose("+space=tiny", "target_ms=5", *overrides)
    with pytest.raises(ConfigError, match=words) as err:
        validate(cfg)
    assert err.value.key == key


@pytest.mark.parametrize(("overrides", "words"), [
    (["latency.source_size=[480]"], "[height, width]"),
    (["latency=predictor", "latency.options.path=p.json"], "another device's latency"),
    (["latency.scenario=server", "latency.throughput_goal=100"], "one request at a time"),
])
def test_an_input_pipeline_that_cannot_be_added_is_refused_before_any_trial(overrides: list[str], words: str) -> None:
    cfg = _compose("+space=tiny", "target_ms=5", "latency.preprocessing=jpeg", *overrides)
    with pytest.raises(ConfigError) as err:
        validate(cfg)
    assert err.value.key == "latency.preprocessing" and words in str(err.value)
