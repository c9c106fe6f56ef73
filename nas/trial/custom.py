"""The user's own evaluator (``accuracy=custom accuracy.fn=my_module:evaluate``).

The function gets the candidate network and an :class:`EvalContext`, and returns the candidate's
score, higher is better::

    def evaluate(model: torch.nn.Module, context: EvalContext) -> float | dict[str, float]:
        ...
        for epoch in range(context.epochs):
            ...                                   # train as the task needs
            context.report(val_score, mse=mse)     # optional: lets ASHA stop a poor candidate early
        return {"score": val_score, "mse": mse}    # or just the score

The network is built from the architecture with the space's stem and head conv; with the
classifier sized ``data``'s ``num_classes`` outputs (a regression head: ``data.num_classes=1``),
or the backbone alone (its feature map) when the space says ``features_only: true``. It is
initialised with ``train.seed`` and sits on the CPU: move it to ``context.device``.

The score is what the reward weighs against latency, exactly as an accuracy is: it must be a
finite number >= 0 (the reward multiplies it by the latency term; a loss is turned into a score
first, e.g. ``1 / (1 + mse)`` or an R^2 clipped at 0). A mapping's other entries are further
metrics, each recorded on the candidate's MLflow run under its own name (``val_loss`` and
``train_loss`` keep their usual meaning; names LatNAS records itself are refused).

Failures are the candidate's, not the search's: an evaluator that cannot be imported, raises, or
returns something that is not a score FAILS the candidate with a
:class:`~nas.core.errors.UserCodeError` naming it, and the search goes on. The driver calls the
evaluator once before any trial, on the space's smallest network with a small share of the data
(:func:`preflight`, ``context.preflight`` is true), so a broken evaluator stops the search at once.

With ``search.rungs`` the evaluator is called once per rung, on the same network (its weights
carry over), with that rung's budget in the context (``rung``, ``epochs``, and the training items
of ``context.data``); the score it returns is the rung's, which ASHA promotes on.
"""

from __future__ import annotations

import json
import math
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from nas.core.errors import UserCodeError
from nas.core.record import USER_METRICS, metric_name_problem
from nas.data import TaskData
from nas.runtime import plugins
from search_spaces import Arch, SearchSpace, build

KEY = "accuracy.fn"
PREFLIGHT_TRAIN_ITEMS = 256
"""Training items the driver's pre-flight call sees (the first of them, seeded): enough for a batch
or two, few enough to take seconds."""


@dataclass
class EvalContext:
    """What a custom evaluator gets besides the network.

    Attributes:
        device: where to train and evaluate (the trial's: a GPU Ray gave it, else the CPU).
        seed: ``train.seed``, the same for every candidate: seed your own randomness with it.
        epochs: the budget: ``train.epochs``, or the epochs of the current rung (``search.rungs``).
        rung: the current rung (0-based), None without rungs.
        data: the search's data: the datasets of ``data.fn`` (:class:`~nas.data.UserData`, with
            ``train_set`` and ``val_set``) or the built-in images; both give ``train_batches``,
            ``val_batches``, ``normalise``, ``num_classes``, ``n_train`` and ``n_val``. At a rung,
            its training items are the rung's.
        options: ``accuracy.options``, your own settings.
        arch: the candidate's architecture string.
        arch_id: its short id (also the name of :attr:`workdir`).
        latency_ms: its latency figure, as the reward sees it (measured or predicted before the evaluator runs).
        threads: CPU threads the trial may use (torch's thread count is set to it already).
        preflight: true for the driver's check before the search (a tiny network, a little data):
            a quick pass is enough.
    """

    device: torch.device
    seed: int
    epochs: int
    rung: int | None
    data: TaskData
    options: dict[str, Any]
    arch: str
    arch_id: str
    latency_ms: float
    threads: int = 1
    preflight: bool = False
    _report: Callable[[float, dict[str, float]], None] = field(default=lambda s, m: None, repr=False)
    _workdir: Path | None = field(default=None, repr=False)

    def report(self, score: float, **metrics: float) -> None:
        """Report an intermediate score (after an epoch, say), with optional metrics.

        Each report is a step of the candidate's history in MLflow, and an early-stopping scheduler
        (``search.scheduler=asha``) compares candidates on it: a poor one may be stopped here (the
        call then does not return). The trial's time limit (``search.trial_timeout_s``) is checked too.

        Raises:
            UserCodeError: the score is not a finite number >= 0, or a metric name is not allowed.
            TrialTimeoutError: the trial has run past its time limit.
        """
        value = check_score(score, "the score given to context.report")
        self._report(value, check_metrics(metrics))

    @property
    def workdir(self) -> Path:
        """A folder of this candidate's own, for files the evaluator writes (created on first use):
        ``<output_dir>/trials/<arch_id>/`` of the search."""
        if self._workdir is None:
            raise UserCodeError(KEY, "", "context.workdir is not available outside a search")
        folder = self._workdir / self.arch_id
        folder.mkdir(parents=True, exist_ok=True)
        return folder


