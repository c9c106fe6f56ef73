"""What the search's printed MLflow link opens: its saved view of the runs page, with the
candidates' figures as columns, and figures recorded at a precision that reads in the UI.

The link and the view use names MLflow's UI reads; the last test finds each of them in the UI
that is installed (its JavaScript bundle), so an MLflow upgrade that renames one fails here.
``scripts/mlflow_ui_check.py`` opens the same link in a real browser."""

from __future__ import annotations

import json
import urllib.parse
from pathlib import Path

import pytest
from mlflow import MlflowClient

from nas.adapters.mlflow_writer import (
    MAX_SEARCH_VIEWS,
    TABLE_METRICS,
    VIEW_TAG_PREFIX,
    StoreWriter,
    candidate_run_name,
    view_key,
)
from nas.core.record import COMPLETED, Candidate, figure

FACETS = {"searchFilter", "orderByKey", "orderByAsc", "startTime", "lifecycleFilter", "modelVersionFilter",
          "datasetsFilter"}
"""The runs page's filter and sort parameters: with any of them in the link, MLflow's UI ignores the view."""


def _cand(i: int, accuracy: float, latency: float) -> Candidate:
    return Candidate(arch=f"a{i}", arch_id=f"{i:012x}", status=COMPLETED, tags={"status": COMPLETED},
                     metrics={"accuracy": accuracy, "latency_p50": latency, "reward": accuracy - latency / 100,
                              "meets_target": float(latency <= 10.0), "params": 36686.0})


@pytest.fixture(scope="module")
def uri(tmp_path_factory: pytest.TempPathFactory) -> str:
    """One SQLite store for the module (creating one takes seconds); each test has its own experiment."""
    return f"sqlite:///{tmp_path_factory.mktemp('store') / 'mlflow.db'}"


def _query(link: str) -> tuple[str, dict[str, str]]:
    route, _, query = urllib.parse.urlsplit(link).fragment.partition("?")
    return route, dict(urllib.parse.parse_qsl(query))


def _view(writer: StoreWriter, key: str) -> dict:
    tags = MlflowClient(writer.uri).get_experiment(writer.experiment_id).tags
    envelope = json.loads(tags[VIEW_TAG_PREFIX + key])
    assert isinstance(envelope["name"], str) and isinstance(envelope["createdAt"], int)
    return json.loads(envelope["state"])  # a JSON string inside the envelope, as the UI saves it


def test_the_printed_link_opens_the_searchs_view_with_its_figures_as_columns(uri: str) -> None:
    writer = StoreWriter(uri, "link")
    parent = writer.start_search("s", {}, {})
    other = writer.start_search("t", {}, {})
    mine = [writer.log_candidate(parent, _cand(i, 0.5 + i / 10, 5.0), "s") for i in range(3)]
    writer.log_candidate(other, _cand(9, 0.99, 1.0), "t")

    route, query = _query(writer.ui_link(parent))
    assert route == f"/experiments/{writer.experiment_id}/runs"
    assert query == {"workflowType": "machine_learning", "viewStateShareKey": view_key(parent)}
    assert not FACETS & set(query)

    state = _view(writer, query["viewStateShareKey"])
    assert state["selectedColumns"] == [f"metrics.`{k}`" for k in TABLE_METRICS]
    assert TABLE_METRICS == ("reward", "accuracy", "latency_p50", "meets_target", "params_m")
    assert state["orderByKey"] == "metrics.`reward`" and state["orderByAsc"] is False
    # the view's filter, run as MLflow runs it: this search's candidates only, best reward first
    shown = MlflowClient(uri).search_runs([writer.experiment_id], state["searchFilter"],
                                          order_by=["metrics.reward DESC"])
    assert [r.info.run_id for r in shown] == mine[::-1]
    assert state["columnOrder"][:2] == ["attributes.`Run Name`", "runDateAndNestInfo"]
    assert state["columnOrder"][2:] == state["selectedColumns"]
    assert state["runsHiddenMode"] == "SHOW_ALL"  # every candidate in the charts, not MLflow's first 10

    # the chart ("compare") mode of the same view: reward, then accuracy, against latency p50 first
    route, query = _query(writer.ui_link(parent, charts=True))
    assert query == {"workflowType": "machine_learning", "viewStateShareKey": view_key(parent),
                     "compareRunsMode": "CHART"}
    first = state["compareRunSections"][0]["uuid"]
    charts = [c for c in state["compareRunCharts"] if c["metricSectionId"] == first]
    assert [(c["type"], c["xaxis"]["key"], c["yaxis"]["key"]) for c in charts] == [
        ("SCATTER", "latency_p50", "reward"), ("SCATTER", "latency_p50", "accuracy")]
    assert state["isAccordionReordered"] is True  # MLflow keeps that section first


def test_a_search_without_a_view_gets_the_filter_and_sort_in_its_link(uri: str) -> None:
    writer = StoreWriter(uri, "no-view")
    parent = writer.start_search("s", {}, {})
    MlflowClient(uri).delete_experiment_tag(writer.experiment_id, VIEW_TAG_PREFIX + view_key(parent))  # an older store

    _, query = _query(writer.ui_link(parent))
    assert query == {"workflowType": "machine_learning", "searchFilter": f"tags.`mlflow.parentRunId` = '{parent}'",
                     "orderByKey": "metrics.`reward`", "orderByAsc": "false"}


