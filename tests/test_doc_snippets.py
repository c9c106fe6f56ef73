"""The documents say what the code does: every Python snippet in README.md and docs/*.md runs as
written, in a fresh folder, and the names and links they cite exist.

The snippets are read from the documents themselves (```python fences), so a snippet edited into
something that fails fails here. A snippet that loads ``mobile-cpu.json`` gets the file the
``collect`` and ``train`` commands of docs/predictor.md make (fewer architectures, a shorter
protocol). Links between the pages under docs/ are checked by the strict MkDocs build
(scripts/test.sh); the README's links, and the modules, files and tests every document names, here.
"""

from __future__ import annotations

import importlib
import importlib.util
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
def test_the_predictor_snippet_loads_what_the_pages_commands_make(where: str, code: str, tmp_path: Path) -> None:
    page = (ROOT / "docs" / "predictor.md").read_text()
    # The page's commands, taken from it, with fewer architectures and a shorter protocol.
    collect = re.search(r"python -m latency_predictor\.collect (\+space=mobile latency=onnxruntime n=300 "
                        r"num_classes=10 out=data/mobile-cpu)", page)
    train = re.search(r"python -m latency_predictor\.train (data=data/mobile-cpu out=mobile-cpu\.json)", page)
    assert collect and train, "docs/predictor.md's collect/train commands changed: update this test with them"
    args = collect.group(1).replace("n=300", "n=12").split()
    _run([sys.executable, "-m", "latency_predictor.collect", *args, "--min-runs", "10", "--min-time-s", "0.05",
          "--max-time-s", "0.3", "--warmup-runs", "2", "--no-progress"], cwd=tmp_path, timeout=900)
    _run([sys.executable, "-m", "latency_predictor.train", *train.group(1).split()], cwd=tmp_path)
    _run([sys.executable, "-c", code], cwd=tmp_path)


# --- names and links ---------------------------------------------------------------------------

TEXTS = [*DOCS, ROOT / "BENCHMARKS.md", *sorted((ROOT / "docs" / "benchmarks").glob("*.md"))]
CODE_SPAN = re.compile(r"`([^`\n]+)`")
DOTTED = re.compile(r"\b((?:search_spaces|latency_predictor|nas|benchmarks)(?:\.[A-Za-z_]\w*)+)")
REPO_PATH = re.compile(r"(?<![\w./<-])((?:search_spaces|latency_predictor|nas|conf|benchmarks|scripts|tests|docs|\.ci)"
                       r"/[\w./*-]*)")
FILE_SUFFIXES = {"md", "py", "json", "jsonl", "yaml", "yml", "csv", "txt", "png", "onnx", "pt", "ts", "sh"}
# Paths the documents name that a checkout does not hold: where the wheel puts conf/, and what a
# benchmark step writes when it runs.
NOT_IN_A_CHECKOUT = {"nas/conf", "benchmarks/cifar10-deploy/"}


def _cited() -> tuple[set[str], set[str]]:
    names: set[str] = set()
    paths: set[str] = set()
    for doc in TEXTS:
        text = doc.read_text()
        for span in CODE_SPAN.findall(text) + re.findall(r"python -m ([\w.]+)", text):
            names.update(n for n in DOTTED.findall(span) if n.rsplit(".", 1)[1] not in FILE_SUFFIXES)
            paths.update(REPO_PATH.findall(span))
    return names, paths


def _resolves(name: str) -> bool:
    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        module = ".".join(parts[:i])
        try:
            if importlib.util.find_spec(module) is None:
                continue
        except ModuleNotFoundError:  # a parent is a module, not a package: the rest are attributes
            continue
        obj: object = importlib.import_module(module)
        for attr in parts[i:]:
            if not hasattr(obj, attr):
                return False
            obj = getattr(obj, attr)
        return True
    return False


def test_every_module_and_name_the_documents_cite_exists() -> None:
    names, _ = _cited()
    assert len(names) > 20, sorted(names)
    stale = sorted(n for n in names if not _resolves(n))
    assert not stale, f"the documents cite modules or names that do not exist: {stale}"


