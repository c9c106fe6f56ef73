"""A predictor for a new device from a few measurements: adapt another device's predictor.

The predictor (:class:`~latency_predictor.prediction.models.AdditiveModel`) is a sum of non-negative
per-operator costs, ``intercept + sum_j w_j x_j``. Moving to another device keeps the *structure*
(which operators cost what relative to each other within a family) and changes the *scales*: more
threads speed up dense convolutions more than depthwise ones and not the per-call overhead at
all; eager PyTorch pays far more per call than ONNX Runtime; another input size changes the
share of fixed costs. So the features are split into a few groups (:data:`GROUPS`): dense
compute, memory traffic, depthwise convolutions, element-wise work, per-call overhead, and the
fixed cost (the intercept), and the new device's predictor is

    latency = sum_g s_g * (sum over the features j of group g of w_j x_j)  +  s_fixed * intercept

with the source device's ``w_j`` and one scale ``s_g >= 0`` per group, fitted on the n new
measurements (:func:`fit_scales`): least squares on relative error, like the predictor itself,
with a ridge penalty ``lam * sum_g (s_g / c - 1)^2`` that pulls every scale towards the one
global scale ``c`` that best maps the source predictions onto the new measurements. ``lam`` is
chosen by leave-one-out cross-validation on the n measurements, from 0 (no pull, tried only where
the fit has fewer parameters than measurements) up, so with few or uninformative measurements
the model falls back to "the same network mix, uniformly faster or slower", and with more it
lets each family move on its own. The result is an ordinary ``AdditiveModel`` (its coefficients
are ``s_g w_j``), saved and loaded like any predictor, with a bootstrap ensemble and
leave-one-out errors for its uncertainty.

A group scale cannot give a cost to an operator the source predictor costs at nothing, nor move
cost between correlated features of one group: the source's non-negative fit is sparse (ONNX
Runtime fuses ReLU into the convolution, so its ReLU costs nothing, while eager PyTorch pays for
every activation). So the scaled model is then *refined* (:func:`refine_costs`): each feature's
cost may move by ``delta_j`` (never below zero), with a ridge penalty ``mu * sum_j (delta_j m_j)^2``
in units of the mean latency (``m_j`` is feature ``j``'s mean value over the mean measured
latency), ``mu`` chosen by leave-one-out among values that include "no refinement" at all: the
strongest penalty whose error is within one standard error of the least (the least of several
noisy errors is an optimistic one). With few measurements, or measurements the scales already
explain, the refinement stays at zero.

Five families are a strong assumption: a device may slow one operator kind and not the others. So
the adapted model has a scale per operator kind's compute and memory (:data:`PER_OPERATOR`), 36
scales against 20 or so measurements, which only the ridge makes a fit. The whole fit (scales,
overheads, refinement) is made twice, with two centres for the pull: once towards the one global
scale, and once (:data:`PER_OPERATOR_IN_FAMILIES`) towards the family fit (:data:`COARSE`) on the
same measurements, each operator kind's scale towards its family's fitted scale and the overheads
towards the family fit's; the adapted model is the mean of the two (:data:`GROUPINGS`,
:func:`adapt_model`), still one additive model. The pull towards the global scale alone throws away
what the families tell apart (from one thread at batch 1 to batch 4, the family fit finds per-call
work less than half as costly per sample and compute as costly); the pull towards the families
alone trusts the family fit, which errs where a device moves operators of one family apart. In the
leave-one-out errors the family fit is refitted without each network too.

With predictors of several other devices (:func:`adapt_model_from_many`), each is adapted with the
same measurements and the result is their mix, weighted (:func:`mix_weights`) so that its
leave-one-out error is least: a source whose structure is wrong for the new device (eager
PyTorch's per-call overheads for ONNX Runtime) then gives way to one whose structure fits.

Which architectures to measure (:func:`informative_order`): those that best represent the
candidates, judged by their *mix*: the share of a network's predicted latency from each group (and
the fixed and per-call terms), standardised across the candidates. A greedy k-median choice takes,
each time, the candidate that most reduces the summed distance from every candidate to its
nearest chosen one: the first is the most typical network, the next the one that best covers
what the first leaves far away, and so on. Networks already measured count as chosen. Typical
networks are what the predictor is asked about, so a fit on them predicts the candidates better
than a fit on extreme ones. But typical networks move their families together: a wider network
has more of both compute and memory traffic, so typical networks alone tell the scales apart
poorly where the new device moves one family and not the other (at another input size, a fit
on typical networks errs in proportion to a network's share of memory traffic). So once as many
networks are measured as the family fit has parameters, every other network is instead the one
with the largest leverage on that fit (a D-optimal step): the candidate whose mix the networks so
far explain least. A D-optimal design alone, most unusual first, did worse on the benchmark than
random choices wherever the scales alone did not explain the new device; alternating keeps the
fit anchored on typical networks and still separates the scales. The order is most informative
first, so measuring stops early with the best subset so far.

The parts: :mod:`.groups` (which features share a scale), :mod:`.scales` (the scales and
overheads), :mod:`.refine` (the per-feature refinement), :mod:`.loo` (how both choose their
ridge strength), :mod:`.adapt` (one source, the mean of the groupings, the mix of sources),
:mod:`.order` (which architectures to measure) and :mod:`.report` (a predictor for the new device
from its dataset, compared on held-out architectures).
"""

from __future__ import annotations

from latency_predictor.prediction.transfer.adapt import (
    Mix,
    adapt_model,
    adapt_model_from_many,
    mix_weights,
    scaled_model,
    unadapted,
)
from latency_predictor.prediction.transfer.groups import (
    COARSE,
    GROUPINGS,
    GROUPS,
    OVERHEADS,
    PARAMETERS,
    PER_OPERATOR,
    PER_OPERATOR_IN_FAMILIES,
    Grouping,
    feature_group,
    group_contributions,
    operator_group,
)
from latency_predictor.prediction.transfer.order import informative_order, mix_rows
from latency_predictor.prediction.transfer.refine import REFINE_MUS, design_matrix, refine_costs
from latency_predictor.prediction.transfer.report import TransferReport, adapt_predictor
from latency_predictor.prediction.transfer.scales import LAMBDAS, Scales, fit_scales

__all__ = [
    "COARSE", "GROUPINGS", "GROUPS", "LAMBDAS", "OVERHEADS", "PARAMETERS", "PER_OPERATOR", "PER_OPERATOR_IN_FAMILIES",
    "REFINE_MUS", "Grouping", "Mix", "Scales", "TransferReport", "adapt_model", "adapt_model_from_many",
    "adapt_predictor", "design_matrix", "feature_group", "fit_scales", "group_contributions", "informative_order",
    "mix_rows", "mix_weights", "operator_group", "refine_costs", "scaled_model", "unadapted",
]
