"""Leaderboard: the ranking matches MLflow's own, filters keep what they say, the plot is a real PNG."""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
from pathlib import Path

import matplotlib.image
import mlflow
import pytest
from mlflow import MlflowClient

from nas.adapters.mlflow_reader import StoreReader, reference_latencies
from nas.core.config import LeaderboardConfig, TrackingConfig
from nas.core.errors import ConfigError, TrackingError
from nas.core.record import Candidate, pareto_front, rank
from nas.review.leaderboard import run_leaderboard
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
    assert [r.candidate.run_id for r in result.rows] == list(df["run_id"])
    assert [r.rank for r in result.rows] == list(range(1, len(df) + 1))
    rewards = [r.candidate.reward for r in result.rows]
    assert rewards == sorted(rewards, reverse=True)
    assert {r.candidate.arch_id for r in result.rows} <= set(small_search.arch_ids)


def test_table_shows_the_columns_and_top_k(small_search: SmallSearch, tmp_path: Path) -> None:
    result = run_leaderboard(_cfg(small_search, tmp_path, top_k=2, plot=False))
    header = result.text.splitlines()[0].split()
    for col in ("arch_id", "accuracy", "p50_ms", "p99_ms", "latency", "params", "macs", "reward", "meets"):
        assert col in header
    assert len(result.rows) == min(2, small_search.completed)
    assert "measured" in result.text


def test_csv_and_json_carry_the_same_entries(small_search: SmallSearch, tmp_path: Path) -> None:
    as_csv = run_leaderboard(_cfg(small_search, tmp_path, format="csv", plot=False, output=str(tmp_path / "lb.csv")))
    rows = list(csv.DictReader(io.StringIO((tmp_path / "lb.csv").read_text())))
    shown = [r.candidate for r in as_csv.rows]
    assert [r["run_id"] for r in rows] == [c.run_id for c in shown]
    assert all(float(r["reward"]) == pytest.approx(c.reward) for r, c in zip(rows, shown, strict=True))
    as_json = json.loads(run_leaderboard(_cfg(small_search, tmp_path, format="json", plot=False)).text)
    assert as_json["search"]["run_id"] == small_search.parent_run_id
    assert [e["arch_id"] for e in as_json["entries"]] == [c.arch_id for c in shown]


def test_feasible_and_pareto_filters(small_search: SmallSearch, tmp_path: Path) -> None:
    feasible = [r.candidate for r in run_leaderboard(_cfg(small_search, tmp_path, feasible=True, plot=False,
                                                          top_k=100)).rows]
    assert all(c.meets_target for c in feasible)
    front = [r.candidate for r in run_leaderboard(_cfg(small_search, tmp_path, pareto=True, plot=False,
                                                       top_k=100)).rows]
    everyone = [r.candidate for r in run_leaderboard(_cfg(small_search, tmp_path, plot=False, top_k=100)).rows]
    assert front
    for f in front:  # nobody is both faster and at least as accurate
        assert not any(o.latency_p50 < f.latency_p50 and o.accuracy >= f.accuracy for o in everyone)


