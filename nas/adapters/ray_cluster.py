"""The Ray cluster: started here or joined, its resources, and checks run where trials run.

With :mod:`nas.adapters.ray_tune` (the Tuner), the only modules that import Ray.

* :func:`connect` starts a local Ray cluster (``ray.init`` on this machine) or joins the one at
  ``ray.address`` (or at ``$RAY_ADDRESS``, which ``ray job submit`` sets for the search it
  starts); an unreachable address, or a cluster that refuses this process's authentication
  token, is a :class:`~nas.core.errors.ClusterError` before any trial (:func:`check_cluster`).
  Ray Client addresses (``ray://``) are refused: under Ray Client, Ray Tune runs its driver loop
  on the head node, so the callbacks that write the MLflow record would run there and not here.
  The user's code travels to the workers as the runtime environment's ``py_modules``. Ray's own
  console output is silenced (no progress tables, no dashboard, no usage stats: the environment
  below is set when this module is imported, before Ray is, and the cluster's processes inherit
  it); warnings from trials still reach the console. A local cluster ends with the driver even
  when the driver is killed (SIGKILL): Ray's head processes share its fate, and an
  :class:`~nas.runtime.workers.OrphanReaper` ends the agents its raylet started, which Ray leaves
  running for about a minute (they try to report the raylet's death to the dead cluster's GCS,
  with a fixed 60 s timeout, before they exit). :func:`disconnect` stops what :func:`connect` started.
* :func:`trial_resources`: the CPUs and GPUs each trial asks for, checked against the cluster's.
* :func:`check_latency_on_trial_node` builds the latency backend once where trials run, with a
  trial's resources (the driver's machine may lack the trials' GPU);
  :func:`check_user_code_on_trial_node` imports the user's functions there.
* :func:`placement`: where the calling trial runs (node and GPUs), for its reports.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from latency_predictor import LatencyError
from nas.core.config import LatencyConfig, RayConfig
from nas.core.errors import ClusterError, UserCodeError
from nas.runtime import plugins
from nas.runtime.workers import OrphanReaper, children
from nas.trial.evaluate import latency_estimator
from search_spaces import SearchSpace

# Set before Ray is imported: Ray reads some of these at import time, and the processes of a
# cluster started here inherit them (Ray Tune's among them: :mod:`nas.adapters.ray_tune` imports
# this module before Ray Tune).
_QUIET_ENV = {
    "RAY_AIR_NEW_OUTPUT": "0",  # with verbose=0 the legacy reporter prints nothing
    "TUNE_DISABLE_AUTO_CALLBACK_LOGGERS": "1",  # no per-trial CSV/JSON/TensorBoard files: MLflow is the record
    "RAY_USAGE_STATS_ENABLED": "0",
    "RAY_DEDUP_LOGS": "1",
    # Ray Tune's traceback of every failed attempt: the driver reports retries in one line, records
    # the reason of a trial that failed and raises a crash with its traceback.
    "TUNE_PRINT_ALL_TRIAL_ERRORS": "0",
}
for _k, _v in _QUIET_ENV.items():
    os.environ.setdefault(_k, _v)

import ray  # noqa: E402
from ray.exceptions import AuthenticationError, RpcError  # noqa: E402

_NOISY_LOGGERS = (
    "ray._private.authentication.authentication_token_setup",  # "token authentication is enabled" on every start
)

log = logging.getLogger(__name__)

RAY_ADDRESS_ENV = "RAY_ADDRESS"


@dataclass(frozen=True)
class Cluster:
    """The Ray cluster the search runs on.

    Attributes:
        address: ``local`` for a cluster started here, else the address joined.
        cpus: CPUs in the cluster.
        gpus: GPUs in the cluster.
        started_here: whether :func:`connect` started it (and :func:`disconnect` stops it).
        joined_here: whether :func:`connect` joined an existing cluster (and :func:`disconnect`
            leaves it, which stops nothing on the cluster).
        nodes: alive nodes in the cluster.
        reaper: for a cluster started here (on Linux), the watcher that ends its processes if this
            process is killed (SIGKILL) before it could stop them.
    """

    address: str
    cpus: float
    gpus: float
    started_here: bool
    joined_here: bool = False
    nodes: int = 1
    reaper: OrphanReaper | None = field(default=None, compare=False, repr=False)


def _check_address(address: str, source: str = "ray.address") -> None:
    if address.startswith("ray://"):
        raise ClusterError(
            f"{source} {address!r} is a Ray Client address: under Ray Client, Ray Tune runs the search's driver "
            "loop on the head node, away from this process and its MLflow record; run the search on a node of "
            "the cluster with ray.address=auto (or host:port), or submit it with `ray job submit` (docs/cluster.md)"
        )
    if address == "auto":
        return
    hostport = address.removeprefix("ray://")
    host, _, port = hostport.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=5):
            pass
    except OSError as err:
        raise ClusterError(
            f"{source} {address!r}: cannot reach a Ray cluster at {host}:{port} ({err.strerror or err}); "
            "start it (ray start --head) or leave ray.address unset to start a local one"
        ) from None
    _check_token(f"{host}:{port}", source, address)


AUTH_HELP = (
    "Ray clusters started with token authentication (the default where the head node has a token) "
    "refuse clients that do not send it: set RAY_AUTH_MODE=token and give this process the head's token "
    "(RAY_AUTH_TOKEN, or the file ~/.ray/auth_token; `ray get-auth-token` on the head prints it); "
    "see docs/cluster.md"
)


_GRPC_UNIMPLEMENTED = 12
"""gRPC's status code for a service or method the server does not have (an HTTP 404 included)."""


