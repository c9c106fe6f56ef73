"""Searches with the user's own evaluator and data on real Ray clusters: the Python API, the examples
as a user runs them, and the user's module sent to a second node that cannot see the folder it is in.

* the API's search on the session's local cluster, with a candidate the evaluator raises on:
  that candidate FAILS with the reason and the search goes on;
* ``examples/cifar10_custom_loop`` (its own training loop on CIFAR-10 images: an archive made here,
  or the real one when ``$LATNAS_CIFAR10`` points at it) and ``examples/segmentation`` (a dense
  prediction head on ``features_only`` backbones), each run as its script, at a tiny size;
* a 2-node cluster started with ``ray start`` (head, then a second node with ``--address``), and
  ``python -m nas.search`` started from a folder that alone holds the example's modules: where the
  machine allows it (a private mount namespace), that folder is hidden from the second node, so its
  trials can only run the copy the search sent; and on that cluster, a SIGTERM while a trial node is still
  being checked (before the first trial), which stops the search as Ctrl-C would and records nothing.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
import time
import warnings
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from mlflow import MlflowClient
from mlflow.entities import Run

from nas.core.record import COMPLETED, FAILED
from search_spaces import load_space

pytestmark = pytest.mark.slow  # real Ray clusters and real searches

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
MODULE = "tests.nas.user_code"
QUICK_LATENCY = [
    "latency.measure.min_runs=10", "latency.measure.min_time_s=0.05", "latency.measure.max_time_s=0.5",
    "latency.measure.max_repeats=1", "latency.final_pass_top_k=0",
]


def _children(db: Path, parent_name: str) -> tuple[Run, list[Run]]:
    client = MlflowClient(f"sqlite:///{db}")
    runs = [r for e in client.search_experiments() for r in client.search_runs([e.experiment_id])]
    parent = next(r for r in runs if r.info.run_name == parent_name)
    return parent, [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]


def _env(home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH") and k not in ("RAY_ADDRESS",
                                                                                              "LATNAS_HOME")}
    home.mkdir(parents=True, exist_ok=True)
    env.update(HOME=str(home), PYTHONPATH=str(REPO), **extra)
    return env


@pytest.mark.usefixtures("ray_cluster")
def test_an_api_search_goes_on_past_a_candidate_the_evaluator_fails_on(tmp_path: Path) -> None:
    from nas.api import search

    space = load_space("tiny")
    small, large = space.extremes()[0], space.extremes()[-1]
    result = search(
        "tiny", 1.0, evaluator=f"{MODULE}:fit_small_only", data=f"{MODULE}:regression",
        data_options={"n_train": 32, "n_val": 16}, evaluator_options={"lr": 0.01},
        overrides=["latency.input_shape=[1,1,32,32]", "train.epochs=1", "search.n_trials=2", "search.max_concurrent=2",
                   f"search.start=[{small.encode()},{large.encode()}]", "progress=false", *QUICK_LATENCY],
        name="api", output_dir=tmp_path / "out", tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}",
    )
    assert result.status == "FINISHED" and len(result.candidates) == 2
    by_arch = {c.arch: c for c in result.candidates}
    assert by_arch[large.encode()].status == FAILED
    assert by_arch[large.encode()].tags["failure_type"] == "UserCodeError"
    assert "raised ValueError: this head does not fit a network that large" in by_arch[
        large.encode()].tags["failure_reason"]
    assert by_arch[small.encode()].status == COMPLETED
    assert [row["arch"] for row in result.leaderboard][:1] == [result.best.arch if result.best else None]

    parent, children = _children(tmp_path / "mlflow.db", "api")
    assert parent.info.status == "FINISHED" and parent.data.params["accuracy.fn"] == f"{MODULE}:fit_small_only"
    assert parent.data.params["data.fn"] == f"{MODULE}:regression"
    assert parent.data.tags["accuracy_estimator"] == "custom"
    done = [c for c in children if c.data.tags["status"] == COMPLETED]
    assert len(done) == 1 and len(children) == 2
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    for child in done:
        m = child.data.metrics
        assert m["accuracy"] == pytest.approx(1 / (1 + m["val_mse"]), rel=1e-3) and m["train_items"] == 32
        assert [h.step for h in client.get_metric_history(child.info.run_id, "val_mse")] == [1]


@pytest.mark.usefixtures("ray_cluster")
def test_a_custom_search_resumes_with_its_evaluator_and_keeps_what_it_recorded(tmp_path: Path) -> None:
    from nas.api import search

    space = load_space("tiny")
    small = space.extremes()[0]
    common = dict(evaluator=f"{MODULE}:fit_regression", data=f"{MODULE}:regression",
                  data_options={"n_train": 32, "n_val": 16}, name="custom-resume", output_dir=tmp_path / "out",
                  tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    quick = ["latency.input_shape=[1,1,32,32]", "train.epochs=1", "search.max_concurrent=1", "progress=false",
             f"search.start=[{small.encode()}]", *QUICK_LATENCY]
    first = search("tiny", 1.0, overrides=[*quick, "search.n_trials=1"], **common)
    assert first.status == "FINISHED" and len(first.candidates) == 1
    (kept,) = first.candidates
    resumed = search("tiny", 1.0, overrides=[*quick, "search.n_trials=3", "resume=true"], **common)
    assert resumed.status == "FINISHED" and len(resumed.candidates) == 3
    assert sum(c.arch == small.encode() for c in resumed.candidates) == 1  # not evaluated again
    parent, children = _children(tmp_path / "mlflow.db", "custom-resume")
    assert parent.data.tags["resume_count"] == "1" and parent.data.params["accuracy.fn"] == f"{MODULE}:fit_regression"
    assert len(children) == 3 and str(kept.run_id) in {c.info.run_id for c in children}
    for child in children:  # each scored by the user's evaluator, the resumed ones too
        m = child.data.metrics
        assert child.data.tags["status"] == COMPLETED and child.data.tags["accuracy_estimator"] == "custom"
        assert m["accuracy"] == pytest.approx(1 / (1 + m["val_mse"]), rel=1e-3) and m["train_items"] == 32


def _fake_cifar(folder: Path) -> Path:
    """A CIFAR-10-like archive: ``train/<class>/<n>.jpg``, 32x32, two classes a network can tell apart."""
    from PIL import Image

    rng = np.random.default_rng(0)
    root = folder / "images" / "train"
    for k, cls in enumerate(("airplane", "frog")):
        (root / cls).mkdir(parents=True)
        for i in range(40):
            img = rng.integers(0, 80, (32, 32, 3), dtype=np.uint8)
            img[..., k] += np.uint8(150)
            Image.fromarray(img).save(root / cls / f"{i:04d}.jpg")
    archive = folder / "cifar10-train-jpeg.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(root, arcname="train")
    return archive


def _script(example: str, script: str, args: list[str], cwd: Path, timeout: float = 600) -> str:
    proc = subprocess.run([sys.executable, str(EXAMPLES / example / script), *args], cwd=cwd,
                          env=_env(cwd / "home"), capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc.stdout


@pytest.mark.ci
def test_the_cifar10_custom_loop_example_runs_as_written(tmp_path: Path) -> None:
    real = os.environ.get("LATNAS_CIFAR10")
    archive = Path(real) if real and Path(real).is_file() else _fake_cifar(tmp_path)
    out = _script("cifar10_custom_loop", "search_cifar10.py", [
        "--archive", str(archive), "--trials", "2", "--epochs", "1", "--train-samples", "48", "--val-samples", "16",
        "--batch-size", "16", "--name", "cifar", "--output-dir", str(tmp_path / "out"),
        "--tracking-uri", f"sqlite:///{tmp_path / 'mlflow.db'}", "--set", f"data.cache_dir={tmp_path / 'cache'}",
        "--set", "search.max_concurrent=1", "--set", "ray.num_cpus=1", *(f"--set={o}" for o in QUICK_LATENCY),
    ], tmp_path)
    assert "best: " in out and "sending cifar_loop.py to the trials" in out + _log(tmp_path)
    parent, children = _children(tmp_path / "mlflow.db", "cifar")
    assert parent.info.status == "FINISHED" and parent.data.tags["dataset"] == "cifar10_jpeg"
    assert len(children) == 2 and all(c.data.tags["status"] == COMPLETED for c in children)
    assert all(0 <= c.data.metrics["accuracy"] <= 1 and c.data.metrics["val_loss"] > 0 for c in children)


def _log(tmp_path: Path) -> str:
    log = tmp_path / "out" / "search.log"
    return log.read_text() if log.is_file() else ""


@pytest.mark.ci
def test_the_segmentation_example_runs_as_written(tmp_path: Path) -> None:
    out = _script("segmentation", "search_segmentation.py", [
        "--trials", "2", "--epochs", "2", "--n-train", "64", "--n-val", "32", "--batch-size", "8", "--lr", "0.01",
        "--name", "seg", "--output-dir", str(tmp_path / "out"), "--tracking-uri", f"sqlite:///{tmp_path / 'mlflow.db'}",
        "--set", "search.max_concurrent=1", "--set", "ray.num_cpus=1", *(f"--set={o}" for o in QUICK_LATENCY),
    ], tmp_path)
    assert "best: " in out
    parent, children = _children(tmp_path / "mlflow.db", "seg")
    assert parent.info.status == "FINISHED" and parent.data.params["space"] == "seg_tiny"
    assert len(children) == 2 and all(c.data.tags["status"] == COMPLETED for c in children)
    for child in children:
        m = child.data.metrics
        assert 0 <= m["accuracy"] <= 1 and m["val_bce"] > 0 and m["head_params"] > 0


# ---------------------------------------------------------------------- two nodes started with `ray start`


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _hiding_prefix(folder: Path) -> list[str] | None:
    """A command prefix that runs a command in a private mount namespace where ``folder`` is an empty
    tmpfs (None where this machine does not allow it: no ``unshare``, no privilege)."""
    if shutil.which("unshare") is None:
        return None
    for flags in (["-m"], ["-r", "-m"]):
        prefix = ["unshare", *flags, "--propagation", "private", "sh", "-c",
                  f'mount -t tmpfs tmpfs "{folder}" && exec "$0" "$@"']
        probe = subprocess.run([*prefix, "sh", "-c", f'test -z "$(ls -A "{folder}")"'], capture_output=True,
                               timeout=30)
        if probe.returncode == 0:
            return prefix
    return None


def _stop(*procs: subprocess.Popen[str]) -> None:
    # `ray start --block` in a session of its own: its process group is that node's processes, and only those.
    # Every node is told at once and given 3 s; then its group is killed (a node's graceful stop here took
    # longer than 10 s, so the kill was what ended it anyway).
    running = [p for p in procs if p.poll() is None]
    for proc in running:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + 3
    for proc in running:
        try:
            proc.wait(timeout=max(deadline - time.monotonic(), 0.1))
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)


def _gcs_up(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


@pytest.fixture
def user_folder(tmp_path: Path) -> Path:
    """A folder holding the segmentation example's modules and space, and a probe that says which copy of
    them a trial imported: the folder's own, or the copy the search sent.

    In a trial the probe also waits (up to a minute) until two trial processes have reached it, each
    leaving its mark in a folder beside the user's that every node sees (the search's own check of
    ``accuracy.fn``, in the driver before any trial, leaves the first and does not wait): with one CPU
    per node, the first two trials then run on different nodes at once, however fast a trial ends on a
    loaded or an idle machine. The search must run without the measurement slot, which a held trial
    would hold."""
    folder = tmp_path / "work"
    marks = tmp_path / "trials-started"
    marks.mkdir()
    shutil.copytree(EXAMPLES / "segmentation", folder, ignore=shutil.ignore_patterns("__pycache__"))
    (folder / "probe.py").write_text(
        "import os\nimport time\n\nimport shapes\n\n\n"
        "def evaluate(model, context):\n"
        f"    marks = {str(marks)!r}\n"
        "    check = not os.listdir(marks)  # the search's check of accuracy.fn, in its driver, comes first\n"
        "    open(os.path.join(marks, str(os.getpid())), 'w').close()\n"
        "    deadline = time.monotonic() + 60\n"
        "    while not check and len(os.listdir(marks)) < 3 and time.monotonic() < deadline:\n"
        "        time.sleep(0.2)\n"
        "    out = shapes.evaluate(model, context)\n"
        f"    out['sent_copy'] = float(not os.path.realpath(shapes.__file__).startswith({str(folder.resolve())!r}))\n"
        "    return out\n"
    )
    return folder


@pytest.fixture
def two_nodes(tmp_path: Path, user_folder: Path) -> Iterator[tuple[str, dict[str, str], bool]]:
    """A head node and a second node (1 CPU each) started with ``ray start``; the second one in a mount
    namespace where ``user_folder`` is empty, where that is possible. Yields the head's address, the
    environment to join it with, and whether the folder is hidden from the second node."""
    env = _env(tmp_path / "home", RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=secrets.token_hex(32))
    port = _free_port()

    def node_args() -> list[str]:
        # Each node its own free ports: Ray's defaults may be taken by another Ray instance on this machine.
        return ["--block", "--num-cpus=1", "--num-gpus=0", "--disable-usage-stats",
                f"--metrics-export-port={_free_port()}", f"--dashboard-agent-listen-port={_free_port()}",
                f"--dashboard-agent-grpc-port={_free_port()}", f"--runtime-env-agent-port={_free_port()}"]

    head = subprocess.Popen(["ray", "start", "--head", f"--port={port}", "--include-dashboard=false",
                             f"--ray-client-server-port={_free_port()}", *node_args()], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    prefix = _hiding_prefix(user_folder)
    if prefix is None:
        warnings.warn("this machine cannot hide a folder from one Ray node (no private mount namespace): the test "
                      "checks that both nodes ran the user's code, not that the second one had only the copy sent",
                      stacklevel=1)
    node = None
    try:
        address = f"127.0.0.1:{port}"
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and head.poll() is None:
            if _gcs_up(port):
                break
            time.sleep(0.5)
        else:
            pytest.fail(f"the head node did not start:\n{head.stdout.read() if head.stdout else ''}")
        # Ray gives a starting node a fixed 30 s to register with the head; a loaded machine can miss that,
        # and the node's `ray start` then exits: start it again (what is left of the failed one killed first).
        deadline = time.monotonic() + 240
        joined = False
        for _attempt in range(3):
            if node is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(node.pid, signal.SIGKILL)
            node = subprocess.Popen([*(prefix or []), "ray", "start", f"--address={address}", *node_args()],
                                    cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                    start_new_session=True)
            while time.monotonic() < deadline and node.poll() is None:
                status = subprocess.run(["ray", "status", f"--address={address}"], env=env, capture_output=True,
                                        text=True, timeout=60)
                if status.stdout.count("node_") >= 2:
                    joined = True
                    break
                time.sleep(2)
            if joined or time.monotonic() >= deadline:
                break
        if not joined:
            pytest.fail(f"the second node did not join:\n{node.stdout.read() if node.stdout else ''}")
        yield address, env, prefix is not None
    finally:
        _stop(*(p for p in (node, head) if p is not None))


# In CI's set: the one test there of a cluster of two nodes started with `ray start` (trials spread over
# both, each recording its node), and of the user's module reaching a node that never saw its folder.
@pytest.mark.ci
def test_the_users_module_reaches_a_node_that_cannot_see_its_folder(
        tmp_path: Path, user_folder: Path, two_nodes: tuple[str, dict[str, str], bool]) -> None:
    address, env, hidden = two_nodes
    db = tmp_path / "mlflow.db"
    proc = subprocess.run(
        [sys.executable, "-m", "nas.search", f"hydra.searchpath=[file://{user_folder}]", "+space=seg_tiny",
         "target_ms=1", "latency.input_shape=[1,3,32,32]", "data=custom", "data.fn=shapes:datasets",
         "+data.options.n_train=32", "+data.options.n_val=16", "accuracy=custom", "accuracy.fn=probe:evaluate",
         "+accuracy.options.batch_size=8", "train.epochs=1", "search.n_trials=4", "search.max_concurrent=2",
         "ray.cpus_per_trial=1", f"ray.address={address}", "name=two-nodes", f"tracking.uri=sqlite:///{db}",
         # The probe holds a trial until a second one reaches it; with the measurement slot the held trial
         # would keep the other's latency measurement waiting (both nodes are this machine's processes).
         "+latency.options.slot=false",
         f"output_dir={tmp_path / 'out'}", "progress=false", *QUICK_LATENCY],
        cwd=user_folder, env=env, capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "sending probe.py, shapes.py to the trials" in proc.stderr + _log(tmp_path)
    parent, children = _children(db, "two-nodes")
    assert parent.info.status == "FINISHED" and parent.data.tags["ray_nodes"] == "2"
    assert len(children) == 4 and all(c.data.tags["status"] == COMPLETED for c in children), [
        c.data.tags.get("failure_reason") for c in children]
    copies: dict[str, set[float]] = {}
    for child in children:
        copies.setdefault(child.data.tags["ray_node_id"], set()).add(child.data.metrics["sent_copy"])
    # one CPU per node, and the probe holds the first trial until a second one has started: on the other node
    assert len(copies) == 2, copies
    if hidden:
        # The head sees the folder (the search started there); the other node saw only the copy sent.
        assert sorted(copies.values(), key=sorted) == [{0.0}, {1.0}], copies


def test_a_sigterm_while_a_trial_node_is_checked_stops_the_search_before_it_begins(
        tmp_path: Path, user_folder: Path, two_nodes: tuple[str, dict[str, str], bool]) -> None:
    """A scheduler's SIGTERM after Ray has started but before the first trial (here while a trial node
    imports the user's module, which takes its time) is a Ctrl-C as it is later: status 130, a line that
    says nothing was recorded, and no folder or run left behind; not ray.init's own handler's silent exit."""
    address, env, _hidden = two_nodes
    marks = tmp_path / "imports"
    marks.mkdir()
    (user_folder / "slow_import.py").write_text(
        "import os\nimport time\n\nfrom shapes import evaluate  # noqa: F401\n\n"
        f"_MARKS = {str(marks)!r}\n"
        "if os.listdir(_MARKS):  # the driver imported it first: this is the check on a trial node\n"
        "    open(os.path.join(_MARKS, 'node'), 'w').close()\n"
        "    time.sleep(120)\n"
        "else:\n"
        "    open(os.path.join(_MARKS, 'driver'), 'w').close()\n"
    )
    db, out, log = tmp_path / "mlflow.db", tmp_path / "out", tmp_path / "driver.log"
    with log.open("w") as sink:  # a file, not a pipe: the driver never blocks on output no one reads yet
        proc = subprocess.Popen(
            [sys.executable, "-m", "nas.search", f"hydra.searchpath=[file://{user_folder}]", "+space=seg_tiny",
             "target_ms=1", "latency.input_shape=[1,3,32,32]", "data=custom", "data.fn=shapes:datasets",
             "+data.options.n_train=32", "+data.options.n_val=16", "accuracy=custom",
             "accuracy.fn=slow_import:evaluate", "+accuracy.options.batch_size=8", "train.epochs=1",
             "search.n_trials=2", "ray.cpus_per_trial=1", f"ray.address={address}", "name=stopped-early",
             f"tracking.uri=sqlite:///{db}", f"output_dir={out}", "progress=false", *QUICK_LATENCY],
            cwd=user_folder, env=env, stdout=sink, stderr=subprocess.STDOUT, text=True,
        )
    try:
        deadline = time.monotonic() + 300
        while not (marks / "node").exists():
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    output = log.read_text()
    assert proc.returncode == 130, output[-3000:]
    assert "search stopped-early: interrupted before the search began; nothing was recorded" in output
    assert not out.exists()
    client = MlflowClient(f"sqlite:///{db}")
    assert not [r for e in client.search_experiments() for r in client.search_runs([e.experiment_id])]
