"""The Tuner: the trials of a search on Ray Tune, the searcher, the scheduler and driver callbacks.

With :mod:`nas.adapters.ray_cluster` (the cluster it runs on, imported first), the only modules
that import Ray.

* :class:`ArchSearcher` is the bookkeeping between Ray Tune's trial ids and a
  :class:`nas.core.sampling.Sampler` (e.g. the Optuna study), as Ray Tune's own
  ``OptunaSearch`` does, plus one evaluation per distinct architecture.
* :func:`run_trials` runs the Tuner: per-trial resources, ``max_concurrent_trials``,
  ``reuse_actors``, FIFO or ASHA (:class:`RungScheduler` for ``search.rungs``), state under an
  absolute ``storage_path`` (resumable), and a driver-side callback that turns each finished trial
  into a :class:`~nas.core.record.Candidate` and hands it to the caller (who records it in MLflow):
  every write happens in this process. Each report carries where the trial ran (Ray node id
  and IP, the GPU ids Ray assigned it: :func:`~nas.adapters.ray_cluster.placement`), so the
  record names the node of every candidate. Ray Tune's own console output is silenced.

Failures: a typed error is a FAILED report from the trial itself (:mod:`nas.trial.evaluate`). A
trial whose process dies (killed, out of memory at the OS level, its node lost: Ray raises
``RayActorError``, ``WorkerCrashedError``, ``NodeDiedError`` or ``OutOfMemoryError``) is started
again by Ray Tune, up to ``search.max_retries`` times (``FailureConfig(max_failures=...)``), and
is recorded once, with its ``retries``; past that it is FAILED with ``TrialProcessDied``. Which
it was is read from the exception object itself, in this process (:func:`_failure_in_hand`),
never from the error's text and never from a pickle on disk: Ray Tune pickles each failure into
the trial's folder (copied to the search's output folder) and its ``ResultGrid`` loads that copy
at the end of ``Tuner.fit``, and loading a pickle runs whatever code it names, so anyone who can
write there could run code as the user. The driver deletes that pickle as soon as Ray Tune
reports the failure and tells Ray Tune there is none (:func:`_forget_pickled_error`); the
error's text (``error.txt``) stays. An unexpected exception (a bug) is not retried: the trial
reports it as ``CRASHED``, a stopper ends the experiment and the driver raises with the
traceback; so does a trial failure Ray Tune would retry that is not a process death. A record the
caller cannot write (``on_record`` raises, e.g. a full store) is not the trial's failure: the
callback keeps the error, the same stopper ends the experiment at once, and :func:`run_trials`
raises it when ``Tuner.fit`` returns (raised inside a Ray Tune hook, Ray Tune would take it for
the trial's failure and run the trial again).

Ctrl-C: Ray Tune stops the experiment on SIGINT; a handler installed in front of Ray Tune's own
(:class:`_RecordCallback` at the experiment's start) sets the outcome's ``interrupted`` flag, so
the driver knows it was interrupted rather than inferring it. Ray Tune's own resume
(``Tuner.restore``) is not used: a search is resumed from its MLflow record (:mod:`nas.driver`).
"""

from __future__ import annotations

import contextlib
import logging
import math
import pickle
import signal
import sys
import time
import traceback
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any, Protocol

from nas.adapters.ray_cluster import placement
from nas.core.config import SearchAlgConfig
from nas.core.errors import ClusterError
from nas.core.record import COMPLETED, CRASHED, RUNNING, Candidate, candidate_from_reports
from nas.core.sampling import Outcome, Sampler
from nas.trial.evaluate import TrialContext, evaluate_candidate
from nas.trial.rungs import RUNG_STEP, milestone

# isort: split
# Ray Tune only after the cluster module, which sets Ray's quiet environment before Ray is imported.
from ray import tune
from ray.exceptions import NodeDiedError, OutOfMemoryError, RayActorError, RayTaskError, WorkerCrashedError
from ray.tune.experiment import Trial
from ray.tune.schedulers import ASHAScheduler, FIFOScheduler, TrialScheduler
from ray.tune.search import Searcher

