"""Proxy fidelity: the rank statistics, the choice of architectures, and a real small study that
resumes without redoing anything and is recorded in MLflow."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from mlflow import MlflowClient

from latency_predictor.prediction.features import FeatureExtractor
from nas.core.config import (
    DataConfig,
    FidelityConfig,
    ReferenceBudget,
    RungConfig,
    SupernetEstimateConfig,
    TrackingConfig,
    TrainConfig,
)
from nas.core.errors import ConfigError
from nas.data import load_dataset
from nas.oneshot.subnet import SupernetTarget, load_supernet, read_checkpoint, subnet_accuracy
from nas.oneshot.train import SupernetResult
from nas.studies.fidelity import REFERENCE, SUPERNET, FidelityError, choose_archs, run_fidelity
from nas.studies.stats import agreement, top_overlap
from search_spaces import load_space


def test_agreement_of_identical_reversed_and_unrelated_rankings() -> None:
    ref = np.arange(20.0)
    same = agreement(ref, ref * 3 + 1)
    assert same.kendall_tau == pytest.approx(1.0) and same.spearman == pytest.approx(1.0)
    assert same.top_overlap == 1.0 and same.top_n == 2
    reverse = agreement(ref, -ref)
    assert reverse.kendall_tau == pytest.approx(-1.0) and reverse.top_overlap == 0.0
    noisy = agreement(ref, ref + np.random.default_rng(0).normal(0, 4, 20), resamples=500)
    assert noisy.kendall_ci[0] <= noisy.kendall_tau <= noisy.kendall_ci[1] and noisy.kendall_ci[1] < 1.0
    assert 0.3 < noisy.kendall_tau < 0.95
    assert top_overlap(np.array([1.0, 5, 3, 4]), np.array([0.0, 1, 0, 1]))[0] == 1.0  # index 1 tops both
    with pytest.raises(ValueError, match="at least 3"):
        agreement(np.array([1.0, 2]), np.array([1.0, 2]))


def test_the_architectures_span_the_space_from_smallest_to_largest() -> None:
    space = load_space("mobile_cifar")
    archs = choose_archs(space, 12, seed=0, input_shape=(1, 3, 32, 32), num_classes=10)
    assert len(set(archs)) == 12 and all(space.contains(a) for a in archs)
    features = FeatureExtractor((1, 3, 32, 32), 10)
    col = features.names.index("total.macs")
    macs = features.transform(archs)[:, col]
    corners = features.transform(space.extremes())[:, col]
    assert macs[0] == corners.min() and macs[1] == corners.max()  # the smallest and the largest networks
    inner = np.sort(macs[2:])
    assert inner[-1] > 2 * inner[0]  # the others are spread over the range, not bunched
    assert archs == choose_archs(space, 12, seed=0, input_shape=(1, 3, 32, 32), num_classes=10)  # seeded


def _cfg(tmp_path: Path, **kw: object) -> FidelityConfig:
    cfg = FidelityConfig(
        space=None,
        k=4, reference=ReferenceBudget(train_samples=128, epochs=1), cheap_train_samples=64, cheap_epochs=[1],
        zero_cost=["synflow"], bootstrap=100, output_dir=str(tmp_path / "study"),
        data=DataConfig(resolution=16, max_val_samples=96), train=TrainConfig(batch_size=32),
        tracking=TrackingConfig(uri=f"sqlite:///{tmp_path / 'mlflow.db'}"),
    )
    for key, value in kw.items():
        setattr(cfg, key, value)
    return cfg


@pytest.mark.slow
@pytest.mark.ci
def test_a_small_study_is_recorded_and_resumes_without_redoing_anything(
    tmp_path: Path, trained_supernet: SupernetResult
) -> None:
    import yaml

    from search_spaces.space import SPACES_DIR

    space = yaml.safe_load((SPACES_DIR / "tiny.yaml").read_text())
    first = run_fidelity(_cfg(tmp_path, space=space), log=lambda _s: None)
    names = ["train_1ep", "synflow", "params", "macs"]
    assert list(first.agreements) == names and first.computed == 4 * 3  # 2 cheap + the reference, per arch
    assert all(-1.0 <= first.agreements[e].kendall_tau <= 1.0 for e in names)
    assert set(first.values[REFERENCE]) == set(first.archs)
    record = json.loads((first.folder / "fidelity.json").read_text())
    assert set(record["estimators"]) == set(names) and len(record["archs"]) == 4
    assert (first.folder / "fidelity.png").read_bytes()[:4] == b"\x89PNG"
    rows = (first.folder / "records.jsonl").read_text().splitlines()
    assert len(rows) == 12
    # A second run reads everything back: nothing is trained again, the figures are the same.
    again = run_fidelity(_cfg(tmp_path, space=space), log=lambda _s: None)
    assert again.computed == 0 and again.values == first.values
    # A killed run leaves a partial record: only the missing estimates are computed.
    kept = [*rows[:-2], rows[-1][: len(rows[-1]) // 2]]  # two lines lost, the last one cut short by a kill
    (first.folder / "records.jsonl").write_text("\n".join(kept) + "\n")
    resumed = run_fidelity(_cfg(tmp_path, space=space), log=lambda _s: None)
    assert resumed.computed == 2
    run = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}").get_run(str(resumed.run_id))
    assert run.data.tags["latnas.role"] == "fidelity" and "synflow.kendall_tau" in run.data.metrics
    # A supernet checkpoint given later is estimated on the same records: the same architectures, the
    # same reference accuracies; only its estimates are computed, and another checkpoint's anew.
    with_supernet = _cfg(tmp_path, space=space, supernet=SupernetEstimateConfig(
        checkpoint=str(trained_supernet.checkpoint), bn_batches=2))
    one_shot = run_fidelity(with_supernet, log=lambda _s: None)
    assert one_shot.computed == 4 and one_shot.values[REFERENCE] == first.values[REFERENCE]
    assert list(one_shot.agreements)[:2] == ["train_1ep", SUPERNET]
    space_t, data = load_space("tiny"), load_dataset(with_supernet.data)
    loaded = load_supernet(trained_supernet.checkpoint, space_t, SupernetTarget.of(space_t, data))
    a = one_shot.archs[0]
    assert one_shot.values[SUPERNET][a] == subnet_accuracy(loaded, space_t.decode(a), data, 2, 64).accuracy
    assert json.loads((first.folder / "fidelity.json").read_text())["supernet"]["sha256"] == loaded.sha256
    payload = read_checkpoint(trained_supernet.checkpoint)
    payload["model"] = {k: v * 1.01 if v.is_floating_point() else v for k, v in payload["model"].items()}
    torch.save(payload, tmp_path / "other.pt")
    other = run_fidelity(_cfg(tmp_path, space=space, supernet=SupernetEstimateConfig(
        checkpoint=str(tmp_path / "other.pt"), bn_batches=2)), log=lambda _s: None)
    assert other.computed == 4
    # The same folder with other settings is refused, not mixed.
    with pytest.raises(FidelityError, match="other settings"):
        run_fidelity(_cfg(tmp_path, space=space, k=5), log=lambda _s: None)


@pytest.mark.slow
@pytest.mark.ci
@pytest.mark.parametrize("workers", [1, 2])
def test_ctrl_c_keeps_the_estimates_recorded_and_says_how_to_go_on(tmp_path: Path, workers: int) -> None:
    from nas.runtime.workers import children

    folder = tmp_path / "study"
    args = [sys.executable, "-m", "nas.fidelity", "+space=tiny", "k=4", "cheap_train_samples=64", "cheap_epochs=[1]",
            "zero_cost=[synflow]", "reference.train_samples=256", "reference.epochs=400", "data.resolution=16",
            "data.max_val_samples=96", "train.batch_size=32", f"workers={workers}", f"output_dir={folder}",
            f"tracking.uri=sqlite:///{tmp_path / 'mlflow.db'}"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("HYDRA_")}
    env.update(PYTHONPATH=str(Path(__file__).resolve().parents[2]), LATNAS_HOME=str(tmp_path / "home"))
    records = folder / "records.jsonl"
    with subprocess.Popen(args, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          start_new_session=True) as proc:
        deadline = time.monotonic() + 240
        # the first architecture's cheap estimates are recorded; its 400-epoch reference is then training
        while not (records.is_file() and len(records.read_text().splitlines()) >= 2):
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[0][-3000:]
            time.sleep(0.2)
        kept = records.read_text()
        training = children(proc.pid)
        os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C: the terminal signals the whole foreground group
        try:
            out, _ = proc.communicate(timeout=120)
        except subprocess.TimeoutExpired:  # something still holds the output open: show what the study said
            os.killpg(proc.pid, signal.SIGKILL)
            out, _ = proc.communicate()
            raise AssertionError(f"still running 120 s after Ctrl-C (exit {proc.returncode}):\n{out[-3000:]}"
                                 ) from None
    assert proc.returncode == 130, out[-3000:]
    final = records.read_text()
    assert final.startswith(kept)  # nothing recorded before the interrupt is lost or cut short
    lines = final.splitlines()
    assert all(json.loads(line)["arch"] for line in lines) and len(lines) < 12
    assert f"interrupted with {len(lines)} of 12 estimates recorded in {records}; the same command goes on" in out
    assert "Traceback" not in out
    deadline = time.monotonic() + 30
    while running := [pid for pid in training if _alive(pid)]:
        assert time.monotonic() < deadline, f"workers still running after the interrupt: {running}"
        time.sleep(0.2)


def _alive(pid: int) -> bool:
    """Whether process ``pid`` runs (a zombie, dead but not yet reaped, does not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def test_bad_settings_are_refused_before_any_training(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="space"):
        run_fidelity(_cfg(tmp_path, space=None), log=lambda _s: None)
    import yaml

    from search_spaces.space import SPACES_DIR

    space = yaml.safe_load((SPACES_DIR / "tiny.yaml").read_text())
    with pytest.raises(ConfigError, match=r"zero_cost: 'zen' is not one of"):
        run_fidelity(_cfg(tmp_path, space=space, zero_cost=["zen"]), log=lambda _s: None)
    with pytest.raises(ConfigError, match="k: must be an integer >= 4"):
        run_fidelity(_cfg(tmp_path, space=space, k=2), log=lambda _s: None)
    assert not (tmp_path / "study").exists()


def test_rungs_and_reference_seeds_are_measured_against_the_mean_reference(tmp_path: Path) -> None:
    import yaml

    from search_spaces.space import SPACES_DIR

    space = yaml.safe_load((SPACES_DIR / "tiny.yaml").read_text())
    cfg = _cfg(tmp_path, space=space, zero_cost=[], cheap_epochs=[1],
               reference=ReferenceBudget(train_samples=128, epochs=1, extra_seeds=[1]),
               rungs=[RungConfig(32, 1), RungConfig(64, 1)])
    result = run_fidelity(cfg, log=lambda _s: None)
    assert list(result.agreements) == ["rung0", "rung1", "train_1ep", "params", "macs"]
    # rung 1 continues from rung 0's weights: its record carries both rungs' accuracies
    rows = [json.loads(r) for r in (result.folder / "records.jsonl").read_text().splitlines()]
    a = result.archs[0]
    rung1 = next(r for r in rows if r["arch"] == a and r["estimator"] == "rung1")
    rung0 = next(r for r in rows if r["arch"] == a and r["estimator"] == "rung0")
    assert rung1["detail"]["accuracy_per_rung"][0] == rung0["value"]
    assert rung1["value"] == rung1["detail"]["accuracy_per_rung"][1]
    # one training passes both rungs: rung 1's cost is the seconds until its end, rung 0's included
    assert 0 < rung0["seconds"] < rung1["seconds"]
    assert result.cost["rung0"] < result.cost["rung1"]
    # each record says how busy the machine was, so that a cost measured under load can be told
    assert all(isinstance(r["load_average"], float) and r["load_average"] >= 0 for r in rows)
    # two reference runs: the estimators are ranked against their mean, the runs against each other
    assert {r["detail"]["seed"] for r in rows if r["estimator"].startswith(REFERENCE)} == {0, 1}
    mean = {x: (result.values[REFERENCE][x] + result.values[f"{REFERENCE}_seed1"][x]) / 2 for x in result.archs}
    assert result.values["reference_mean"] == pytest.approx(mean)
    assert list(result.reference_runs) == [f"{REFERENCE}_seed1"]
    record = json.loads((result.folder / "fidelity.json").read_text())
    assert record["rungs"] == [{"train_images": 32, "epochs": 1}, {"train_images": 64, "epochs": 1}]
    assert "reference_seed1" in record["reference_runs"] and "Each run against the first" in (
        result.folder / "fidelity.md").read_text()
    # a rung added later: the study resumes, trains through the rungs again for the new one only,
    # and records nothing twice
    more = run_fidelity(dataclasses.replace(cfg, rungs=[RungConfig(32, 1), RungConfig(64, 1), RungConfig(96, 1)]),
                        log=lambda _s: None)
    assert more.computed == len(more.archs)
    again = [json.loads(r) for r in (result.folder / "records.jsonl").read_text().splitlines()]
    assert sorted((r["arch"], r["estimator"]) for r in again) == sorted(
        {(r["arch"], r["estimator"]) for r in again})
    assert {r["estimator"] for r in again[len(rows):]} == {"rung2"}
    assert more.values["rung0"] == result.values["rung0"]
    with pytest.raises(ConfigError, match=r"reference\.extra_seeds"):
        run_fidelity(_cfg(tmp_path, space=space, reference=ReferenceBudget(extra_seeds=[0])), log=lambda _s: None)
    with pytest.raises(ConfigError, match=r"search.rungs\[1\]"):
        run_fidelity(_cfg(tmp_path, space=space, rungs=[RungConfig(64, 1), RungConfig(32, 1)]), log=lambda _s: None)
