"""Prediction: a learned model of how fast a network runs, fitted on measurements.

The features of an architecture (:mod:`~latency_predictor.prediction.features`), the models
fitted on them (:mod:`~latency_predictor.prediction.models`), the datasets of measurements they
learn from (:mod:`~latency_predictor.prediction.dataset`) and the setting they are valid for
(:mod:`~latency_predictor.prediction.target`), the saved predictor as a latency estimator
(:mod:`~latency_predictor.prediction.predictor`), how good it is
(:mod:`~latency_predictor.prediction.metrics`), adapting one to a new device
(:mod:`~latency_predictor.prediction.transfer`), and hybrid mode, where real measurements
confirm the predictions that matter (:mod:`~latency_predictor.prediction.hybrid`).

Builds on :mod:`latency_predictor.measurement`; never imports the estimator wiring or the commands.
"""
