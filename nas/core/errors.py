"""Typed errors of the search layer.

:class:`NASError` is the root. The trial boundary (:mod:`nas.trial.evaluate`) turns these, and
the typed errors of :mod:`search_spaces` and :mod:`latency_predictor`, into FAILED trials with a
reason; any other exception is a bug and propagates. :data:`USER_ERRORS` is the same tuple for
the commands: one line and exit status 2, not a traceback.
"""

from __future__ import annotations

from latency_predictor import LatencyError
from search_spaces import SearchSpaceError


class NASError(Exception):
    """Root of every error raised by :mod:`nas`."""


class ConfigError(NASError, ValueError):
    """A configuration value is invalid; the message names the key and the fix."""

    def __init__(self, key: str, problem: str) -> None:
        self.key = key
        self.problem = problem
        super().__init__(f"{key}: {problem}")


class DataError(NASError):
    """A dataset cannot be found, read or understood."""


class TrainingError(NASError):
    """Training a candidate failed (e.g. the loss became NaN or infinite)."""


class TrialTimeoutError(NASError):
    """A trial ran past ``search.trial_timeout_s`` (checked between training steps and around
    the latency measurement)."""


class TrialOutOfMemoryError(NASError):
    """A trial ran out of memory (CUDA or host); the candidate is too large for the trial's device."""


class ProxyError(NASError):
    """A training-free accuracy proxy could not score a candidate."""


class RewardError(NASError, ValueError):
    """The reward was asked of values it is not defined for (e.g. a non-positive latency)."""


class TrackingError(NASError):
    """The MLflow tracking store cannot be reached, created or written."""


class NotRecordedError(TrackingError):
    """The MLflow store, or the experiment in it, does not exist (nothing has been recorded there yet)."""


class StoreFullError(TrackingError):
    """The MLflow store cannot grow: the disk holding it (or the database's own size limit) is full.

    SQLite refused the write as a whole (``SQLITE_FULL``), or an artifact could not be copied
    (``ENOSPC``): what the store held before is intact, and a search stopped by it resumes
    (``resume=true``) once there is space.
    """


class CorruptStoreError(TrackingError):
    """The MLflow store's SQLite file is damaged (truncated, overwritten, not a database); nothing was written to it."""


class UserCodeError(NASError):
    """The user's own function (``accuracy.fn``, ``data.fn``) could not be imported, raised, or returned
    something LatNAS cannot use; the message names the setting, the function and the cause.

    In a trial it FAILS the candidate and the search goes on; in the driver's pre-flight call it
    stops the search before any trial.
    """

    def __init__(self, key: str, ref: str, problem: str) -> None:
        self.key = key
        self.ref = ref
        self.problem = problem
        super().__init__(f"{key}={ref}: {problem}")

    def __reduce__(self) -> tuple[type[UserCodeError], tuple[str, str, str]]:
        # Pickled across processes (a trial's report, Ray's error transport) with its three parts.
        return type(self), (self.key, self.ref, self.problem)


class ClusterError(NASError):
    """The Ray cluster cannot be reached or started."""


class FaultSpecError(NASError):
    """The fault-injection specification (``$LATNAS_FAULTS``) is malformed."""


class SearchError(NASError):
    """The search itself could not run to the end (e.g. a trial crashed on an unexpected error)."""


class LeaderboardError(NASError):
    """The leaderboard was asked for something it cannot give (bad option, nothing to show)."""


class ExportError(NASError):
    """A candidate could not be exported, or an exported model failed its check."""


class SupernetError(NASError):
    """A supernet checkpoint cannot be read or written, or its training cannot go on."""


class SupernetMismatchError(SupernetError):
    """A supernet checkpoint was made for another space, space definition, classifier width,
    resolution, class list or data split than it is used with; the message names each difference."""


class OptimizeError(NASError):
    """An exported candidate could not be optimised, or an optimised variant failed its regression check."""


USER_ERRORS: tuple[type[Exception], ...] = (NASError, SearchSpaceError, LatencyError)
"""Expected errors: a trial that raises one FAILS with its reason; a command prints it and exits 2."""
