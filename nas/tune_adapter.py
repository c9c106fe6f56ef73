"""The only module that imports Ray: the cluster, the Tuner, the searcher and driver callbacks.

* :func:`connect` starts a local Ray cluster (``ray.init`` on this machine) or joins the one at
  ``ray.address``; an unreachable address is a :class:`~nas.errors.ClusterError` before any
  trial. Ray's own console output is silenced (no progress tables, no dashboard, no usage
  stats); warnings from trials still reach the console.
* :class:`ArchSearcher` is the bookkeeping between Ray Tune's trial ids and
  :class:`nas.sampler.ArchSampler` (which holds the Optuna study), as Ray Tune's own
  ``OptunaSearch`` does, plus one evaluation per distinct architecture.
* :func:`run_trials` runs the Tuner: per-trial resources, ``max_concurrent_trials``,
  ``reuse_actors``, FIFO or ASHA, state under an absolute ``storage_path`` (resumable), and a
  driver-side callback that turns each finished trial into a
  :class:`~nas.record.CandidateRecord` and hands it to the caller (who records it in MLflow):
  every write happens in this process.
"""

from __future__ import annotations

import logging
import os
import pickle
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nas.config import RayConfig, SearchAlgConfig
from nas.errors import ClusterError
from nas.record import CandidateRecord, record_from_results
from nas.sampler import ArchSampler, Outcome
from nas.trial import COMPLETED, RUNNING, TrialContext, evaluate_candidate

# Set before Ray is imported: Ray reads some of these at import time.
_QUIET_ENV = {
    "RAY_AIR_NEW_OUTPUT": "0",  # with verbose=0 the legacy reporter prints nothing
    "TUNE_DISABLE_AUTO_CALLBACK_LOGGERS": "1",  # no per-trial CSV/JSON/TensorBoard files: MLflow is the record
    "RAY_USAGE_STATS_ENABLED": "0",
    "RAY_DEDUP_LOGS": "1",
}
for _k, _v in _QUIET_ENV.items():
    os.environ.setdefault(_k, _v)

import ray  # noqa: E402
from ray import tune  # noqa: E402
from ray.tune.experiment import Trial  # noqa: E402
from ray.tune.schedulers import ASHAScheduler, FIFOScheduler, TrialScheduler  # noqa: E402
from ray.tune.search import Searcher  # noqa: E402

_NOISY_LOGGERS = (
    "ray._private.authentication.authentication_token_setup",  # "token authentication is enabled" on every start
    "ray.tune.analysis.experiment_analysis",  # "failed to fetch metrics": per-trial files are off on purpose
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Cluster:
    """The Ray cluster the search runs on.

    Attributes:
        address: ``local`` for a cluster started here, else the address joined.
        cpus: CPUs in the cluster.
        gpus: GPUs in the cluster.
        started_here: whether :func:`connect` started it (and :func:`disconnect` stops it).
    """

    address: str
    cpus: float
    gpus: float
    started_here: bool


def _check_address(address: str) -> None:
    if address == "auto":
        return
    hostport = address.removeprefix("ray://")
    host, _, port = hostport.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=5):
            pass
    except OSError as err:
        raise ClusterError(
            f"ray.address {address!r}: cannot reach a Ray cluster at {host}:{port} ({err.strerror or err}); "
            "start it (ray start --head) or leave ray.address unset to start a local one"
        ) from None


def connect(cfg: RayConfig) -> Cluster:
    """Start a local Ray cluster, or join ``cfg.address``; reuse Ray if it is already initialised.

    Raises:
        ClusterError: the address cannot be reached.
    """
    for name in _NOISY_LOGGERS:
        logging.getLogger(name).setLevel(logging.ERROR)
    started = False
    if cfg.address is not None:
        _check_address(cfg.address)  # even when Ray is up already: a wrong address is the user's mistake
    if ray.is_initialized():
        address = "existing"
    elif cfg.address is not None:
        try:
            ray.init(address=cfg.address, logging_level=logging.WARNING, include_dashboard=False)
        except (ConnectionError, RuntimeError) as err:
            raise ClusterError(f"ray.address {cfg.address!r}: cannot join the Ray cluster: {err}") from None
        address = cfg.address
    else:
        ray.init(num_cpus=cfg.num_cpus, logging_level=logging.WARNING, include_dashboard=False)
        address, started = "local", True
    res = ray.cluster_resources()
    return Cluster(address, float(res.get("CPU", 0)), float(res.get("GPU", 0)), started)


