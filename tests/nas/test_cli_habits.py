"""What Hydra and MLflow users expect of the command line and the store, before any trial runs.

Hidden schemas, refused unknown keys, one-line YAML errors, a store that cannot be written, and
the store created by several processes at once (real processes, a real SQLite file).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from hydra.errors import HydraException
from mlflow import MlflowClient

from nas.cli import compose_search_config
from nas.core.config import ENGINE_PRECISIONS, LEADERBOARD_FORMATS, SAMPLERS
from nas.core.errors import ClusterError, ConfigError, TrackingError
from nas.core.record import SORT_KEYS
from nas.driver import run_search
from search_spaces import available_spaces

REPO = Path(__file__).resolve().parents[2]


def _cli(cwd: Path, *args: str, module: str = "nas.search", **env_vars: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HYDRA_")}
    env.update(PYTHONPATH=str(REPO), LATNAS_HOME=str(cwd / "home"), **env_vars)
    return subprocess.run([sys.executable, "-m", module, *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=300)


def test_schemas_are_not_group_options(tmp_path: Path) -> None:
    with pytest.raises(HydraException, match=r"Could not find 'latency/schema'"):
        compose_search_config("+space=tiny", "target_ms=5", "latency=schema")
    proc = _cli(tmp_path, "--help")
    assert proc.returncode == 0
    text = " ".join(proc.stdout.split())
    assert (
        "Pick one with latency=<option>: "
        "litert, onnxruntime (the default), openvino, predictor, remote, tensorrt, torch."
        in text
    )
    assert "schema" not in text


def _help(tmp_path: Path, command: str) -> dict[str, str]:
    """``python -m <command> --help`` as {key=default: its text} (wrapped lines joined)."""
    proc = _cli(tmp_path, "--help", module=command)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    entries: dict[str, str] = {}
    key = None
    for line in proc.stdout.splitlines():
        if line.startswith("  ") and not line.startswith("   "):  # an option: "  key=default  text"
            key, _, text = line.strip().partition("  ")
            entries[key] = text.strip()
        elif line.startswith("   ") and key is not None:  # its text, continued
            entries[key] = f"{entries[key]} {line.strip()}".strip()
        else:
            key = None
    return entries


def test_leaderboard_help_lists_every_option_with_its_default_and_allowed_values(tmp_path: Path) -> None:
    entries = _help(tmp_path, "nas.leaderboard")
    assert list(entries) == [
        "search=null", "top_k=10", "sort=reward", "feasible=false", "pareto=false", "failed=false", "format=table",
        "output=null", "plot=true", "plot_path=null", "references=logged", "tracking.uri=null",
        "tracking.experiment=latnas",
    ]
    assert entries["sort=reward"].endswith(f"One of: {', '.join(SORT_KEYS)}.")
    assert entries["format=table"].endswith(f"One of: {', '.join(LEADERBOARD_FORMATS)}.")
    assert entries["references=logged"].endswith("One of: logged, measure, none.")
    assert all(entries.values()), [k for k, v in entries.items() if not v]  # every option says what it does


def test_export_and_search_help_list_allowed_values_and_group_options(tmp_path: Path) -> None:
    export = _help(tmp_path, "nas.export")
    assert export["engine_precision=fp16"].endswith(f"One of: {', '.join(ENGINE_PRECISIONS)}.")
    assert export["init=random"].endswith("One of: random, supernet.")
    assert export["train.epochs=0"]  # the export's own default (the YAML's), not the search's
    assert export["+data=<name>"].endswith("Options: cifar10, cifar10_jpeg, digits, image_folder.")
    assert export["space=null"]  # a plain key here, not the search's space group
    assert all(export.values()), [k for k, v in export.items() if not v]
    search = _help(tmp_path, "nas.search")
    assert search["+space=<name>"].endswith(f"Options: {', '.join(available_spaces())}.")
    assert search["search.sampler=tpe"].endswith(f"One of: {', '.join(SAMPLERS)}.")
    assert search["latency.target_stat=p50"].endswith("One of: p50, p90, p95, p99.")
    assert "space_source=<config>" not in search


HELP_IMPORTS = """
import runpy, sys
sys.argv = [sys.argv[1], "--help"]
try:
    runpy.run_module(sys.argv[0], run_name="__main__")
