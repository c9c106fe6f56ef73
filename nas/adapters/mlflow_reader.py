"""Reading a search's record back from MLflow (one of the two modules that import MLflow).

The record's layout (written by :mod:`nas.adapters.mlflow_writer`):

* one **parent run** per search, named after the search (tag ``latnas.role=search``), with the
  resolved configuration as params, the environment as tags and summary metrics at the end;
* one **child run** per evaluated architecture (tag ``latnas.role=candidate``,
  ``mlflow.parentRunId`` = the parent), named by its ``arch_id``, with the decisions as params,
  the figures as metrics and status, latency source and failure reason as tags;
* export runs (``latnas.role=export``) nested under the search, and predictor runs
  (``latnas.role=predictor``).

:class:`StoreReader` turns those runs into the plain types of :mod:`nas.core.record`: a
:class:`~nas.core.record.SearchRecord` per search and a :class:`~nas.core.record.Candidate` per
candidate run (:func:`candidate_from_run`, the one conversion). It opens existing stores only.
"""

from __future__ import annotations

import ast
import logging
import math
import re
import sqlite3
import urllib.parse
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mlflow import MlflowClient
from mlflow.entities import Run
from mlflow.exceptions import MlflowException
from sqlalchemy.exc import DBAPIError

from nas.core.errors import CorruptStoreError, NotRecordedError, StoreFullError, TrackingError
from nas.core.paths import default_tracking_uri
from nas.core.record import KILLED, Candidate, SearchRecord

ROLE_TAG = "latnas.role"
SEARCH_TAG = "latnas.search_name"
PARENT_TAG = "mlflow.parentRunId"
EXPORTED_FROM_TAG = "latnas.exported_from"
REFERENCE_PREFIX = "reference."
"""Parent-run metrics ``reference.<name>.latency_p50`` hold reference latencies on the search's device."""
REFERENCE_DEVICE_TAG = "reference_device"
RUN_ID_RE = re.compile(r"[0-9a-f]{32}")
_RECORD_TAGS_SKIPPED = (ROLE_TAG, SEARCH_TAG, PARENT_TAG, "trial_id")


def sqlite_path(uri: str) -> Path | None:
    """The database file of a ``sqlite:///`` URI (None for other schemes)."""
    return Path(uri[len("sqlite:///"):]) if uri.startswith("sqlite:///") else None


ARTIFACTS_FOLDER = "mlartifacts"
"""The folder beside a SQLite store that holds its experiments' artifacts (MLflow's own default name)."""

_DAMAGED = ("SQLITE_CORRUPT", "SQLITE_NOTADB")


def check_sqlite_store(path: Path) -> None:
    """Check that an existing SQLite store is a sound database before MLflow opens it.

    MLflow opens a store read-write to check and migrate its schema, and a damaged file fails
    there, deep in SQLAlchemy. Here the file is opened read-only (SQLite's ``quick_check``:
    milliseconds for a store of a few MB), so it is left byte for byte as it was. Only damage is
    reported: a store another process holds locked, or any other condition SQLite reports, is left
    to MLflow as before.

    Raises:
        CorruptStoreError: the file is not a SQLite database, or SQLite finds it damaged
            (truncated, overwritten).
    """
    problem = None
    try:
        with closing(sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)) as db:
            rows = db.execute("PRAGMA quick_check").fetchall()
        if rows != [("ok",)]:
            problem = "; ".join(str(r[0]) for r in rows[:3])
    except sqlite3.DatabaseError as err:
        if err.sqlite_errorname not in _DAMAGED:
            return
        problem = str(err)
    if problem is not None:
        raise CorruptStoreError(
            f"the MLflow store {path} is damaged ({problem}); it was left untouched: restore it from a copy, "
            "or move it aside to start a new store (or point tracking.uri at another one)"
        )


def quiet_mlflow() -> None:
    """"Creating initial MLflow database tables..." and the like are not the user's business.

    Nor is the traceback MLflow logs for each failed database write ("SQLAlchemy database
    error..."): MLflow raises that error too, and :func:`mlflow_errors` says it in one line,
    naming the write.
    """
    logging.getLogger("mlflow.store.db.utils").setLevel(logging.CRITICAL)
    logging.getLogger("alembic").setLevel(logging.WARNING)


def _database_error(err: BaseException) -> BaseException | None:
    """The database driver's own exception behind an MLflow error (SQLAlchemy keeps it as ``orig``)."""
    cause = err.__cause__
    while cause is not None:
        if isinstance(cause, DBAPIError) and isinstance(cause.orig, BaseException):
            return cause.orig
        cause = cause.__cause__
    return None


