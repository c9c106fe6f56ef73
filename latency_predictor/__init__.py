"""How fast a network runs: measurement backends, the measurement protocol, learned predictors.

May import :mod:`search_spaces`; never :mod:`nas`.
"""

from __future__ import annotations

from latency_predictor.errors import (
    BackendUnavailableError,
    ConfigError,
    EngineBuildError,
    ExportError,
    LatencyError,
    MeasurementError,
    PredictorMismatchError,
)
from latency_predictor.measurement.protocol import LatencyEstimator, LatencyResult, LatencyStats
from latency_predictor.measurement.slot import SlotTicket, measurement_slot
from latency_predictor.measurement.timing import MeasureConfig, Measurement, measure_latency

__all__ = [
    "BackendUnavailableError", "ConfigError", "EngineBuildError", "ExportError", "LatencyError",
    "LatencyEstimator", "LatencyResult", "LatencyStats", "MeasureConfig", "Measurement", "MeasurementError",
    "PredictorMismatchError", "SlotTicket", "measure_latency", "measurement_slot",
]
