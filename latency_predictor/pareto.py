"""The Pareto front of latency against an objective: the one rule the search's record and hybrid mode share."""

from __future__ import annotations

import numpy as np


def pareto_front(latency_ms: np.ndarray, objective: np.ndarray) -> np.ndarray:
    """Indices of the candidates no other beats on both lower latency and higher objective."""
    order = np.lexsort((-objective, latency_ms))  # by latency, ties: best objective first
    front, best = [], -np.inf
    for i in order:
        if objective[i] > best:
            front.append(int(i))
            best = objective[i]
    return np.array(front, dtype=np.int64)