_NOISY_LOGGERS = (
    # On Ctrl-C: "Trials did not complete" and "Resume experiment with: Tuner.restore(...)"; the
    # driver says what was recorded and how to resume (resume=true).
    "ray.tune.tune",
    "ray.tune.analysis.experiment_analysis",  # "failed to fetch metrics": per-trial files are off on purpose
)
_STATE_LOGGERS = (
    # Ray Tune's snapshot of the experiment, copied to its folder under the search's output folder.
    # A search resumes from its MLflow record, never from this snapshot, so a failed copy (a full
    # disk) loses nothing; the driver's own writes to that disk fail too and say so in one line.
    "ray.tune.execution.experiment_state",
    "ray.train._internal.syncer",
)

log = logging.getLogger(__name__)

PROCESS_DEATHS: tuple[type[BaseException], ...] = (RayActorError, WorkerCrashedError, NodeDiedError, OutOfMemoryError)
"""Ray's exceptions for a trial whose process (or node) died, rather than code that raised."""


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
    """A Ray Tune searcher that proposes distinct architectures from a :class:`~nas.core.sampling.Sampler`.

    The trial config is ``{"arch": <canonical architecture string>}``, plus ``"front"`` (the
    ``[latency_ms, accuracy]`` Pareto front when the trial starts) when ``front`` is given.
    """

    def __init__(self, sampler: Sampler, front: Callable[[], list[list[float]]] | None = None) -> None:
        super().__init__(metric="reward", mode="max")
        self.sampler = sampler
        self.front = front
        self.arch_of: dict[str, str] = {}

    def set_search_properties(self, metric: str | None, mode: str | None, config: dict[str, Any], **spec: Any) -> bool:
        # The objectives are the sampler's (reward, or accuracy and latency for NSGA-II).
        return True

    def suggest(self, trial_id: str) -> dict[str, Any] | None:
        arch = self.sampler.ask()
        if arch is None:
            return Searcher.FINISHED  # type: ignore[return-value]  # Ray's documented sentinel
        self.arch_of[trial_id] = arch
        return {"arch": arch} if self.front is None else {"arch": arch, "front": self.front()}

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


def process_died(error: BaseException | None) -> bool:
    """Whether a trial's error means its process (or node) died rather than code raising.

    The trainable reports every exception of LatNAS's own code itself, so what reaches Ray Tune
    as an error is either a death (:data:`PROCESS_DEATHS`) or an exception in Ray's wrapper around
    the trainable (a ``RayTaskError`` whose cause is not a death): a bug.
    """
    if isinstance(error, RayTaskError):
        error = error.as_instanceof_cause()
    return isinstance(error, PROCESS_DEATHS)


def _failure_in_hand() -> BaseException | None:
    """The exception of the trial failure Ray Tune is reporting to a callback (None: none in hand).

    Ray Tune 2.x hands a trial's exception to ``Trial.handle_error`` only, not to any Callback,
    TrialScheduler or Searcher hook; a hook gets the ``Trial``, which keeps no exception in
    memory (``Trial.get_pickled_error`` loads the pickle ``handle_error`` wrote to disk). But it
    calls ``on_trial_recover`` and ``on_trial_error`` synchronously from the ``except`` block
    that caught the exception (``RayEventManager.resolve_future`` -> ``TuneController.
    _process_trial_failure``), so the exception being handled is that failure's, the object
    itself. A failure reported outside an ``except`` block (Ray Tune giving up on a trial whose
    resources it cannot place) has none, and is not a process death.
    """
    return sys.exc_info()[1]


def _forget_pickled_error(trial: Trial) -> None:
    """Delete the pickle of the trial's last failure that Ray Tune wrote, and Ray Tune's note of it.

    With no note, nothing Ray Tune does later (its ``ResultGrid`` at the end of ``Tuner.fit``)
    loads a pickle from the trial's folder: it reads the error's text instead, as it does for a
    restored trial.
    """
    path = trial.pickled_error_file
    if path:
        Path(path).unlink(missing_ok=True)
    trial.run_metadata.pickled_error_filename = None
    trial.run_metadata.invalidate_cache()