except SystemExit as done:
    assert done.code == 0, done.code
print(" ".join(m for m in ("torch", "ray", "mlflow", "onnx", "onnxruntime", "optuna") if m in sys.modules),
      file=sys.stderr)
"""


@pytest.mark.parametrize("command", ["nas.search", "nas.leaderboard", "nas.export", "nas.fidelity", "nas.supernet",
                                     "nas.optimize"])
def test_help_is_printed_before_torch_ray_or_mlflow_load(tmp_path: Path, command: str) -> None:
    proc = subprocess.run([sys.executable, "-c", HELP_IMPORTS, command], cwd=tmp_path, capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=str(REPO)), timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"usage: python -m {command} ")
    assert proc.stderr.strip() == ""  # none of them was imported


def test_an_unknown_key_added_with_plus_is_refused_naming_the_keys_that_exist() -> None:
    with pytest.raises(ConfigError, match=r"^search\.storag: unknown setting .*search has .*storage"):
        compose_search_config("+space=tiny", "target_ms=5", "+search.storag=sqlite:////tmp/x.db")
    with pytest.raises(ConfigError, match=r"^nonsense: unknown setting .*the top level has .*target_ms"):
        compose_search_config("+space=tiny", "target_ms=5", "+nonsense=1")
    # Free-form mappings still take new keys: backend options and the space.
    cfg = compose_search_config("+space=tiny", "target_ms=5", "+latency.options.enable_mem_pattern=false")
    assert cfg.latency.options["enable_mem_pattern"] is False


def test_an_unknown_key_on_the_command_line_is_one_line_and_creates_nothing(tmp_path: Path) -> None:
    proc = _cli(tmp_path, "+space=tiny", "target_ms=5", "+search.storag=x")
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1].startswith("error: search.storag: unknown setting")
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "home").exists() and not (tmp_path / "outputs").exists()


@pytest.mark.parametrize(("command", "args", "line"), [
    # a value of the wrong type, an unknown option, a misspelt key without '+', an override Hydra cannot parse
    ("nas.search", ["+space=tiny", "target_ms=abc"],
     "error: target_ms: Value 'abc' of type 'str' could not be converted to Float"),
    ("nas.search", ["+space=nope"], f"error: space=nope: no such option; space has {', '.join(available_spaces())}"),
    ("nas.search", ["+space=tiny", "target_ms=5", "search.n_trails=4"],
     "error: search.n_trails: unknown setting; did you mean search.n_trials? search has fill_mutate_after, "
     "grace_period, "),
    ("nas.search", ["+space=tiny", "target_ms=5", "train=nope"],
     "error: train=nope: no such option; train has default"),
    ("nas.search", ["+space=tiny", "target_ms=5", "foo=[1,2"],
     "error: foo=[1,2: not an override Hydra can read (no viable alternative at input '[1,2'); the grammar: https://"),
    ("nas.leaderboard", ["top_k=abc"], "error: top_k: Value 'abc' of type 'str' could not be converted to Integer"),
    ("nas.leaderboard", ["tracking=nope"], "error: tracking=nope: no such option; tracking has default"),
    ("nas.leaderboard", ["sortt=accuracy"], "error: sortt: unknown setting; did you mean sort? the top level has "),
    ("nas.export", ["+data=nope"], "error: data=nope: no such option; data has cifar10, cifar10_jpeg, digits, "),
    ("nas.fidelity", ["+space=tiny", "k=abc"], "error: k: Value 'abc' of type 'str' could not be converted to Integer"),
    ("nas.supernet", ["+space=tiny", "train.epochz=1"],
     "error: train.epochz: unknown setting; did you mean train.epochs? train has "),
    ("nas.optimize", ["candidate=x", "prune.ratios=abc"],
     "error: prune.ratios: Invalid value assigned: str is not a ListConfig, list or tuple."),
])
def test_what_hydra_refuses_is_one_line_naming_the_key_exit_2_and_creates_nothing(
    tmp_path: Path, command: str, args: list[str], line: str
) -> None:
    proc = _cli(tmp_path, *args, module=command)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(line), proc.stderr
    assert proc.stdout == ""
    assert list(tmp_path.iterdir()) == []  # no home, no store, no output folder


def test_hydra_full_error_still_shows_hydras_own_report(tmp_path: Path) -> None:
    proc = _cli(tmp_path, "+space=tiny", "target_ms=abc", HYDRA_FULL_ERROR="1")
    assert proc.returncode == 1
    assert "hydra.errors.ConfigCompositionException: Error merging override target_ms=abc" in proc.stderr


def test_a_yaml_syntax_error_in_a_users_space_is_one_line_with_file_line_and_column(tmp_path: Path) -> None:
    folder = tmp_path / "my_conf"
    (folder / "space").mkdir(parents=True)
    bad = folder / "space" / "broken.yaml"
    bad.write_text("name: broken\nstages:\n  - {depth: [1, 2]\n    kernel: [3]\n")
    proc = _cli(tmp_path, f"hydra.searchpath=[file://{folder}]", "+space=broken", "target_ms=5")
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith(f"error: {bad}: line 4, column ") and "Traceback" not in proc.stderr


def test_a_store_in_a_folder_that_cannot_be_written_is_refused_before_anything(tmp_path: Path) -> None:
    cfg = compose_search_config("+space=tiny", "target_ms=5", "progress=false")
    cfg.output_dir = str(tmp_path / "out")
    # /proc refuses new files even to root, as a read-only mount would.
    cfg.tracking.uri = "sqlite:////proc/latnas-store/mlflow.db"
    with pytest.raises(TrackingError, match=r"does not exist"):
        run_search(cfg)
    cfg.tracking.uri = "sqlite:////proc/mlflow.db"
    with pytest.raises(TrackingError, match=r"^tracking\.uri .*cannot write the store: '/proc' cannot be written"):
        run_search(cfg)
    assert not (tmp_path / "out").exists()


def test_a_missing_folder_in_an_explicit_store_path_is_an_error_and_the_home_is_created(tmp_path: Path) -> None:
    cfg = compose_search_config("+space=tiny", "target_ms=5", "progress=false")
    cfg.tracking.uri = f"sqlite:///{tmp_path / 'typo' / 'mlflow.db'}"
    with pytest.raises(TrackingError, match=r"the folder .*typo' does not exist"):
        run_search(cfg)
    assert not (tmp_path / "typo").exists()


STORE_CREATOR = """
import sys, time
from pathlib import Path
from nas.adapters.mlflow_writer import StoreWriter
uri, barrier, me, n = sys.argv[1], Path(sys.argv[2]), sys.argv[3], int(sys.argv[4])
(barrier / me).touch()  # imported: ready
while len(list(barrier.iterdir())) < n:  # every process is ready: all create at the same moment
    time.sleep(0.01)