def test_reference_tags_of_networks_at_similar_latency_do_not_overlap(small_search: SmallSearch) -> None:
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from nas.review.plot import pareto_figure

    reader = StoreReader(small_search.uri, "latnas")
    search = reader.find_search(small_search.name)
    candidates = reader.candidates(search.run_id)
    # Six networks within 3% of each other in latency, and two far apart.
    refs = {f"net_{i}_with_a_long_name": 2.0 * (1 + 0.006 * i) for i in range(6)} | {"fast": 0.5, "slow": 9.0}
    fig = pareto_figure(candidates, search, refs)
    renderer = FigureCanvasAgg(fig).get_renderer()
    fig.draw(renderer)
    tags = [t for t in fig.axes[0].texts if t.get_text().startswith("R")]
    assert sorted(t.get_text() for t in tags) == sorted(f"R{i}" for i in range(1, 9))
    boxes = [t.get_window_extent(renderer) for t in tags]
    for i, a in enumerate(boxes):
        for b in boxes[i + 1:]:
            assert not a.overlaps(b), (a, b)
    axes_box = fig.axes[0].get_window_extent(renderer)
    assert all(axes_box.contains(b.x0, b.y0) and axes_box.contains(b.x1, b.y1) for b in boxes)
    # Every name is in the legend with its latency, tagged in latency order.
    legend = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert "  R1  fast: 0.5 ms" in legend and "  R8  slow: 9 ms" in legend
    assert any(t.startswith("  R2  net_0_with_a_long_name: 2 ms") for t in legend)


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
    reader = StoreReader(small_search.uri, "latnas")
    refs, device = reference_latencies(reader.get_run(small_search.parent_run_id))
    assert set(refs) == set(REFERENCES) and all(v > 0 for v in refs.values())
    assert device
    assert reader.find_search(small_search.name).references == refs
    # The search measured its candidates beside an anchor network: the references are timed beside it too.
    metrics = reader.get_run(small_search.parent_run_id).metrics
    assert all(metrics[f"reference.{name}.x_anchor"] > 0 for name in REFERENCES)
    assert any(n.startswith("references beside the anchor mobilenetv2_100@0.35: efficientnet_b0 x")
               for n in result.notes)


def test_unknown_search_and_missing_store_are_clear_errors(small_search: SmallSearch, tmp_path: Path) -> None:
    with pytest.raises(TrackingError, match=r"no search named 'nope'.*searches: \['" + small_search.name):
        run_leaderboard(_cfg(small_search, tmp_path, search="nope"))
    with pytest.raises(TrackingError, match="no MLflow store at"):
        run_leaderboard(LeaderboardConfig(tracking=TrackingConfig(uri=f"sqlite:///{tmp_path / 'none.db'}")))
    with pytest.raises(ConfigError, match="sort: 'speed' is not one of"):
        run_leaderboard(_cfg(small_search, tmp_path, sort="speed"))


@pytest.mark.slow
@pytest.mark.ci
def test_command_line_prints_the_table(small_search: SmallSearch, tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "nas.leaderboard", f"tracking.uri={small_search.uri}", "top_k=3", "plot=false"],
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[2].split()[1] in small_search.best_arch_ids
    assert "Traceback" not in proc.stderr


# ---------------------------------------------------------------------- the pure ranking


def _c(i: int, acc: float, lat: float, status: str = "COMPLETED", meets: bool = True) -> Candidate:
    metrics = {"accuracy": acc, "latency_p50": lat, "meets_target": float(meets)}
    if status == "COMPLETED":
        metrics["reward"] = acc
    return Candidate(arch="a", arch_id=f"{i:012x}", status=status, metrics=metrics, run_id=f"run{i}")


def test_pareto_front_keeps_only_non_dominated_points() -> None:
    cs = [_c(0, 0.9, 5.0), _c(1, 0.8, 2.0), _c(2, 0.85, 6.0), _c(3, 0.7, 1.0), _c(4, 0.95, 9.0),
          _c(5, 0.99, 0.5, status="FAILED")]
    assert [c.run_id for c in pareto_front(cs)] == ["run3", "run1", "run0", "run4"]


def test_rank_sorts_stably_and_appends_failures_on_request() -> None:
    cs = [_c(0, 0.9, 5.0), _c(1, 0.9, 2.0), _c(2, 0.5, 1.0, meets=False), _c(3, 0.0, 0.0, status="FAILED")]
    assert [r.candidate.run_id for r in rank(cs)] == ["run0", "run1", "run2"]
    assert [r.candidate.run_id for r in rank(cs, sort="latency_p50")] == ["run2", "run1", "run0"]
    assert [r.candidate.run_id for r in rank(cs, feasible_only=True, top_k=1)] == ["run0"]
    with_failed = rank(cs, include_unfinished=True)
    assert with_failed[-1].candidate.run_id == "run3" and with_failed[-1].rank is None
    with pytest.raises(ValueError, match="top_k must be >= 1"):
        rank(cs, top_k=0)
