"""Ray's token authentication, as a search meets it (docs/cluster.md, "Token authentication").

A real head node started with ``ray start --head`` and token authentication on (in its own
home folder, so no token of this machine's user leaks in), a real search refused by it with
the cause named and nothing recorded, the documented ``ray job submit`` with the token that
runs a real search on it, and a local search's Ray instance that refuses a client without its
token (its ports listen on every interface: the token is what keeps others out).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from mlflow import MlflowClient

pytestmark = pytest.mark.slow  # real head nodes, real searches in other processes

REPO = Path(__file__).resolve().parents[2]
SEARCH = [
    "+space=tiny", "target_ms=5", "search.n_trials=2", "data.max_train_samples=128", "data.max_val_samples=64",
    "train.epochs=1", "latency.input_shape=[1,3,64,64]", "latency.measure.min_runs=10",
    "latency.measure.min_time_s=0.05", "latency.measure.max_time_s=0.5", "latency.measure.max_repeats=1",
    "ray.cpus_per_trial=1", "progress=false",
]
# Asks a GCS once, as the search's own check does; prints what Ray answered.
PROBE = """
import sys
from ray._raylet import InnerGcsClient
from ray.exceptions import AuthenticationError
try:
    InnerGcsClient.standalone(sys.argv[1], None, 5000)
except AuthenticationError as err:
    print("REFUSED", err)
