"""Reliability and scale: a search under injected faults (trials failed, retried, recovered) and the search's
throughput with more workers, projected to a cluster."""
