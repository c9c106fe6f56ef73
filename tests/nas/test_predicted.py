"""latency=predictor: a real predictor (trained on real ONNX Runtime measurements of the tiny
space) drives the search, is refused when it does not fit, and hybrid mode confirms and refits."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import numpy as np
import pytest
from mlflow import MlflowClient

from latency_predictor import ConfigError, PredictorMismatchError
from latency_predictor.estimators import make_predictor_estimator, predictor_measuring_backend
from latency_predictor.measurement.backends import make_estimator
from latency_predictor.prediction.collection import collect
from latency_predictor.prediction.dataset import Dataset
from latency_predictor.prediction.hybrid import POINTER_FILE, HybridEstimator
from latency_predictor.prediction.training import train_predictor
from nas.adapters.mlflow_reader import StoreReader, reference_latencies
from nas.core.config import LeaderboardConfig, TrackingConfig
from nas.core.record import pareto_points
from nas.driver import run_search
from nas.review.leaderboard import run_leaderboard
from search_spaces import REFERENCES, SearchSpace, load_space, reference
from tests.nas.configs import stored_config

SHAPE = (1, 3, 32, 32)
CLASSES = 10
MEASURE = {"warmup_runs": 2, "warmup_s": 0.0, "min_runs": 10, "min_time_s": 0.0, "max_time_s": 0.5,
           "max_repeats": 1, "stability_threshold": 100.0, "min_cpu_share": 0.0}


@pytest.fixture(scope="module")
def space() -> SearchSpace:
    return load_space("tiny")


@pytest.fixture(scope="module")
def trained(space: SearchSpace, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    slots = tmp_path_factory.mktemp("slots")
    est = make_estimator("onnxruntime", input_shape=SHAPE, measure=MEASURE, slot_dir=slots, num_classes=CLASSES)
    data = tmp_path_factory.mktemp("data") / "tiny"
    collect(space, est, data, 16, repeats=2, min_cpu_share=0.0, progress=False)
    predictor, _ = train_predictor(Dataset.open(data), test_fraction=0.25, seed=0)
    return predictor.save(data.parent / "tiny-predictor.json"), data


def test_predictor_for_the_search_predicts(space: SearchSpace, trained: tuple[Path, Path]) -> None:
    est = make_predictor_estimator(SHAPE, {"path": str(trained[0])}, CLASSES, space)
    arch = space.sample(np.random.default_rng(5))
    r = est.measure(arch)
    assert r.source == "predicted" and r.latency_ms > 0 and r.input_shape == SHAPE


@pytest.mark.parametrize(
    ("shape", "classes", "space_name", "options", "words"),
    [
        ((1, 3, 64, 64), CLASSES, "tiny", {}, "input shape"),
        (SHAPE, 1000, "tiny", {}, "num_classes"),
        (SHAPE, CLASSES, "mobile", {}, "space 'mobile' here"),
        (SHAPE, CLASSES, "tiny", {"device": "no-such-device-xyz"}, "no-such-device-xyz"),
    ],
)
def test_mismatched_predictor_is_refused_naming_the_difference(
    trained: tuple[Path, Path], shape: tuple[int, ...], classes: int, space_name: str,
    options: dict[str, str], words: str,
) -> None:
    with pytest.raises(PredictorMismatchError, match=words):
        make_predictor_estimator(shape, {"path": str(trained[0]), **options}, classes, load_space(space_name))


def test_a_predictor_for_fp32_is_refused_for_int8(space: SearchSpace, trained: tuple[Path, Path]) -> None:
    words = "device fingerprint: precision 'int8' here, 'fp32' in the predictor"
    with pytest.raises(PredictorMismatchError, match=words):
        make_predictor_estimator(SHAPE, {"path": str(trained[0])}, CLASSES, space, precision="int8")


def test_bad_options_are_config_errors(space: SearchSpace, trained: tuple[Path, Path], tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"latency\.options\.path"):
        make_predictor_estimator(SHAPE, {}, CLASSES, space)
    with pytest.raises(ConfigError, match="no predictor file"):
        make_predictor_estimator(SHAPE, {"path": str(tmp_path / "none.json")}, CLASSES, space)
    with pytest.raises(ConfigError, match="unknown for latency=predictor"):
        make_predictor_estimator(SHAPE, {"path": str(trained[0]), "hybird": True}, CLASSES, space)
    with pytest.raises(ConfigError, match="dataset"):
        make_predictor_estimator(SHAPE, {"path": str(trained[0]), "hybrid": True}, CLASSES, space)


def test_hybrid_confirms_near_target_adds_to_dataset_and_refits(
    space: SearchSpace, trained: tuple[Path, Path], tmp_path: Path
) -> None:
    path, data = trained
    options = {"path": str(path), "hybrid": True, "dataset": str(data), "refit_every": 1,
               "measure_options": {"measure": MEASURE, "slot_dir": str(tmp_path)}}
    probe = make_predictor_estimator(SHAPE, {"path": str(path)}, CLASSES, space)
    arch = next(a for a in (space.sample(np.random.default_rng(i)) for i in range(100))
                if a.encode() not in Dataset.open(data).measured_archs())
    predicted = probe.measure(arch).latency_ms
    before = len(Dataset.open(data).records)
    est = make_predictor_estimator(SHAPE, options, CLASSES, space, target_ms=predicted)  # right at the target
    assert isinstance(est, HybridEstimator)
    r = est.measure(arch)
    assert r.source == "measured" and r.extra["confirm_reason"] == "near_target"
    assert r.extra["predicted_ms"] == pytest.approx(predicted)
    ds = Dataset.open(data)
    assert len(ds.records) == before + 1 and ds.records[-1].origin == "confirm"
    assert (data / POINTER_FILE).read_text().strip().startswith("predictor-refit-")
    # far from the target and sure: predicted, not measured; and by the refitted predictor
    far = make_predictor_estimator(SHAPE, options, CLASSES, space, target_ms=predicted * 1000)
    assert isinstance(far, HybridEstimator)
    far.opts = dataclasses.replace(far.opts, confirm_uncertain_rel=1e9)
    other = far.measure(space.sample(np.random.default_rng(99)))
    assert other.source == "predicted"
    assert far.predictor.digest != probe.digest


@pytest.mark.slow
@pytest.mark.usefixtures("ray_cluster")
def test_search_with_predicted_latency(trained: tuple[Path, Path], tmp_path: Path) -> None:
    cfg = stored_config(
        tmp_path, "+space=tiny", "target_ms=1.0", "search.n_trials=3", "search.max_concurrent=2",
        "data.max_train_samples=256", "data.max_val_samples=128", "train.epochs=1",
        "latency=predictor", f"latency.options.path={trained[0]}", "latency.input_shape=[1,3,32,32]",
        "progress=false", "name=predicted",
    )
    result = run_search(cfg)
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    exp = client.get_experiment_by_name("latnas")
    assert exp is not None
    children = [r for r in client.search_runs([exp.experiment_id]) if r.data.tags.get("latnas.role") == "candidate"]
    assert len(children) == 3 and result.parent_run_id
    assert all(c.data.tags["latency_source"] == "predicted" for c in children)
    assert all(c.data.tags["latency_backend"] == "predictor" for c in children)
    # references=measure on a predicted search: the references are measured like the predictor's data
    board = run_leaderboard(LeaderboardConfig(
        tracking=TrackingConfig(uri=f"sqlite:///{tmp_path / 'mlflow.db'}"), search="predicted",
        references="measure", plot_path=str(tmp_path / "pareto.png"),
    ))
    assert board.plot_path is not None and board.plot_path.exists()
    refs, _ = reference_latencies(StoreReader(f"sqlite:///{tmp_path / 'mlflow.db'}", "latnas").get_run(
        result.parent_run_id))
    assert set(refs) == set(REFERENCES) and all(v > 0 for v in refs.values())


def test_networks_outside_the_space_are_measured_the_way_the_predictor_was_made(
    space: SearchSpace, trained: tuple[Path, Path]
) -> None:
    # A reference network is not in the predictor's space; it is measured on this machine with the
    # backend and settings the predictor's data came from, and refused where those differ.
    est = predictor_measuring_backend(SHAPE, {"path": str(trained[0])}, CLASSES, MEASURE)
    arch = reference("mobilenetv2_100")
    assert not space.contains(arch)
    r = est.measure(arch)
    assert r.source == "measured" and r.backend == "onnxruntime" and r.latency_ms > 0
    with pytest.raises(PredictorMismatchError, match="intra_op_threads '2' here, '1' in the predictor"):
        predictor_measuring_backend(SHAPE, {"path": str(trained[0]), "measure_options": {"intra_op_threads": 2}},
                                    CLASSES, MEASURE)


def test_register_predictor_records_files_and_a_model_version(trained: tuple[Path, Path], tmp_path: Path) -> None:
    from nas.register_predictor import main

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    rc = main(["--predictor", str(trained[0]), "--dataset", str(trained[1]), "--register", "tiny-cpu",
               "--tracking-uri", uri])
    assert rc == 0
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name("latnas")
    assert exp is not None
    (run,) = client.search_runs([exp.experiment_id])
    assert run.data.tags["latnas.role"] == "predictor" and run.info.status == "FINISHED"
    assert run.data.params["predictor.space"] == "tiny"
    assert any(k.startswith("dataset.") for k in run.data.params)
    paths = {a.path for a in client.list_artifacts(run.info.run_id, "predictor")}
    assert paths == {f"predictor/{trained[0].name}"}
    assert client.list_artifacts(run.info.run_id, "dataset")
    (version,) = client.search_model_versions("name='tiny-cpu'")
    assert version.run_id == run.info.run_id and version.source.endswith("/predictor")
    assert main(["--predictor", str(tmp_path / "missing.json"), "--tracking-uri", uri]) == 2


@pytest.mark.slow
@pytest.mark.usefixtures("ray_cluster")
def test_hybrid_search_measures_every_candidate_of_the_final_pareto_front(
    trained: tuple[Path, Path], tmp_path: Path
) -> None:
    """Far from the target, with uncertainty ignored and no band around the front (this small
    predictor's error band is about 50%, which would confirm nearly everything), only the Pareto
    front is confirmed: every
    candidate on the final (accuracy, latency) front carries a measured latency, dominated ones
    keep their prediction, and the confirmations reach the dataset."""
    data = tmp_path / "data"
    shutil.copytree(trained[1], data)
    (data / POINTER_FILE).unlink(missing_ok=True)
    before = len(Dataset.open(data).records)
    cfg = stored_config(
        tmp_path, "+space=tiny", "target_ms=1000", "search.n_trials=10", "search.max_concurrent=2",
        "search.sampler=random", "accuracy=naswot", "data.max_train_samples=256", "data.max_val_samples=128",
        "latency=predictor", f"latency.options.path={trained[0]}", "latency.input_shape=[1,3,32,32]",
        "latency.options.hybrid=true", f"latency.options.dataset={data}", "latency.options.refit_every=0",
        "latency.options.confirm_uncertain_rel=1e9", "latency.options.pareto_band=0",
        # The search's own confirmations only: the final latency pass would re-measure the top candidates
        # afterwards and move the front (tests/nas/test_final_pass.py covers it on a predicted search).
        "latency.final_pass_top_k=0", "progress=false", "name=hybrid-front",
    )
    cfg.latency.options["measure_options"] = {"measure": MEASURE, "slot_dir": str(tmp_path / "slots")}
    result = run_search(cfg)

    done = [r for r in result.candidates if r.status == "COMPLETED"]
    assert len(done) == 10
    front = {(lat, acc) for lat, acc in pareto_points(done)}
    on_front = [r for r in done if (r.metrics["latency_p50"], r.metrics["accuracy"]) in front]
    assert on_front
    for r in on_front:
        assert r.tags["latency_source"] == "measured" and r.tags["latency_confirm_reason"] == "pareto", r.arch
        assert r.metrics["latency_predicted_ms"] > 0
        # the reward uses the measured latency (the target is far, so it is the accuracy)
        assert r.metrics["reward"] == pytest.approx(r.metrics["accuracy"])
    confirmed = [r for r in done if r.tags["latency_source"] == "measured"]
    assert all(r.tags["latency_confirm_reason"] == "pareto" for r in confirmed)
    assert len(confirmed) < len(done), "a dominated candidate keeps its prediction"
    ds = Dataset.open(data)
    assert len(ds.records) == before + len(confirmed)
    assert {r.arch for r in ds.records[before:]} == {r.arch for r in confirmed}
    assert all(r.origin == "confirm" for r in ds.records[before:])
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    parent = client.get_run(result.parent_run_id)
    assert parent.data.metrics["n_latency_confirmed_pareto"] == len(confirmed)
    assert parent.data.metrics["n_latency_predicted"] == len(done) - len(confirmed)
