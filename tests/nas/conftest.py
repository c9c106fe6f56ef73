"""Shared fixtures: one real local Ray cluster (2 CPUs) and one tiny trained supernet for the whole
test session."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from nas.oneshot.train import SupernetResult


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[None]:
    """A local Ray cluster with 2 CPUs, started once; searches reuse it instead of starting their own."""
    import ray

    from nas.adapters import ray_cluster as adapter  # sets Ray's quiet environment before the cluster starts

    del adapter
    ray.init(address="local", num_cpus=2, include_dashboard=False, logging_level="WARNING")
    yield
    ray.shutdown()


@pytest.fixture(scope="session")
def trained_supernet(tmp_path_factory: pytest.TempPathFactory) -> SupernetResult:
    """A real supernet training: the tiny space on 64 of scikit-learn's digits at 16x16 (the split of
    ``DataConfig(resolution=16)``), two epochs, one torch thread."""
    import torch
    import yaml

    from nas.core.config import DataConfig, SupernetConfig, TrackingConfig, TrainConfig
    from nas.oneshot.train import run_supernet
    from search_spaces.space import SPACES_DIR

    folder = tmp_path_factory.mktemp("supernet")
    cfg = SupernetConfig(
        space=yaml.safe_load((SPACES_DIR / "tiny.yaml").read_text()), space_source="search_spaces/spaces/tiny.yaml",
        name="tiny-test", output_dir=str(folder / "out"), random_subnets=1, bn_batches=2, progress=False,
        data=DataConfig(resolution=16, max_train_samples=64, max_val_samples=96),
        train=TrainConfig(epochs=2, batch_size=32, device="cpu"),
        tracking=TrackingConfig(uri=f"sqlite:///{folder / 'mlflow.db'}"),
    )
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return run_supernet(cfg, log=lambda _s: None)
    finally:
        torch.set_num_threads(threads)
