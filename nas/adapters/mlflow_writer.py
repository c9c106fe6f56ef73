"""Writing to MLflow (one of the two modules that import MLflow): every write LatNAS makes.

:class:`StoreWriter` opens a store (creating it and the experiment when asked, once, in the
process that opens it first) and makes the writes of every command: a search's parent run and
one finished child run per candidate (the layout is described in :mod:`nas.adapters.mlflow_reader`),
the review's writes (the Pareto plot, reference latencies, export runs with their ONNX model)
and predictor runs. Each method takes the run it writes to; every MLflow failure becomes a
:class:`~nas.core.errors.TrackingError` naming what was being written.

A search's writes all happen in its driver process (Ray Tune callbacks run there), so the store
never has concurrent writers from one search. Child runs are created already finished, so none
is ever left RUNNING; the parent is always ended with a status (``FINISHED``, ``FAILED`` or
``KILLED``), except when the driver itself is killed (SIGKILL, a lost machine) or the store
refuses even that write (a full disk): resuming the search (:meth:`StoreWriter.resume_search`)
reopens its parent run, marks a child run the driver was writing when it stopped ``KILLED``, and
hands back the finished candidates. Every MLflow failure, with SQLite's own message, is one line.
"""

from __future__ import annotations

import errno
import json
import math
import os
import socket
import sqlite3
import time
import urllib.parse
from collections.abc import Iterable, Iterator, Mapping
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import mlflow
from mlflow import MlflowClient
from mlflow.entities import Metric, Param, RunTag
from mlflow.exceptions import MlflowException
from mlflow.tracking._tracking_service import utils as tracking_utils

from latency_predictor.locking import locked
from nas.adapters.mlflow_reader import (
    ARTIFACTS_FOLDER,
    EXPORTED_FROM_TAG,
    PARENT_TAG,
    REFERENCE_DEVICE_TAG,
    REFERENCE_PREFIX,
    ROLE_TAG,
    SEARCH_TAG,
    StoreReader,
    candidate_from_run,
    check_sqlite_store,
    database_error,
    mlflow_errors,
    quiet_mlflow,
    sqlite_path,
    tracking_error,
)
from nas.core.errors import StoreFullError, TrackingError
from nas.core.paths import project_home, unwritable
from nas.core.record import KILLED, STOP_REASON_TAG, Candidate, SearchRecord, figure

_MAX_PARAMS, _MAX_TAGS, _MAX_METRICS = 100, 100, 1000
EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
MODEL_DEVELOPMENT = "custom_model_development"
_MAX_PARAM_LEN = 6000

# What MLflow 3.17's UI reads (names found in its bundle, mlflow/server/js/build): the runs page's
# model-training switch, a saved view of the runs page (one experiment tag per view, opened by the
# view's key in the link), and the chart ("compare") mode of the same page.
WORKFLOW_PARAM, MACHINE_LEARNING = "workflowType", "machine_learning"
VIEW_PARAM = "viewStateShareKey"
VIEW_TAG_PREFIX = "mlflow.sharedViewState."
COMPARE_MODE_PARAM, CHART_MODE = "compareRunsMode", "CHART"
_VIEW_KEY_PREFIX = "latnas-"
MAX_SEARCH_VIEWS = 20
"""Saved views LatNAS keeps in an experiment, one per recent search (MLflow's UI saves no more
than 40 views per experiment, so the user keeps room for theirs)."""
TABLE_METRICS = ("reward", "accuracy", "latency_p50", "meets_target", "params_m")
"""The candidates' figures the runs table of a search's view shows as columns, in this order."""
_COLUMN_WIDTHS = {"attributes.`Run Name`": 270, "runDateAndNestInfo": 130, "metrics.`reward`": 80,
                  "metrics.`accuracy`": 80, "metrics.`latency_p50`": 95, "metrics.`meets_target`": 105,
                  "metrics.`params_m`": 75}
"""Pixels: the run names and the five figures fit beside MLflow's side bars in a 1600 px window."""
IN_MILLIONS = {"params": "params_m", "macs": "macs_m"}
"""Counts also logged in millions, for a table column: the 75-pixel column shows five characters,
and a network's parameters run to eight digits (``12870...``)."""