w = StoreWriter(uri, "latnas")
print("OK", w.experiment_id)
"""


@pytest.mark.slow  # four processes importing MLflow and torch
def test_processes_creating_one_new_store_at_once_all_succeed(tmp_path: Path) -> None:
    # Before the lock, the second of two searches started together on a new SQLite store crashed
    # in MLflow's schema migration ("table ... already exists").
    n = 4
    uri = f"sqlite:///{tmp_path / 'store' / 'mlflow.db'}"
    (tmp_path / "store").mkdir()
    (tmp_path / "barrier").mkdir()
    procs = [
        subprocess.Popen([sys.executable, "-c", STORE_CREATOR, uri, str(tmp_path / "barrier"), str(i), str(n)],
                         env=dict(os.environ, PYTHONPATH=str(REPO)), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
        for i in range(n)
    ]
    outs = [p.communicate(timeout=600) for p in procs]
    assert all(p.returncode == 0 for p in procs), [err[-1500:] for _, err in outs]
    ids = {out.split()[-1] for out, _ in outs}
    assert len(ids) == 1  # one experiment, found by all four
    assert [e.name for e in MlflowClient(uri).search_experiments()].count("latnas") == 1


@pytest.mark.slow
def test_an_address_where_no_ray_cluster_answers_is_one_line_and_leaves_no_folder(tmp_path: Path) -> None:
    # A real HTTP server where the user meant a Ray head: Ray's C++ client would log each retry.
    server = subprocess.Popen([sys.executable, "-m", "http.server", "0", "--bind", "127.0.0.1"], cwd=tmp_path,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert server.stdout is not None
        port = int(server.stdout.readline().split(" port ")[1].split()[0])
        proc = _cli(tmp_path, "+space=tiny", "target_ms=5", f"ray.address=127.0.0.1:{port}", "name=nowhere")
    finally:
        server.kill()
        server.wait()
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        f"error: ray.address '127.0.0.1:{port}': something listens at 127.0.0.1:{port} but does not answer as a "
        "Ray cluster's GCS within 5 s; give the head node's GCS port (6379 unless `ray start --head --port` chose "
        "another)"
    ], proc.stderr
    assert "gcs_client" not in proc.stdout + proc.stderr
    assert not (tmp_path / "home" / "searches").exists()


@pytest.mark.usefixtures("ray_cluster")
def test_a_search_refused_after_ray_started_leaves_no_folder(tmp_path: Path) -> None:
    out = tmp_path / "home" / "searches" / "too-big"
    cfg = compose_search_config("+space=tiny", "target_ms=5", "ray.cpus_per_trial=4096", "name=too-big",
                                f"tracking.uri=sqlite:///{tmp_path / 'mlflow.db'}", f"output_dir={out}",
                                "progress=false")
    with pytest.raises(ClusterError, match=r"ray.cpus_per_trial=4096 but the cluster has"):
        run_search(cfg)
    assert not out.exists()


# ---------------------------------------------------------------------- a damaged store


@pytest.fixture(scope="module")
def store_bytes(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    """A real MLflow store, as the first search creates it (schema and experiment), as bytes."""
    from nas.adapters.mlflow_writer import StoreWriter

    folder = tmp_path_factory.mktemp("store")
    StoreWriter(f"sqlite:///{folder / 'mlflow.db'}", "latnas")
    return (folder / "mlflow.db").read_bytes()


DAMAGE = {
    "truncated": lambda good: good[: len(good) // 2],  # a copy cut short, a disk that filled up
    "overwritten": lambda good: b"not a database, " * 512,
}


@pytest.mark.parametrize(("damage", "command"), [
    ("truncated", ("nas.leaderboard",)),
    ("overwritten", ("nas.leaderboard",)),
    ("truncated", ("nas.search", "+space=tiny", "target_ms=5")),
])
def test_a_damaged_store_is_one_line_naming_the_file_and_is_left_untouched(
    store_bytes: bytes, tmp_path: Path, damage: str, command: tuple[str, ...]
) -> None:
    db = tmp_path / "home" / "mlflow.db"
    db.parent.mkdir()
    damaged = DAMAGE[damage](store_bytes)
    db.write_bytes(damaged)
    proc = _cli(tmp_path, *command[1:], module=command[0])
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines() == [
        f"error: the MLflow store {db} is damaged "
        f"({'database disk image is malformed' if damage == 'truncated' else 'file is not a database'}); it was "
        "left untouched: restore it from a copy, or move it aside to start a new store (or point tracking.uri at "
        "another one)"
    ], proc.stderr
    assert db.read_bytes() == damaged
    assert sorted(p.name for p in db.parent.iterdir()) == ["mlflow.db"]  # no lock file, no search folder


@pytest.mark.parametrize("module", ["nas.search", "nas.fidelity", "nas.supernet"])
def test_a_command_without_a_space_names_itself_the_spaces_and_exits_2(tmp_path: Path, module: str) -> None:
    proc = _cli(tmp_path, module=module)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert lines[0] == "error: no search space chosen. Pick one with +space=<name>, for example:"
    assert lines[1].strip().startswith(f"python -m {module} +space=mobile")
    assert lines[2] == f"available spaces: {', '.join(available_spaces())}"
    assert not (tmp_path / ".latnas").exists()  # nothing created