class TrialWatcher(Protocol):
    """What follows the trials as they run (the driver's progress display)."""

    def started(self, trial_id: str, arch: str) -> None:
        """A trial started evaluating ``arch``."""

    def reported(self, trial_id: str, report: dict[str, Any]) -> None:
        """A running trial reported (one report per epoch of training, then its final figures)."""


class _RecordCallback(tune.Callback):
    """Driver side: gathers each trial's reports and hands one candidate per finished trial on.

    At the experiment's start it also puts a SIGINT handler in front of Ray Tune's own, which
    sets :attr:`interrupted` and then lets Ray Tune stop the experiment as it does on Ctrl-C.
    """

    def __init__(self, searcher: ArchSearcher, on_record: Callable[[Candidate], None], max_retries: int,
                 watch: TrialWatcher | None = None) -> None:
        self._searcher = searcher
        self._on_record = on_record
        self._watch = watch
        self._max_retries = max_retries
        self._results: dict[str, list[dict[str, Any]]] = {}
        self._start: dict[str, float] = {}
        self._retries: dict[str, int] = {}
        self.crashes: list[str] = []
        self.record_error: Exception | None = None
        self.n_records = 0
        self.n_retries = 0
        self.interrupted = False

    def setup(self, stop: Any = None, num_samples: int | None = None, total_num_samples: int | None = None,
              **info: Any) -> None:
        # Called by Ray Tune after it installed its own SIGINT handler (in the main thread).
        try:
            ray_handler = signal.getsignal(signal.SIGINT)
        except ValueError:  # not the main thread: Ray Tune installed none either
            return

        def on_sigint(signum: int, frame: FrameType | None) -> None:
            self.interrupted = True
            if callable(ray_handler):
                ray_handler(signum, frame)
            else:
                raise KeyboardInterrupt

        with contextlib.suppress(ValueError):
            signal.signal(signal.SIGINT, on_sigint)

    def on_trial_start(self, iteration: int, trials: list[Trial], trial: Trial, **info: Any) -> None:
        self._start[trial.trial_id] = time.time()
        if self._watch is not None:
            self._watch.started(trial.trial_id, str(trial.config.get("arch") or ""))

    def on_trial_result(
        self, iteration: int, trials: list[Trial], trial: Trial, result: dict[str, Any], **info: Any
    ) -> None:
        self._results.setdefault(trial.trial_id, []).append(result)
        if self._watch is not None:
            self._watch.reported(trial.trial_id, result)

    def on_trial_recover(self, iteration: int, trials: list[Trial], trial: Trial, **info: Any) -> None:
        # The process died and Ray Tune starts the trial again from the beginning: what the lost
        # attempt reported is discarded, so the record holds one attempt.
        _forget_pickled_error(trial)
        exception = _failure_in_hand()
        if not process_died(exception):
            # Not a death (an exception in Ray's wrapper or in a driver-side hook): a bug, which a
            # retry would only repeat. The stopper ends the experiment and the driver raises it.
            self.crashes.append(f"trial {trial.trial_id} ({trial.config.get('arch')}):\n"
                                f"{_error_text(trial, exception)}")
            return
        self._results.pop(trial.trial_id, None)
        n = self._retries[trial.trial_id] = self._retries.get(trial.trial_id, 0) + 1
        self.n_retries += 1
        log.warning(
            "trial %s (%s): its process died (%s); starting it again (retry %d of %d)", trial.trial_id,
            trial.config.get("arch"), _first_sentence(_last_line(_error_text(trial, exception))), n,
            self._max_retries,
        )

    def on_trial_complete(self, iteration: int, trials: list[Trial], trial: Trial, **info: Any) -> None:
        last = (self._results.get(trial.trial_id) or [{}])[-1]
        if last.get("status") == CRASHED:
            self.crashes.append(f"trial {trial.trial_id} ({trial.config.get('arch')}):\n{last.get('crash', '')}")
        self._finish(trial, None)

    def on_trial_error(self, iteration: int, trials: list[Trial], trial: Trial, **info: Any) -> None:
        _forget_pickled_error(trial)
        exception = _failure_in_hand()
        error = _error_text(trial, exception)
        if process_died(exception):
            tries = self._retries.get(trial.trial_id, 0) + 1
            reason = (f"the trial's process died {tries} time(s), search.max_retries={self._max_retries}: "
                      f"{_last_line(error)}")
            self._finish(trial, reason, "TrialProcessDied")
            return
        self.crashes.append(f"trial {trial.trial_id} ({trial.config.get('arch')}):\n{error}")
        self._finish(trial, _last_line(error))

    def on_experiment_end(self, trials: list[Trial], **info: Any) -> None:
        # A failure reported to no hook above (a trial already stopped) may have left one.
        for trial in trials:
            _forget_pickled_error(trial)

    def _finish(self, trial: Trial, error: str | None, error_type: str = "TrialCrashed") -> None:
        arch = trial.config.get("arch") or self._searcher.arch_of.get(trial.trial_id, "")
        results = self._results.pop(trial.trial_id, [])
        start = self._start.pop(trial.trial_id, time.time())
        decisions = self._searcher.sampler.decisions(arch) if arch else {}
        cand = candidate_from_reports(trial.trial_id, arch, results, decisions, start, time.time(), error, error_type)
        cand.metrics["retries"] = float(self._retries.pop(trial.trial_id, 0))
        if self.record_error is not None:  # the record cannot be written: nothing more is tried
            return
        try:
            self._on_record(cand)
        except Exception as err:  # raised by run_trials once Ray Tune has stopped (see below)
            # Raised here, inside a Ray Tune hook, it would be taken for the trial's own failure
            # ("Error stopping trial"), its traceback printed and the trial run again as if its
            # process had died. Kept instead: the stopper ends the experiment at once, and
            # run_trials raises it as it was (a TrackingError says in one line what failed).
            self.record_error = err
            return
        self.n_records += 1