def tracking_error(action: str, err: MlflowException) -> TrackingError:
    """The :class:`TrackingError` of ``action`` failing with ``err``, in one line.

    Where a database refused the write, the line gives the database's own message (and SQLite's
    error name), not SQLAlchemy's statement and parameters; a full SQLite store (``SQLITE_FULL``,
    read from the error, not its text) is a :class:`StoreFullError`.
    """
    db = _database_error(err)
    if db is None:
        return TrackingError(f"{action}: {err.message}")
    return database_error(action, db)


def database_error(action: str, db: BaseException) -> TrackingError:
    """The :class:`TrackingError` of ``action`` refused by the database with ``db`` (its driver's own
    exception), in one line: a :class:`StoreFullError` where SQLite says the disk is full."""
    name = getattr(db, "sqlite_errorname", None)
    problem = f"{db} ({name})" if name else str(db).strip().splitlines()[0]
    code = getattr(db, "sqlite_errorcode", None)
    full = isinstance(code, int) and code & 0xFF == sqlite3.SQLITE_FULL  # the primary code of an extended one
    return (StoreFullError if full else TrackingError)(f"{action}: {problem}")


@contextmanager
def mlflow_errors(what: Callable[[], str]) -> Iterator[None]:
    """Turn MLflow's exceptions into :class:`TrackingError` (``what()``: the action that failed)."""
    try:
        yield
    except MlflowException as err:
        raise tracking_error(what(), err) from None


@dataclass(frozen=True)
class RunInfo:
    """One MLflow run as plain values.

    Attributes:
        run_id: the run's id.
        name: its run name.
        status: MLflow's run status (``FINISHED``, ``FAILED``, ...).
        start_time: milliseconds since the epoch.
        end_time: milliseconds since the epoch (0 while running).
        params: every param, as logged (strings).
        metrics: the latest value of every metric.
        tags: every tag.
        artifact_uri: where the run's artifacts are.
    """

    run_id: str
    name: str
    status: str
    start_time: int
    end_time: int = 0
    params: dict[str, str] = field(default_factory=dict)
    metrics: dict[str, float] = field(default_factory=dict)
    tags: dict[str, str] = field(default_factory=dict)
    artifact_uri: str = ""

    @property
    def role(self) -> str:
        """``search``, ``candidate``, ``export``, ``predictor`` or ``""`` for runs LatNAS did not write."""
        return self.tags.get(ROLE_TAG, "")

    @property
    def parent_run_id(self) -> str | None:
        """The run this one is nested under."""
        return self.tags.get(PARENT_TAG)

    def config(self, prefix: str) -> dict[str, Any]:
        """The nested mapping under ``prefix`` of a search's flattened config params.

        ``latency.options.provider=cpu`` and ``latency.input_shape=[1, 3, 224, 224]`` give
        ``config("latency") == {"options": {"provider": "cpu"}, "input_shape": [1, 3, 224, 224]}``.
        """
        out: dict[str, Any] = {}
        for key, raw in self.params.items():
            if not key.startswith(prefix + "."):
                continue
            parts = key[len(prefix) + 1:].split(".")
            node = out
            for p in parts[:-1]:
                node = node.setdefault(p, {})
            node[parts[-1]] = parse_param(raw)
        return out


def parse_param(raw: str) -> Any:
    """A logged param back as a Python value (``"[1, 3]"`` -> ``[1, 3]``, ``"None"`` -> None); else the string.

    Only literals are parsed (``ast.literal_eval``): nothing in a param is executed.
    """
    try:
        return ast.literal_eval(raw)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return raw


def _info(run: Run) -> RunInfo:
    return RunInfo(
        run_id=run.info.run_id, name=run.info.run_name or "", status=run.info.status,
        start_time=int(run.info.start_time or 0), end_time=int(run.info.end_time or 0),
        params=dict(run.data.params), metrics=dict(run.data.metrics), tags=dict(run.data.tags),
        artifact_uri=run.info.artifact_uri or "",
    )


