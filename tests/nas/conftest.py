"""Shared fixtures: one real local Ray cluster (2 CPUs) for the whole test session."""

from __future__ import annotations

from collections.abc import Iterator

import pytest


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[None]:
    """A local Ray cluster with 2 CPUs, started once; searches reuse it instead of starting their own."""
    import ray

    from nas.adapters import ray_tune  # sets Ray's quiet environment before the cluster starts

    del ray_tune
    ray.init(address="local", num_cpus=2, include_dashboard=False, logging_level="WARNING")
    yield
    ray.shutdown()