else:
    print("ACCEPTED")
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _env(home: Path, **extra: str) -> dict[str, str]:
    """This environment without any Ray token or address, with ``home`` as the home folder."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH") and k != "RAY_ADDRESS"}
    home.mkdir(parents=True, exist_ok=True)
    env.update(HOME=str(home), PYTHONPATH=str(REPO), **extra)
    return env


@dataclass(frozen=True)
class Head:
    """A head node with token authentication: its GCS address, Jobs API address and token."""

    gcs: str
    jobs: str
    token: str


@pytest.fixture(scope="module")
def head(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Head]:
    home = tmp_path_factory.mktemp("head-home")
    token = secrets.token_hex(32)
    port, dash = _free_port(), _free_port()
    env = _env(home, RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=token)
    # --block keeps `ray start` in the foreground, and stopping it stops this head's processes
    # only (`ray stop` would stop every Ray instance on the machine). Every port is a free one: with
    # Ray's default agent port (52365) taken by another Ray instance on this machine, the head's
    # dashboard agent cannot serve and `ray job submit` is refused with "No available agent".
    proc = subprocess.Popen(
        ["ray", "start", "--head", "--block", f"--port={port}", "--num-cpus=2", "--num-gpus=0",
         "--include-dashboard=true", "--dashboard-host=127.0.0.1", f"--dashboard-port={dash}",
         f"--ray-client-server-port={_free_port()}", f"--dashboard-agent-listen-port={_free_port()}",
         f"--dashboard-agent-grpc-port={_free_port()}", f"--metrics-export-port={_free_port()}",
         "--disable-usage-stats"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 180
        ready = False
        while time.monotonic() < deadline and proc.poll() is None:
            probe = subprocess.run(
                [sys.executable, "-c", PROBE, f"127.0.0.1:{port}"], env=env, capture_output=True, text=True,
                timeout=60,
            )
            jobs_up = subprocess.run(
                ["ray", "job", "list", "--address", f"http://127.0.0.1:{dash}"], env=env, capture_output=True,
                text=True, timeout=60,
            )
            if "ACCEPTED" in probe.stdout and jobs_up.returncode == 0:
                ready = True
                break
            time.sleep(2)
        if not ready:
            proc.kill()
            pytest.fail(f"the head node did not start:\n{proc.stdout.read() if proc.stdout else ''}")
        yield Head(f"127.0.0.1:{port}", f"http://127.0.0.1:{dash}", token)
    finally:
        if proc.poll() is None:  # nothing of this head is kept: a short grace, then the whole group
            os.killpg(proc.pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)


def _runs(db: Path) -> list:
    client = MlflowClient(f"sqlite:///{db}")
    return [r for e in client.search_experiments() for r in client.search_runs([e.experiment_id])]


@pytest.mark.ci
def test_a_search_without_the_clusters_token_stops_at_once_naming_the_cause(head: Head, tmp_path: Path) -> None:
    db = tmp_path / "mlflow.db"
    proc = subprocess.run(
        [sys.executable, "-m", "nas.search", *SEARCH, f"ray.address={head.gcs}", f"tracking.uri=sqlite:///{db}",
         f"output_dir={tmp_path / 'out'}"],
        cwd=tmp_path, env=_env(tmp_path / "home"), capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 2, proc.stderr[-3000:]
    err = proc.stderr
    assert "refused this process's authentication token" in err and "InvalidAuthToken" in err, err[-3000:]
    assert "RAY_AUTH_MODE=token" in err and "ray get-auth-token" in err
    assert "Traceback" not in err
    # Refused before anything was created: no store, no output folder.
    assert not db.exists() and not (tmp_path / "out").exists()


def test_the_clusters_check_accepts_the_right_token(head: Head, tmp_path: Path) -> None:
    # The check's other side: with the token, the same address passes (no false refusals).
    probe = subprocess.run(
        [sys.executable, "-c", "import sys; from nas.adapters.ray_cluster import check_cluster; "
         "from nas.core.config import RayConfig; check_cluster(RayConfig(address=sys.argv[1])); print('OK')",
         head.gcs],
        env=_env(tmp_path / "home", RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=head.token), capture_output=True,
        text=True, timeout=120,
    )
    assert probe.stdout.strip().endswith("OK"), probe.stderr[-2000:]


def test_the_documented_job_submit_runs_a_search_on_the_token_cluster(head: Head, tmp_path: Path) -> None:
    db = tmp_path / "mlflow.db"
    out = tmp_path / "out"
    # docs/cluster.md: `ray job submit --address http://<head>:8265 --working-dir . -- python -m nas.search ...`
    # with RAY_AUTH_MODE=token and the token in the submitting shell, run from the checkout.
    # Right after `ray start` the head's job agent may not be up yet; Ray then says to try again later.
    deadline = time.monotonic() + 120
    while True:
        proc = subprocess.run(
            ["ray", "job", "submit", "--address", head.jobs, "--working-dir", ".", "--",
             "python", "-m", "nas.search", *SEARCH, "name=submitted", f"tracking.uri=sqlite:///{db}",
             f"output_dir={out}"],
            cwd=REPO, env=_env(tmp_path / "home", RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=head.token),
            capture_output=True, text=True, timeout=900,
        )
        if "No available agent to submit job" not in proc.stderr or time.monotonic() > deadline:
            break
        time.sleep(3)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "Search submitted" in proc.stdout and "Best: " in proc.stdout, proc.stdout[-4000:]
    runs = _runs(db)
    parent = next(r for r in runs if r.info.run_name == "submitted")
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
    assert parent.info.status == "FINISHED" and len(children) == 2
    assert parent.data.tags["ray_address"] not in ("local", "existing")  # it joined the head, via $RAY_ADDRESS
    assert (out / "search.log").is_file()


def test_job_submit_without_the_token_is_refused(head: Head, tmp_path: Path) -> None:
    proc = subprocess.run(
        ["ray", "job", "submit", "--address", head.jobs, "--", "python", "-c", "print('ran')"],
        cwd=tmp_path, env=_env(tmp_path / "home"), capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode != 0 and "ran" not in proc.stdout


def test_a_local_searchs_ray_refuses_clients_without_its_token(tmp_path: Path) -> None:
    # The Ray instance a local search starts, through the search's own adapter, in its own home.
    home = tmp_path / "searcher"
    script = (
        "import sys; from nas.adapters.ray_cluster import connect, disconnect; from nas.core.config import RayConfig; "
        "import ray; c = connect(RayConfig(num_cpus=1)); print('GCS', ray.get_runtime_context().gcs_address, "
        "flush=True); sys.stdin.readline(); disconnect(c)"
    )
    searcher = subprocess.Popen(
        [sys.executable, "-c", script], env=_env(home), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL, text=True,
    )
    try:
        assert searcher.stdout is not None and searcher.stdin is not None
        line = searcher.stdout.readline()
        assert line.startswith("GCS "), line
        gcs = line.split()[1]
        token = (home / ".ray" / "auth_token").read_text().strip()  # Ray made one for the user

        def probe(**extra: str) -> str:
            return subprocess.run(
                [sys.executable, "-c", PROBE, gcs], env=_env(tmp_path / "other", **extra), capture_output=True,
                text=True, timeout=120,
            ).stdout

        assert "REFUSED" in probe()  # another user, no token
        assert "REFUSED" in probe(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=secrets.token_hex(32))  # a wrong token
        assert "ACCEPTED" in probe(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=token)  # the user's own token
        searcher.stdin.write("\n")
        searcher.stdin.flush()
        assert searcher.wait(timeout=120) == 0
    finally:
        if searcher.poll() is None:
            searcher.kill()


def test_a_local_search_with_authentication_disabled_warns(tmp_path: Path) -> None:
    script = (
        "import logging; logging.basicConfig(); from nas.adapters.ray_cluster import connect, disconnect; "
        "from nas.core.config import RayConfig; disconnect(connect(RayConfig(num_cpus=1)))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], env=_env(tmp_path / "home", RAY_AUTH_MODE="disabled"), capture_output=True,
        text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "RAY_AUTH_MODE=disabled" in proc.stderr and "listens on all network interfaces" in proc.stderr
