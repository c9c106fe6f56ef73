"""The package: a wheel built from the repository installs into a clean virtual environment and runs
the README's search from an empty folder, with nothing of the checkout on its path."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("search_spaces", "latency_predictor", "nas")


def _listed_packages() -> set[str]:
    return set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])


def test_every_package_of_the_tree_is_listed_for_the_wheel() -> None:
    on_disk = {
        ".".join(p.parent.relative_to(ROOT).parts) for top in PACKAGES for p in (ROOT / top).rglob("__init__.py")
    }
    missing = sorted(on_disk - _listed_packages())
    assert not missing, f"packages missing from pyproject.toml: {missing}"


def _run(cmd: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(cmd, capture_output=True, text=True, **kw)  # type: ignore[call-overload]
    tail = f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    assert proc.returncode == 0, f"{' '.join(cmd)} exited {proc.returncode}:\n{tail}"
    return proc


@pytest.mark.slow
@pytest.mark.timeout(1800)  # a wheel, a venv, two installs and a search: about 4 minutes, longer on a busy machine
def test_the_wheel_installs_into_a_clean_venv_and_searches_from_an_empty_folder(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", str(ROOT), "-w", str(dist)])
    wheel = next(dist.glob("latnas-*.whl"))
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {"nas/conf/config.yaml", "nas/conf/latency/onnxruntime.yaml", "search_spaces/spaces/mobile.yaml"} <= names
    assert not any(n.startswith(("benchmarks/", "tests/")) for n in names)

    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", str(venv)])  # no system site-packages: nothing of this environment
    py = str(venv / "bin" / "python")
    import torch

    # The torch this machine has (a CPU build where there is no GPU), then the wheel and its dependencies.
    _run([py, "-m", "pip", "install", "-q", "--disable-pip-version-check", f"torch=={torch.__version__}"])
    _run([py, "-m", "pip", "install", "-q", "--disable-pip-version-check", f"{wheel}[cpu]"])

    empty = tmp_path / "elsewhere"
    empty.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "RAY_ADDRESS")}
    where = _run([py, "-c", "import nas, search_spaces; print(nas.__file__); print(search_spaces.__file__)"],
                 cwd=empty, env=env).stdout.split()
    assert all(path.startswith(str(venv)) for path in where), where
    # The README's search, made small: the same command, the built-in data, from the empty folder.
    proc = _run([py, "-m", "nas.search", "+space=mobile", "target_ms=50", "search.n_trials=2", "train.epochs=1",
                 "data.max_train_samples=200", "data.max_val_samples=100", "latency.input_shape=[1,3,64,64]",
                 "progress=false"], cwd=empty, env=env, timeout=600)
    assert "Search mobile-50ms-" in proc.stdout and "Best: " in proc.stdout
    assert (empty / ".latnas" / "mlflow.db").is_file()  # the project home, in the folder it ran from