def candidate_run_name(cand: Candidate) -> str:
    """A candidate run's name that says what it is at a glance in MLflow's run list and charts, short
    enough for the run-name column: ``3f2a9c1d0b7e acc 0.912 12.31 ms ✓`` (✓ meets the target, ✗
    misses it; the arch_id is also the param ``arch_id``), with ``x0.83`` after the milliseconds when
    it was measured beside an anchor network (its latency over the anchor's)."""
    if cand.status == "FAILED":
        return f"{cand.arch_id} failed: {cand.tags.get('failure_type', 'error')}"
    est = cand.tags.get("accuracy_estimator", "train")
    figure = f"acc {cand.accuracy:.3f}" if est == "train" else f"{est} {cand.accuracy:.4g}"
    meets = {True: " ✓", False: " ✗", None: ""}[cand.meets_target]
    pruned = f" pruned ep {int(cand.metric('epochs_completed'))}" if cand.status == "PRUNED" else ""
    anchor = f" x{cand.x_anchor:.2f}" if math.isfinite(cand.x_anchor) else ""
    return f"{cand.arch_id} {figure} {cand.latency_p50:.2f} ms{anchor}{meets}{pruned}"


def view_key(parent_run_id: str) -> str:
    """The key of a search's saved view in MLflow's UI (the link's ``viewStateShareKey``)."""
    return f"{_VIEW_KEY_PREFIX}{parent_run_id}"


def search_facets(parent_run_id: str) -> dict[str, Any]:
    """The runs page's filter and sort for one search's candidates, best reward first, in the
    names and forms MLflow's UI keeps them (the link's parameters, or a saved view's)."""
    return {"searchFilter": f"tags.`{PARENT_TAG}` = '{parent_run_id}'", "orderByKey": "metrics.`reward`",
            "orderByAsc": False}


def search_view(parent_run_id: str) -> dict[str, Any]:
    """The state of MLflow's runs page for one search, as its UI saves a view: the search's
    candidates best reward first, :data:`TABLE_METRICS` as columns, and in chart mode the
    reward and the accuracy against latency p50 before MLflow's one chart per metric."""
    columns = [f"metrics.`{k}`" for k in TABLE_METRICS]
    section = f"{_VIEW_KEY_PREFIX}{parent_run_id}-latency"
    charts = [
        {"uuid": f"{section}-{y}", "type": "SCATTER", "runsCountToCompare": 100, "metricSectionId": section,
         "deleted": False, "isGenerated": False, "xaxis": {"key": "latency_p50", "type": "METRIC"},
         "yaxis": {"key": y, "type": "METRIC"}}
        for y in ("reward", "accuracy")
    ]
    return {
        **search_facets(parent_run_id),
        "selectedColumns": columns,
        "columnOrder": ["attributes.`Run Name`", "runDateAndNestInfo", *columns],
        "columnWidths": _COLUMN_WIDTHS,
        "runsHiddenMode": "SHOW_ALL",
        "compareRunCharts": charts,
        "compareRunSections": [{"uuid": section, "name": "vs latency", "display": True,
                                "isReordered": False, "deleted": False, "isGenerated": False}],
        "isAccordionReordered": True,
    }


def check_reachable(uri: str) -> None:
    """Check that ``uri`` names a store this process can reach, before any work.

    Raises:
        TrackingError: an unreachable server, a relative or missing SQLite path, an unknown scheme.
        CorruptStoreError: an existing SQLite file that is damaged (it is left untouched).
    """
    parsed = urlparse(uri)
    if parsed.scheme in ("http", "https"):
        host = parsed.hostname or ""
        port = parsed.port or (443 if parsed.scheme == "https" else 80)
        try:
            with socket.create_connection((host, port), timeout=5):
                pass
        except OSError as err:
            raise TrackingError(
                f"tracking.uri {uri!r}: cannot reach the MLflow server at {host}:{port} ({err.strerror or err}); "
                "start it (mlflow server --host 127.0.0.1 --port PORT) or leave tracking.uri unset for a local "
                "SQLite file"
            ) from None
    elif parsed.scheme == "sqlite":
        path = sqlite_path(uri)
        if path is None or not path.is_absolute():
            raise TrackingError(f"tracking.uri {uri!r}: use an absolute SQLite path, e.g. sqlite:////abs/path/mlflow.db")
        # The project home is created on first use; any other folder must exist (a typo in a path
        # would otherwise quietly start a new, empty store).
        if not path.parent.exists() and path.parent != project_home():
            raise TrackingError(f"tracking.uri {uri!r}: the folder {str(path.parent)!r} does not exist; create it "
                                "or fix the path")
        problem = unwritable(path.parent)
        if problem is None and path.exists() and not os.access(path, os.W_OK):
            problem = f"{str(path)!r} is read-only"
        if problem:
            raise TrackingError(f"tracking.uri {uri!r}: cannot write the store: {problem}; choose a folder you can "
                                "write (tracking.uri=sqlite:////abs/path/mlflow.db)")
        if path.exists():
            check_sqlite_store(path)
    elif parsed.scheme not in ("databricks", "postgresql", "mysql", "mssql") and not parsed.scheme.startswith(
        ("postgresql+", "mysql+", "mssql+")
    ):
        raise TrackingError(
            f"tracking.uri {uri!r}: unsupported scheme {parsed.scheme or '(none)'!r}; use "
            "sqlite:////abs/path/mlflow.db, http(s)://host:port or a database URI"
        )


