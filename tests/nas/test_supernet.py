"""One-shot accuracy: a real (tiny) supernet training, its checkpoint and record, the checks that
refuse a checkpoint made for another setting, and the supernet's accuracy where the search, the
export and the fidelity study use it."""

from __future__ import annotations

import dataclasses
import json
import pickle
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import yaml
from mlflow import MlflowClient

from nas.accuracy.training import train_briefly
from nas.core.config import (
    AccuracyConfig,
    DataConfig,
    ExportConfig,
    LatencyConfig,
    RungConfig,
    SupernetConfig,
    SupernetEstimateConfig,
    TrackingConfig,
    TrainConfig,
)
from nas.core.errors import ConfigError, SupernetError, SupernetMismatchError
from nas.core.record import COMPLETED
from nas.data import load_dataset
from nas.deploy.export import ExportTarget, export_candidate
from nas.driver import run_search
from nas.oneshot.subnet import (
    SupernetTarget,
    check_supernet,
    load_supernet,
    read_checkpoint,
    recalibrated_subnet,
    subnet_accuracy,
)
from nas.oneshot.train import SupernetResult, run_supernet
from nas.trial.evaluate import TrialContext, evaluate_candidate
from nas.trial.rungs import RungCheckpoints
from search_spaces import load_space
from search_spaces.space import SPACES_DIR
from tests.nas.configs import stored_config

DATA = DataConfig(resolution=16, max_train_samples=64, max_val_samples=96)
FAST_MEASURE = {"warmup_runs": 2, "warmup_s": 0.0, "min_runs": 10, "min_time_s": 0.0, "max_time_s": 1.0,
                "max_repeats": 1}


def tiny_space() -> dict[str, Any]:
    return dict(yaml.safe_load((SPACES_DIR / "tiny.yaml").read_text()))


pytestmark = pytest.mark.usefixtures("one_torch_thread")  # small networks: one torch thread


def test_training_checkpoints_every_epoch_and_is_recorded_with_its_checkpoint(trained_supernet: SupernetResult) -> None:
    payload = read_checkpoint(trained_supernet.checkpoint)
    assert payload["epoch"] == 2 and [r["epoch"] for r in payload["history"]] == [1, 2]
    for row in payload["history"]:
        assert row["images"] == 64 and 0 <= row["accuracy_smallest"] <= 1 and 0 <= row["accuracy_largest"] <= 1
    assert payload["target"]["space"] == "tiny" and payload["target"]["resolution"] == 16
    history = json.loads((trained_supernet.folder / "history.json").read_text())
    assert history["epoch"] == 2 and history["mlflow_run_id"] == trained_supernet.run_id
    uri = f"sqlite:///{trained_supernet.folder.parent / 'mlflow.db'}"
    client = MlflowClient(uri)
    run = client.get_run(str(trained_supernet.run_id))
    assert run.info.status == "FINISHED" and run.data.tags["latnas.role"] == "supernet"
    assert [m.step for m in client.get_metric_history(run.info.run_id, "loss_largest")] == [1, 2]
    assert {f.path for f in client.list_artifacts(run.info.run_id)} >= {"supernet.pt", "history.json"}


def test_the_same_command_again_finds_it_trained_and_other_settings_are_refused(
    trained_supernet: SupernetResult,
) -> None:
    folder = trained_supernet.folder
    cfg = SupernetConfig(space=tiny_space(), name="tiny-test", output_dir=str(folder), random_subnets=1,
                         bn_batches=2, progress=False, data=DATA, train=TrainConfig(epochs=2, batch_size=32),
                         tracking=TrackingConfig(uri=f"sqlite:///{folder.parent / 'mlflow.db'}"))
    again = run_supernet(cfg, log=lambda _s: None)
    assert again.resumed_from == 2 and again.run_id == trained_supernet.run_id  # nothing trained, no second record
    with pytest.raises(SupernetError, match=r"train.lr 0.1 here, 0.05 in the checkpoint"):
        run_supernet(dataclasses.replace(cfg, train=TrainConfig(epochs=2, batch_size=32, lr=0.1)), log=lambda _s: None)
    with pytest.raises(ConfigError, match="resume=true continues it"):
        run_supernet(dataclasses.replace(cfg, resume=False), log=lambda _s: None)


