"""Two searches started at the same moment, as two users of one project would, then reviewed one by one.

Two real ``python -m nas.search`` processes on one new SQLite store, without ``name=``: both
must finish, with distinct names and folders, in one store; ``nas.leaderboard search=`` and
``nas.export search=`` then pick each of them (by name and by parent run id) out of the store.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from mlflow import MlflowClient
from mlflow.entities import Run

pytestmark = pytest.mark.slow  # two searches with their own Ray instances, at once

REPO = Path(__file__).resolve().parents[2]
SEARCH = [
    "+space=tiny", "target_ms=5", "search.n_trials=3", "data.max_train_samples=128", "data.max_val_samples=64",
    "train.epochs=1", "latency.input_shape=[1,3,64,64]", "latency.measure.min_runs=10",
    "latency.measure.min_time_s=0.05", "latency.measure.max_time_s=0.5", "latency.measure.max_repeats=1",
    "ray.num_cpus=1", "search.max_concurrent=1", "progress=false",
]


@dataclass(frozen=True)
class TwoSearches:
    home: Path
    uri: str
    parents: dict[str, Run]  # name -> parent run
    children: dict[str, list[Run]]


def _run(home: Path, module: str, *args: str, timeout: int = 900) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env.update(PYTHONPATH=str(REPO), LATNAS_HOME=str(home))
    return subprocess.run([sys.executable, "-m", module, *args], cwd=home.parent, env=env, capture_output=True,
                          text=True, timeout=timeout)


@pytest.fixture(scope="module")
def two(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TwoSearches]:
    home = tmp_path_factory.mktemp("project") / ".latnas"
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env.update(PYTHONPATH=str(REPO), LATNAS_HOME=str(home))
    procs = [
        subprocess.Popen([sys.executable, "-m", "nas.search", *SEARCH], cwd=home.parent, env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=1500) for p in procs]
    for p, (out, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0, out[-2000:] + err[-3000:]
    uri = f"sqlite:///{home / 'mlflow.db'}"
    client = MlflowClient(uri)
    runs = client.search_runs([client.get_experiment_by_name("latnas").experiment_id])
    parents = {r.info.run_name: r for r in runs if "mlflow.parentRunId" not in r.data.tags}
    children = {name: [r for r in runs if r.data.tags.get("mlflow.parentRunId") == p.info.run_id]
                for name, p in parents.items()}
    yield TwoSearches(home, uri, parents, children)


def test_both_finish_with_their_own_names_folders_and_candidates(two: TwoSearches) -> None:
    assert len(two.parents) == 2, sorted(two.parents)  # two names: the same second does not collide
    for name, parent in two.parents.items():
        assert name.startswith("tiny-5ms-")
        assert parent.info.status == "FINISHED" and len(two.children[name]) == 3
        folder = two.home / "searches" / name
        assert parent.data.tags["output_dir"] == str(folder)
        for f in ("config.yaml", "leaderboard.csv", "best_arch.json", "search.log"):
            assert (folder / f).is_file(), (name, f)
        assert name in (folder / "search.log").read_text()
    a, b = sorted(two.parents)
    assert not (two.home / "searches" / a).samefile(two.home / "searches" / b)
    assert not (two.home.parent / "outputs").exists()  # Hydra writes no folder of its own


def test_the_leaderboard_picks_each_search_by_name_or_run_id(two: TwoSearches) -> None:
    for name, parent in two.parents.items():
        mine = {c.data.params["arch_id"] for c in two.children[name]}
        for key in (name, parent.info.run_id):
            proc = _run(two.home, "nas.leaderboard", f"search={key}", "format=json", "plot=false", timeout=300)
            assert proc.returncode == 0, proc.stderr[-2000:]
            board = json.loads(proc.stdout)
            assert board["search"]["name"] == name
            assert {r["arch_id"] for r in board["entries"]} == mine, (key, board)


def test_export_picks_the_best_of_the_named_search(two: TwoSearches, tmp_path: Path) -> None:
    name = sorted(two.parents)[0]
    best = max(two.children[name], key=lambda r: r.data.metrics.get("reward", -1.0))
    proc = _run(two.home, "nas.export", f"search={name}", f"output_dir={tmp_path}", "latency.rounds=1",
                "+latency.measure.min_runs=10", "+latency.measure.max_repeats=1", timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads((tmp_path / best.data.params["arch_id"] / "report.json").read_text())
    assert report["candidate"]["search"] == name and report["candidate"]["run_id"] == best.info.run_id


def test_a_search_name_that_is_not_in_the_store_lists_the_ones_that_are(two: TwoSearches) -> None:
    proc = _run(two.home, "nas.leaderboard", "search=nope", timeout=300)
    assert proc.returncode == 2
    assert "no search named 'nope'" in proc.stderr and all(n in proc.stderr for n in two.parents)
