"""The only module that imports MLflow: the search's record.

Layout (others read it: the leaderboard, the export, resume):

* one **parent run** per search, named after the search (tag ``latnas.role=search``), with the
  resolved configuration as params, the environment as tags, summary metrics at the end and
  the artifacts ``config.yaml``, ``space.yaml``, ``best_arch.json``, ``best_arch.txt`` and
  ``leaderboard.csv``;
* one **child run** per evaluated architecture (tag ``latnas.role=candidate``,
  ``mlflow.parentRunId`` = the parent), named by its ``arch_id``, with the decisions as
  params, the figures as metrics (per-epoch history as steps) and status, latency source and
  failure reason as tags.

Every write happens in the driver process (Ray Tune callbacks run there), so the store never
has concurrent writers. Child runs are created already finished, so none is ever left RUNNING;
the parent is always ended with a status (``FINISHED``, ``FAILED`` or ``KILLED``), except when
the driver itself is killed (SIGKILL, a lost machine): resuming the search
(:meth:`Tracker.resume_search`) reopens its parent run, marks a child run the driver was
writing when it died ``KILLED``, and hands back the finished candidates.

The second part of the module, :class:`SearchStore`, reads that record back for the
leaderboard and the export, and makes the review's own few writes: the Pareto plot and reference
latencies on the parent run, and exported models as runs nested under the search (tag
``latnas.role=export``), registered on request. It only opens existing stores, never creates one.
"""

from __future__ import annotations

import ast
import logging
import math
import re
import socket
import time
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import mlflow
from mlflow import MlflowClient
from mlflow.entities import Metric, Param, Run, RunTag
from mlflow.exceptions import MlflowException

from nas.errors import TrackingError
from nas.record import CandidateRecord

ROLE_TAG = "latnas.role"
SEARCH_TAG = "latnas.search_name"
PARENT_TAG = "mlflow.parentRunId"
_MAX_PARAMS, _MAX_TAGS, _MAX_METRICS = 100, 100, 1000
_MAX_PARAM_LEN = 6000


def default_tracking_uri(base_dir: Path) -> str:
    """``sqlite:///<base_dir>/mlflow.db`` with ``base_dir`` made absolute."""
    return f"sqlite:///{(base_dir / 'mlflow.db').resolve()}"


def _check_reachable(uri: str) -> None:
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
        path = Path(uri[len("sqlite:///"):]) if uri.startswith("sqlite:///") else None
        if path is None or not path.is_absolute():
            raise TrackingError(f"tracking.uri {uri!r}: use an absolute SQLite path, e.g. sqlite:////abs/path/mlflow.db")
        if not path.parent.is_dir():
            raise TrackingError(f"tracking.uri {uri!r}: folder {str(path.parent)!r} does not exist")
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