def test_every_repository_path_the_documents_cite_exists() -> None:
    _, paths = _cited()
    assert len(paths) > 20, sorted(paths)
    missing = sorted(p for p in paths - NOT_IN_A_CHECKOUT
                     if not (list(ROOT.glob(p)) if "*" in p else (ROOT / p).exists()))
    assert not missing, f"the documents cite paths that do not exist: {missing}"


CITED_TEST = re.compile(r"`(tests/[\w/]+\.py)::(\w+)")


def _defines(path: Path, name: str) -> bool:
    return path.is_file() and re.search(rf"^def {name}\(", path.read_text(), re.M) is not None


def test_every_test_the_documents_cite_exists() -> None:
    cited = {m.groups() for doc in TEXTS for m in CITED_TEST.finditer(doc.read_text())}
    assert len(cited) >= 10, sorted(cited)
    missing = sorted(f"{path}::{name}" for path, name in cited if not _defines(ROOT / path, name))
    assert not missing, f"the documents cite tests that do not exist: {missing}"


def _github_anchor(heading: str) -> str:
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_the_readmes_links_name_files_and_sections_that_exist() -> None:
    links = re.findall(r"\]\(([^)\s]+)\)", (ROOT / "README.md").read_text())
    local = [link for link in links if "://" not in link]
    assert len(local) >= 10, local
    for link in local:
        target, _, anchor = link.partition("#")
        assert (ROOT / target).is_file(), f"README.md links to {target}, which does not exist"
        if anchor:
            headings = re.findall(r"^#+ (.+)$", (ROOT / target).read_text(), re.M)
            assert anchor in {_github_anchor(h) for h in headings}, f"README.md: {target} has no section #{anchor}"


def test_the_results_tables_links_land_on_sections_that_exist() -> None:
    links = re.findall(r"\]\(([^)\s]+)\)", (ROOT / "BENCHMARKS.md").read_text())
    assert sum("#" in link for link in links) >= 10, links
    for link in links:
        target, _, anchor = link.partition("#")
        assert (ROOT / target).is_file(), f"BENCHMARKS.md links to {target}, which does not exist"
        if anchor:
            headings = re.findall(r"^#+ (.+)$", (ROOT / target).read_text(), re.M)
            assert anchor in {_github_anchor(h) for h in headings}, f"BENCHMARKS.md: {target} has no section #{anchor}"


# --- example searches --------------------------------------------------------------------------

SEARCH_LINE = re.compile(r"^ {4,}(?:.* -- +)?python -m nas\.search (.+)$", re.M)


def _example_searches() -> list[tuple[str, str]]:
    """Every ``python -m nas.search`` command of an indented code block, continuation lines joined."""
    out = []
    for doc in DOCS:
        text = doc.read_text().replace("\\\n", " ")
        for m in SEARCH_LINE.finditer(text):
            args = " ".join(re.split(r"\s{2,}#", m.group(1))[0].split())  # without a trailing comment
            if "..." not in args and "<" not in args:
                out.append((f"{doc.name}: {args[:60]}", args))
    return out


EXAMPLE_SEARCHES = _example_searches()


@pytest.mark.parametrize("args", [a for _, a in EXAMPLE_SEARCHES], ids=[w for w, _ in EXAMPLE_SEARCHES])
def test_every_example_search_is_a_valid_configuration_whose_target_binds_anywhere(args: str) -> None:
    """Each example composes and passes the checks a search makes before its first trial; and its
    target is relative to an anchor network, or says why not: the main command (fixed by design), a
    predictor's milliseconds (those of its device), milliseconds with an anchor measured beside them,
    or a task of one's own (``data=custom``: its inputs need not suit the reference networks)."""
    import shlex

    from nas.cli import compose_search_config
    from nas.core.config import validate

    argv = [a.replace("$PWD", "/abs") for a in shlex.split(args)]
    validate(compose_search_config(*argv))
    if any(a.startswith("target_ms=") for a in argv):
        why = {"target_ms=50", "latency=predictor", "data=custom"} & set(argv) or {
            a for a in argv if a.startswith("latency.anchor=")}
        assert why, f"{args}: a target in ms that means something else on another machine; use target_anchor="


def test_the_documents_have_example_searches() -> None:
    assert len(EXAMPLE_SEARCHES) >= 15, [w for w, _ in EXAMPLE_SEARCHES]
