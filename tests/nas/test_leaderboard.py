"""Leaderboard: the ranking matches MLflow's own, filters keep what they say, the plot is a real PNG."""

from __future__ import annotations

import csv
import io
import json
import math
import subprocess
import sys
from pathlib import Path

import matplotlib.image
import mlflow
import pytest
from mlflow import MlflowClient

from nas.config import TrackingConfig
from nas.errors import TrackingError
from nas.leaderboard import (
    Entry,
    LeaderboardConfig,
    LeaderboardError,
    load_search,
    pareto_front,
    rank,
    run_leaderboard,
)
from nas.tracking import SearchStore
from search_spaces import REFERENCES
from tests.nas.review_search import SmallSearch, small_search_once

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def small_search(ray_cluster: None, tmp_path_factory: pytest.TempPathFactory) -> SmallSearch:
    return small_search_once(tmp_path_factory)


def _cfg(small: SmallSearch, tmp_path: Path, **kw: object) -> LeaderboardConfig:
    kw.setdefault("plot_path", str(tmp_path / "pareto.png"))
    return LeaderboardConfig(tracking=TrackingConfig(uri=small.uri), **kw)  # type: ignore[arg-type]


def test_order_equals_a_direct_mlflow_query(small_search: SmallSearch, tmp_path: Path) -> None:
    result = run_leaderboard(_cfg(small_search, tmp_path, top_k=100, plot=False))
    previous = mlflow.get_tracking_uri()
    mlflow.set_tracking_uri(small_search.uri)
    try:
        df = mlflow.search_runs(
            experiment_names=["latnas"], order_by=["metrics.reward DESC"],
            filter_string=f"tags.`mlflow.parentRunId` = '{small_search.parent_run_id}' and tags.status = 'COMPLETED'",
        )
    finally:
        mlflow.set_tracking_uri(previous)
    assert [e.run_id for e in result.entries] == list(df["run_id"])
    assert [e.rank for e in result.entries] == list(range(1, len(df) + 1))
    rewards = [e.reward for e in result.entries]
    assert rewards == sorted(rewards, reverse=True)
    assert {e.arch_id for e in result.entries} <= set(small_search.arch_ids)


def test_table_shows_the_columns_and_top_k(small_search: SmallSearch, tmp_path: Path) -> None:
    result = run_leaderboard(_cfg(small_search, tmp_path, top_k=2, plot=False))
    header = result.text.splitlines()[0].split()
    for col in ("arch_id", "accuracy", "p50_ms", "p99_ms", "latency", "params", "macs", "reward", "meets"):
        assert col in header
    assert len(result.entries) == min(2, small_search.completed)
    assert "measured" in result.text


def test_csv_and_json_carry_the_same_entries(small_search: SmallSearch, tmp_path: Path) -> None:
    as_csv = run_leaderboard(_cfg(small_search, tmp_path, format="csv", plot=False, output=str(tmp_path / "lb.csv")))
    rows = list(csv.DictReader(io.StringIO((tmp_path / "lb.csv").read_text())))
    assert [r["run_id"] for r in rows] == [e.run_id for e in as_csv.entries]
    assert all(float(r["reward"]) == pytest.approx(e.reward) for r, e in zip(rows, as_csv.entries, strict=True))
    as_json = json.loads(run_leaderboard(_cfg(small_search, tmp_path, format="json", plot=False)).text)
    assert as_json["search"]["parent_run_id"] == small_search.parent_run_id
    assert [e["arch_id"] for e in as_json["entries"]] == [e.arch_id for e in as_csv.entries]


def test_feasible_and_pareto_filters(small_search: SmallSearch, tmp_path: Path) -> None:
    feasible = run_leaderboard(_cfg(small_search, tmp_path, feasible=True, plot=False, top_k=100)).entries
    assert all(e.meets_target for e in feasible)
    front = run_leaderboard(_cfg(small_search, tmp_path, pareto=True, plot=False, top_k=100)).entries
    everyone = run_leaderboard(_cfg(small_search, tmp_path, plot=False, top_k=100)).entries
    assert front
    for f in front:  # nobody is both faster and at least as accurate
        assert not any(o.latency_p50 < f.latency_p50 and o.accuracy >= f.accuracy for o in everyone)


