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
the parent is always ended with a status (``FINISHED``, ``FAILED`` or ``KILLED``).
"""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from mlflow import MlflowClient
from mlflow.entities import Metric, Param, RunTag
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
