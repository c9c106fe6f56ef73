"""A predictor for the new device from a dataset measured there, and how it compares on held-out
architectures (:func:`adapt_predictor`, :class:`TransferReport`).
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from latency_predictor.errors import ConfigError, DatasetError, PredictorMismatchError
from latency_predictor.measurement.statistic import MIN_RUNS, check_stat
from latency_predictor.prediction.dataset import Dataset, LatencyTable
from latency_predictor.prediction.features import FeatureExtractor
from latency_predictor.prediction.metrics import accuracy_metrics
from latency_predictor.prediction.models import AdditiveModel, MacsBaseline
from latency_predictor.prediction.predictor import PredictorEstimator
from latency_predictor.prediction.target import PredictorTarget
from latency_predictor.prediction.transfer.adapt import adapt_model, adapt_model_from_many, unadapted
from latency_predictor.prediction.transfer.scales import Scales
from search_spaces import Arch, arch_id_of


def _fit_lines(lead: str, fit: dict[str, Any], after_scales: str = "") -> list[str]:
    """One fit of :meth:`Scales.to_dict` for the report: its scales, overheads and strengths,
    wrapped to 100 columns."""
    refined = ("not\0refined" if fit.get("refine_mu") is None else
               f"refined\0{fit['refined_features']}\0costs\0(mu\0{fit['refine_mu']:g})")
    # a name and its value stay on one line: joined by a placeholder until wrapped
    text = (f"{lead} ({len(fit['scales'])} scales): " + ", ".join(f"{g}\0{v:.3g}" for g, v in fit["scales"].items())
            + f"{after_scales}; fixed\0{fit['fixed_ms']:.3g}\0ms, per\0call\0{fit['per_call_ms']:.3g}\0ms; "
            f"lambda\0{fit['lambda']:g}; {refined}")
    indent = " " * (len(lead) - len(lead.lstrip()) + 4)
    return [line.replace("\0", " ") for line in textwrap.wrap(text, 100, subsequent_indent=indent,
                                                                break_on_hyphens=False)]


@dataclass
class TransferReport:
    """How the adapted predictor does on held-out architectures of the new device.

    Attributes:
        source: the predictor adapted from (its device, what it was trained on).
        others: the further predictors it was mixed with (:func:`adapt_model_from_many`), each
            with its weight and its leave-one-out MAPE adapted alone; ``source``'s are
            ``source_weight`` and ``source_loo_mape``.
        dataset: the new device's dataset summary.
        shots: the architectures the adaptation used (the first n of the dataset).
        test_archs: the held-out architectures every figure is computed on.
        scales: the fitted scales (:meth:`Scales.to_dict`).
        models: accuracy of ``adapted``; with ``others``, ``adapted_first`` (adapted from
            ``source`` alone); ``scratch`` (the predictor fitted from scratch on the same
            n), ``global_scale`` (the source times one scale), ``source`` (as it is), ``macs``
            (latency proportional to MACs, fitted on the n) and ``full`` (a predictor trained on
            many measurements of the new device, when given).
        predictions: held-out predictions per model (ms), aligned with ``test_archs``.
        measured_ms: held-out measured latencies.
    """

    source: dict[str, Any]
    dataset: dict[str, Any]
    shots: list[str]
    test_archs: list[str]
    scales: dict[str, Any]
    others: list[dict[str, Any]] = field(default_factory=list)
    source_weight: float = 1.0
    source_loo_mape: float | None = None
    models: dict[str, Any] = field(default_factory=dict)
    predictions: dict[str, list[float]] = field(repr=False, default_factory=dict)
    measured_ms: list[float] = field(repr=False, default_factory=list)

    def to_dict(self, with_archs: bool = True) -> dict[str, Any]:
        """A JSON-serialisable record (``with_archs=False`` leaves out the per-architecture lists)."""
        d: dict[str, Any] = {
            "source": self.source, "dataset": self.dataset, "n_shots": len(self.shots), "n_test": len(self.test_archs),
            "scales": self.scales, "models": {k: m.to_dict() for k, m in self.models.items()},
        }
        if self.others:
            d.update(source_weight=self.source_weight, source_loo_mape=self.source_loo_mape, others=self.others)
        if with_archs:
            d.update(shots=self.shots, test_archs=self.test_archs, measured_ms=self.measured_ms,
                     predictions=self.predictions)
        return d

    def table(self) -> str:
        """The report as a fixed-width table."""
        s, d = self.scales, self.dataset
        lines = [
            f"adapted from {self.source['device']} (trained on {self.source['n_train']}) with {len(self.shots)} "
            f"measurements of {d['backend']} on {d['device']}, input {d['input_shape']}",
        ]
        lines += _fit_lines(f"scales of the {s['grouping']} fit", s, f" (global {s['global_scale']:.3g})")
        for other in s.get("averaged_with", []):
            lines += _fit_lines(f"averaged with the {other['grouping']} fit", other)
            if "within" in other:
                lines += _fit_lines(f"  its scales pulled towards the {other['within']['grouping']} fit",
                                    other["within"])
        if s.get("padding_share") is not None:
            lines.append(f"padding: the mix of the source's variants moved {s['padding_share']:+.2f} of its cost per "
                         "kernel tap inside the input onto every tap (+1: the device pays for the taps on the "
                         "padding, -1: the reverse)")
        if self.others:
            mixed = [(self.source_weight, self.source["device"], self.source_loo_mape),
                     *((o["weight"], o["device"], o["loo_mape"]) for o in self.others)]
            lines.append("mixed: " + "; ".join(
                f"weight {w:.2f} for {device}"
                + ("" if mape is None else f" (adapted alone: leave-one-out MAPE {mape:.1%})")
                for w, device, mape in mixed))
        lines.append(f"leave-one-out MAPE {s['loo_mape']:.1%}"
                     + (" (of the mix)" if self.others else " (of the mean)" if s.get("averaged_with") else ""))
        if not self.models:
            lines.append("no held-out architectures: nothing to compare (measure more on this device, after the "
                         "first n, or give --test-data)")
            return "\n".join(lines)
        lines += [
            f"held-out architectures: {len(self.test_archs)}",
            f"{'model':<14}{'n':>6}{'MAPE':>8}{'+-5%':>8}{'+-10%':>8}{'Spearman':>10}{'Kendall':>9}",
        ]
        for name, m in self.models.items():
            n = self.source["n_train"] if name == "source" else len(self.shots)
            if name == "full":
                n = self.source.get("full_n_train", "-")
            lines.append(f"{name:<14}{n!s:>6}{m.mape:>8.2%}{m.within_5:>8.1%}{m.within_10:>8.1%}{m.spearman:>10.3f}"
                         f"{m.kendall:>9.3f}")
        return "\n".join(lines)


def _check_sources(source: PredictorEstimator, others: Sequence[PredictorEstimator]) -> None:
    seen = {source.digest}
    for other in others:
        if other.digest in seen:
            raise ConfigError(f"predictor {other.digest[:12]} is given twice as a source: give each device's once")
        seen.add(other.digest)
        if other.statistic != source.statistic:
            raise PredictorMismatchError(
                f"the source predictors predict different statistics: {source.statistic!r} and {other.statistic!r} "
                "(mix predictors of one statistic)")


def _source_summary(source: PredictorEstimator) -> dict[str, Any]:
    fp = source.target.fingerprint
    model = fp.environment.get("device_name") or fp.environment.get("cpu_model") or fp.device
    threads = fp.environment.get("intra_op_threads") or fp.environment.get("torch_threads")
    device = f"{fp.backend} on {model}" + (f", {threads} thread(s)" if threads else "")
    device += f", input {'x'.join(map(str, source.target.input_shape))}"
    return {"device": device, "fingerprint": fp.digest, "predictor_digest": source.digest, "space": source.target.space,
            "input_shape": list(source.target.input_shape), "n_train": len(source.training.get("train_arch_ids", []))}


def adapt_predictor(
    source: PredictorEstimator,
    dataset: Dataset,
    shots: int | None = None,
    test: Dataset | None = None,
    full: PredictorEstimator | None = None,
    members: int = 16,
    seed: int = 0,
    include_disturbed: bool = False,
    statistic: str | None = None,
    others: Sequence[PredictorEstimator] = (),
    padding: bool = False,
    combine: str = "median",
) -> tuple[PredictorEstimator, TransferReport]:
    """Adapt ``source`` (another device's predictor) with measurements of the device of ``dataset``.

    Args:
        source: the predictor to start from.
        dataset: the new device's measurements, in the order they were made (a collection with
            ``--adapt-from`` measures the most informative first).
        shots: adapt with the first ``shots`` usable architectures (None: all of them).
        test: held-out measurements of the same device (None: the dataset's architectures after
            the first ``shots``, if any).
        full: a predictor trained on many measurements of the new device, to compare against.
        members: bootstrap ensemble size of the adapted predictor.
        seed: seed of the bootstrap.
        include_disturbed: also use architectures whose every measurement was disturbed.
        statistic: the statistic the adapted predictor learns (None: ``source``'s); records with
            too few timed runs for it are not used.
        others: predictors of further devices: each is adapted with the same measurements, and the
            adapted predictor is their mix with ``source``'s (:func:`adapt_model_from_many`).
        padding: also fit how the new device pays for the kernel taps on the zero padding
            (``adapt_model(..., padding=True)``); with one source only.
        combine: an architecture's latency from its records, in ``dataset`` and ``test``: as
            :meth:`~latency_predictor.prediction.dataset.Dataset.table`.

    Returns:
        The adapted predictor, valid for the dataset's setting, and the comparison on held-out
        architectures (empty ``models`` when there are none).

    Raises:
        DatasetError: fewer usable architectures than ``shots`` (or than 3).
        PredictorMismatchError: ``test`` or ``full`` is for another setting than ``dataset``, or
            one of ``others`` predicts another statistic than ``source``.
        ConfigError: ``full`` was trained on held-out architectures, a source is given twice, or ``padding``
            with ``others``.
    """
    _check_sources(source, others)
    if padding and others:
        raise ConfigError("--padding adapts one source predictor; it does not go with several --adapt-from "
                          "predictors")
    stat = check_stat(source.statistic if statistic is None else statistic)
    table = dataset.table(include_disturbed=include_disturbed, statistic=stat, combine=combine)
    n = len(table) if shots is None else shots
    if n < 3 or n > len(table):
        raise DatasetError(
            f"{dataset.path}: {len(table)} usable architectures; adapting with the first {n} needs at least "
            f"{max(n, 3)}: collect more on this device"
            + (f" ({table.too_few_runs} left out with fewer than {MIN_RUNS[stat]} timed runs, too few for a {stat}: "
               f"collect with --statistic {stat})" if table.too_few_runs else "")
        )
    fit_rows = table.subset(np.arange(n))
    if test is not None:
        test.target.check(dataset.target, what="test dataset")
        held = test.table(include_disturbed=include_disturbed, statistic=stat, combine=combine)
        held = held.subset([i for i, a in enumerate(held.archs) if a not in set(fit_rows.archs)])
    else:
        held = table.subset(np.arange(n, len(table)))
    extractor = FeatureExtractor(dataset.target.input_shape, dataset.target.num_classes)
    fit_archs = [Arch.decode(a) for a in fit_rows.archs]
    report = TransferReport(source=_source_summary(source), dataset=dataset.summary(), shots=list(fit_rows.archs),
                            test_archs=list(held.archs), scales={})
    first: AdditiveModel | None = None
    if others:
        model, mix = adapt_model_from_many([source.model, *(o.model for o in others)], extractor, fit_archs,
                                           fit_rows.latency_ms, members, seed)
        scales = replace(mix.scales[0], loo_abs_rel_error=mix.loo_abs_rel_error)
        report.source_weight = float(mix.weights[0])
        report.source_loo_mape = float(np.mean(mix.scales[0].loo_abs_rel_error))
        report.others = [{**_source_summary(o), "weight": float(w), "loo_mape": float(np.mean(f.loo_abs_rel_error))}
                         for o, w, f in zip(others, mix.weights[1:], mix.scales[1:], strict=True)]
        first = mix.alone[0]
    else:
        model, scales = adapt_model(source.model, extractor, fit_archs, fit_rows.latency_ms, members, seed,
                                    padding=padding)
    report.scales = scales.to_dict()
    if len(held) >= 2:
        _compare(report, source, model, scales, extractor, fit_archs, fit_rows.latency_ms, held, dataset.target,
                 full, seed, first)
    training = {
        "dataset": dataset.summary(), "statistic": stat, "combine": combine, "seed": seed,
        "adapted_from": report.source,
        **({"also_adapted_from": report.others, "source_weight": report.source_weight} if others else {}),
        "train_arch_ids": [arch_id_of(a) for a in fit_rows.archs],
        "test_arch_ids": [arch_id_of(a) for a in held.archs],
        "report": report.to_dict(with_archs=False),
    }
    return PredictorEstimator(model, dataset.target, training, statistic=stat), report


def _compare(
    report: TransferReport, source: PredictorEstimator, adapted: AdditiveModel, scales: Scales,
    extractor: FeatureExtractor, fit_archs: list[Arch], fit_ms: np.ndarray, held: LatencyTable,
    target: PredictorTarget, full: PredictorEstimator | None, seed: int, first: AdditiveModel | None = None,
) -> None:
    test_archs = [Arch.decode(a) for a in held.archs]
    preds: dict[str, np.ndarray] = {"adapted": adapted.predict(test_archs)}
    if first is not None:
        preds["adapted_first"] = first.predict(test_archs)
    if len(fit_archs) >= 5:
        scratch = AdditiveModel(extractor, members=0, seed=seed)
        scratch.fit(fit_archs, fit_ms)
        preds["scratch"] = scratch.predict(test_archs)
    preds["global_scale"] = unadapted(source.model, extractor, scales.global_scale).predict(test_archs)
    preds["source"] = unadapted(source.model, extractor).predict(test_archs)
    macs = MacsBaseline(extractor)
    macs.fit(fit_archs, fit_ms)
    preds["macs"] = macs.predict(test_archs)
    if full is not None:
        full.target.check(target, what="full predictor")
        if full.statistic != held.statistic:
            raise PredictorMismatchError(
                f"the full predictor was made for another setting: statistic {held.statistic!r} here, "
                f"{full.statistic!r} in the full predictor"
            )
        seen = set(full.training.get("train_arch_ids", [])) & {arch_id_of(a) for a in held.archs}
        if seen:
            raise ConfigError(f"the full predictor was trained on {len(seen)} of the held-out architectures: "
                              "compare on architectures it has not seen (another --test-data)")
        preds["full"] = full.predict_many(test_archs)
        report.source["full_n_train"] = len(full.training.get("train_arch_ids", []))
    report.models = {k: accuracy_metrics(held.latency_ms, p) for k, p in preds.items()}
    report.predictions = {k: p.tolist() for k, p in preds.items()}
    report.measured_ms = held.latency_ms.tolist()