def disconnect(cluster: Cluster) -> None:
    """Stop the cluster if :func:`connect` started it."""
    if cluster.started_here and ray.is_initialized():
        ray.shutdown()


def trial_resources(cfg: RayConfig, cluster: Cluster, max_concurrent: int) -> dict[str, float]:
    """CPUs and GPUs per trial (``gpus_per_trial`` None: the cluster's GPUs shared by the
    concurrent trials on a local cluster, none on an existing one).

    Raises:
        ClusterError: a trial asks for more than the whole cluster has (it would wait forever).
    """
    gpus = cfg.gpus_per_trial
    if gpus is None:
        gpus = cluster.gpus / max_concurrent if cluster.started_here and cluster.gpus else 0.0
    if cfg.cpus_per_trial > cluster.cpus:
        raise ClusterError(
            f"ray.cpus_per_trial={cfg.cpus_per_trial:g} but the cluster has {cluster.cpus:g} CPUs; lower it"
        )
    if gpus > cluster.gpus:
        raise ClusterError(f"ray.gpus_per_trial={gpus:g} but the cluster has {cluster.gpus:g} GPUs; lower it")
    return {"cpu": cfg.cpus_per_trial, "gpu": gpus}


def outcome_of(result: dict[str, Any] | None, error: bool) -> Outcome:
    """What to tell the sampler about a trial that ended with ``result`` as its last report."""
    if error or not result or result.get("status") not in (COMPLETED, RUNNING):
        return Outcome("fail")
    state = "complete" if result["status"] == COMPLETED else "pruned"
    return Outcome(
        state, reward=float(result["reward"]), accuracy=float(result["accuracy"]),
        latency_ms=float(result["latency_ms"]), step=int(result.get("epoch", 0)),
    )


class ArchSearcher(Searcher):
    """A Ray Tune searcher that proposes distinct architectures from an :class:`ArchSampler`.

    The trial config is ``{"arch": <canonical architecture string>}``.
    """

    def __init__(self, sampler: ArchSampler) -> None:
        super().__init__(metric="reward", mode="max")
        self.sampler = sampler
        self.arch_of: dict[str, str] = {}

    def set_search_properties(self, metric: str | None, mode: str | None, config: dict[str, Any], **spec: Any) -> bool:
        # The objectives are the sampler's (reward, or accuracy and latency for NSGA-II).
        return True

    def suggest(self, trial_id: str) -> dict[str, Any] | None:
        arch = self.sampler.ask()
        if arch is None:
            return Searcher.FINISHED  # type: ignore[return-value]  # Ray's documented sentinel
        self.arch_of[trial_id] = arch
        return {"arch": arch}

    def on_trial_complete(self, trial_id: str, result: dict[str, Any] | None = None, error: bool = False) -> None:
        arch = self.arch_of.get(trial_id)
        if arch is not None:
            self.sampler.tell(arch, outcome_of(result, error))

    def save(self, checkpoint_path: str) -> None:
        with open(checkpoint_path, "wb") as f:
            pickle.dump({"sampler": self.sampler, "arch_of": self.arch_of}, f)

    def restore(self, checkpoint_path: str) -> None:
        with open(checkpoint_path, "rb") as f:
            state = pickle.load(f)
        self.sampler, self.arch_of = state["sampler"], state["arch_of"]


class _RecordCallback(tune.Callback):
    """Driver side: gathers each trial's reports and hands one record per finished trial on."""

    def __init__(self, searcher: ArchSearcher, on_record: Callable[[CandidateRecord], None]) -> None:
        self._searcher = searcher
        self._on_record = on_record
        self._results: dict[str, list[dict[str, Any]]] = {}
        self._start: dict[str, float] = {}
        self.crashes: list[str] = []
        self.n_records = 0

    def on_trial_start(self, iteration: int, trials: list[Trial], trial: Trial, **info: Any) -> None:
        self._start[trial.trial_id] = time.time()

    def on_trial_result(
        self, iteration: int, trials: list[Trial], trial: Trial, result: dict[str, Any], **info: Any
    ) -> None:
        self._results.setdefault(trial.trial_id, []).append(result)

    def on_trial_complete(self, iteration: int, trials: list[Trial], trial: Trial, **info: Any) -> None:
        self._finish(trial, None)

    def on_trial_error(self, iteration: int, trials: list[Trial], trial: Trial, **info: Any) -> None:
        error = _error_text(trial)
        self.crashes.append(f"trial {trial.trial_id} ({trial.config.get('arch')}):\n{error}")
        self._finish(trial, error.strip().splitlines()[-1])

    def _finish(self, trial: Trial, error: str | None) -> None:
        arch = trial.config.get("arch") or self._searcher.arch_of.get(trial.trial_id, "")
        results = self._results.pop(trial.trial_id, [])
        start = self._start.pop(trial.trial_id, time.time())
        decisions = self._searcher.sampler.decisions(arch) if arch else {}
        self.n_records += 1
        self._on_record(record_from_results(trial.trial_id, arch, results, decisions, start, time.time(), error))


