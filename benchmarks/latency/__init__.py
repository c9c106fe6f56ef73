"""Latency measurement: how repeatable, how costly and how faithful a measured latency is (repeatability
across processes, agreement between backends and with OpenVINO's benchmark_app, the final pass across
searches, tail latency, measurement under load, and the remote measurement agent)."""
