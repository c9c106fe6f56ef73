"""Deployment variants: a searched network against its INT8 and pruned variants on the deployment runtime
(accuracy and latency of each)."""
