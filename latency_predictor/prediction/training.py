"""Fit a latency predictor on a dataset and report how good it is on held-out architectures.

The command line is ``python -m latency_predictor.train`` (:func:`latency_predictor.cli.train_main`).

``--statistic`` (default ``p50``) is the statistic the predictor learns and predicts: each
architecture's latency is the median of its records' p50, or of their p99 for a predictor of the
tail (a search with ``latency.target_stat=p99`` takes only a p99 predictor). A p99 needs about
1,000 timed runs per record (:data:`~latency_predictor.measurement.statistic.MIN_RUNS`): records with fewer
are not used, the report counts the architectures left out that way, and such a dataset is
collected with ``python -m latency_predictor.collect ... --statistic p99``. The predictor file
records the statistic (a file without one is a p50 predictor).

With ``--adapt-from``, the predictor of another device is adapted to the device of ``--data``
with the first ``--shots`` architectures measured there (:mod:`latency_predictor.prediction.transfer`), and
the report compares it, on the held-out architectures (the rest of ``--data``, or ``--test-data``),
with a predictor fitted from scratch on the same measurements and, given ``--full``, with one
trained on many measurements of the new device. Given several predictors (of several other
devices), each is adapted with the same measurements and the predictor is their mix, weighted so
that the mix's leave-one-out error is least; the report then also shows the first one adapted
alone. The rest of this docstring is about training.

The architectures are split once (``--test-fraction``, ``--seed``) into a training set and a
held-out set. The predictor and both baselines (latency proportional to MACs; a per-block
lookup table) are fitted on the training set only, and every figure of the report is computed
on the held-out architectures, which no model saw. The saved predictor is the evaluated one;
it records the ids of the architectures it was trained on and those it was tested on.

The noise ceiling is the share within +-10% (and +-5%) that a *perfect* predictor would reach
on the same held-out measurements, because the measurements themselves are noisy. Each held-out
latency ``y_i`` is the median p50 (or the ``--statistic``) of ``k_i`` records; its relative
noise is estimated as

    sigma_i^2 = sigma_between^2 / k_i + within_i^2

* ``within_i``: the within-run part, ``sqrt(pi/2) * cv / sqrt(runs)`` per record (the standard
  error of a median of normal runs; for a higher percentile, from its 95% interval:
  :func:`latency_predictor.prediction.dataset.within_rel_se`), divided by ``sqrt(k_i)``;
* ``sigma_between``: what varies from one measurement session to the next (a new session,
  another moment of the machine's load), which no single record's spread shows. It is estimated
  from architectures measured more than once (``collect --repeats``): the log-ratio ``d`` of two
  records has variance ``2 sigma_1^2``; ``sigma_1`` is estimated robustly
  (``1.4826 median|d| / sqrt(2)``), and ``sigma_between^2 = max(0, sigma_1^2 - median within^2)``.
  Both are medians: one record whose runs were stalled (its cv many times the others') moves
  neither, where a mean of the within-run parts would let it cancel the whole between-session part.
  Without repeats it is taken as 0, and the report says the ceiling counts within-run noise only
  (an optimistic ceiling).

A perfect predictor's relative error on ``y_i`` is then about ``N(0, sigma_i)``, so its chance
of landing within 10% is ``erf(0.1 / (sigma_i sqrt 2))``; the ceiling is the mean over the
held-out architectures (:func:`latency_predictor.prediction.metrics.noise_ceiling`).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from latency_predictor.errors import ConfigError, DatasetError
from latency_predictor.measurement.statistic import MIN_RUNS, check_stat
from latency_predictor.prediction.dataset import Dataset, LatencyTable, within_rel_se
from latency_predictor.prediction.features import FeatureExtractor
from latency_predictor.prediction.metrics import AccuracyMetrics, accuracy_metrics, noise_ceiling, repeat_rel_sigma
from latency_predictor.prediction.models import AdditiveModel, LatencyModel, LookupTableBaseline, MacsBaseline
from latency_predictor.prediction.predictor import PredictorEstimator
from search_spaces import Arch, arch_id_of

MIN_ARCHS = 10
"""Fewest usable architectures a train/test split is made from."""

RECOMMENDED_ARCHS = 100
"""Fewest usable architectures below which training warns. Measured on ``mobile`` with ONNX Runtime
on the CPU: fitted on 10 architectures the predictor put 28% of held-out networks within +-10%,
on 30 about 79%, on 240 95-100% (BENCHMARKS.md, "Latency predictor")."""


def size_warning(n_usable: int) -> str | None:
    """The warning for a predictor fitted on ``n_usable`` architectures, or None when there are enough."""
    if n_usable >= RECOMMENDED_ARCHS:
        return None
    more = RECOMMENDED_ARCHS - n_usable
    return (f"only {n_usable} usable architectures: below {RECOMMENDED_ARCHS} the predictor is often off by more "
            f"than 10% (on 10 architectures 28% of held-out networks were within +-10%, on 30 about 79%, on "
            f"240 95-100%); collect at least {more} more into the same dataset (latency_predictor.collect "
            f"... n={more} out=<the same folder>) and train again")


NOISY_SESSIONS = 0.05
"""A between-session sigma above which the training report suggests a second session per architecture."""


def session_warning(noise: dict[str, Any], table: LatencyTable, combine: str) -> str | None:
    """The warning for a dataset whose sessions of the same network differ by more than :data:`NOISY_SESSIONS`
    (``noise``: :func:`noise_estimate`), unless every architecture of ``table`` already keeps its fastest of two
    or more sessions."""
    sigma = noise["sigma_between"]
    once = int(np.sum(table.records < 2))
    if not sigma > NOISY_SESSIONS or (combine == "min" and once == 0):
        return None
    again = (f"measure every architecture again (latency_predictor.collect ... n=0 repeats={once} "
             "out=<the same folder>) and " if once else "")
    return (f"two sessions of the same network differ by {sigma:.1%} here (between-session sigma, from "
            f"{noise['repeat_pairs']} repeat pairs): other work on this host slows whole sessions; {again}"
            "train with combine=min, which keeps each one's fastest session")


@dataclass
class TrainReport:
    """What :func:`train_predictor` measured on the held-out architectures.

    Attributes:
        dataset: the dataset's summary.
        train_archs: architectures the models were fitted on.
        test_archs: held-out architectures every figure is computed on.
        excluded_disturbed: architectures left out because all their records were disturbed.
        statistic: the statistic the predictor learns (``p50``, ``p90``, ``p95``, ``p99``).
        excluded_few_runs: architectures left out because no record of theirs has the timed runs
            ``statistic`` needs (:data:`~latency_predictor.measurement.statistic.MIN_RUNS`).
        models: accuracy of the predictor (``additive``) and the baselines (``macs``, ``lookup_table``).
        noise: the noise estimate and ceilings (see the module docstring).
        lut_coverage: share of held-out blocks whose exact lookup-table entry was seen in training.
        fit_s: seconds the predictor's fit took.
        predictions: held-out predictions per model (ms), aligned with ``test_archs``.
        measured_ms: held-out measured latencies, aligned with ``test_archs``.
        warning: set when the dataset is smaller than :data:`RECOMMENDED_ARCHS` (see :func:`size_warning`), or
            when its sessions differ by more than :data:`NOISY_SESSIONS` (see :func:`session_warning`).
        statistic: the statistic the predictor learns.
        excluded_few_runs: architectures left out with too few timed runs for ``statistic``.
        combine: how an architecture's records were combined (:meth:`Dataset.table`).
    """

    dataset: dict[str, Any]
    train_archs: list[str]
    test_archs: list[str]
    excluded_disturbed: int
    models: dict[str, AccuracyMetrics]
    noise: dict[str, Any]
    lut_coverage: float
    fit_s: float
    predictions: dict[str, list[float]] = field(repr=False, default_factory=dict)
    measured_ms: list[float] = field(repr=False, default_factory=list)
    warning: str | None = None
    statistic: str = "p50"
    excluded_few_runs: int = 0
    combine: str = "median"

    def to_dict(self, with_archs: bool = True) -> dict[str, Any]:
        """A JSON-serialisable record (``with_archs=False`` leaves out the per-architecture lists)."""
        d: dict[str, Any] = {
            "dataset": self.dataset, "n_train": len(self.train_archs), "n_test": len(self.test_archs),
            "excluded_disturbed": self.excluded_disturbed, "statistic": self.statistic, "combine": self.combine,
            "excluded_few_runs": self.excluded_few_runs,
            "models": {k: m.to_dict() for k, m in self.models.items()},
            "noise": self.noise, "gap_to_ceiling_10": self.noise["ceiling_10"] - self.models["additive"].within_10,
            "lut_coverage": self.lut_coverage, "fit_s": self.fit_s, "warning": self.warning,
        }
        if with_archs:
            d.update(test_archs=self.test_archs, measured_ms=self.measured_ms, predictions=self.predictions)
        return d

    def table(self) -> str:
        """The report as a fixed-width table."""
        few = (f"; {self.excluded_few_runs} left out: fewer than {MIN_RUNS[self.statistic]} timed runs"
               if self.excluded_few_runs else "")
        lines = [
            f"statistic: {self.statistic} (each architecture's "
            f"{'median' if self.combine == 'median' else 'lowest'} {self.statistic} over its records)",
            f"held-out architectures: {len(self.test_archs)} (trained on {len(self.train_archs)}; "
            f"{self.excluded_disturbed} left out: every measurement disturbed{few})",
            f"{'model':<14}{'RMSE ms':>9}{'MAPE':>8}{'+-5%':>8}{'+-10%':>8}{'Spearman':>10}{'Kendall':>9}",
        ]
        for name, m in self.models.items():
            lines.append(f"{name:<14}{m.rmse_ms:>9.3f}{m.mape:>8.2%}{m.within_5:>8.1%}{m.within_10:>8.1%}"
                         f"{m.spearman:>10.3f}{m.kendall:>9.3f}")
        n = self.noise
        lines.append(f"{'noise ceiling':<14}{'':>9}{'':>8}{n['ceiling_5']:>8.1%}{n['ceiling_10']:>8.1%}")
        gap = n["ceiling_10"] - self.models["additive"].within_10
        lines.append(f"gap to the +-10% ceiling: {gap:+.1%}; noise: {n['basis']}")
        lines.append(f"lookup-table coverage of held-out blocks: {self.lut_coverage:.1%}")
        if self.warning:
            lines.append(f"warning: {self.warning}")
        return "\n".join(lines)


def split(n: int, test_fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Disjoint ``(train, test)`` index arrays over ``n`` architectures.

    Raises:
        ConfigError: ``test_fraction`` not in (0, 1) or a split that leaves a side empty.
    """
    if not 0 < test_fraction < 1:
        raise ConfigError(f"test_fraction must be in (0, 1), got {test_fraction}")
    n_test = round(n * test_fraction)
    if n_test < 2 or n - n_test < 5:
        raise ConfigError(f"{n} architectures cannot be split {1 - test_fraction:.0%}/{test_fraction:.0%}: "
                          "need >= 5 to train and >= 2 to test")
    perm = np.random.default_rng(seed).permutation(n)
    return np.sort(perm[n_test:]), np.sort(perm[:n_test])


