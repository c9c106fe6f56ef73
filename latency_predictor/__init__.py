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
from latency_predictor.protocol import LatencyEstimator, LatencyResult, LatencyStats

__all__ = [
    "BackendUnavailableError", "ConfigError", "EngineBuildError", "ExportError", "LatencyError",
    "LatencyEstimator", "LatencyResult", "LatencyStats", "MeasurementError", "PredictorMismatchError",
]
