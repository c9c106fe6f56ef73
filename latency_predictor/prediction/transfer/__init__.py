"""A predictor for a new device from a few measurements: adapt another device's predictor.

The method, and why each part of it is there, is described once, in the documentation's
"Predictor and transfer" page (``docs/predictor.md``); the runs that led to it are in the transfer
benchmark's notes. In short: the source predictor (:class:`~latency_predictor.prediction.models.AdditiveModel`,
``intercept + sum_j w_j x_j``) keeps its structure and the new device gets its own scales,

    latency = sum_g s_g * (sum over the features j of group g of w_j x_j)  +  fixed_ms + per_call_ms * calls

fitted on the n new measurements with every scale pulled towards a centre by a ridge whose
strength leave-one-out chooses, then each feature's cost refined. What is where:

* :func:`feature_group`, :data:`GROUPS`, :data:`OVERHEADS`: the five families and the device's
  overheads; :data:`COARSE`, :data:`PER_OPERATOR`, :data:`PER_OPERATOR_IN_FAMILIES`,
  :data:`GROUPINGS`: the groupings whose scales are fitted;
* :func:`fit_scales`: the scales and overheads of one grouping, least squares on relative error
  with the ridge (strengths :data:`LAMBDAS`);
* :func:`refine_costs`: each feature's cost moved by a penalised delta (strengths :data:`REFINE_MUS`);
* :func:`adapt_model`: the adapted predictor, the mean of the per-operator fits pulled towards the
  global scale and towards the family fit; :func:`adapt_model_from_many` and :func:`mix_weights`:
  several sources mixed by leave-one-out error; :func:`padding_variant` and :data:`PADDING_SHARES`: the source
  with its compute cost moved between the kernel taps inside the input and all taps, which ``adapt_model(...,
  padding=True)`` mixes to fit how the new device pays for the taps on the zero padding;
* :func:`informative_order`: which architectures to measure, most informative first.

The parts live in ``groups`` (the groupings), ``scales`` (the ridge fit), ``refine`` (the
per-feature refinement), ``adapt`` (the adapted and mixed predictors), ``order`` (what to measure),
``loo`` (the leave-one-out rule both strengths are chosen by) and ``report`` (the command's report).
"""

from __future__ import annotations

from latency_predictor.prediction.transfer.adapt import (
    PADDING_SHARES,
    Mix,
    adapt_model,
    adapt_model_from_many,
    mix_weights,
    padding_variant,
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
    "COARSE", "GROUPINGS", "GROUPS", "LAMBDAS", "OVERHEADS", "PADDING_SHARES", "PARAMETERS", "PER_OPERATOR",
    "PER_OPERATOR_IN_FAMILIES",
    "REFINE_MUS", "Grouping", "Mix", "Scales", "TransferReport", "adapt_model", "adapt_model_from_many",
    "adapt_predictor", "design_matrix", "feature_group", "fit_scales", "group_contributions", "informative_order",
    "mix_rows", "mix_weights", "operator_group", "padding_variant", "refine_costs", "scaled_model", "unadapted",
]