class Tracker:
    """Writes one search's record to an MLflow tracking store.

    Opening it creates the store and the experiment if needed, so that happens once, in the
    driver, before any trial (two processes creating one SQLite store at once race).

    Args:
        uri: MLflow tracking URI.
        experiment: experiment name.

    Raises:
        TrackingError: the store cannot be reached or created.
    """

    def __init__(self, uri: str, experiment: str) -> None:
        _check_reachable(uri)
        # "Creating initial MLflow database tables..." is not the user's business.
        logging.getLogger("mlflow.store.db.utils").setLevel(logging.WARNING)
        self.uri = uri
        self.client = MlflowClient(tracking_uri=uri)
        try:
            exp = self.client.get_experiment_by_name(experiment)
            if exp is None:
                location = None
                if uri.startswith("sqlite:///"):
                    # Artifacts next to the database, wherever the search is launched from.
                    location = (Path(uri[len("sqlite:///"):]).parent / "mlartifacts").as_uri()
                self.experiment_id = self.client.create_experiment(experiment, artifact_location=location)
            else:
                if exp.lifecycle_stage == "deleted":
                    raise TrackingError(
                        f"tracking.experiment {experiment!r} is deleted in {uri}; restore it in the MLflow UI or "
                        "choose another name"
                    )
                self.experiment_id = exp.experiment_id
        except MlflowException as err:
            raise TrackingError(f"tracking.uri {uri!r}: cannot open the MLflow store: {err.message}") from None
        self.experiment = experiment
        self.parent_run_id: str | None = None

    # ------------------------------------------------------------------ parent run
    def start_search(self, name: str, params: Mapping[str, Any], tags: Mapping[str, str]) -> str:
        """Create the parent run of a search; returns its run id."""
        run = self.client.create_run(
            self.experiment_id, run_name=name, tags={ROLE_TAG: "search", SEARCH_TAG: name, **tags}
        )
        self.parent_run_id = run.info.run_id
        self._log(self.parent_run_id, params=params)
        return self.parent_run_id

    def previous_search(self, name: str) -> RunInfo | None:
        """The parent run of the search called ``name`` already in this experiment (None: none)."""
        runs = SearchStore(self.uri, self.experiment).searches_named(name)
        return runs[0] if runs else None

    def resume_search(self, parent: RunInfo, tags: Mapping[str, str]) -> tuple[list[RunInfo], int]:
        """Continue the search of ``parent``: reopen its run and return its finished candidates.

        The parent run is set RUNNING again (it is RUNNING already when the driver was killed) and
        tagged with ``tags``. A candidate run still RUNNING was being written when the driver
        died: its record is incomplete, so it is marked KILLED (tag ``status=KILLED``) and its
        architecture counts as not evaluated.

        Returns:
            The finished candidate runs (``COMPLETED``, ``PRUNED`` or ``FAILED``), one per
            architecture, and how many stale runs were marked KILLED.
        """
        store = SearchStore(self.uri, self.experiment)
        finished: dict[str, RunInfo] = {}
        stale = 0
        try:
            self.client.update_run(parent.run_id, status="RUNNING")
            self.parent_run_id = parent.run_id
            self._log(parent.run_id, tags=tags)
            for run in sorted(store.candidates(parent.run_id), key=lambda r: r.start_time):
                if run.status == "RUNNING":
                    self._log(run.run_id, tags={
                        "status": "KILLED", "failure_type": "DriverStopped",
                        "failure_reason": "the search's driver stopped while this record was written; the "
                                          "architecture counts as not evaluated and may be evaluated again",
                    })
                    self.client.set_terminated(run.run_id, "KILLED")
                    stale += 1
                elif run.tags.get("status") in ("COMPLETED", "PRUNED", "FAILED") and "arch" in run.params:
                    finished.setdefault(run.params["arch"], run)
        except MlflowException as err:
            raise TrackingError(f"cannot resume the search in {self.uri}: {err.message}") from None
        return list(finished.values()), stale

    def log_candidate(self, rec: CandidateRecord, search_name: str) -> str:
        """Create the finished child run of one candidate; returns its run id."""
        if self.parent_run_id is None:
            raise TrackingError("log_candidate called before start_search")
        tags = {ROLE_TAG: "candidate", SEARCH_TAG: search_name, PARENT_TAG: self.parent_run_id,
                "trial_id": rec.trial_id, **rec.tags}
        run = self.client.create_run(
            self.experiment_id, start_time=int(rec.start_time * 1000), run_name=rec.arch_id, tags=tags
        )
        run_id = run.info.run_id
        params = {"arch": rec.arch, "arch_id": rec.arch_id, **rec.decisions}
        now = int(time.time() * 1000)
        metrics = [Metric(k, v, now, 0) for k, v in rec.metrics.items() if k not in _history_keys(rec)]
        for row in rec.history:
            step = int(row["epoch"])
            metrics += [Metric(k, v, now, step) for k, v in row.items() if k != "epoch"]
        # The final value of a metric with history is its last step, which MLflow shows as latest.
        self._log(run_id, params=params, metrics=metrics)
        self.client.set_terminated(run_id, "FAILED" if rec.status == "FAILED" else "FINISHED",
                                   end_time=int(rec.end_time * 1000))
        return run_id

    def log_summary(self, metrics: Mapping[str, float], tags: Mapping[str, str] | None = None) -> None:
        """Summary metrics (and tags) on the parent run."""
        if self.parent_run_id is None:
            raise TrackingError("log_summary called before start_search")
        self._log(self.parent_run_id, metrics=[Metric(k, float(v), int(time.time() * 1000), 0) for k, v in
                                                metrics.items()], tags=tags or {})

    def log_artifacts(self, paths: Iterable[Path]) -> None:
        """Upload files to the parent run's artifacts."""
        if self.parent_run_id is None:
            raise TrackingError("log_artifacts called before start_search")
        for p in paths:
            self.client.log_artifact(self.parent_run_id, str(p))

    def end_search(self, status: str) -> None:
        """End the parent run with ``status`` (``FINISHED``, ``FAILED`` or ``KILLED``)."""
        if self.parent_run_id is not None:
            self.client.set_terminated(self.parent_run_id, status)

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

    def run_url_hint(self) -> str:
        """The command that opens this store in the MLflow UI, bound to localhost."""
        return f"mlflow ui --backend-store-uri {self.uri} --host 127.0.0.1"