def test_a_checkpoint_for_another_setting_is_refused_naming_every_difference(trained_supernet: SupernetResult) -> None:
    other = dict(tiny_space(), stem_chs=[12])
    space = load_space("tiny").from_dict(other)
    data_cfg = dataclasses.replace(DATA, resolution=24, val_fraction=0.3)
    with pytest.raises(SupernetMismatchError) as err:
        check_supernet(trained_supernet.checkpoint, space, load_dataset(data_cfg), data_cfg)
    text = str(err.value)
    assert "space 'tiny' has a different definition" in text
    assert "resolution 24 here, 16 in the checkpoint" in text
    assert "val_fraction=0.3 seed=0 here, val_fraction=0.2 seed=0" in text and "trained on part of" in text
    # The search refuses it before any trial: no search is recorded.
    (trained_supernet.folder.parent / "refused").mkdir()
    cfg = stored_config(trained_supernet.folder.parent / "refused", "+space=tiny", "target_ms=5", "accuracy=supernet",
                        f"accuracy.checkpoint={trained_supernet.checkpoint}", "data.resolution=24",
                        "data.max_train_samples=64", "data.max_val_samples=96")
    with pytest.raises(SupernetMismatchError, match="resolution 24 here"):
        run_search(cfg)
    runs = MlflowClient(cfg.tracking.uri).search_runs(
        [e.experiment_id for e in MlflowClient(cfg.tracking.uri).search_experiments()])
    assert runs == []


def test_a_checkpoint_that_is_not_a_supernets_is_refused_without_running_it(tmp_path: Path) -> None:
    class Payload:
        def __reduce__(self) -> tuple[Any, ...]:
            return (Path.touch, (tmp_path / "ran",))

    bad = tmp_path / "supernet.pt"
    bad.write_bytes(pickle.dumps({"format": "latnas-supernet", "x": Payload()}))
    with pytest.raises(SupernetError, match="cannot read supernet checkpoint"):
        read_checkpoint(bad)
    assert not (tmp_path / "ran").exists()
    torch.save({"weights": torch.zeros(2)}, tmp_path / "other.pt")
    with pytest.raises(SupernetError, match="not a LatNAS supernet checkpoint"):
        read_checkpoint(tmp_path / "other.pt")
    with pytest.raises(SupernetError, match="does not exist"):
        read_checkpoint(tmp_path / "missing.pt")


def test_a_trial_with_accuracy_supernet_reports_its_subnets_validation_accuracy(
    trained_supernet: SupernetResult,
) -> None:
    space, data = load_space("tiny"), load_dataset(DATA)
    ctx = TrialContext(
        space=space, data=data, train=TrainConfig(), target_ms=0.5, reward="squared", threads=1,
        accuracy=AccuracyConfig(estimator="supernet", checkpoint=str(trained_supernet.checkpoint), bn_batches=2),
        latency=LatencyConfig(input_shape=[1, 3, 16, 16], options={"intra_op_threads": 1}, measure=FAST_MEASURE),
    )
    arch = space.sample(np.random.default_rng(3))
    reports: list[dict[str, Any]] = []
    evaluate_candidate(arch.encode(), ctx, reports.append)
    assert len(reports) == 1 and reports[0]["status"] == COMPLETED and reports[0]["accuracy_estimator"] == "supernet"
    loaded = load_supernet(trained_supernet.checkpoint, space, SupernetTarget.of(space, data))
    again = load_supernet(trained_supernet.checkpoint, space, SupernetTarget.of(space, data))
    assert again is loaded  # read once per process
    direct = subnet_accuracy(loaded, arch, data, 2, 64)
    assert reports[0]["accuracy"] == direct.accuracy and reports[0]["val_loss"] == direct.val_loss
    # Recalibration matters: the supernet's shared running statistics give another accuracy.
    sub = loaded.net.extract(arch).eval()
    recal, _ = recalibrated_subnet(loaded.net, arch, loaded.normalised_like_training(data), 2, 64)
    assert any(not torch.equal(a, b) for a, b in zip(sub.state_dict().values(), recal.state_dict().values(),
                                                      strict=True))


