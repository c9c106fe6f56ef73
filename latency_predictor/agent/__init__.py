"""Measure on another device: a measurement agent that runs there, and the client the search uses.

* :mod:`latency_predictor.agent.__main__` (``python -m latency_predictor.agent``): the agent, an
  HTTP server (:mod:`~latency_predictor.agent.server`) on the device to measure on, which measures
  architectures or ONNX models with the same backends and protocol as a local measurement, in a
  measuring process of its own (:mod:`~latency_predictor.agent.worker`).
* :mod:`latency_predictor.agent.client`: :class:`~latency_predictor.agent.client.RemoteEstimator`,
  a :class:`~latency_predictor.LatencyEstimator` that sends each measurement to a pool of agents
  (``latency=remote`` in the search, ``--backend remote`` in ``collect``).
* :mod:`latency_predictor.agent.wire`: the typed requests and replies between the two.

Importing this package imports neither the server nor the client (each pulls its own libraries).
"""