@contextlib.contextmanager
def _native_stderr_silenced() -> Iterator[None]:
    """File descriptor 2 pointed at /dev/null for the block: Ray's C++ layer writes there directly."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "wb") as null:
            os.dup2(null.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def _check_token(gcs: str, source: str, address: str) -> None:
    """Ask the cluster's GCS once, so a refused token or a wrong port is named, not a bare "Failed to connect".

    Without this, ``ray.init`` retries for about 30 s and reports only that it failed to connect;
    the cause (``InvalidAuthToken``) is in Ray's C++ log lines. Any other answer (or an API change
    in Ray's GCS client) leaves the decision to ``ray.init``.
    """
    try:
        from ray._raylet import InnerGcsClient  # type: ignore[attr-defined]

        with _native_stderr_silenced():  # Ray's C++ client logs each failed attempt; the error below says it once
            InnerGcsClient.standalone(gcs, None, 5000)
    except AuthenticationError as err:
        mode = os.environ.get("RAY_AUTH_MODE", "unset")
        raise ClusterError(
            f"{source} {address!r}: the Ray cluster refused this process's authentication token "
            f"(RAY_AUTH_MODE is {mode}; Ray says: {str(err).split('. ')[0]}). {AUTH_HELP}"
        ) from None
    except RpcError as err:
        port_help = "give the head node's GCS port (6379 unless `ray start --head --port` chose another)"
        if "Timed out" in str(err):
            raise ClusterError(
                f"{source} {address!r}: something listens at {gcs} but does not answer as a Ray cluster's GCS "
                f"within 5 s; {port_help}"
            ) from None
        if getattr(err, "rpc_code", None) == _GRPC_UNIMPLEMENTED:
            # an HTTP server, proxy or another gRPC service: it answered, but not as Ray's GCS
            raise ClusterError(
                f"{source} {address!r}: something listens at {gcs} but it is not a Ray cluster's GCS (it answered: "
                f"{err}); {port_help}"
            ) from None
    except Exception:  # a probe only: ray.init gives the verdict
        return


def _target(cfg: RayConfig) -> tuple[str | None, str]:
    """The cluster address to join and where it came from (``ray.address``, else ``$RAY_ADDRESS``)."""
    if cfg.address is None and os.environ.get(RAY_ADDRESS_ENV, "").strip():
        return os.environ[RAY_ADDRESS_ENV].strip(), f"${RAY_ADDRESS_ENV}"
    return cfg.address, "ray.address"


def check_cluster(cfg: RayConfig) -> None:
    """Check the cluster to join, if any, before the search creates anything: a Ray Client address,
    nothing listening, something that is not a Ray GCS, or a refused token is a ClusterError."""
    target, source = _target(cfg)
    if target is not None:
        _check_address(target, source)


def joins_cluster(cfg: RayConfig) -> bool:
    """Whether :func:`connect` will join an existing cluster (``ray.address`` or ``$RAY_ADDRESS`` set)."""
    return cfg.address is not None or bool(os.environ.get(RAY_ADDRESS_ENV, "").strip())


def connect(cfg: RayConfig, py_modules: list[Path] | None = None, env_vars: dict[str, str] | None = None) -> Cluster:
    """Start a local Ray cluster, or join ``cfg.address``; reuse Ray if it is already initialised.

    With ``cfg.address`` unset and ``$RAY_ADDRESS`` set (``ray job submit`` sets it for the
    command it starts), the cluster at ``$RAY_ADDRESS`` is joined, as ``ray.init`` would.

    ``py_modules``: the user's modules and packages (files and folders) to send to every worker of
    this search, as Ray's runtime environment ``py_modules``: Ray uploads each once and every node
    that runs a trial unpacks it onto the trial's import path. ``py_modules`` rather than a
    ``working_dir``: only the code travels (not the folder the search started in, with its data,
    store and checkpoints), trials keep their working folders, and it combines with the
    ``working_dir`` of ``ray job submit --working-dir``, which Ray does not let a second one
    override. In a process where Ray was already started, that start's runtime environment stays.

    ``env_vars``: environment variables of every worker of a local cluster started here (Ray's runtime
    environment ``env_vars``); a cluster joined or already running keeps its own workers' environment.

    Raises:
        ClusterError: the address is a Ray Client address or cannot be reached, or Ray refuses the
            runtime environment.
    """
    runtime_env = {"py_modules": [str(p) for p in py_modules]} if py_modules else None
    for name in _NOISY_LOGGERS:
        logging.getLogger(name).setLevel(logging.ERROR)
    started = joined = False
    reaper = None
    target, source = _target(cfg)
    if target is not None:
        _check_address(target, source)  # even when Ray is up already: a wrong address is the user's mistake
    if ray.is_initialized():
        address = "existing"
    elif target is not None:
        try:
            ray.init(address=target, logging_level=logging.WARNING, include_dashboard=False, runtime_env=runtime_env)
        except AuthenticationError as err:
            raise ClusterError(f"{source} {target!r}: cannot join the Ray cluster: {err}") from None
        except (ConnectionError, RuntimeError) as err:
            hint = "" if os.environ.get("RAY_AUTH_MODE", "") == "token" else f". {AUTH_HELP}"
            raise ClusterError(f"{source} {target!r}: cannot join the Ray cluster: {err}{hint}") from None
        except ValueError as err:  # the job's own runtime environment (ray job submit) already has py_modules
            raise ClusterError(
                f"{source} {target!r}: Ray refused to add the user's modules to this job's runtime environment "
                f"({' '.join(str(err).split())[:300]}); pass them with the job's own --py-modules and set "
                "ray.ship_code=false"
            ) from None
        address, joined = target, True
    else:
        # address="local": a new cluster here, even where `ray start` (or another program) left a
        # cluster address in Ray's temp folder, which a plain ray.init() would silently join.
        # Its processes listen on every interface (Ray has no loopback-only setting): the token,
        # on by default for a new local instance, is what keeps others out.
        if os.environ.get("RAY_AUTH_MODE", "").strip().lower() == "disabled":
            log.warning(
                "RAY_AUTH_MODE=disabled: the search's Ray instance listens on all network interfaces "
                "without authentication, so anyone who reaches this machine can run code as you while it "
                "runs; unset RAY_AUTH_MODE to keep Ray's token (docs/cluster.md, 'Token authentication')"
            )
        # Ray's head processes die with this process; the agents its raylet starts linger for a
        # minute after a SIGKILL of it (see nas.runtime.workers): a watcher ends them then. It starts
        # first and adopts the processes ray.init starts, so a kill while Ray starts is covered too.
        reaper = OrphanReaper((), adopt_except=children(os.getpid()))
        try:
            local_env = {**(runtime_env or {}), **({"env_vars": env_vars} if env_vars else {})}
            ray.init(address="local", num_cpus=cfg.num_cpus, logging_level=logging.WARNING,
                     include_dashboard=False, runtime_env=local_env or None)
        except BaseException:
            reaper.stop()
            raise
        address, started = "local", True
    res = ray.cluster_resources()
    nodes = sum(1 for n in ray.nodes() if n.get("Alive"))
    return Cluster(address, float(res.get("CPU", 0)), float(res.get("GPU", 0)), started, joined, nodes, reaper)


def disconnect(cluster: Cluster) -> None:
    """Stop the cluster if :func:`connect` started it; leave it if :func:`connect` joined it."""
    if (cluster.started_here or cluster.joined_here) and ray.is_initialized():
        ray.shutdown()
    if cluster.reaper is not None:
        cluster.reaper.stop()


def check_latency_on_trial_node(
    cfg: LatencyConfig, num_classes: int, space: SearchSpace, resources: dict[str, float]
) -> str:
    """Build the latency estimator once in a Ray task with a trial's ``resources``, where trials run.

    The driver's machine may lack the trials' device (a CPU-only head node driving trials on GPU
    nodes), so on a joined cluster the backend is checked on a trial node instead.

    Returns:
        The name of the device the estimator's figures are for.

    Raises:
        LatencyError: the estimator cannot be built there (unknown option, device not available).
    """
    task = ray.remote(num_cpus=resources["cpu"], num_gpus=resources["gpu"])(_latency_check)
    error, device_name = ray.get(task.remote(cfg, num_classes, space))
    if error is not None:
        raise error
    return str(device_name)


def check_user_code_on_trial_node(refs: dict[str, str], resources: dict[str, float]) -> None:
    """Import the user's functions (setting -> ``module:function``) once in a Ray task with a trial's
    ``resources``, where trials run: a module the nodes cannot import (not sent, a package missing
    there) stops the search before any trial.

    Raises:
        UserCodeError: a function that cannot be imported there (naming the node).
    """
    task = ray.remote(num_cpus=resources["cpu"], num_gpus=resources["gpu"])(_import_check)
    error, node = ray.get(task.remote(refs))
    if error is not None:
        error.add_note(f"on the trial node {node}")
        raise error


def _import_check(refs: dict[str, str]) -> tuple[UserCodeError | None, str]:
    # The error is returned, not raised: a raised error would come back wrapped in Ray's own type.
    node = ray.util.get_node_ip_address()
    try:
        for key, ref in refs.items():
            plugins.load_function(key, ref)
    except UserCodeError as err:
        return err, node
    return None, node


def _latency_check(cfg: LatencyConfig, num_classes: int, space: SearchSpace) -> tuple[LatencyError | None, str]:
    # The error is returned, not raised: a raised error would come back wrapped in Ray's own type.
    try:
        est = latency_estimator(cfg, num_classes, space)
    except LatencyError as err:
        return err, ""
    return None, est.environment().get("device_name", "unknown")


def placement() -> dict[str, str]:
    """Where the calling trial runs: :data:`~nas.core.record.PLACEMENT_TAGS` (Ray node id and IP,
    assigned GPU ids; ``none`` without a GPU).

    Ray shows a trial only the GPUs it assigned (``CUDA_VISIBLE_DEVICES``), as ``cuda:0``,
    ``cuda:1``, ...; the ids here are the node's own numbering of those GPUs.
    """
    rt = ray.get_runtime_context()
    gpus = rt.get_accelerator_ids().get("GPU", [])
    return {
        "ray_node_id": rt.get_node_id(), "ray_node_ip": ray.util.get_node_ip_address(),
        "ray_gpu_ids": ",".join(str(g) for g in gpus) or "none",
    }


def trial_resources(cfg: RayConfig, cluster: Cluster, max_concurrent: int) -> dict[str, float]:
    """CPUs and GPUs per trial (``gpus_per_trial`` None: the cluster's GPUs shared by the
    concurrent trials on a local cluster, none on an existing one).

    Raises:
        ClusterError: a trial asks for more than the whole cluster has (it would wait forever).
    """
    gpus = cfg.gpus_per_trial
    if gpus is None:
        gpus = cluster.gpus / max_concurrent if cluster.started_here and cluster.gpus else 0.0
    if cfg.cpus_per_trial > cluster.cpus:
        raise ClusterError(
            f"ray.cpus_per_trial={cfg.cpus_per_trial:g} but the cluster has {cluster.cpus:g} CPUs; lower it"
        )
    if gpus > cluster.gpus:
        raise ClusterError(f"ray.gpus_per_trial={gpus:g} but the cluster has {cluster.gpus:g} GPUs; lower it")
    return {"cpu": cfg.cpus_per_trial, "gpu": gpus}
