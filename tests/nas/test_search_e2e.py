"""End to end: a real 4-trial search on digits, a real local Ray cluster, a real SQLite MLflow
store and real ONNX Runtime measurements; the record is checked against itself."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
from mlflow import MlflowClient

from nas.core.config import SearchConfig
from nas.core.record import FINAL_METRICS
from nas.core.reward import squared_penalty
from nas.driver import run_search
from search_spaces import Arch, load_space
from tests.nas.configs import stored_config

# how far a reward recomputed from recorded figures may lie from the recorded one (see below)
REWARD_REL = 2e-4
CHILD_PARAMS = ("arch", "arch_id")
CHILD_TAGS = ("status", "latency_source", "latency_backend", "accuracy_estimator", "mlflow.parentRunId")
PARENT_ARTIFACTS = {"best_arch.json", "best_arch.txt", "leaderboard.csv", "leaderboard_table.json", "config.yaml",
                    "space.yaml"}


def _config(tmp_path: Path, *overrides: str) -> SearchConfig:
    return stored_config(
        tmp_path, "+space=tiny", "target_ms=1.0", "search.n_trials=4", "search.max_concurrent=2",
        "data.max_train_samples=512", "data.max_val_samples=256", "train.epochs=2",
        "latency.measure.min_runs=20", "latency.measure.min_time_s=0.2", "latency.measure.max_time_s=1.0",
        "latency.measure.max_repeats=1", "progress=false", "name=e2e", *overrides,
    )


@pytest.mark.slow
@pytest.mark.ci
@pytest.mark.usefixtures("ray_cluster")
def test_four_trial_search_is_recorded_faithfully(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = _config(tmp_path)
    result = run_search(cfg)
    out = capsys.readouterr().out
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    exp = client.get_experiment_by_name("latnas")
    assert exp is not None
    runs = client.search_runs([exp.experiment_id])
    parents = [r for r in runs if r.data.tags.get("latnas.role") == "search"]
    children = [r for r in runs if r.data.tags.get("latnas.role") == "candidate"]
    assert len(parents) == 1 and len(children) == 4 and len(runs) == 5
    parent = parents[0]
    assert parent.info.run_id == result.parent_run_id and parent.info.run_name == "e2e"
    assert parent.info.status == "FINISHED" and all(r.info.status == "FINISHED" for r in children)

    # The parent: config, environment, summary, artifacts.
    p = parent.data
    assert p.params["space"] == "tiny" and p.params["target_ms"] == "1.0" and p.params["search.seed"] == "0"
    assert p.params["latency.backend"] == "onnxruntime" and p.params["search.n_trials"] == "4"
    assert p.tags["version.ray"] and p.tags["version.mlflow"] and p.tags["train_device"] == "cpu"
    assert p.tags["mlflow.source.git.commit"]
    assert p.metrics["n_completed"] == 4 and p.metrics["n_failed"] == 0
    assert {a.path for a in client.list_artifacts(parent.info.run_id)} == PARENT_ARTIFACTS

    space = load_space("tiny")
    space_decisions = {d.name for d in space.choices()}
    for child in children:
        d = child.data
        assert d.tags["mlflow.parentRunId"] == parent.info.run_id
        for key in CHILD_TAGS:
            assert d.tags[key], key
        assert d.tags["status"] == "COMPLETED" and d.tags["latency_source"] == "measured"
        assert d.tags["accuracy_estimator"] == "train"
        for key in FINAL_METRICS:
            assert key in d.metrics, key
        arch = Arch.decode(d.params["arch"])
        assert d.params["arch_id"] == arch.arch_id
        # The run's name says what it is in the UI's list: "<arch_id> acc 0.xxx 1.23 ms ✓" (✗: misses the target).
        assert child.info.run_name.startswith(f"{arch.arch_id} acc {d.metrics['accuracy']:.3f} ")
        assert child.info.run_name.endswith(" ms ✓" if d.metrics["meets_target"] else " ms ✗")
        decisions = {k: v for k, v in d.params.items() if k in space_decisions}
        assert set(decisions) == set(space.to_decisions(arch))
        assert space.from_decisions({k: type(space.to_decisions(arch)[k])(v) for k, v in decisions.items()}) == arch
        m = d.metrics
        # figures are recorded with 5 significant digits (nas.core.record.figure), the reward from unrounded ones:
        # accuracy, latency (squared) and the reward each carry up to 5e-5 of relative rounding, 2e-4 in all
        assert m["reward"] == pytest.approx(squared_penalty(m["accuracy"], m["latency_p50"], 1.0), rel=REWARD_REL)
        assert m["meets_target"] == float(m["latency_p50"] <= 1.0)
        assert m["latency_p50"] <= m["latency_p90"] <= m["latency_p99"]
        assert m["latency_ms"] == m["latency_p50"]
        # The final latency pass measured every candidate again (4 <= its top 5): the figures above
        # are the final ones, the in-search ones are kept beside them and in the metric's history.
        assert d.tags["latency_final_pass"] == "true"
        assert m["latency_in_search_p50"] > 0 and m["reward_in_search"] == pytest.approx(
            squared_penalty(m["accuracy"], m["latency_in_search_p50"], 1.0), rel=REWARD_REL)
        p50s = [h.value for h in sorted(client.get_metric_history(child.info.run_id, "latency_p50"),
                                        key=lambda h: (h.step, h.timestamp))]
        assert len(p50s) == 2 and p50s == [m["latency_in_search_p50"], m["latency_p50"]]
        history = client.get_metric_history(child.info.run_id, "accuracy")
        assert sorted(h.step for h in history) == [1, 2] and max(history, key=lambda h: h.step).value == m["accuracy"]
    assert len({c.data.params["arch"] for c in children}) == 4  # never the same network twice

    # The best: returned, printed, and MLflow's best agree.
    best_run = client.search_runs(
        [exp.experiment_id], "tags.`latnas.role` = 'candidate'", order_by=["metrics.reward DESC"], max_results=1
    )[0]
    assert result.best is not None
    assert result.best.arch_id == best_run.data.params["arch_id"]
    assert result.best.metrics["reward"] == best_run.data.metrics["reward"]
    assert p.tags["best_arch_id"] == result.best.arch_id
    assert p.metrics["best_reward"] == best_run.data.metrics["reward"]
    assert f"Best: {result.best.arch_id}  reward {best_run.data.metrics['reward']:.4f}" in out
    assert "mlflow ui --backend-store-uri sqlite:///" in out and "--host 127.0.0.1" in out
    best_json = json.loads((tmp_path / "out" / "best_arch.json").read_text())
    assert best_json["arch"] == best_run.data.params["arch"] and best_json["run_id"] == best_run.info.run_id
    with (tmp_path / "out" / "leaderboard.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert rows[0]["arch_id"] == result.best.arch_id and len(rows) == 4
    assert all(float(r["latency_in_search_p50"]) > 0 for r in rows)
    assert "Final latency pass: 4 candidates" in out and "in_search_p50" in out and "measured (final pass)" in out
    assert p.metrics["final_pass_candidates"] == 4 and p.metrics["final_pass_ratio_median"] > 0
    assert len(result.final_pass.measured) == 4
    assert Path(result.ray_experiment_path).is_absolute() and Path(result.ray_experiment_path).exists()


@pytest.mark.slow
@pytest.mark.ci
@pytest.mark.usefixtures("ray_cluster")
def test_a_search_on_cifar10_jpeg_is_called_cifar10_jpeg(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # data=cifar10_jpeg loads an image folder: the log, the record and best_arch.json call it cifar10_jpeg.
    from PIL import Image

    rng = np.random.default_rng(0)
    for cls in ("cat", "dog"):
        folder = tmp_path / "images" / cls
        folder.mkdir(parents=True)
        for i in range(10):
            Image.fromarray(rng.integers(0, 255, (24, 24, 3), dtype=np.uint8)).save(folder / f"{i}.png")
    cfg = _config(tmp_path, "data=cifar10_jpeg", "~data_rungs", f"data.path={tmp_path / 'images'}",
                  "data.resolution=16", f"data.cache_dir={tmp_path / 'cache'}", "search.n_trials=1", "train.epochs=1",
                  "name=jpeg")
    result = run_search(cfg)
    assert f"search jpeg: loading data (cifar10_jpeg, {tmp_path / 'images'})" in capsys.readouterr().err
    parent = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}").get_run(result.parent_run_id).data
    assert parent.params["data.name"] == "image_folder" and parent.params["data.label"] == "cifar10_jpeg"
    assert parent.tags["dataset"] == "cifar10_jpeg"
    assert json.loads((tmp_path / "out" / "best_arch.json").read_text())["dataset"] == "cifar10_jpeg"