def _history_keys(rec: CandidateRecord) -> set[str]:
    return {k for row in rec.history for k in row if k != "epoch"}


# ======================================================================================
# Reading the record back (leaderboard, export) and the review's own writes
# ======================================================================================

RUN_ID_RE = re.compile(r"[0-9a-f]{32}")
REFERENCE_PREFIX = "reference."
"""Parent-run metrics ``reference.<name>.latency_p50`` hold reference latencies on the search's device."""
REFERENCE_DEVICE_TAG = "reference_device"
EXPORTED_FROM_TAG = "latnas.exported_from"


@dataclass(frozen=True)
class RunInfo:
    """One MLflow run as plain values.

    Attributes:
        run_id: the run's id.
        name: its run name.
        status: MLflow's run status (``FINISHED``, ``FAILED``, ...).
        start_time: milliseconds since the epoch.
        params: every param, as logged (strings).
        metrics: the latest value of every metric.
        tags: every tag.
    """

    run_id: str
    name: str
    status: str
    start_time: int
    params: dict[str, str] = field(default_factory=dict)
    metrics: dict[str, float] = field(default_factory=dict)
    tags: dict[str, str] = field(default_factory=dict)

    @property
    def role(self) -> str:
        """``search``, ``candidate``, ``export`` or ``""`` for runs LatNAS did not write."""
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
    """A logged param back as a Python value (``"[1, 3]"`` -> ``[1, 3]``, ``"None"`` -> None); else the string."""
    try:
        return ast.literal_eval(raw)
    except (ValueError, SyntaxError):
        return raw


def _info(run: Run) -> RunInfo:
    return RunInfo(
        run_id=run.info.run_id, name=run.info.run_name or "", status=run.info.status,
        start_time=int(run.info.start_time or 0), params=dict(run.data.params), metrics=dict(run.data.metrics),
        tags=dict(run.data.tags),
    )


_RECORD_TAGS_SKIPPED = (ROLE_TAG, SEARCH_TAG, PARENT_TAG, "trial_id")


def candidate_from_run(run: RunInfo, decisions: dict[str, Any]) -> CandidateRecord:
    """A candidate's record read back from its child run (a resumed search's earlier candidates).

    Args:
        run: the candidate's child run.
        decisions: the active decisions of its architecture (typed, from the space).

    The per-epoch history and the full latency record stay in MLflow; the record carries the
    final metrics and the tags.
    """
    tags = {k: v for k, v in run.tags.items() if not k.startswith("mlflow.") and k not in _RECORD_TAGS_SKIPPED}
    return CandidateRecord(
        trial_id=run.tags.get("trial_id", run.run_id), arch=run.params["arch"],
        arch_id=run.params.get("arch_id", run.name), status=run.tags.get("status", "FAILED"), decisions=decisions,
        metrics=dict(run.metrics), tags=tags, start_time=run.start_time / 1000, end_time=run.start_time / 1000,
    )


def _quote(value: str) -> str:
    return "'" + value.replace("'", "\\'") + "'"