def noise_estimate(dataset: Dataset, test: LatencyTable) -> dict[str, Any]:
    """The relative noise of the held-out measurements and the noise ceilings (module docstring),
    at the statistic of ``test``."""
    stat = test.statistic
    ratios = dataset.repeat_log_ratios(stat)
    single_within = [
        within_rel_se(r.result, stat) ** 2
        for r in dataset.records if r.disturbed is None and r.result.stats.n >= MIN_RUNS[stat]
    ]
    if len(ratios):
        sigma_1 = repeat_rel_sigma(ratios)
        between2 = max(0.0, sigma_1**2 - float(np.median(single_within)))
        basis = f"{len(ratios)} repeat pairs (between-session sigma {math.sqrt(between2):.2%}) + within-run cv"
    else:
        sigma_1, between2 = float("nan"), 0.0
        basis = "within-run cv only (no repeated measurements: the ceiling is optimistic)"
    sigma = np.sqrt(between2 / test.records + test.within_rel_se**2)
    return {
        "basis": basis, "repeat_pairs": len(ratios), "sigma_single": sigma_1,
        "sigma_between": math.sqrt(between2), "sigma_median": float(np.median(sigma)),
        "ceiling_5": noise_ceiling(sigma, 0.05), "ceiling_10": noise_ceiling(sigma, 0.10),
    }


