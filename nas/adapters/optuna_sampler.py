"""The only module that imports Optuna: ask for architectures, tell their results.

:class:`ArchSampler` (a :class:`nas.core.sampling.Sampler`) keeps an Optuna study (TPE, random or
NSGA-II) and adds what a NAS driver needs on top of ask/tell:

* **conditional decisions**: a trial is asked only for the decisions that are active given
  its earlier answers (no block decisions beyond a stage's chosen depth, no expansion ratio
  for residual blocks), because :meth:`search_spaces.SearchSpace.from_decisions` reads the
  decisions lazily through :class:`_Suggestions`;
* **one evaluation per architecture**: when the sampler suggests an architecture already
  evaluated, the earlier result is told again and another one is asked for; when it suggests
  one still being evaluated, that Optuna trial waits and is told the same result when it comes.
  Such suggestions are counted in :attr:`ArchSampler.duplicates`.
* **a history that survives the driver**: :meth:`ArchSampler.replay` adds an architecture
  evaluated by an earlier run of the same search (read back from the MLflow record on resume)
  to the study as a finished trial with its decisions and outcome, so the sampler models it
  and never proposes it again. Each Optuna trial of an evaluated architecture carries the
  user attribute ``arch`` (and ``replayed`` when it came from the record); a repeated
  suggestion carries ``duplicate_of``.

Objectives: ``reward`` (maximised) for TPE and random; ``accuracy`` (maximised) and
``latency_ms`` (minimised) for NSGA-II.
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Iterator, Mapping
from typing import Any

import optuna
from sqlalchemy.exc import SQLAlchemyError

from nas.core.errors import ConfigError
from nas.core.sampling import Outcome
from search_spaces import SearchSpace

optuna.logging.set_verbosity(optuna.logging.WARNING)


def objectives(sampler: str) -> list[tuple[str, str]]:
    """``(metric, "max"|"min")`` pairs the sampler optimises."""
    if sampler == "nsga2":
        return [("accuracy", "max"), ("latency_ms", "min")]
    return [("reward", "max")]


_LOCK = type(threading.Lock())


class _NSGAIISampler(optuna.samplers.NSGAIISampler):
    """Optuna's NSGA-II sampler that survives pickling.

    The Ray Tune searcher checkpoints the sampler by pickling it. Optuna 5.1's genetic samplers
    keep a ``threading.Lock``, which cannot be pickled: the lock is left out of the pickle and a
    new one made when it is read back. An unlocked lock carries no state worth keeping.
    """

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        locks = [name for name, value in state.items() if isinstance(value, _LOCK)]
        for name in locks:
            del state[name]
        state["_unpickled_locks"] = locks
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        locks = state.pop("_unpickled_locks", [])
        self.__dict__.update(state)
        for name in locks:
            setattr(self, name, threading.Lock())


def make_sampler(name: str, seed: int, n_startup_trials: int, population_size: int) -> optuna.samplers.BaseSampler:
    """Optuna's sampler called ``name`` (``tpe``, ``random`` or ``nsga2``), seeded.

    Raises:
        ConfigError: an unknown name.
    """
    if name == "tpe":
        # multivariate + group: TPE models the decisions of each conditional branch jointly
        # (e.g. a stage's blocks given its depth). Both are marked experimental by Optuna.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            return optuna.samplers.TPESampler(
                seed=seed, n_startup_trials=n_startup_trials, multivariate=True, group=True,
            )
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if name == "nsga2":
        return _NSGAIISampler(seed=seed, population_size=population_size)
    raise ConfigError("search.sampler", f"{name!r} is not one of ['tpe', 'random', 'nsga2'] (Optuna's)")


class _Suggestions(Mapping[str, Any]):
    """The decisions of one Optuna trial, suggested when first read.

    Contains every multi-option decision of the space; single-option ones are absent, so
    :meth:`SearchSpace.from_decisions` takes their only value.
    """

    def __init__(self, trial: optuna.Trial, options: dict[str, tuple[Any, ...]]) -> None:
        self._trial = trial
        self._options = options
        self.asked: dict[str, Any] = {}

    def __getitem__(self, name: str) -> Any:
        if name not in self.asked:
            self.asked[name] = self._trial.suggest_categorical(name, list(self._options[name]))
        return self.asked[name]

    def __contains__(self, name: object) -> bool:
        return name in self._options

    def __iter__(self) -> Iterator[str]:
        return iter(self._options)

    def __len__(self) -> int:
        return len(self._options)


class ArchSampler:
    """Proposes distinct architectures of a space with an Optuna sampler.

    Args:
        space: the search space.
        sampler: ``tpe``, ``random`` or ``nsga2``.
        seed: the sampler's seed.
        n_startup_trials: TPE's random start.
        population_size: NSGA-II's population.
        max_duplicates: give up (the space is taken as exhausted) after this many already
            evaluated suggestions in a row.
        storage: an Optuna storage URL (e.g. ``sqlite:////abs/optuna.db``) where the study
            persists (``optuna-dashboard <url>`` shows it); None: in memory.
        study_name: the study's name in ``storage`` (the search's name): a study of that name is
            continued, its trials left running by a stopped driver marked failed.

    Raises:
        ConfigError: a storage URL Optuna cannot open.
    """

    def __init__(
        self, space: SearchSpace, sampler: str = "tpe", seed: int = 0, n_startup_trials: int = 8,
        population_size: int = 8, max_duplicates: int = 200, storage: str | None = None,
        study_name: str | None = None,
    ) -> None:
        self.space = space
        self.objectives = objectives(sampler)
        try:
            self.study = optuna.create_study(
                sampler=make_sampler(sampler, seed, n_startup_trials, population_size), storage=storage,
                study_name=study_name, load_if_exists=storage is not None,
                directions=["maximize" if mode == "max" else "minimize" for _, mode in self.objectives],
            )
        except (ValueError, ImportError, optuna.exceptions.OptunaError, SQLAlchemyError) as err:
            raise ConfigError("search.storage", f"Optuna cannot open {storage!r}: {err}") from None
        # Trials a stopped driver left running are over; finished ones stay for the sampler's model.
        self._stored: set[str] = set()
        for t in self.study.get_trials(deepcopy=False):
            if t.state == optuna.trial.TrialState.RUNNING:
                self.study.tell(t.number, state=optuna.trial.TrialState.FAIL)
            elif "arch" in t.user_attrs:
                self._stored.add(str(t.user_attrs["arch"]))
        self.max_duplicates = max_duplicates
        self._options = {d.name: d.options for d in space.choices()}
        self._size = space.size()
        self._running: dict[str, optuna.Trial] = {}  # arch -> the trial evaluating it
        self._waiting: dict[str, list[optuna.Trial]] = {}  # arch -> duplicate trials awaiting its result
        self._done: dict[str, Outcome] = {}
        self.duplicates = 0
        self.exhausted = False

    @property
    def n_distinct(self) -> int:
        """Architectures proposed so far (running or done)."""
        return len(self._running) + len(self._done)

    def ask(self) -> str | None:
        """The next architecture string to evaluate; None when the space is exhausted."""
        for _ in range(self.max_duplicates + 1):
            if self.n_distinct >= self._size:
                break
            trial = self.study.ask()
            arch = self.space.from_decisions(_Suggestions(trial, self._options)).encode()
            if arch in self._done:
                self.duplicates += 1
                trial.set_user_attr("duplicate_of", arch)
                self._tell(trial, self._done[arch])
            elif arch in self._running:
                self.duplicates += 1
                trial.set_user_attr("duplicate_of", arch)
                self._waiting.setdefault(arch, []).append(trial)
            else:
                trial.set_user_attr("arch", arch)
                self._running[arch] = trial
                return arch
        self.exhausted = True
        return None

    def tell(self, arch: str, outcome: Outcome) -> None:
        """Record ``arch``'s outcome (and give it to the suggestions that waited for it)."""
        trial = self._running.pop(arch, None)
        if trial is None:
            return
        self._done[arch] = outcome
        self._tell(trial, outcome)
        for waiting in self._waiting.pop(arch, []):
            self._tell(waiting, outcome)

    def replay(self, arch: str, outcome: Outcome) -> None:
        """Add ``arch``, evaluated earlier with ``outcome``, to the study as a finished trial.

        Used when a search is resumed: the study's history is rebuilt from the record, one
        trial per evaluated architecture, with the decisions that give it. An architecture
        already known to this sampler is left as it is.

        Raises:
            SearchSpaceError: ``arch`` does not belong to the space.
        """
        if arch in self._done or arch in self._running:
            return
        if arch in self._stored:  # already a trial of the persisted study: known, not added twice
            self._done[arch] = outcome
            return
        decisions = self.space.to_decisions(self.space.decode(arch))
        params = {name: value for name, value in decisions.items() if name in self._options}
        distributions: dict[str, optuna.distributions.BaseDistribution] = {
            name: optuna.distributions.CategoricalDistribution(list(self._options[name])) for name in params
        }
        values: list[float] | None = None
        intermediate: dict[int, float] = {}
        if outcome.state == "fail":
            state = optuna.trial.TrialState.FAIL
        elif outcome.state == "pruned":
            state = optuna.trial.TrialState.PRUNED
            if len(self.objectives) == 1 and outcome.reward is not None:
                # as when told live: the last report is the pruned trial's value
                intermediate[outcome.step] = outcome.reward
                values = [outcome.reward]
        else:
            state = optuna.trial.TrialState.COMPLETE
            values = self._values(outcome)
        self.study.add_trial(optuna.trial.create_trial(
            state=state, params=params, distributions=distributions, values=values,
            intermediate_values=intermediate, user_attrs={"arch": arch, "replayed": True},
        ))
        self._done[arch] = outcome

    def counts(self) -> dict[str, int]:
        """Optuna trial states of the evaluated architectures (repeated suggestions left out)."""
        out: dict[str, int] = {}
        for t in self.study.get_trials(deepcopy=False):
            if "arch" in t.user_attrs:
                out[t.state.name] = out.get(t.state.name, 0) + 1
        return out

    def _values(self, outcome: Outcome) -> list[float]:
        if len(self.objectives) > 1:
            if outcome.accuracy is None or outcome.latency_ms is None:
                raise ValueError("a completed outcome needs accuracy and latency_ms for a multi-objective sampler")
            return [outcome.accuracy, outcome.latency_ms]
        if outcome.reward is None:
            raise ValueError("a completed outcome needs a reward")
        return [outcome.reward]

    def _tell(self, trial: optuna.Trial, outcome: Outcome) -> None:
        if outcome.state == "fail":
            self.study.tell(trial, state=optuna.trial.TrialState.FAIL)
            return
        if outcome.state == "pruned":
            if len(self.objectives) == 1 and outcome.reward is not None:
                trial.report(outcome.reward, outcome.step)  # TPE reads a pruned trial's last value
            self.study.tell(trial, state=optuna.trial.TrialState.PRUNED)
        else:
            self.study.tell(trial, self._values(outcome))

    def decisions(self, arch: str) -> dict[str, Any]:
        """The active decisions that give ``arch``."""
        return self.space.to_decisions(self.space.decode(arch))