def test_pareto_plot_is_a_png_logged_on_the_parent_run(small_search: SmallSearch, tmp_path: Path) -> None:
    result = run_leaderboard(_cfg(small_search, tmp_path, references="measure"))
    assert result.plot_path is not None
    data = result.plot_path.read_bytes()
    assert data[:8] == PNG_SIGNATURE
    image = matplotlib.image.imread(result.plot_path)
    assert image.ndim == 3 and image.shape[0] > 100 and image.shape[1] > 100
    client = MlflowClient(small_search.uri)
    assert "pareto.png" in {a.path for a in client.list_artifacts(small_search.parent_run_id)}
    # The references were measured with the search's backend and recorded for the next plot.
    parent = SearchStore(small_search.uri, "latnas").get_run(small_search.parent_run_id)
    refs, device = SearchStore.reference_latencies(parent)
    assert set(refs) == set(REFERENCES) and all(v > 0 for v in refs.values())
    assert device
    record, _ = load_search(SearchStore(small_search.uri, "latnas"), small_search.name)
    assert record.references == refs


def test_unknown_search_and_missing_store_are_clear_errors(small_search: SmallSearch, tmp_path: Path) -> None:
    with pytest.raises(TrackingError, match=r"no search named 'nope'.*searches: \['" + small_search.name):
        run_leaderboard(_cfg(small_search, tmp_path, search="nope"))
    with pytest.raises(TrackingError, match="no MLflow store at"):
        run_leaderboard(LeaderboardConfig(tracking=TrackingConfig(uri=f"sqlite:///{tmp_path / 'none.db'}")))
    with pytest.raises(LeaderboardError, match="sort='speed' is not one of"):
        run_leaderboard(_cfg(small_search, tmp_path, sort="speed"))


def test_command_line_prints_the_table(small_search: SmallSearch, tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "nas.leaderboard", f"tracking.uri={small_search.uri}", "top_k=3", "plot=false"],
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[2].split()[1] in small_search.best_arch_ids
    assert "Traceback" not in proc.stderr


# ---------------------------------------------------------------------- the pure ranking


def _e(i: int, acc: float, lat: float, status: str = "COMPLETED", meets: bool = True) -> Entry:
    reward = acc if status == "COMPLETED" else math.nan
    return Entry(f"run{i}", f"{i:012x}", "a", status, accuracy=acc, latency_p50=lat, reward=reward, meets_target=meets)


def test_pareto_front_keeps_only_non_dominated_points() -> None:
    es = [_e(0, 0.9, 5.0), _e(1, 0.8, 2.0), _e(2, 0.85, 6.0), _e(3, 0.7, 1.0), _e(4, 0.95, 9.0),
          _e(5, 0.99, 0.5, status="FAILED")]
    assert [e.run_id for e in pareto_front(es)] == ["run3", "run1", "run0", "run4"]


def test_rank_sorts_stably_and_appends_failures_on_request() -> None:
    es = [_e(0, 0.9, 5.0), _e(1, 0.9, 2.0), _e(2, 0.5, 1.0, meets=False), _e(3, 0.0, 0.0, status="FAILED")]
    assert [e.run_id for e in rank(es)] == ["run0", "run1", "run2"]
    assert [e.run_id for e in rank(es, sort="latency_p50")] == ["run2", "run1", "run0"]
    assert [e.run_id for e in rank(es, feasible_only=True, top_k=1)] == ["run0"]
    with_failed = rank(es, include_failed=True)
    assert with_failed[-1].run_id == "run3" and with_failed[-1].rank == 0
    with pytest.raises(LeaderboardError, match="top_k must be >= 1"):
        rank(es, top_k=0)