def _archs(table: LatencyTable) -> list[Arch]:
    return [Arch.decode(a) for a in table.archs]


def fit_additive(dataset: Dataset, table: LatencyTable, members: int = 16, seed: int = 0) -> AdditiveModel:
    """Fit the predictor's model on the rows of ``table``."""
    model = AdditiveModel(FeatureExtractor(dataset.target.input_shape, dataset.target.num_classes),
                          members=members, seed=seed)
    model.fit(_archs(table), table.latency_ms)
    return model


def usable_table(dataset: Dataset, include_disturbed: bool = False,
                 statistic: str = "p50", combine: str = "median") -> tuple[LatencyTable, int]:
    """The per-architecture table at ``statistic`` and how many architectures were left out as disturbed.

    Those left out for too few timed runs are counted in the table's ``too_few_runs``; ``combine``: as
    :meth:`Dataset.table`.
    """
    full = dataset.table(include_disturbed=True, statistic=statistic, combine=combine)
    table = full if include_disturbed else dataset.table(statistic=statistic, combine=combine)
    return table, len(full) - len(table)


def _too_few(dataset: Dataset, table: LatencyTable, excluded: int) -> DatasetError:
    """The error for a ``table`` with fewer than :data:`MIN_ARCHS` architectures, saying why and what to do."""
    stat = table.statistic
    why = f"{excluded} left out as disturbed"
    fix = "collect more"
    if table.too_few_runs:
        need = MIN_RUNS[stat]
        why += f", {table.too_few_runs} with fewer than {need} timed runs, too few for a {stat}"
        fix = (f"collect with enough runs for a {stat} (python -m latency_predictor.collect ... --statistic {stat}, "
               f"at least {need} timed runs per measurement)")
    return DatasetError(
        f"{dataset.path}: {len(table)} usable architectures for a {stat} predictor ({why}); "
        f"need at least {MIN_ARCHS}: {fix}"
    )