def _error_text(trial: Trial) -> str:
    # Ray writes the traceback to the trial's local error file before calling back; the copy in
    # the storage path (what Trial.get_error reads) appears only after the next sync.
    path = trial.error_file
    if path and Path(path).is_file():
        text = Path(path).read_text(errors="replace").strip()
        if text:
            return text
    return str(trial.get_error() or "the trial process failed without an error message")


@dataclass
class TuneOutcome:
    """How the Tuner run ended.

    Attributes:
        experiment_path: the Ray Tune experiment folder (absolute), from which it can be resumed.
        finished_trials: trials that ended (completed, failed, stopped early, crashed).
        crashes: error texts of trials that raised an unexpected exception.
        exhausted: the sampler found no new architecture (the space is exhausted).
        interrupted: the run was stopped (Ctrl-C) before ``n_trials`` trials ended.
        duplicates: suggestions of already evaluated architectures (given the earlier result).
        wall_seconds: time spent in ``Tuner.fit``.
    """

    experiment_path: str
    finished_trials: int
    crashes: list[str] = field(default_factory=list)
    exhausted: bool = False
    interrupted: bool = False
    duplicates: int = 0
    wall_seconds: float = 0.0


def _trainable(config: dict[str, Any], ctx: TrialContext) -> None:
    evaluate_candidate(config["arch"], ctx, tune.report)


def _scheduler(cfg: SearchAlgConfig, epochs: int) -> TrialScheduler:
    if cfg.scheduler == "asha":
        return ASHAScheduler(
            time_attr="training_iteration", max_t=epochs, grace_period=cfg.grace_period,
            reduction_factor=cfg.reduction_factor,
        )
    return FIFOScheduler()


def run_trials(
    ctx: TrialContext,
    sampler: ArchSampler,
    search: SearchAlgConfig,
    resources: dict[str, float],
    storage_path: Path,
    name: str,
    on_record: Callable[[CandidateRecord], None],
) -> TuneOutcome:
    """Run up to ``search.n_trials`` trials of distinct architectures.

    Args:
        ctx: what every trial needs (shipped once through Ray's object store).
        sampler: proposes the architectures.
        search: trial count, concurrency, scheduler.
        resources: ``{"cpu": ..., "gpu": ...}`` per trial.
        storage_path: absolute folder for Ray Tune's state (``<storage_path>/<name>``).
        name: the Ray Tune experiment name.
        on_record: called in this process with each finished trial's record, as it finishes.
    """
    searcher = ArchSearcher(sampler)
    callback = _RecordCallback(searcher, on_record)
    trainable = tune.with_resources(tune.with_parameters(_trainable, ctx=ctx), resources)
    tuner = tune.Tuner(
        trainable,
        tune_config=tune.TuneConfig(
            metric="reward", mode="max", search_alg=searcher, scheduler=_scheduler(search, ctx.train.epochs),
            num_samples=search.n_trials, max_concurrent_trials=search.max_concurrent, reuse_actors=True,
            trial_name_creator=lambda t: f"trial_{t.trial_id}", trial_dirname_creator=lambda t: f"trial_{t.trial_id}",
        ),
        run_config=tune.RunConfig(
            name=name, storage_path=str(storage_path.resolve()), verbose=0, callbacks=[callback],
            # An unexpected exception in a trial is a bug: stop the search (the driver raises).
            failure_config=tune.FailureConfig(max_failures=0, fail_fast=True),
        ),
    )
    t0 = time.perf_counter()
    grid = tuner.fit()
    wall = time.perf_counter() - t0
    interrupted = not sampler.exhausted and not callback.crashes and callback.n_records < search.n_trials
    return TuneOutcome(
        experiment_path=str(Path(grid.experiment_path)), finished_trials=callback.n_records,
        crashes=callback.crashes, exhausted=sampler.exhausted, interrupted=interrupted,
        duplicates=sampler.duplicates, wall_seconds=wall,
    )
