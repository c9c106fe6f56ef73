"""search.sampler=evolution and search.storage: the same guarantees as the in-memory Optuna samplers
(distinct proposals, a replayed history never proposed again) and a study that persists."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest
from mlflow import MlflowClient

from nas.adapters.optuna_sampler import ArchSampler
from nas.core.errors import ConfigError
from nas.core.evolution import EvolutionSampler
from nas.core.sampling import Outcome
from nas.driver import run_search
from search_spaces import load_space
from tests.nas.configs import stored_config


def test_evolution_proposes_distinct_architectures_and_never_a_replayed_one() -> None:
    space = load_space("tiny")
    first = EvolutionSampler(space, population_size=4, tournament_size=2, seed=0, max_duplicates=200)
    done = []
    for i in range(10):
        arch = first.ask()
        assert arch is not None and arch not in done
        first.tell(arch, Outcome("fail") if i == 3 else Outcome("complete", reward=0.1 * i))
        done.append(arch)
    assert first.counts() == {"COMPLETE": 9, "FAIL": 1}

    # A resumed search: the record replayed, then 20 more proposals, none of them evaluated before.
    again = EvolutionSampler(space, population_size=4, tournament_size=2, seed=0, max_duplicates=200)
    for i, arch in enumerate(done):
        again.replay(arch, Outcome("complete", reward=0.1 * i))
    new = [again.ask() for _ in range(20)]
    assert None not in new and not set(new) & set(done) and len(set(new)) == 20


def test_a_stored_study_is_continued_without_adding_its_trials_twice(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'optuna.db'}"
    space = load_space("tiny")
    first = ArchSampler(space, "tpe", seed=0, storage=url, study_name="s1")
    archs = [first.ask() for _ in range(4)]
    assert None not in archs
    for i, arch in enumerate(archs[:3]):
        first.tell(arch, Outcome("complete", reward=0.1 * i))  # type: ignore[arg-type]
    # The driver stops with archs[3] still running.

    study = optuna.load_study(study_name="s1", storage=url)
    assert [t.state.name for t in study.trials] == ["COMPLETE", "COMPLETE", "COMPLETE", "RUNNING"]
    assert [t.user_attrs["arch"] for t in study.trials] == archs

    again = ArchSampler(space, "tpe", seed=0, storage=url, study_name="s1")
    for i, arch in enumerate(archs[:3]):  # the resume replays what MLflow recorded
        again.replay(arch, Outcome("complete", reward=0.1 * i))  # type: ignore[arg-type]
    study = optuna.load_study(study_name="s1", storage=url)
    assert [t.state.name for t in study.trials] == ["COMPLETE", "COMPLETE", "COMPLETE", "FAIL"]
    nxt = again.ask()
    assert nxt is not None and nxt not in archs[:3]
    # One trial per proposed architecture (suggestions of known ones are kept apart as duplicate_of).
    proposed = [t.user_attrs["arch"] for t in optuna.load_study(study_name="s1", storage=url).trials
                if "arch" in t.user_attrs]
    assert proposed == [*archs, nxt]


def test_a_storage_optuna_cannot_open_is_named() -> None:
    with pytest.raises(ConfigError, match=r"search\.storage.*nosuchdb"):
        ArchSampler(load_space("tiny"), "tpe", storage="nosuchdb://x", study_name="s")


def test_a_search_with_a_storage_optuna_cannot_open_creates_nothing(tmp_path: Path) -> None:
    cfg = stored_config(tmp_path, "+space=tiny", "target_ms=1.0", "search.storage=nosuchdb://x", "progress=false")
    with pytest.raises(ConfigError, match=r"search\.storage"):
        run_search(cfg)
    assert not (tmp_path / "mlflow.db").exists() and not (tmp_path / "out").exists()


@pytest.mark.slow
@pytest.mark.usefixtures("ray_cluster")
def test_an_evolution_search_resumes_without_repeating(tmp_path: Path) -> None:
    def cfg(n: int, *extra: str):  # type: ignore[no-untyped-def]
        return stored_config(
            tmp_path, "+space=tiny", "target_ms=1.0", f"search.n_trials={n}", "search.max_concurrent=2",
            "search.sampler=evolution", "search.population_size=3", "data.max_train_samples=128",
            "data.max_val_samples=64", "train.epochs=1", "latency.measure.min_runs=10",
            "latency.measure.min_time_s=0.05", "latency.measure.max_time_s=0.3", "latency.measure.max_repeats=1",
            "progress=false", "name=evo", *extra,
        )

    run_search(cfg(4))
    run_search(cfg(7, "resume=true"))
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    exp = client.get_experiment_by_name("latnas")
    assert exp is not None
    runs = client.search_runs([exp.experiment_id])
    children = [r for r in runs if r.data.tags.get("latnas.role") == "candidate"]
    archs = [c.data.params["arch"] for c in children]
    assert len(archs) == 7 and len(set(archs)) == 7
    parent = next(r for r in runs if r.data.tags.get("latnas.role") == "search")
    assert parent.data.params["search.sampler"] == "evolution" and parent.info.status == "FINISHED"