def candidate_from_run(run: RunInfo) -> Candidate:
    """The candidate a child run of a search records.

    The per-epoch history and the full latency record stay in MLflow; the candidate carries the
    final metrics, the decisions (params other than ``arch`` and ``arch_id``) and the tags.

    Raises:
        TrackingError: the run records no architecture (no ``arch`` param).
    """
    if "arch" not in run.params:
        what = f"the parent run of search {run.name!r}" if run.role == "search" else "not a LatNAS candidate run"
        raise TrackingError(f"MLflow run {run.run_id} has no architecture (no 'arch' param): it is {what}")
    tags = {k: v for k, v in run.tags.items() if not k.startswith("mlflow.") and k not in _RECORD_TAGS_SKIPPED}
    status = run.tags.get("status") or (KILLED if run.status == "KILLED" else "FAILED")
    return Candidate(
        arch=run.params["arch"], arch_id=run.params.get("arch_id", run.name), status=status,
        decisions={k: parse_param(v) for k, v in run.params.items() if k not in ("arch", "arch_id")},
        metrics=dict(run.metrics), tags=tags, trial_id=run.tags.get("trial_id", run.run_id), run_id=run.run_id,
        start_time=run.start_time / 1000, end_time=(run.end_time or run.start_time) / 1000,
    )


def reference_latencies(parent: RunInfo) -> tuple[dict[str, float], str | None]:
    """Reference p50 latencies logged on a parent run, and the device they were measured on."""
    refs = {
        k[len(REFERENCE_PREFIX):-len(".latency_p50")]: v for k, v in parent.metrics.items()
        if k.startswith(REFERENCE_PREFIX) and k.endswith(".latency_p50") and math.isfinite(v)
    }
    return refs, parent.tags.get(REFERENCE_DEVICE_TAG)


def search_from_run(parent: RunInfo, experiment_id: str) -> SearchRecord:
    """The :class:`SearchRecord` of a search's parent run."""
    target = parse_param(parent.params.get("target_ms", "None"))
    target_anchor = parse_param(parent.params.get("target_anchor", "None"))
    target_x = parse_param(parent.params.get("target_x", "None"))
    dataset = parse_param(parent.params.get("dataset", "None"))
    refs, _ = reference_latencies(parent)
    return SearchRecord(
        run_id=parent.run_id, name=parent.tags.get(SEARCH_TAG, parent.name), experiment_id=experiment_id,
        status=parent.status, target_ms=float(target) if isinstance(target, int | float) else None,
        target_anchor=str(target_anchor) if target_anchor else None,
        target_x=float(target_x) if target_anchor and isinstance(target_x, int | float) else None,
        space=parent.params.get("space"), latency=parent.config("latency"), data=parent.config("data"),
        num_classes=int(dataset["classes"]) if isinstance(dataset, dict) and "classes" in dataset else None,
        accuracy_estimator=parent.tags.get("accuracy_estimator"), device_name=parent.tags.get("latency_device_name"),
        best_arch_id=parent.tags.get("best_arch_id"), references=refs, params=dict(parent.params),
        tags=dict(parent.tags),
    )


def _quote(value: str) -> str:
    return "'" + value.replace("'", "\\'") + "'"


