"""How fast a network runs: measured, or predicted by a model learned from measurements.

* :mod:`latency_predictor.measurement`: the measurement protocol, the result record, the device's
  slot, and the measuring backends (:mod:`latency_predictor.measurement.backends`);
* :mod:`latency_predictor.prediction`: learned latency predictors, their datasets, hybrid mode and
  adapting a predictor to a new device (:mod:`latency_predictor.prediction.transfer`);
* :mod:`latency_predictor.agent`: measurement agents, for measuring on another device;
* :mod:`latency_predictor.estimators`: the search's ``latency`` settings made an estimator;
* the commands ``python -m latency_predictor.measure``, ``.collect``, ``.train`` (their command
  line: :mod:`latency_predictor.cli`) and ``.agent``.

Each part imports only the parts listed before it (prediction and the agents not each other; an
import-linter contract keeps it so), and all of them may import :mod:`~latency_predictor.errors`,
:mod:`~latency_predictor.pareto` and :mod:`~latency_predictor.locking`. May import
:mod:`search_spaces`; never :mod:`nas`.
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