def train_predictor(
    dataset: Dataset, test_fraction: float = 0.2, seed: int = 0, members: int = 16, include_disturbed: bool = False,
    statistic: str = "p50", combine: str = "median",
) -> tuple[PredictorEstimator, TrainReport]:
    """Split, fit the predictor and the baselines on the training part, evaluate on the rest.

    The predictor learns ``statistic`` (each architecture's median over its records, or with
    ``combine="min"`` its fastest session's; records with too few timed runs for it are not used,
    see :meth:`Dataset.table`).

    Raises:
        DatasetError: fewer than :data:`MIN_ARCHS` usable architectures (the message says how
            many were left out as disturbed and for too few timed runs).
        ConfigError: an invalid ``test_fraction``, an unknown ``statistic`` or ``combine``.
    """
    table, excluded = usable_table(dataset, include_disturbed, check_stat(statistic), combine)
    if len(table) < MIN_ARCHS:
        raise _too_few(dataset, table, excluded)
    tr, te = split(len(table), test_fraction, seed)
    train, test = table.subset(tr), table.subset(te)
    train_archs, test_archs = _archs(train), _archs(test)
    t0 = time.perf_counter()
    model = fit_additive(dataset, train, members, seed)
    fit_s = time.perf_counter() - t0
    extractor = model.extractor
    lut = LookupTableBaseline(extractor, seed=seed)
    baselines: list[LatencyModel] = [MacsBaseline(extractor), lut]
    for b in baselines:
        b.fit(train_archs, train.latency_ms)
    preds = {"additive": model.predict(test_archs)}
    preds.update({b.name: b.predict(test_archs) for b in baselines})
    noise = noise_estimate(dataset, test)
    warnings = [w for w in (size_warning(len(table)), session_warning(noise, table, combine)) if w]
    report = TrainReport(
        dataset=dataset.summary(), train_archs=list(train.archs), test_archs=list(test.archs),
        excluded_disturbed=excluded, models={k: accuracy_metrics(test.latency_ms, p) for k, p in preds.items()},
        noise=noise, lut_coverage=lut.coverage, fit_s=fit_s,
        predictions={k: p.tolist() for k, p in preds.items()}, measured_ms=test.latency_ms.tolist(),
        warning="; ".join(warnings) or None, statistic=statistic, excluded_few_runs=table.too_few_runs,
        combine=combine,
    )
    training = {
        "dataset": dataset.summary(), "statistic": statistic, "combine": combine, "test_fraction": test_fraction,
        "seed": seed, "train_arch_ids": [arch_id_of(a) for a in train.archs],
        "test_arch_ids": [arch_id_of(a) for a in test.archs],
        "report": report.to_dict(with_archs=False),
    }
    return PredictorEstimator(model, dataset.target, training, statistic=statistic), report


def fit_predictor(dataset: Dataset, members: int = 16, seed: int = 0, statistic: str = "p50") -> PredictorEstimator:
    """Fit a predictor of ``statistic`` on every usable architecture of ``dataset`` (no held-out part).

    Its uncertainty band comes from out-of-fold errors on the same data. Used to refit during a
    search, once confirmed measurements have been added.

    Raises:
        DatasetError: fewer than :data:`MIN_ARCHS` usable architectures.
        ConfigError: an unknown ``statistic``.
    """
    table, excluded = usable_table(dataset, statistic=check_stat(statistic))
    if len(table) < MIN_ARCHS:
        raise _too_few(dataset, table, excluded)
    model = fit_additive(dataset, table, members, seed)
    training = {
        "dataset": dataset.summary(), "statistic": statistic, "test_fraction": 0.0, "seed": seed,
        "train_arch_ids": [arch_id_of(a) for a in table.archs], "test_arch_ids": [],
        "excluded_disturbed": excluded, "excluded_few_runs": table.too_few_runs,
        "oof": {"within_10": float(np.mean(model.oof_abs_rel_error <= 0.10)),
                "mape": float(np.mean(model.oof_abs_rel_error))},
    }
    return PredictorEstimator(model, dataset.target, training, statistic=statistic)
