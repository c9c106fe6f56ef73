"""Every Python snippet in README.md and docs/*.md runs as written, in a fresh folder.

The snippets are read from the documents themselves (```python fences), so a snippet edited into
something that fails fails here. A snippet that loads ``mobile-cpu.json`` gets the file the
README's own ``collect`` and ``train`` commands make (fewer architectures, a shorter protocol).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"```python\n(.*?)```", re.S)


def _snippets() -> list[tuple[str, str]]:
    out = []
    for doc in DOCS:
        text = doc.read_text()
        for m in FENCE.finditer(text):
            line = text[: m.start()].count("\n") + 1
            out.append((f"{doc.name}:{line}", m.group(1)))
    return out


SNIPPETS = _snippets()


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "LATNAS_HOME")}
    env["PYTHONPATH"] = str(ROOT)
    return env


def _run(args: list[str], cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(args, cwd=cwd, env=_env(), capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"{args}\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
    return proc


def test_the_documents_have_python_snippets() -> None:
    assert len(SNIPPETS) >= 3, [where for where, _ in SNIPPETS]


def _param(where: str, code: str) -> object:
    # a snippet that times a full-size network takes tens of seconds: it runs in the slow set, and in CI
    heavy = ".measure(" in code
    # a snippet that runs a search (the Python API) runs in the slow set; CI runs that path in
    # tests/nas/test_custom_search.py
    marks = [pytest.mark.slow] if "from nas.api import search" in code else (
        [pytest.mark.slow, pytest.mark.ci] if heavy else [])
    return pytest.param(where, code, id=where, marks=marks)


@pytest.mark.parametrize("where,code", [_param(w, c) for w, c in SNIPPETS if "mobile-cpu.json" not in c])
def test_a_snippet_runs_as_written_in_a_fresh_folder(where: str, code: str, tmp_path: Path) -> None:
    # As a file, as a reader saves and runs it (a search's trials import the file for its functions).
    (tmp_path / "snippet.py").write_text(code)
    _run([sys.executable, "snippet.py"], cwd=tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("where,code", [s for s in SNIPPETS if "mobile-cpu.json" in s[1]],
                         ids=[w for w, c in SNIPPETS if "mobile-cpu.json" in c])
def test_the_predictor_snippet_loads_what_the_readmes_commands_make(where: str, code: str, tmp_path: Path) -> None:
    readme = (ROOT / "README.md").read_text()
    # The README's commands, taken from it, with fewer architectures and a shorter protocol.
    collect = re.search(r"python -m latency_predictor\.collect (\+space=mobile latency=onnxruntime n=300 "
                        r"num_classes=10 out=data/mobile-cpu)", readme)
    train = re.search(r"python -m latency_predictor\.train (data=data/mobile-cpu out=mobile-cpu\.json)", readme)
    assert collect and train, "the README's collect/train commands changed: update this test with them"
    args = collect.group(1).replace("n=300", "n=12").split()
    _run([sys.executable, "-m", "latency_predictor.collect", *args, "--min-runs", "10", "--min-time-s", "0.05",
          "--max-time-s", "0.3", "--warmup-runs", "2", "--no-progress"], cwd=tmp_path, timeout=900)
    _run([sys.executable, "-m", "latency_predictor.train", *train.group(1).split()], cwd=tmp_path)
    _run([sys.executable, "-c", code], cwd=tmp_path)