class SearchStore:
    """Read access to one experiment of an existing MLflow store, plus the review's writes.

    Args:
        uri: the tracking URI; None: ``sqlite:///<cwd>/mlflow.db``, the search's default.
        experiment: the experiment name.

    Raises:
        TrackingError: the store or the experiment does not exist, or cannot be read.
    """

    def __init__(self, uri: str | None, experiment: str) -> None:
        self.uri = uri or default_tracking_uri(Path.cwd())
        if self.uri.startswith("sqlite:///"):
            path = Path(self.uri[len("sqlite:///"):])
            if not path.is_file():
                raise TrackingError(
                    f"no MLflow store at {path}: run a search first (python -m nas.search +space=tiny target_ms=5) "
                    "or point tracking.uri at the search's store (sqlite:////abs/path/mlflow.db)"
                )
        logging.getLogger("mlflow.store.db.utils").setLevel(logging.WARNING)
        self.client = MlflowClient(tracking_uri=self.uri)
        try:
            exp = self.client.get_experiment_by_name(experiment)
            if exp is None or exp.lifecycle_stage == "deleted":
                names = sorted(e.name for e in self.client.search_experiments())
                raise TrackingError(f"experiment {experiment!r} not found in {self.uri}; experiments there: {names}")
        except MlflowException as err:
            raise TrackingError(f"cannot read the MLflow store {self.uri}: {err.message}") from None
        self.experiment = experiment
        self.experiment_id: str = exp.experiment_id

    # ------------------------------------------------------------------ queries
    def _search(self, filter_string: str, order_by: list[str] | None = None, limit: int | None = None) -> list[RunInfo]:
        out: list[RunInfo] = []
        token: str | None = None
        try:
            while True:
                page = self.client.search_runs(
                    [self.experiment_id], filter_string=filter_string, order_by=order_by,
                    max_results=min(limit or 1000, 1000), page_token=token,
                )
                out += [_info(r) for r in page]
                token = page.token
                if not token or (limit is not None and len(out) >= limit):
                    return out[:limit] if limit is not None else out
        except MlflowException as err:
            raise TrackingError(f"cannot query the MLflow store {self.uri}: {err.message}") from None

    def get_run(self, run_id: str) -> RunInfo:
        """The run ``run_id`` of this store.

        Raises:
            TrackingError: no such run.
        """
        try:
            return _info(self.client.get_run(run_id))
        except MlflowException:
            raise TrackingError(f"no MLflow run {run_id!r} in {self.uri}") from None

    def find_search(self, search: str | None = None) -> RunInfo:
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
        flt = f"tags.`{ROLE_TAG}` = 'search'"
        if search is not None:
            flt += f" and tags.`{SEARCH_TAG}` = {_quote(search)}"
        runs = self._search(flt, order_by=["attributes.start_time DESC"], limit=1)
        if runs:
            return runs[0]
        if search is None:
            raise TrackingError(f"experiment {self.experiment!r} in {self.uri} has no search yet")
        known = sorted({r.tags.get(SEARCH_TAG, r.name) for r in self._search(f"tags.`{ROLE_TAG}` = 'search'")})
        raise TrackingError(f"no search named {search!r} in experiment {self.experiment!r}; searches: {known}")

    def searches_named(self, name: str) -> list[RunInfo]:
        """Parent runs of searches called ``name``, latest first (normally one)."""
        return self._search(
            f"tags.`{ROLE_TAG}` = 'search' and tags.`{SEARCH_TAG}` = {_quote(name)}",
            order_by=["attributes.start_time DESC"],
        )

    def candidates(self, parent_run_id: str) -> list[RunInfo]:
        """Every candidate run of a search, by reward (best first; runs without a reward last)."""
        flt = f"tags.`{ROLE_TAG}` = 'candidate' and tags.`{PARENT_TAG}` = {_quote(parent_run_id)}"
        return self._search(flt, order_by=["metrics.reward DESC"])

    def find_arch_id(self, arch_id: str, parent_run_id: str | None = None) -> list[RunInfo]:
        """Candidate runs of ``arch_id`` (in one search, or in the whole experiment), latest first."""
        flt = f"tags.`{ROLE_TAG}` = 'candidate' and params.arch_id = {_quote(arch_id)}"
        if parent_run_id is not None:
            flt += f" and tags.`{PARENT_TAG}` = {_quote(parent_run_id)}"
        return self._search(flt, order_by=["attributes.start_time DESC"])

    # ------------------------------------------------------------------ the review's writes
    def log_artifact(self, run_id: str, path: Path) -> None:
        """Upload one file to a run's artifacts."""
        try:
            self.client.log_artifact(run_id, str(path))
        except (MlflowException, OSError) as err:
            raise TrackingError(f"cannot log {path.name} on run {run_id}: {err}") from None

    def log_reference_latencies(self, parent_run_id: str, latencies: Mapping[str, float], device: str) -> None:
        """Record reference networks' p50 latency on a search's parent run (and the device they ran on)."""
        now = int(time.time() * 1000)
        metrics = [Metric(f"{REFERENCE_PREFIX}{k}.latency_p50", float(v), now, 0) for k, v in latencies.items()]
        try:
            self.client.log_batch(parent_run_id, metrics=metrics, tags=[RunTag(REFERENCE_DEVICE_TAG, device)])
        except MlflowException as err:
            raise TrackingError(f"cannot log reference latencies on run {parent_run_id}: {err.message}") from None

    @staticmethod
    def reference_latencies(parent: RunInfo) -> tuple[dict[str, float], str | None]:
        """Reference p50 latencies logged on a parent run, and the device they were measured on."""
        refs = {
            k[len(REFERENCE_PREFIX):-len(".latency_p50")]: v for k, v in parent.metrics.items()
            if k.startswith(REFERENCE_PREFIX) and k.endswith(".latency_p50") and math.isfinite(v)
        }
        return refs, parent.tags.get(REFERENCE_DEVICE_TAG)

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
        try:
            return str(self.client.create_run(self.experiment_id, run_name=f"export-{arch_id}", tags=tags).info.run_id)
        except MlflowException as err:
            raise TrackingError(f"cannot create the export run in {self.uri}: {err.message}") from None

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

        try:
            with _fluent(self.uri, run_id):
                info = mlflow.onnx.log_model(
                    onnx.load(str(onnx_path)), name="model", signature=infer_signature(sample, output),
                    registered_model_name=register, save_as_external_data=False,
                )
        except MlflowException as err:
            raise TrackingError(f"cannot log the ONNX model to {self.uri}: {err.message}") from None
        version = str(info.registered_model_version) if register else None
        return str(info.model_uri), version

    def finish_export_run(self, run_id: str, folder: Path, metrics: Mapping[str, float]) -> None:
        """Upload the export folder (as ``export/``), log its figures and close the run."""
        now = int(time.time() * 1000)
        batch = [Metric(k, float(v), now, 0) for k, v in metrics.items() if math.isfinite(float(v))]
        try:
            self.client.log_artifacts(run_id, str(folder), artifact_path="export")
            self.client.log_batch(run_id, metrics=batch)
            self.client.set_terminated(run_id, "FINISHED")
        except (MlflowException, OSError) as err:
            raise TrackingError(f"cannot finish the export run {run_id}: {err}") from None


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