def check_score(value: Any, what: str, ref: str = "") -> float:
    """A score as the reward takes it: a finite number >= 0.

    Raises:
        UserCodeError: it is not a number, not finite, or negative.
    """
    score = plugins.number(KEY, ref, value, what)
    if score < 0:
        raise UserCodeError(KEY, ref, f"{what} is {score:g}, below 0: the reward multiplies the score by the latency "
                            "term, so it must be >= 0 and higher must be better (turn a loss into a score, e.g. "
                            "1 / (1 + loss), or clip an R^2 at 0)")
    return score


def check_metrics(metrics: Mapping[str, Any], ref: str = "") -> dict[str, float]:
    """Further metrics as they are recorded: allowed names, finite numbers.

    Raises:
        UserCodeError: a name LatNAS records itself or MLflow refuses, or a value that is not a finite number.
    """
    out = {}
    for name, value in metrics.items():
        problem = metric_name_problem(str(name))
        if problem:
            raise UserCodeError(KEY, ref, f"metric {str(name)!r}: {problem}")
        out[str(name)] = plugins.number(KEY, ref, value, f"metric {name!r}")
    return out


def parse_result(ref: str, out: Any) -> tuple[float, dict[str, float]]:
    """The score and the further metrics of what the evaluator returned.

    Raises:
        UserCodeError: neither a number nor a mapping with ``score``; a bad score or metric.
    """
    m = plugins.mapping(out)
    if m is None:
        return check_score(out, "the returned score", ref), {}
    if "score" not in m:
        has = ", ".join(map(str, m)) or "nothing"
        raise UserCodeError(KEY, ref, f"returned a mapping without 'score' (it has {has}); return the score, or "
                            "{'score': ..., '<metric>': ...}")
    return check_score(m["score"], "the returned 'score'", ref), check_metrics(
        {k: v for k, v in m.items() if k != "score"}, ref)


def user_figures(metrics: Mapping[str, float]) -> dict[str, Any]:
    """The report fields of a custom evaluator's metrics: the recipe's losses as they are, the rest as
    :data:`~nas.core.record.USER_METRICS`."""
    own = {k: v for k, v in metrics.items() if k not in ("val_loss", "train_loss")}
    fields: dict[str, Any] = {k: metrics[k] for k in ("val_loss", "train_loss") if k in metrics}
    if own:
        fields[USER_METRICS] = json.dumps(own)
    return fields


def in_chans(data: TaskData) -> int:
    """The input channels of the candidates trained on ``data``."""
    return int(data.input_shape[0])


def candidate_network(arch: Arch, space: SearchSpace, data: TaskData, seed: int, dropout: float) -> torch.nn.Module:
    """The network a custom evaluator gets: built from ``arch`` (the backbone alone when the space is
    ``features_only``), initialised with ``seed``, on the CPU."""
    torch.manual_seed(seed)
    return build(arch, num_classes=data.num_classes, in_chans=in_chans(data), dropout=dropout,
                 features_only=space.features_only)


@dataclass(frozen=True)
class Evaluator:
    """The user's evaluator, resolved in this process, with its reference and settings."""

    ref: str
    options: dict[str, Any]
    fn: Callable[..., Any]

    @classmethod
    def load(cls, ref: str, options: Mapping[str, Any], from_cwd: bool = False) -> Evaluator:
        """Import ``ref`` (``module:function``).

        Raises:
            UserCodeError: it cannot be imported or is not a function.
        """
        return cls(ref, dict(options), plugins.load_function(KEY, ref, from_cwd))

    def __call__(self, model: torch.nn.Module, context: EvalContext) -> tuple[float, dict[str, float]]:
        """Call it; its score and further metrics.

        Raises:
            UserCodeError: it raised, or returned something that is not a score.
        """
        return parse_result(self.ref, plugins.call(KEY, self.ref, self.fn, model, context))


def preflight(evaluator: Evaluator, space: SearchSpace, data: TaskData, seed: int, dropout: float,
              device: torch.device) -> tuple[str, float, dict[str, float], float]:
    """The driver's check before any trial: the evaluator called once on the space's smallest network
    with a small share of the training data, one epoch, and a temporary working folder
    (``context.preflight`` true).

    Returns:
        The network's architecture string, the score, the metrics and the seconds the call took.

    Raises:
        UserCodeError: the evaluator cannot be imported, raises, or returns something that is not a score.
    """
    arch = space.extremes()[0]
    model = candidate_network(arch, space, data, seed, dropout)
    with tempfile.TemporaryDirectory(prefix="latnas-preflight-") as folder:
        context = EvalContext(
            device=device, seed=seed, epochs=1, rung=None, data=data.take_train(PREFLIGHT_TRAIN_ITEMS, seed),
            options=evaluator.options, arch=arch.encode(), arch_id=arch.arch_id, latency_ms=math.nan, preflight=True,
            _workdir=Path(folder),
        )
        t0 = time.perf_counter()
        score, metrics = evaluator(model, context)
        return arch.encode(), score, metrics, time.perf_counter() - t0