def _chunks(items: list[Any], n: int) -> Iterable[list[Any]]:
    for i in range(0, len(items), n):
        yield items[i : i + n]


def _now_ms() -> int:
    return int(time.time() * 1000)


def _metric(key: str, value: float, timestamp: int, step: int) -> Metric:
    """A metric as LatNAS logs it: rounded as a search records its figures (:func:`~nas.core.record.figure`)."""
    return Metric(key, figure(float(value)), timestamp, step)


def millions(count: float) -> float:
    """``count`` in millions, in five characters at most: four significant digits, three decimals at
    most (``12870123`` -> ``12.87``, ``36686`` -> ``0.037``, ``301460000`` -> ``301.5``)."""
    m = count / 1e6
    if m == 0 or not math.isfinite(m):
        return m
    return round(m, max(0, min(3, 3 - math.floor(math.log10(abs(m))))))


class StoreWriter:
    """Writes LatNAS's records to one experiment of an MLflow tracking store.

    Args:
        uri: MLflow tracking URI.
        experiment: experiment name.
        create: create the store and the experiment when missing (a search, an export of a
            network from outside the store); False: they must exist (the review's writes).

    Raises:
        TrackingError: the store cannot be reached, created or opened, or the experiment is
            deleted (or missing with ``create=False``).
    """

    def __init__(self, uri: str, experiment: str, create: bool = True) -> None:
        if create:
            check_reachable(uri)
        else:
            StoreReader(uri, experiment)  # raises when the store or experiment is missing
        quiet_mlflow()
        self.uri = uri
        self.experiment = experiment
        # Two processes creating one SQLite store at once both fail (MLflow's schema migration
        # races); the first creates it while the other waits on a lock file beside it. The client
        # creates the tables as it opens the store, so it is made under the lock too.
        with _creation_lock(uri), mlflow_errors(lambda: f"tracking.uri {uri!r}: cannot open the MLflow store"):
            self.client = MlflowClient(tracking_uri=uri)
            exp = self.client.get_experiment_by_name(experiment)
            if exp is None:
                location = None
                path = sqlite_path(uri)
                if path is not None:
                    # Artifacts next to the database, wherever the command is started from.
                    location = (path.parent / ARTIFACTS_FOLDER).as_uri()
                self.experiment_id = self.client.create_experiment(experiment, artifact_location=location)
            elif exp.lifecycle_stage == "deleted":
                raise TrackingError(
                    f"tracking.experiment {experiment!r} is deleted in {uri}; restore it in the MLflow UI or "
                    "choose another name"
                )
            else:
                self.experiment_id = exp.experiment_id
            if exp is None or EXPERIMENT_KIND_TAG not in exp.tags:
                # MLflow 3's UI opens an experiment without this tag in its GenAI view (traces, no runs);
                # 3.17's global GenAI / model-training switch overrides it (see ui_link).
                self.client.set_experiment_tag(self.experiment_id, EXPERIMENT_KIND_TAG, MODEL_DEVELOPMENT)

    def reader(self) -> StoreReader:
        """A reader of the same store and experiment."""
        return StoreReader(self.uri, self.experiment)

    def ui_command(self) -> str:
        """The command that opens this store in the MLflow UI, bound to localhost."""
        return f"mlflow ui --backend-store-uri {self.uri} --host 127.0.0.1"

    def ui_link(self, parent_run_id: str, base: str = "http://127.0.0.1:5000", charts: bool = False) -> str:
        """The MLflow UI's page of one search's candidates, best reward first.

        MLflow 3's UI keeps one GenAI / model-training switch for every experiment (GenAI unless
        the browser has chosen otherwise) and, with it, ignores the experiment's kind tag: the
        ``workflowType`` parameter is what opens the runs table rather than the traces overview.
        A search saved as a view (:meth:`save_search_view`) is opened by its key: the table then
        shows the candidates' figures as columns, and ``charts=True`` opens the same page in its
        chart mode, reward and accuracy against latency first. A search without a view (from an
        older LatNAS, or one of the oldest in the experiment) gets the filter and the sort in the
        link, and MLflow's default columns.
        """
        query: dict[str, str] = {WORKFLOW_PARAM: MACHINE_LEARNING}
        key = view_key(parent_run_id)
        with mlflow_errors(lambda: f"cannot read experiment {self.experiment!r} in {self.uri}"):
            exp = self.client.get_experiment(self.experiment_id)
        if VIEW_TAG_PREFIX + key in exp.tags:
            # Any filter or sort in the link would make the UI ignore the view: the view holds them.
            query[VIEW_PARAM] = key
        else:
            query.update({k: str(v).lower() if isinstance(v, bool) else str(v)
                          for k, v in search_facets(parent_run_id).items()})
        if charts:
            query[COMPARE_MODE_PARAM] = CHART_MODE
        encoded = urllib.parse.urlencode(query, quote_via=urllib.parse.quote)
        return f"{base}/#/experiments/{self.experiment_id}/runs?{encoded}"

    def save_search_view(self, parent_run_id: str, name: str) -> None:
        """Save the runs page of one search as a view of the experiment, as MLflow's "Save view"
        does (:func:`search_view`), and forget the views of all but the newest
        :data:`MAX_SEARCH_VIEWS` searches (views the user saved are left alone)."""
        now = _now_ms()
        envelope = {"name": f"{name}: candidates by reward", "createdAt": now, "updatedAt": now,
                    "state": json.dumps(search_view(parent_run_id))}
        with mlflow_errors(lambda: f"cannot save the search's view in experiment {self.experiment!r}"):
            self.client.set_experiment_tag(self.experiment_id, VIEW_TAG_PREFIX + view_key(parent_run_id),
                                           json.dumps(envelope))
            ours: list[tuple[float, str]] = []
            for tag, value in self.client.get_experiment(self.experiment_id).tags.items():
                if tag.startswith(VIEW_TAG_PREFIX + _VIEW_KEY_PREFIX):
                    try:
                        ours.append((float(json.loads(value)["createdAt"]), tag))
                    except (ValueError, KeyError, TypeError):
                        ours.append((0.0, tag))
            for _, tag in sorted(ours, reverse=True)[MAX_SEARCH_VIEWS:]:
                self.client.delete_experiment_tag(self.experiment_id, tag)

    # ------------------------------------------------------------------ a search
    def follow_move(self, was: Path) -> int:
        """Point the artifacts kept in ``was``'s ``mlartifacts/`` (where the store was: see
        :meth:`~nas.adapters.mlflow_reader.StoreReader.moved_from`) at the ``mlartifacts/`` beside
        the store now, for every experiment and run, so that what is logged from here on, and what
        MLflow's UI reads, is where the store moved with its folder. Returns how many were re-pointed.

        MLflow keeps each experiment's and run's artifact location as an absolute URI and has no
        call to change it; a store moved with its folder is the case this rewrites, in one
        transaction, as MLflow's users do by hand.

        Raises:
            TrackingError: the store is not a SQLite file, or refused the write.
        """
        path = sqlite_path(self.uri)
        if path is None:
            raise TrackingError(f"tracking.uri {self.uri!r}: only a SQLite store moves with its folder")
        before, after = (was / ARTIFACTS_FOLDER).as_uri(), (path.parent.resolve() / ARTIFACTS_FOLDER).as_uri()
        n = len(before) + 1
        try:
            with closing(sqlite3.connect(path, timeout=60)) as db, db:
                moved = sum(db.execute(
                    f"UPDATE {table} SET {column} = ? || substr({column}, ?) WHERE {column} = ? OR "
                    f"substr({column}, 1, ?) = ?", (after, n, before, n, before + "/")).rowcount
                    for table, column in (("experiments", "artifact_location"), ("runs", "artifact_uri")))
        except sqlite3.Error as err:
            raise database_error(f"cannot point the artifacts of {self.uri} from {before} to {after}", err) from None
        # MLflow keeps each run's artifact location, once used, in a cache of the process: a search
        # run before the move in this process (the Python API, a notebook) would write to the old one.
        cache = getattr(tracking_utils, "_artifact_repos_cache", None)
        if cache is not None:
            cache.clear()
        return moved

    def start_search(self, name: str, params: Mapping[str, Any], tags: Mapping[str, str]) -> str:
        """Create the parent run of a search; returns its run id."""
        with mlflow_errors(lambda: f"cannot start the search's run in {self.uri}"):
            run = self.client.create_run(
                self.experiment_id, run_name=name, tags={ROLE_TAG: "search", SEARCH_TAG: name, **tags}
            )
            self._log(run.info.run_id, params=params)
        self.save_search_view(run.info.run_id, name)
        return str(run.info.run_id)

    def resume_search(self, parent: SearchRecord, tags: Mapping[str, str]) -> tuple[list[Candidate], int]:
        """Continue the search of ``parent``: reopen its run and return its finished candidates.

        The parent run is set RUNNING again (it is RUNNING already when the driver was killed) and
        tagged with ``tags``. A candidate run still RUNNING was being written when the driver
        died: its record is incomplete, so it is marked KILLED (tag ``status=KILLED``) and its
        architecture counts as not evaluated.

        Returns:
            The finished candidates (``COMPLETED``, ``PRUNED`` or ``FAILED``), one per
            architecture, oldest first, and how many stale runs were marked KILLED.
        """
        finished: dict[str, Candidate] = {}
        stale = 0
        with mlflow_errors(lambda: f"cannot resume the search in {self.uri}"):
            self.client.update_run(parent.run_id, status="RUNNING")
            if STOP_REASON_TAG in parent.tags:  # what stopped the last run no longer holds
                self.client.delete_tag(parent.run_id, STOP_REASON_TAG)
            self._log(parent.run_id, tags=tags)
            for run in sorted(self.reader().candidate_runs(parent.run_id), key=lambda r: r.start_time):
                if run.status == "RUNNING":
                    self._log(run.run_id, tags={
                        "status": KILLED, "failure_type": "DriverStopped",
                        "failure_reason": "the search's driver stopped while this record was written; the "
                                          "architecture counts as not evaluated and may be evaluated again",
                    })
                    self.client.set_terminated(run.run_id, "KILLED")
                    stale += 1
                elif run.tags.get("status") in ("COMPLETED", "PRUNED", "FAILED") and "arch" in run.params:
                    finished.setdefault(run.params["arch"], candidate_from_run(run))
        self.save_search_view(parent.run_id, parent.name)
        return list(finished.values()), stale

    def log_candidate(self, parent_run_id: str, cand: Candidate, search_name: str) -> str:
        """Create the finished child run of one candidate under ``parent_run_id``; returns its run id."""
        tags = {ROLE_TAG: "candidate", SEARCH_TAG: search_name, PARENT_TAG: parent_run_id,
                "trial_id": cand.trial_id, **cand.tags}
        history_keys = {k for row in cand.history for k in row if k != "epoch"}
        now = _now_ms()
        final = {k: v for k, v in cand.metrics.items() if k not in history_keys}
        final.update({IN_MILLIONS[k]: millions(v) for k, v in final.items() if k in IN_MILLIONS})
        metrics = [_metric(k, v, now, 0) for k, v in final.items()]
        for row in cand.history:
            step = int(row["epoch"])
            metrics += [_metric(k, v, now, step) for k, v in row.items() if k != "epoch"]
        with mlflow_errors(lambda: f"cannot record candidate {cand.arch_id} in {self.uri}"):
            run = self.client.create_run(
                self.experiment_id, start_time=int(cand.start_time * 1000), run_name=candidate_run_name(cand),
                tags=tags,
            )
            run_id = str(run.info.run_id)
            # The final value of a metric with history is its last step, which MLflow shows as latest.
            self._log(run_id, params={"arch": cand.arch, "arch_id": cand.arch_id, **cand.decisions}, metrics=metrics)
            self.client.set_terminated(run_id, "FAILED" if cand.status == "FAILED" else "FINISHED",
                                       end_time=int(cand.end_time * 1000))
        return run_id

    def log_revised(self, cand: Candidate, metrics: Mapping[str, float], tags: Mapping[str, str]) -> None:
        """New values of some of a recorded candidate's metrics (and tags), e.g. after the final
        latency pass. Each is logged at the step of the metric's last value with a later time, so
        MLflow shows it as the latest while the history keeps the value it replaces. ``cand`` holds
        the revised figures already: the run is renamed after them (:func:`candidate_run_name`)."""
        if cand.run_id is None:
            raise TrackingError(f"candidate {cand.arch_id} has no MLflow run to revise")
        steps: dict[str, int] = {}
        for row in cand.history:
            for key in row:
                if key != "epoch":
                    steps[key] = max(steps.get(key, 0), int(row["epoch"]))
        now = _now_ms()
        logged = [_metric(k, float(v), now, steps.get(k, 0)) for k, v in metrics.items() if math.isfinite(v)]
        run_id = cand.run_id
        with mlflow_errors(lambda: f"cannot revise the record of candidate {cand.arch_id} (run {run_id})"):
            self._log(run_id, metrics=logged, tags=tags)
            # the run's name states its latency and verdict: it follows the revised figures
            self.client.update_run(run_id, name=candidate_run_name(cand))

    def log_table(self, run_id: str, rows: list[dict[str, Any]], artifact_file: str) -> None:
        """A table on a run, as MLflow's UI shows tables (its artifact view renders it, sortable)."""
        columns = list(rows[0]) if rows else []
        data = {c: ["" if r.get(c) is None else r.get(c) for r in rows] for c in columns}
        with mlflow_errors(lambda: f"cannot log the table {artifact_file} on run {run_id}"):
            self.client.log_table(run_id, data=data, artifact_file=artifact_file)

    def log_summary(self, run_id: str, metrics: Mapping[str, float], tags: Mapping[str, str] | None = None) -> None:
        """Summary metrics (and tags) on a run."""
        now = _now_ms()
        with mlflow_errors(lambda: f"cannot log the summary of run {run_id}"):
            self._log(run_id, metrics=[_metric(k, float(v), now, 0) for k, v in metrics.items()], tags=tags or {})

    def log_tags(self, run_id: str, tags: Mapping[str, str]) -> None:
        """Tags on a run."""
        with mlflow_errors(lambda: f"cannot tag run {run_id}"):
            self._log(run_id, tags=tags)

    def log_artifacts(self, run_id: str, paths: Iterable[Path], artifact_path: str | None = None) -> None:
        """Upload files to a run's artifacts."""
        for p in paths:
            try:
                self.client.log_artifact(run_id, str(p), artifact_path=artifact_path)
            except MlflowException as err:
                raise tracking_error(f"cannot log {p.name} on run {run_id}", err) from None
            except OSError as err:
                kind = StoreFullError if err.errno == errno.ENOSPC else TrackingError
                raise kind(f"cannot log {p.name} on run {run_id}: {err.strerror or err}") from None

    def end_run(self, run_id: str, status: str) -> None:
        """End a run with ``status`` (``FINISHED``, ``FAILED`` or ``KILLED``)."""
        with mlflow_errors(lambda: f"cannot end run {run_id}"):
            self.client.set_terminated(run_id, status)

    # ------------------------------------------------------------------ the review's writes
    def log_reference_latencies(self, parent_run_id: str, latencies: Mapping[str, float], device: str,
                                x_anchor: Mapping[str, float] | None = None) -> None:
        """Record reference networks' p50 latency on a search's parent run (and the device they ran on),
        and their latency over the search's anchor network's (``reference.<name>.x_anchor``)."""
        now = _now_ms()
        metrics = [_metric(f"{REFERENCE_PREFIX}{k}.latency_p50", float(v), now, 0) for k, v in latencies.items()]
        metrics += [_metric(f"{REFERENCE_PREFIX}{k}.x_anchor", float(v), now, 0) for k, v in (x_anchor or {}).items()]
        with mlflow_errors(lambda: f"cannot log reference latencies on run {parent_run_id}"):
            self.client.log_batch(parent_run_id, metrics=metrics, tags=[RunTag(REFERENCE_DEVICE_TAG, device)])

    def create_export_run(
        self, arch_id: str, parent_run_id: str | None, candidate_run_id: str | None, search_name: str | None
    ) -> str:
        """Open the run of an export, nested under the search (``latnas.role=export``); returns its id.

        Args:
            arch_id: names the run ``export-<arch_id>``.
            parent_run_id: the search's parent run (None: a top-level run).
            candidate_run_id: the candidate run exported (tag ``latnas.exported_from``).
            search_name: the search's name (tag).
        """
        tags = {ROLE_TAG: "export", "arch_id": arch_id}
        if parent_run_id:
            tags[PARENT_TAG] = parent_run_id
        if candidate_run_id:
            tags[EXPORTED_FROM_TAG] = candidate_run_id
        if search_name:
            tags[SEARCH_TAG] = search_name
        with mlflow_errors(lambda: f"cannot create the export run in {self.uri}"):
            return str(self.client.create_run(self.experiment_id, run_name=f"export-{arch_id}", tags=tags).info.run_id)

    def log_onnx_model(
        self, run_id: str, onnx_path: Path, sample: Any, output: Any, register: str | None
    ) -> tuple[str, str | None]:
        """Log an ONNX model on ``run_id`` (:func:`mlflow.onnx.log_model`), registering it when named.

        Args:
            run_id: the export run.
            onnx_path: the model file.
            sample: an input array, for the model signature.
            output: the model's output on ``sample``, for the signature.
            register: registered model name (None: not registered).

        Returns:
            The model URI and the registered version (None when not registered).
        """
        # Only exports log models: the search does not pay for these imports.
        import mlflow.onnx
        import onnx
        from mlflow.models import infer_signature

        with mlflow_errors(lambda: f"cannot log the ONNX model to {self.uri}"), _fluent(self.uri, run_id):
            info = mlflow.onnx.log_model(
                onnx.load(str(onnx_path)), name="model", signature=infer_signature(sample, output),
                registered_model_name=register, save_as_external_data=False,
            )
        version = str(info.registered_model_version) if register else None
        return str(info.model_uri), version

    def finish_export_run(self, run_id: str, folder: Path, metrics: Mapping[str, float]) -> None:
        """Upload the export folder (as ``export/``), log its figures and close the run."""
        now = _now_ms()
        batch = [_metric(k, float(v), now, 0) for k, v in metrics.items() if math.isfinite(float(v))]
        try:
            self.client.log_artifacts(run_id, str(folder), artifact_path="export")
            self.client.log_batch(run_id, metrics=batch)
            self.client.set_terminated(run_id, "FINISHED")
        except (MlflowException, OSError) as err:
            raise TrackingError(f"cannot finish the export run {run_id}: {err}") from None

    def log_optimized_variant(
        self, export_run_id: str, name: str, params: Mapping[str, Any], metrics: Mapping[str, float],
        tags: Mapping[str, str], files: Iterable[Path], passed: bool,
    ) -> str:
        """Record one optimised variant of an exported candidate as a finished run nested under its export run
        (``latnas.role=optimized``), ``FAILED`` when it failed its regression check; returns the run id."""
        now = _now_ms()
        batch = [_metric(k, float(v), now, 0) for k, v in metrics.items() if math.isfinite(float(v))]
        all_tags = {ROLE_TAG: "optimized", PARENT_TAG: export_run_id, **tags}
        try:
            run = self.client.create_run(self.experiment_id, run_name=name, tags=all_tags)
            run_id = str(run.info.run_id)
            self._log(run_id, params=params, metrics=batch)
            for f in files:
                if f.is_file():
                    self.client.log_artifact(run_id, str(f), artifact_path="variant")
            self.client.set_terminated(run_id, "FINISHED" if passed else "FAILED")
        except (MlflowException, OSError) as err:
            raise TrackingError(f"cannot record the variant {name} in {self.uri}: {err}") from None
        return run_id

    # ------------------------------------------------------------------ studies
    def log_finished_run(
        self, name: str, role: str, params: Mapping[str, Any], metrics: Mapping[str, float], files: Iterable[Path],
        tags: Mapping[str, str] | None = None, history: Iterable[Mapping[str, float]] = (),
    ) -> str:
        """Record a finished piece of work (a fidelity study, a supernet) as one run tagged
        ``latnas.role=<role>``, with its params, metrics and files; returns the run id.

        ``history``: rows of per-epoch figures, each with its ``epoch`` (the metric's step)."""
        now = _now_ms()
        batch = [_metric(k, float(v), now, 0) for k, v in metrics.items() if math.isfinite(float(v))]
        batch += [_metric(k, float(v), now, int(row["epoch"])) for row in history for k, v in row.items()
                  if k != "epoch" and isinstance(v, int | float) and math.isfinite(float(v))]
        try:
            run = self.client.create_run(self.experiment_id, run_name=name, tags={ROLE_TAG: role, **(tags or {})})
            run_id = str(run.info.run_id)
            self._log(run_id, params=params, metrics=batch)
            for f in files:
                if f.is_file():
                    self.client.log_artifact(run_id, str(f))
            self.client.set_terminated(run_id, "FINISHED")
        except (MlflowException, OSError) as err:
            raise TrackingError(f"cannot record {name} in {self.uri}: {err}") from None
        return run_id

    # ------------------------------------------------------------------ latency predictors
    def log_predictor(
        self, name: str, files: Iterable[Path], params: Mapping[str, Any],
        dataset_files: Iterable[Path] = (), dataset_params: Mapping[str, Any] | None = None,
        register: str | None = None,
    ) -> tuple[str, str | None]:
        """Record a latency predictor (and the dataset it was fitted on) as a finished run.

        The run has tag ``latnas.role=predictor`` (the leaderboard ignores it), the predictor's
        identity and quality figures as params, the predictor file under ``predictor/`` and the
        dataset files under ``dataset/``. With ``register``, the predictor file is registered as a
        version of that registered model (its source is the logged artifact folder).

        Returns:
            The run id and the registered version (None when not registered).
        """
        flat = {f"predictor.{k}": v for k, v in params.items()}
        flat.update({f"dataset.{k}": v for k, v in (dataset_params or {}).items()})
        try:
            run = self.client.create_run(self.experiment_id, run_name=name, tags={ROLE_TAG: "predictor"})
            run_id = run.info.run_id
            self._log(run_id, params=flat)
            for f in files:
                self.client.log_artifact(run_id, str(f), artifact_path="predictor")
            for f in dataset_files:
                self.client.log_artifact(run_id, str(f), artifact_path="dataset")
            version: str | None = None
            if register:
                try:
                    self.client.get_registered_model(register)
                except MlflowException:
                    self.client.create_registered_model(register, tags={ROLE_TAG: "predictor"})
                mv = self.client.create_model_version(
                    register, source=f"{run.info.artifact_uri}/predictor", run_id=run_id,
                    tags={k: str(v) for k, v in params.items()
                          if k in ("predictor_digest", "space", "backend", "fingerprint")},
                )
                version = str(mv.version)
            self.client.set_terminated(run_id, "FINISHED")
        except (MlflowException, OSError) as err:
            raise TrackingError(f"cannot record the predictor in {self.uri}: {err}") from None
        return str(run_id), version

    # ------------------------------------------------------------------ helpers
    def _log(
        self, run_id: str, params: Mapping[str, Any] | None = None, metrics: list[Metric] | None = None,
        tags: Mapping[str, str] | None = None,
    ) -> None:
        p = [Param(k, str(v)[:_MAX_PARAM_LEN]) for k, v in (params or {}).items()]
        t = [RunTag(k, str(v)[:_MAX_PARAM_LEN]) for k, v in (tags or {}).items()]
        for chunk in _chunks(p, _MAX_PARAMS):
            self.client.log_batch(run_id, params=chunk)
        for chunk in _chunks(t, _MAX_TAGS):
            self.client.log_batch(run_id, tags=chunk)
        for chunk in _chunks(metrics or [], _MAX_METRICS):
            self.client.log_batch(run_id, metrics=chunk)


@contextmanager
def _creation_lock(uri: str) -> Iterator[None]:
    path = sqlite_path(uri)
    if path is None:  # a server or database serialises its own schema changes
        yield
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    with locked(path.with_name(path.name + ".lock")):
        yield


@contextmanager
def _fluent(uri: str, run_id: str) -> Iterator[None]:
    """``mlflow.<flavor>.log_model`` logs to the fluent API's active run: point it at ``run_id`` for a moment."""
    previous = mlflow.get_tracking_uri()
    mlflow.set_tracking_uri(uri)
    try:
        with mlflow.start_run(run_id=run_id):
            yield
    finally:
        mlflow.set_tracking_uri(previous)
