"""The search on a multi-node Ray cluster.

Three real Ray nodes on this machine (``ray.cluster_utils.Cluster``): a head and two workers
with one CPU each; the workers also declare one logical GPU, so GPU placement is checked
without a GPU. Searches join the cluster through ``ray.address`` (as on a real cluster), run
real trials with real ONNX Runtime measurements and write a real SQLite MLflow store; the
record must say where every trial ran. The ``gpu`` test runs a short real search on the GPUs of
a GPU machine.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from mlflow import MlflowClient
from mlflow.entities import Run

from latency_predictor import LatencyError
from nas.core.config import RayConfig, SearchConfig, validate
from nas.core.errors import ConfigError
from nas.driver import SearchResult, run_search
from tests.nas.configs import stored_config

pytestmark = pytest.mark.slow  # every test here starts or joins a real multi-node Ray cluster

CHEAP = (
    "+space=tiny", "target_ms=1.0", "data.max_train_samples=256", "data.max_val_samples=128", "train.epochs=1",
    "latency.input_shape=[1,3,64,64]", "latency.measure.min_runs=10", "latency.measure.min_time_s=0.05",
    "latency.measure.max_time_s=0.5", "latency.measure.max_repeats=1", "ray.cpus_per_trial=1", "progress=false",
)


@dataclass(frozen=True)
class ThreeNodes:
    """The test cluster: its address, the head's node id and the GPU workers' node ids."""

    address: str
    head: str
    gpu_nodes: frozenset[str]


@pytest.fixture(scope="module")
def three_nodes() -> Iterator[ThreeNodes]:
    """A head node (1 CPU, no GPU) and two workers (1 CPU and 1 logical GPU each), as separate Ray nodes."""
    import ray
    from ray.cluster_utils import Cluster

    from nas.adapters import ray_cluster  # sets Ray's quiet environment before the nodes start

    del ray_cluster
    # The session's local cluster (tests/nas/conftest.py) would be reused instead of joining this
    # one: stop it here and start it again afterwards for the tests that use it.
    was_up = ray.is_initialized()
    if was_up:
        ray.shutdown()
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "num_gpus": 0})
    try:
        workers = [cluster.add_node(num_cpus=1, num_gpus=1) for _ in range(2)]
        cluster.wait_for_nodes()
        yield ThreeNodes(cluster.address, cluster.head_node.node_id, frozenset(w.node_id for w in workers))
    finally:
        if ray.is_initialized():
            ray.shutdown()
        cluster.shutdown()
        if was_up:
            ray.init(address="local", num_cpus=2, include_dashboard=False, logging_level="WARNING")


def _config(tmp_path: Path, *overrides: str) -> SearchConfig:
    return stored_config(tmp_path, *CHEAP, *overrides)


def _runs(tmp_path: Path, result: SearchResult) -> tuple[Run, list[Run]]:
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    runs = client.search_runs([result.experiment_id])
    parent = next(r for r in runs if r.info.run_id == result.parent_run_id)
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == result.parent_run_id]
    return parent, children


def test_trials_spread_over_the_nodes_and_each_records_its_node(tmp_path: Path, three_nodes: ThreeNodes) -> None:
    cfg = _config(
        tmp_path, f"ray.address={three_nodes.address}", "ray.gpus_per_trial=0", "search.n_trials=4",
        "search.max_concurrent=3", "name=spread",
    )
    result = run_search(cfg)
    parent, children = _runs(tmp_path, result)
    assert result.status == "FINISHED" and parent.info.status == "FINISHED"
    assert parent.data.tags["ray_address"] == three_nodes.address and parent.data.tags["ray_nodes"] == "3"
    assert len(children) == 4 and all(c.data.tags["status"] == "COMPLETED" for c in children)
    nodes = [c.data.tags["ray_node_id"] for c in children]
    all_nodes = three_nodes.gpu_nodes | {three_nodes.head}
    assert set(nodes) <= all_nodes and len(set(nodes)) > 1, nodes  # one CPU per node: 3 at once need 3 nodes
    assert all(c.data.tags["ray_node_ip"] and c.data.tags["ray_gpu_ids"] == "none" for c in children)
    assert {r.tags["ray_node_id"] for r in result.candidates} == set(nodes)
    # Joined, not started: the search left the cluster running and disconnected from it.
    import ray

    assert not ray.is_initialized()


def test_one_gpu_per_trial_places_trials_on_gpu_nodes_only(tmp_path: Path, three_nodes: ThreeNodes) -> None:
    cfg = _config(
        tmp_path, f"ray.address={three_nodes.address}", "ray.gpus_per_trial=1", "search.n_trials=3",
        "search.max_concurrent=2", "train.device=cpu", "name=gpus",
    )
    result = run_search(cfg)
    parent, children = _runs(tmp_path, result)
    assert result.status == "FINISHED" and len(children) == 3
    assert json.loads(parent.data.tags["resources_per_trial"]) == {"cpu": 1.0, "gpu": 1.0}
    for child in children:
        tags = child.data.tags
        assert tags["status"] == "COMPLETED"
        assert tags["ray_node_id"] in three_nodes.gpu_nodes, "a GPU trial ran on the head node, which has no GPU"
        assert tags["ray_gpu_ids"] == "0"  # one logical GPU, the only one of its node


def test_ray_address_from_the_environment_joins_that_cluster(
    three_nodes: ThreeNodes, monkeypatch: pytest.MonkeyPatch
) -> None:
    import ray

    from nas.adapters import ray_cluster

    monkeypatch.setenv("RAY_ADDRESS", three_nodes.address)  # what `ray job submit` sets for the search
    assert ray_cluster.joins_cluster(RayConfig())
    cluster = ray_cluster.connect(RayConfig())
    try:
        assert cluster.joined_here and not cluster.started_here
        assert (cluster.address, cluster.nodes, cluster.cpus, cluster.gpus) == (three_nodes.address, 3, 3.0, 2.0)
    finally:
        ray_cluster.disconnect(cluster)
    assert not ray.is_initialized()


def test_without_an_address_a_local_cluster_is_started_not_the_running_one_joined(
    three_nodes: ThreeNodes, monkeypatch: pytest.MonkeyPatch
) -> None:
    import ray

    from nas.adapters import ray_cluster

    # The running cluster left its address in Ray's temp folder, which a plain ray.init() joins.
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    cluster = ray_cluster.connect(RayConfig(num_cpus=1))
    try:
        assert cluster.started_here and not cluster.joined_here
        assert (cluster.address, cluster.nodes, cluster.cpus) == ("local", 1, 1.0)
    finally:
        ray_cluster.disconnect(cluster)
    assert not ray.is_initialized()


def test_latency_backend_is_checked_on_a_trial_node_before_any_trial(
    tmp_path: Path, three_nodes: ThreeNodes
) -> None:
    cfg = _config(tmp_path, f"ray.address={three_nodes.address}", "ray.gpus_per_trial=1", "name=bad")
    cfg.latency.options["warp_speed"] = True
    with pytest.raises(LatencyError, match="warp_speed"):
        run_search(cfg)
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    assert all(not client.search_runs([e.experiment_id]) for e in client.search_experiments())


def test_ray_client_addresses_are_refused_with_the_alternative(tmp_path: Path) -> None:
    cfg = _config(tmp_path, "ray.address=ray://head:10001")
    with pytest.raises(ConfigError, match=r"ray\.address.*Ray Client.*ray job submit"):
        validate(cfg)


@pytest.mark.gpu
def test_one_gpu_per_trial_measures_on_the_trials_own_gpu(tmp_path: Path) -> None:
    """On a GPU machine: each trial trains and measures (torch, CUDA) on the one GPU Ray gave it."""
    import torch

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    n_gpus = torch.cuda.device_count()
    cfg = _config(
        tmp_path, "latency=torch", "latency.options.device=cuda", "latency.input_shape=[1,3,224,224]",
        "ray.gpus_per_trial=1", "train.device=auto", "search.n_trials=3", f"search.max_concurrent={min(2, n_gpus)}",
        "name=gpu",
    )
    result = run_search(cfg)
    assert result.status == "FINISHED" and len(result.candidates) == 3
    for rec in result.candidates:
        assert rec.status == "COMPLETED", rec.failure_reason
        gpu = rec.tags["ray_gpu_ids"]
        assert gpu != "none" and "," not in gpu
        assert rec.tags["latency_device"] == "cuda:0"  # the trial's own GPU, as the trial sees it
        assert rec.latency is not None
        # The slot is the physical GPU's, so trials on different GPUs never queue for each other.
        assert rec.latency["extra"]["slot_key"] == f"cuda-{gpu}"
        assert rec.latency["environment"]["device_name"] == torch.cuda.get_device_name(int(gpu))
