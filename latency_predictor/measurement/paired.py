"""Latency relative to an anchor network measured beside the candidates.

A host's speed drifts: the same network, measured alone minutes apart, can differ by a fifth,
and a host that switches between speed levels can double it within seconds. No absolute figure
then repeats; a ratio to a fixed network measured right before or after it does, because a
change of speed between two measurements of a pair moves both figures, and one that falls inside a
pair is outvoted by the other rounds.

So a network is measured in rounds, each one the network and then the anchor right after it
(:func:`alternate`), and judged by ``x_anchor``: the median over the rounds of its figure over the
anchor's, at the statistic the target bounds (:func:`measure_paired`). A single round
(:func:`pair`) is what a search's trial can do: there the candidate's figure is compared with the
anchor's from the nearest measurement.

The pairing rides on the network's :class:`~latency_predictor.LatencyResult`: its ``extra`` holds
the anchor's figure, ``x_anchor`` and the rounds' ratios under :data:`ANCHOR_KEY`
(:func:`anchor_figures` reads them back), so that anything that receives the result receives them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

import numpy as np

from latency_predictor.errors import MeasurementError
from latency_predictor.measurement.protocol import LatencyResult
from latency_predictor.measurement.statistic import check_runs, stat_value
from search_spaces import Arch

ANCHOR_KEY = "anchor"
"""The key of a result's ``extra`` under which its pairing with the anchor is kept."""

R = TypeVar("R")


@dataclass(frozen=True)
class AnchorFigures:
    """A network's figures against the anchor (at ``stat``).

    Attributes:
        x_anchor: the median over the rounds of the network's figure over the anchor's.
        anchor_ms: the anchor's figure, in ms: the median of those paired with the network.
        latency_ms: the network's figure, in ms: the median over the rounds.
        ratios: each round's ratio, in order.
        stat: the statistic compared (``p50``, ``p90``, ``p95`` or ``p99``).
        anchor: the anchor as it was named (e.g. ``mobilenetv2_100@0.35``), or its canonical string.
    """

    x_anchor: float
    anchor_ms: float
    latency_ms: float
    ratios: tuple[float, ...]
    stat: str
    anchor: str

    @property
    def rounds(self) -> int:
        """How many rounds paired the network with the anchor."""
        return len(self.ratios)


def alternate(archs: Sequence[Arch], anchor: Arch, measure: Callable[[Arch], R], rounds: int
              ) -> dict[Arch, list[tuple[R, R]]]:
    """Measure every network of ``archs`` back to back with ``anchor``, in ``rounds`` rounds.

    Each round measures each network and then the anchor right after it, in the order of ``archs``.
    A network equal to the anchor is not measured (its list stays empty).

    Returns:
        Per network, its ``(own, anchor's)`` measurements, one pair per round.
    """
    if rounds < 1:
        raise MeasurementError(f"paired measurement needs at least 1 round, got {rounds}")
    pairs: dict[Arch, list[tuple[R, R]]] = {a: [] for a in archs}
    for _ in range(rounds):
        for a in archs:
            if a == anchor:
                continue
            mine = measure(a)
            pairs[a].append((mine, measure(anchor)))
    return pairs


def pair(results: Sequence[LatencyResult], anchors: Sequence[LatencyResult], stat: str = "p50",
         anchor: str | None = None) -> LatencyResult:
    """The network's result with its figures against the anchor in ``extra`` (:data:`ANCHOR_KEY`).

    Args:
        results: the network's measurements, one per round.
        anchors: the anchor's measurement paired with each (the same number).
        stat: the statistic compared.
        anchor: how the anchor is named in records (None: its canonical string).

    Returns:
        The result of the network's median round (the lower median for an even number of rounds),
        so that its percentiles come from one measurement, with :class:`AnchorFigures` attached.

    Raises:
        MeasurementError: no rounds, unequal numbers of results, or a statistic that rests on too
            few timed runs (:func:`~latency_predictor.measurement.statistic.check_runs`).
    """
    if not results or len(results) != len(anchors):
        raise MeasurementError(f"paired measurement needs as many anchor results as network results, got "
                               f"{len(results)} and {len(anchors)}")
    for r in (*results, *anchors):
        check_runs(r, stat)
    mine = np.array([stat_value(r, stat) for r in results])
    theirs = np.array([stat_value(r, stat) for r in anchors])
    ratios = mine / theirs
    median_round = int(np.argsort(mine, kind="stable")[(len(mine) - 1) // 2])
    figures = AnchorFigures(
        x_anchor=float(np.median(ratios)), anchor_ms=float(np.median(theirs)), latency_ms=float(np.median(mine)),
        ratios=tuple(float(x) for x in ratios), stat=stat, anchor=anchor or anchors[0].arch,
    )
    chosen = results[median_round]
    return dataclasses.replace(chosen, extra={**chosen.extra, ANCHOR_KEY: dataclasses.asdict(figures)})


def measure_paired(measure: Callable[[Arch], LatencyResult], anchor: Arch, archs: Sequence[Arch], rounds: int,
                   stat: str = "p50", name: str | None = None) -> dict[Arch, LatencyResult]:
    """Each network of ``archs`` measured back to back with ``anchor`` in ``rounds`` rounds (:func:`alternate`),
    and its result with its figures against the anchor (:func:`pair`).

    A network equal to the anchor has ``x_anchor`` 1 by definition; its figure is the median of all
    the anchor's measurements here.

    Args:
        measure: how a network is measured, usually an estimator's ``measure``.
        anchor: the anchor network.
        archs: the networks.
        rounds: rounds of the pairing (at least 1).
        stat: the statistic compared.
        name: how the anchor is named in records (e.g. ``mobilenetv2_100@0.35``).

    Raises:
        LatencyError: a measurement failed; MeasurementError: see :func:`pair`.
    """
    pairs = alternate(archs, anchor, measure, rounds)
    out = {a: pair([m for m, _ in ps], [t for _, t in ps], stat, name) for a, ps in pairs.items() if ps}
    if len(out) < len(pairs):  # the anchor is among the networks: paired with itself
        own = [t for ps in pairs.values() for _, t in ps] or [measure(anchor) for _ in range(rounds)]
        out[anchor] = pair(own, own, stat, name)
    return {a: out[a] for a in archs}


def anchor_figures(result: LatencyResult) -> AnchorFigures | None:
    """The figures against the anchor a result carries (None: it was not paired with one)."""
    raw = result.extra.get(ANCHOR_KEY)
    if raw is None:
        return None
    return AnchorFigures(**{**raw, "ratios": tuple(raw["ratios"])})


__all__ = ["ANCHOR_KEY", "AnchorFigures", "alternate", "anchor_figures", "measure_paired", "pair"]