# ---------------------------------------------------------------------- latency predictors
def log_predictor(
    tracker: Tracker, name: str, files: Iterable[Path], params: Mapping[str, Any],
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

    Raises:
        TrackingError: the store cannot be written.
    """
    flat = {f"predictor.{k}": v for k, v in params.items()}
    flat.update({f"dataset.{k}": v for k, v in (dataset_params or {}).items()})
    try:
        run = tracker.client.create_run(tracker.experiment_id, run_name=name, tags={ROLE_TAG: "predictor"})
        run_id = run.info.run_id
        tracker._log(run_id, params=flat)
        for f in files:
            tracker.client.log_artifact(run_id, str(f), artifact_path="predictor")
        for f in dataset_files:
            tracker.client.log_artifact(run_id, str(f), artifact_path="dataset")
        version: str | None = None
        if register:
            try:
                tracker.client.get_registered_model(register)
            except MlflowException:
                tracker.client.create_registered_model(register, tags={ROLE_TAG: "predictor"})
            mv = tracker.client.create_model_version(
                register, source=f"{run.info.artifact_uri}/predictor", run_id=run_id,
                tags={k: str(v) for k, v in params.items()
                      if k in ("predictor_digest", "space", "backend", "fingerprint")},
            )
            version = str(mv.version)
        tracker.client.set_terminated(run_id, "FINISHED")
    except (MlflowException, OSError) as err:
        raise TrackingError(f"cannot record the predictor in {tracker.uri}: {err}") from None
    return run_id, version