def test_a_resumed_search_gets_its_view_again(uri: str) -> None:
    from nas.adapters.mlflow_reader import StoreReader

    writer = StoreWriter(uri, "resumed")
    parent = writer.start_search("s", {}, {})
    MlflowClient(uri).delete_experiment_tag(writer.experiment_id, VIEW_TAG_PREFIX + view_key(parent))
    writer.resume_search(StoreReader(uri, "resumed").find_search("s"), {})
    assert _query(writer.ui_link(parent))[1]["viewStateShareKey"] == view_key(parent)


def test_only_the_newest_searches_keep_a_view_and_the_users_own_views_stay(uri: str) -> None:
    writer = StoreWriter(uri, "many")
    users = VIEW_TAG_PREFIX + "a1b2c3"
    MlflowClient(uri).set_experiment_tag(writer.experiment_id, users, json.dumps(
        {"name": "mine", "createdAt": 0, "updatedAt": 0, "state": "{}"}))
    parents = [writer.start_search(f"s{i}", {}, {}) for i in range(MAX_SEARCH_VIEWS + 2)]

    tags = MlflowClient(uri).get_experiment(writer.experiment_id).tags
    views = {t for t in tags if t.startswith(VIEW_TAG_PREFIX)}
    assert views == {users} | {VIEW_TAG_PREFIX + view_key(p) for p in parents[2:]}
    assert MAX_SEARCH_VIEWS + 1 <= 40  # MLflow's UI saves no more than 40 views per experiment
    assert "searchFilter" in _query(writer.ui_link(parents[0]))[1]  # the oldest: the filter in the link


def test_figures_are_recorded_with_five_significant_digits(uri: str) -> None:
    assert figure(490.908183) == 490.91 and figure(0.679177999) == 0.67918 and figure(0.000123456) == 0.00012346
    assert figure(36686.0) == 36686.0 and figure(27785920.0) == 27785920.0  # counts stay whole
    assert figure(0.9123) == 0.9123  # an accuracy on 10,000 images is exact
    assert abs(figure(1733000000.25) - 1733000000.25) < 1  # the whole part of a larger number is kept

    writer = StoreWriter(uri, "figures")
    parent = writer.start_search("s", {}, {})
    run = MlflowClient(uri).get_run(writer.log_candidate(parent, _cand(0, 0.912345678, 0.679177999), "s"))
    assert run.data.metrics["accuracy"] == 0.91235 and run.data.metrics["latency_p50"] == 0.67918
    assert run.data.metrics["params"] == 36686.0


def test_the_tables_size_column_shows_millions_that_fit_it(uri: str) -> None:
    # The 75-pixel column showed 5 characters of an 8-digit count ("12870..." in a real browser).
    writer = StoreWriter(uri, "sizes")
    parent = writer.start_search("s", {}, {})
    client = MlflowClient(uri)
    shown = {}
    for i, (params, macs) in enumerate([(12_870_123, 301_460_000), (36_686, 1_234_567), (99_999_999, 98_765)]):
        cand = _cand(i, 0.9, 5.0)
        cand.metrics.update(params=float(params), macs=float(macs))
        metrics = client.get_run(writer.log_candidate(parent, cand, "s")).data.metrics
        assert metrics["params"] == params and metrics["macs"] == macs  # the counts themselves stay whole
        shown[params] = (metrics["params_m"], metrics["macs_m"])
    assert shown == {12_870_123: (12.87, 301.5), 36_686: (0.037, 1.235), 99_999_999: (100.0, 0.099)}
    state = _view(writer, view_key(parent))
    assert "metrics.`params_m`" in state["selectedColumns"] and "metrics.`params`" not in state["selectedColumns"]
    assert all(len(f"{v:g}") <= 5 for pair in shown.values() for v in pair)


def test_a_candidates_name_is_short_and_says_what_it_is() -> None:
    assert candidate_run_name(_cand(0, 0.912, 9.87)) == "000000000000 acc 0.912 9.87 ms ✓"  # meets the target
    assert candidate_run_name(_cand(1, 0.5, 11.0)) == "000000000001 acc 0.500 11.00 ms ✗"  # misses it


def test_the_names_the_link_and_the_view_use_are_read_by_the_installed_mlflow_ui() -> None:
    import mlflow

    bundle = Path(mlflow.__file__).parent / "server" / "js" / "build" / "static" / "js"
    if not bundle.is_dir():
        pytest.skip("this MLflow has no UI (mlflow-skinny)")
    text = "\n".join(p.read_text(errors="replace") for p in bundle.glob("*.js"))
    for name in ("workflowType", "machine_learning", "viewStateShareKey", "mlflow.sharedViewState.",
                 "compareRunsMode", "CHART", "selectedColumns", "columnOrder", "columnWidths", "runsHiddenMode",
                 "SHOW_ALL", "compareRunCharts", "compareRunSections", "isAccordionReordered", "SCATTER",
                 "runDateAndNestInfo", '"Run Name"', "createdAt", "updatedAt", *FACETS):
        assert name in text, name