def test_the_supernets_estimate_is_the_bottom_rung_and_the_rungs_above_train_from_its_weights(
    trained_supernet: SupernetResult, tmp_path: Path
) -> None:
    space, data = load_space("tiny"), load_dataset(DATA)
    ctx = TrialContext(
        space=space, data=data, train=TrainConfig(batch_size=32), target_ms=50.0, reward="squared", threads=1,
        accuracy=AccuracyConfig(estimator="supernet", checkpoint=str(trained_supernet.checkpoint), bn_batches=2),
        latency=LatencyConfig(input_shape=[1, 3, 16, 16], options={"intra_op_threads": 1}, measure=FAST_MEASURE),
        rungs=(RungConfig(64, 1),), reduction_factor=2, checkpoints=RungCheckpoints(tmp_path / "checkpoints"),
    )
    arch = space.sample(np.random.default_rng(3))
    reports: list[dict[str, Any]] = []
    evaluate_candidate(arch.encode(), ctx, reports.append)
    loaded = load_supernet(trained_supernet.checkpoint, space, SupernetTarget.of(space, data))
    direct = subnet_accuracy(loaded, arch, data, 2, 64)
    assert [(r["rung"], r["status"]) for r in reports] == [(0, COMPLETED), (1, COMPLETED)]
    assert reports[0]["accuracy"] == direct.accuracy and reports[0]["rung_train_images"] == 0
    assert reports[0]["rung_step"] == 1 and reports[1]["rung_step"] == 2
    assert reports[1]["accuracy_rung0"] == direct.accuracy and reports[1]["rung_train_images"] == 64
    # the training rung starts from the subnet's weights, not from a fresh network
    net, _ = recalibrated_subnet(loaded.net, arch, loaded.normalised_like_training(data), 2, 64)
    trained = train_briefly(net, loaded.normalised_like_training(data).take_train(64, 0),
                            TrainConfig(batch_size=32, epochs=1), torch.device("cpu"))
    assert reports[1]["accuracy"] == trained[-1].accuracy and reports[1]["val_loss"] == trained[-1].val_loss


def test_export_starts_from_the_supernets_weights_and_fine_tunes(
    trained_supernet: SupernetResult, tmp_path: Path
) -> None:
    space, data = load_space("tiny"), load_dataset(DATA)
    arch = space.sample(np.random.default_rng(4))
    loaded = load_supernet(trained_supernet.checkpoint, space, SupernetTarget.of(space, data))
    want = subnet_accuracy(loaded, arch, data, 2, 64)
    cfg = ExportConfig(candidate=arch.encode(), output_dir=str(tmp_path), init="supernet",
                       supernet=SupernetEstimateConfig(checkpoint=str(trained_supernet.checkpoint), bn_batches=2),
                       train=TrainConfig(epochs=1, batch_size=32), engine=False,
                       train_samples=DATA.max_train_samples, val_samples=DATA.max_val_samples,
                       latency=dataclasses.replace(ExportConfig().latency, input_shape=[1, 3, 16, 16],
                                                   options={"intra_op_threads": 1}, measure=FAST_MEASURE, rounds=1))
    report = export_candidate(ExportTarget(arch, "arch_string"), cfg).report
    assert report["init"]["accuracy"] == want.accuracy  # the search's figure for it, before fine-tuning
    # the supernet's own data and split, called by its label
    assert report["training"]["dataset"] == {**data.summary(), "label": "digits"}
    assert report["training"]["preprocessing"]["mean"] == list(loaded.mean)
    assert "supernet's weights" in report["weights"] and "fine-tuned 1 epochs" in report["weights"]
    with pytest.raises(ConfigError, match=r"supernet\.checkpoint"):
        export_candidate(ExportTarget(arch, "arch_string"), dataclasses.replace(cfg, supernet=SupernetEstimateConfig()))
