"""Supernet training as a user runs it: the command, killed with SIGKILL mid-training and run again;
and two data-parallel processes started by torchrun with the gloo backend."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from mlflow import MlflowClient

from nas.oneshot.subnet import read_checkpoint

ROOT = Path(__file__).resolve().parents[2]


def _command(out: Path, name: str, epochs: int, train_samples: int) -> list[str]:
    return ["+space=tiny", "data.resolution=16", f"data.max_train_samples={train_samples}", "data.max_val_samples=96",
            f"train.epochs={epochs}", "train.batch_size=32", "train.device=cpu", "random_subnets=1", "bn_batches=2",
            f"output_dir={out}", f"tracking.uri=sqlite:///{out.parent / 'mlflow.db'}", "progress=false", f"name={name}"]


def _env() -> dict[str, str]:
    # One torch thread per process: two processes sharing two cores.
    return {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join(
        p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}


def _history(out: Path) -> dict:  # type: ignore[type-arg]
    path = out / "history.json"
    return json.loads(path.read_text()) if path.is_file() else {"epoch": 0, "history": []}


@pytest.mark.slow
def test_a_killed_training_continues_from_its_last_checkpoint(tmp_path: Path) -> None:
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "nas.supernet", *_command(out, "killed", epochs=3, train_samples=384)]
    proc = subprocess.Popen(cmd, cwd=tmp_path, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    deadline = time.monotonic() + 400
    while _history(out)["epoch"] < 1:
        assert proc.poll() is None, f"training ended early:\n{proc.communicate()[0][-3000:]}"
        assert time.monotonic() < deadline, "no checkpoint after 400 s"
        time.sleep(0.05)
    proc.kill()  # SIGKILL: no handler runs, nothing is tidied up
    proc.communicate()
    assert proc.returncode == -9
    before = _history(out)
    killed_after = before["epoch"]
    assert killed_after < 3, "the training finished before it could be killed"
    assert read_checkpoint(out / "supernet.pt")["epoch"] == killed_after  # the last checkpoint is whole

    again = subprocess.run(cmd, cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert f"resuming from {out / 'supernet.pt'} after epoch {killed_after} of 3" in again.stdout
    assert f"epoch {killed_after + 1}/3" in again.stdout and "epoch 1/3:" not in again.stdout
    after = _history(out)
    assert [r["epoch"] for r in after["history"]] == [1, 2, 3]
    assert after["history"][:killed_after] == before["history"]  # the finished epochs were not trained again
    assert read_checkpoint(out / "supernet.pt")["epoch"] == 3
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    runs = client.search_runs([e.experiment_id for e in client.search_experiments()])
    assert len(runs) == 1 and runs[0].info.run_name == "killed" and runs[0].info.run_id == after["mlflow_run_id"]
    assert [m.step for m in client.get_metric_history(runs[0].info.run_id, "loss_largest")] == [1, 2, 3]


@pytest.mark.slow
def test_two_gloo_processes_train_one_supernet_data_parallel(tmp_path: Path) -> None:
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "-m", "nas.supernet",
           *_command(out, "ddp", epochs=2, train_samples=256), "distributed.backend=gloo"]
    proc = subprocess.run(cmd, cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "2 process(es) x 32 images x 4 steps per epoch" in proc.stdout  # each process a half of each step
    history = _history(out)
    assert history["world_size"] == 2
    assert [r["images"] for r in history["history"]] == [256, 256]  # every training image once per epoch
    payload = read_checkpoint(out / "supernet.pt")
    assert payload["world_size"] == 2 and payload["settings"]["world_size"] == 2 and payload["epoch"] == 2
    assert proc.stdout.count("Supernet ddp:") == 1  # one process writes and records