class StoreReader:
    """Read access to one experiment of an existing MLflow store.

    Args:
        uri: the tracking URI; None: the project's store (``sqlite:///<home>/mlflow.db``), the search's default.
        experiment: the experiment name.

    Raises:
        TrackingError: the store or the experiment does not exist, or cannot be read.
        CorruptStoreError: the store's SQLite file is damaged (it is left untouched).
    """

    def __init__(self, uri: str | None, experiment: str) -> None:
        self.uri = uri or default_tracking_uri()
        path = sqlite_path(self.uri)
        if path is not None and not path.is_file():
            raise NotRecordedError(
                f"no MLflow store at {path}: run a search first (python -m nas.search +space=tiny target_ms=5) "
                "or point tracking.uri at the search's store (sqlite:////abs/path/mlflow.db)"
            )
        if path is not None:
            check_sqlite_store(path)
        quiet_mlflow()
        self.client = MlflowClient(tracking_uri=self.uri)
        with mlflow_errors(lambda: f"cannot read the MLflow store {self.uri}"):
            exp = self.client.get_experiment_by_name(experiment)
            if exp is None or exp.lifecycle_stage == "deleted":
                names = sorted(e.name for e in self.client.search_experiments())
                raise NotRecordedError(f"experiment {experiment!r} not found in {self.uri}; experiments there: {names}")
        self.experiment = experiment
        self.experiment_id: str = exp.experiment_id

    def moved_from(self) -> Path | None:
        """The folder this SQLite store was in when its experiment was made, where the store has moved since.

        A store LatNAS makes keeps its artifacts beside it (``<folder>/mlartifacts``), so an
        experiment whose artifacts are in another folder's ``mlartifacts`` says where the store was.
        None: the store has not moved, it is a server's, or the experiment keeps its artifacts elsewhere.
        """
        path = sqlite_path(self.uri)
        if path is None:
            return None
        with mlflow_errors(lambda: f"cannot read the MLflow store {self.uri}"):
            location = urllib.parse.urlsplit(self.client.get_experiment(self.experiment_id).artifact_location)
        artifacts = Path(urllib.parse.unquote(location.path))
        if location.scheme != "file" or artifacts.name != ARTIFACTS_FOLDER:
            return None
        was, now = artifacts.parent, path.parent.resolve()
        return None if was == now or was.resolve() == now else was

    # ------------------------------------------------------------------ runs
    def _search(self, filter_string: str, order_by: list[str] | None = None, limit: int | None = None) -> list[RunInfo]:
        out: list[RunInfo] = []
        token: str | None = None
        with mlflow_errors(lambda: f"cannot query the MLflow store {self.uri}"):
            while True:
                page = self.client.search_runs(
                    [self.experiment_id], filter_string=filter_string, order_by=order_by,
                    max_results=min(limit or 1000, 1000), page_token=token,
                )
                out += [_info(r) for r in page]
                token = page.token
                if not token or (limit is not None and len(out) >= limit):
                    return out[:limit] if limit is not None else out

    def get_run(self, run_id: str) -> RunInfo:
        """The run ``run_id`` of this store.

        Raises:
            TrackingError: no such run.
        """
        try:
            return _info(self.client.get_run(run_id))
        except MlflowException:
            raise TrackingError(f"no MLflow run {run_id!r} in {self.uri}") from None

    # ------------------------------------------------------------------ searches
    def search_runs(self, name: str | None = None) -> list[RunInfo]:
        """Parent runs of searches (those called ``name``), latest first."""
        flt = f"tags.`{ROLE_TAG}` = 'search'"
        if name is not None:
            flt += f" and tags.`{SEARCH_TAG}` = {_quote(name)}"
        return self._search(flt, order_by=["attributes.start_time DESC"])

    def search_run(self, search: str | None = None) -> RunInfo:
        """The parent run of a search: the latest one, or the one named ``search`` (or with that run id).

        Raises:
            TrackingError: no search in the experiment, or none by that name or id.
        """
        if search is not None and RUN_ID_RE.fullmatch(search):
            run = self.get_run(search)
            if run.role != "search":
                what = f"a {run.role} run" if run.role else "not a LatNAS run"
                raise TrackingError(f"run {search} is {what}, not the parent run of a search")
            return run
        runs = self.search_runs(search)
        if runs:
            return runs[0]
        if search is None:
            raise TrackingError(f"experiment {self.experiment!r} in {self.uri} has no search yet")
        known = sorted({r.tags.get(SEARCH_TAG, r.name) for r in self.search_runs()})
        raise TrackingError(f"no search named {search!r} in experiment {self.experiment!r}; searches: {known}")

    def find_search(self, search: str | None = None) -> SearchRecord:
        """The :class:`SearchRecord` of a search (see :meth:`search_run`)."""
        return search_from_run(self.search_run(search), self.experiment_id)

    # ------------------------------------------------------------------ candidates
    def candidate_runs(self, parent_run_id: str) -> list[RunInfo]:
        """Every candidate run of a search, by reward (best first; runs without a reward last)."""
        flt = f"tags.`{ROLE_TAG}` = 'candidate' and tags.`{PARENT_TAG}` = {_quote(parent_run_id)}"
        return self._search(flt, order_by=["metrics.reward DESC"])

    def candidates(self, parent_run_id: str) -> list[Candidate]:
        """Every candidate of a search, by reward (best first; candidates without a reward last)."""
        return [candidate_from_run(r) for r in self.candidate_runs(parent_run_id) if "arch" in r.params]

    def candidate(self, run_id: str) -> tuple[Candidate, SearchRecord | None]:
        """The candidate of run ``run_id`` and its search (None: a run not nested under a search).

        Raises:
            TrackingError: no such run, or a run without an architecture.
        """
        run = self.get_run(run_id)
        cand = candidate_from_run(run)
        parent = run.parent_run_id
        return cand, (search_from_run(self.get_run(parent), self.experiment_id) if parent else None)

    def find_arch_id(self, arch_id: str, parent_run_id: str | None = None) -> list[RunInfo]:
        """Candidate runs of ``arch_id`` (in one search, or in the whole experiment), latest first."""
        flt = f"tags.`{ROLE_TAG}` = 'candidate' and params.arch_id = {_quote(arch_id)}"
        if parent_run_id is not None:
            flt += f" and tags.`{PARENT_TAG}` = {_quote(parent_run_id)}"
        return self._search(flt, order_by=["attributes.start_time DESC"])
