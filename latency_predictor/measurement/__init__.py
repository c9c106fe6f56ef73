"""Measurement: how long a network takes on a named device, timed by a fixed protocol.

The protocol (:mod:`~latency_predictor.measurement.timing`), the result record
(:mod:`~latency_predictor.measurement.protocol`), the device's measurement slot
(:mod:`~latency_predictor.measurement.slot`), what a measurement ran on
(:mod:`~latency_predictor.measurement.environment`), the statistic a target bounds
(:mod:`~latency_predictor.measurement.statistic`), export and quantisation, and the measuring
backends behind one registry (:mod:`~latency_predictor.measurement.backends`).

Imports nothing of :mod:`latency_predictor.prediction`.
"""