class _CrashStopper(tune.Stopper):
    """Ends the experiment once a trial has crashed (a bug: the driver raises after recording) or
    the record of a trial could not be written (the driver raises that error)."""

    def __init__(self, callback: _RecordCallback) -> None:
        self._callback = callback

    def __call__(self, trial_id: str, result: dict[str, Any]) -> bool:
        return False

    def stop_all(self) -> bool:
        return bool(self._callback.crashes) or self._callback.record_error is not None


def _last_line(text: str) -> str:
    lines = text.strip().splitlines()
    return lines[-1] if lines else text


def _first_sentence(text: str, limit: int = 160) -> str:
    head = text.split(". ", 1)[0]
    return head if len(head) <= limit else head[: limit - 3] + "..."


def _error_text(trial: Trial, exception: BaseException | None) -> str:
    # Ray's text of the exception (what it appends to the trial's error file); without the
    # exception in hand, that file: text only, shown, never executed.
    if exception is not None:
        text = str(exception).strip()
        if text:
            return text
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
        ray_trials: trials Ray Tune started (its ResultGrid), each counted once however often
            retried; after a Ctrl-C this includes the trials it stopped unfinished (not recorded).
        retries: trial processes that died and were started again.
    """

    experiment_path: str
    finished_trials: int
    crashes: list[str] = field(default_factory=list)
    exhausted: bool = False
    interrupted: bool = False
    duplicates: int = 0
    wall_seconds: float = 0.0
    ray_trials: int = 0
    retries: int = 0


def _restore_sigint(handler: Any) -> None:
    if handler is None:
        return
    with contextlib.suppress(ValueError):  # not the main thread: nothing was installed
        signal.signal(signal.SIGINT, handler)


def _trainable(config: dict[str, Any], ctx: TrialContext) -> None:
    where = placement()

    def report(metrics: dict[str, Any]) -> None:
        tune.report({**metrics, **where})

    try:
        evaluate_candidate(config["arch"], ctx, report, config.get("front"))
    except Exception:  # a bug: reported, not raised, so that Ray Tune does not retry it; the driver
        # records it, stops the search and raises it with this traceback.
        report({"status": CRASHED, "arch": config["arch"], "reward": math.nan, "crash": traceback.format_exc()})


class RungScheduler(ASHAScheduler):
    """Ray Tune's ASHA with its milestones on the rungs of a multi-fidelity search.

    Trials report :data:`nas.trial.rungs.RUNG_STEP`, which reaches ``reduction_factor ** k`` at
    the end of rung ``k``; with ``grace_period=1`` and ``max_t = reduction_factor ** (rungs - 1)``
    ASHA's milestones are exactly those values, so it decides at each rung's end: a trial whose
    reward there is below the best ``1/reduction_factor`` of those recorded at that rung is
    stopped; the others go on to the next rung. The promotion rule is ASHA's own.

    The start architectures (``search.start``: known designs, such as the references' front) are
    never stopped: their rewards count toward every rung's cut-off, and each goes on to the top rung,
    where the winner is chosen. So the search's winner, by its own figures, is never below the best of
    its start.

    Args:
        rungs: how many rungs.
        reduction_factor: ASHA's ``eta``.
        earlier: rewards at each rung of candidates recorded before (a resumed search), so that
            its cut-offs start from them rather than from nothing.
        start: canonical strings of the start architectures, which always reach the top rung.
    """

    def __init__(self, rungs: int, reduction_factor: int, earlier: list[dict[int, float]] | None = None,
                 start: Iterable[str] = ()) -> None:
        self._start = frozenset(start)
        # ASHA derives its rung count from a float logarithm of max_t, which can fall just short of
        # the last rung (log(243) / log(3) < 5): half a step more is safely between two milestones.
        # The last rung then ends its trial by itself rather than by a STOP at max_t.
        super().__init__(time_attr=RUNG_STEP, max_t=milestone(rungs - 1, reduction_factor) + 0.5,  # type: ignore[arg-type]
                         grace_period=1,
                         reduction_factor=reduction_factor)
        bracket = self._brackets[0]
        milestones = sorted(int(m) for m, _ in bracket._rungs)
        if milestones != [milestone(k, reduction_factor) for k in range(rungs)]:
            raise ClusterError(f"ASHA's milestones {milestones} do not match {rungs} rungs at "
                               f"reduction_factor={reduction_factor}")
        by_milestone = {int(m): recorded for m, recorded in bracket._rungs}
        for i, rewards in enumerate(earlier or []):
            for k, reward in rewards.items():
                if k < rungs and math.isfinite(reward):
                    by_milestone[milestone(k, reduction_factor)][f"recorded-{i}"] = reward

    def on_trial_result(self, tune_controller: Any, trial: Trial, result: dict[str, Any]) -> str:
        """ASHA's decision (the reward is recorded at its rung either way); a start architecture continues."""
        decision: str = super().on_trial_result(tune_controller, trial, result)
        if decision == TrialScheduler.STOP and trial.config.get("arch") in self._start:
            return TrialScheduler.CONTINUE
        return decision

    def cutoffs(self) -> dict[int, float | None]:
        """Each rung's current cut-off reward (None: nothing recorded there yet)."""
        bracket = self._brackets[0]
        out = {}
        for m, recorded in bracket._rungs:
            c = bracket.cutoff(recorded)
            out[round(math.log(m, self._reduction_factor))] = None if c is None else float(c)  # type: ignore[arg-type]
        return out


def _scheduler(cfg: SearchAlgConfig, epochs: int, earlier: list[dict[int, float]] | None = None,
               supernet_rung: bool = False, start: Iterable[str] = ()) -> TrialScheduler:
    if cfg.scheduler == "asha" and cfg.rungs:
        return RungScheduler(len(cfg.rungs) + supernet_rung, cfg.reduction_factor, earlier, start)
    if cfg.scheduler == "asha":
        return ASHAScheduler(
            time_attr="training_iteration", max_t=epochs, grace_period=cfg.grace_period,
            reduction_factor=cfg.reduction_factor,
        )
    return FIFOScheduler()


def run_trials(
    ctx: TrialContext,
    sampler: Sampler,
    search: SearchAlgConfig,
    resources: dict[str, float],
    storage_path: Path,
    name: str,
    on_record: Callable[[Candidate], None],
    n_trials: int | None = None,
    front: Callable[[], list[list[float]]] | None = None,
    earlier: list[dict[int, float]] | None = None,
    watch: TrialWatcher | None = None,
    start: Iterable[str] = (),
) -> TuneOutcome:
    """Run up to ``n_trials`` trials of distinct architectures.

    Args:
        ctx: what every trial needs (shipped once through Ray's object store).
        sampler: proposes the architectures.
        search: trial count, concurrency, scheduler, retries.
        resources: ``{"cpu": ..., "gpu": ...}`` per trial.
        storage_path: absolute folder for Ray Tune's state (``<storage_path>/<name>``).
        name: the Ray Tune experiment name.
        on_record: called in this process with each finished trial's record, as it finishes.
        n_trials: trials to run (None: ``search.n_trials``; fewer when a search is resumed).
        front: the current ``[latency_ms, accuracy]`` Pareto front, handed to each trial as it
            starts (hybrid predictor mode confirms candidates that could join it).
        earlier: with ``search.rungs``, the rewards per rung of the candidates recorded before
            (a resumed search), which ASHA's cut-offs start from.
        watch: told in this process when a trial starts and of each report it makes, as it makes it.
        start: canonical strings of the start architectures (``search.start``), which ASHA never stops.
    """
    for logger in _NOISY_LOGGERS:
        logging.getLogger(logger).setLevel(logging.ERROR)
    for logger in _STATE_LOGGERS:
        logging.getLogger(logger).setLevel(logging.CRITICAL)
    n_trials = search.n_trials if n_trials is None else n_trials
    searcher = ArchSearcher(sampler, front)
    callback = _RecordCallback(searcher, on_record, search.max_retries, watch)
    trainable = tune.with_resources(tune.with_parameters(_trainable, ctx=ctx), resources)
    # A custom evaluator's score comes after its own reports (context.report), one more than the epochs
    # it is given: ASHA's horizon includes it, so its last report is not taken for the horizon's end.
    horizon = ctx.train.epochs + (ctx.accuracy.estimator == "custom")
    scheduler = _scheduler(search, horizon, earlier, ctx.accuracy.estimator == "supernet", start)
    tuner = tune.Tuner(
        trainable,
        tune_config=tune.TuneConfig(
            metric="reward", mode="max", search_alg=searcher, scheduler=scheduler,
            num_samples=n_trials, max_concurrent_trials=search.max_concurrent, reuse_actors=True,
            trial_name_creator=lambda t: f"trial_{t.trial_id}", trial_dirname_creator=lambda t: f"trial_{t.trial_id}",
        ),
        run_config=tune.RunConfig(
            name=name, storage_path=str(storage_path.resolve()), verbose=0, callbacks=[callback],
            # A dead trial process is started again; a bug is reported as CRASHED and stops the
            # experiment through the stopper (fail_fast would also stop on a retried death).
            failure_config=tune.FailureConfig(max_failures=search.max_retries, fail_fast=False),
            stop=_CrashStopper(callback),
        ),
    )
    t0 = time.perf_counter()
    sigint = signal.getsignal(signal.SIGINT)
    try:
        grid = tuner.fit()
    finally:
        _restore_sigint(sigint)  # Ray Tune leaves its own handler (and so ours) installed
    wall = time.perf_counter() - t0
    if callback.record_error is not None:
        raise callback.record_error
    return TuneOutcome(
        experiment_path=str(Path(grid.experiment_path)), finished_trials=callback.n_records,
        crashes=callback.crashes, exhausted=sampler.exhausted, interrupted=callback.interrupted,
        duplicates=sampler.duplicates, wall_seconds=wall, ray_trials=len(grid), retries=callback.n_retries,
    )
