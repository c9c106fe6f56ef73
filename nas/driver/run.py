"""The search driver: :func:`run_search` takes a :class:`~nas.core.config.SearchConfig` and runs it.

Everything a user can get wrong is checked before the first trial: values and ranges, the
search space, the dataset path, the latency backend, the MLflow store, the Ray cluster. Then
the parent MLflow run is opened, the trials run on Ray Tune, each finished trial is recorded
as it finishes, and the parent run is closed with a status whatever happens. A write the
record (or the search's folder) refuses, e.g. on a full disk, stops the search at once: the
parent run is ended FAILED with the error as its tag ``stop_reason``, or stays RUNNING when the
store refuses that too, and the error (a :class:`~nas.core.errors.TrackingError`, with a note
saying which and how to resume) is raised.

**Resuming** (``resume=true name=<name>``, :mod:`nas.driver.resume`) re-drives the search from
its MLflow record: the parent run is reopened (a child run the killed driver left RUNNING is
marked KILLED), the settings that decide results must match the recorded ones, every recorded
candidate is replayed into a fresh sampler (Optuna's history is rebuilt, and those architectures
are never proposed again), and a new Ray Tune experiment (``<output_dir>/ray/<name>-resume<k>``)
runs the trials still missing.
"""

from __future__ import annotations

import csv
import dataclasses
import hashlib
import json
import secrets
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import torch
import yaml

from latency_predictor import ConfigError as LatencyConfigError
from latency_predictor.measurement.environment import machine, versions
from latency_predictor.measurement.protocol import LatencyStats
from latency_predictor.measurement.statistic import MIN_RUNS, stat_value
from nas.accuracy.training import trial_environment
from nas.adapters import ray_cluster, ray_tune
from nas.adapters.mlflow_reader import StoreReader, sqlite_path
from nas.adapters.mlflow_writer import StoreWriter, check_reachable
from nas.adapters.optuna_sampler import ArchSampler
from nas.core.config import SearchConfig, check_top_rung, validate
from nas.core.errors import ConfigError, NASError, NotRecordedError, SearchError, StoreFullError, TrackingError
from nas.core.evolution import EvolutionSampler
from nas.core.objective import Objective
from nas.core.paths import default_tracking_uri, project_home, unwritable
from nas.core.record import (
    FINAL_PASS_TAG,
    LEADERBOARD_COLUMNS,
    STOP_REASON_TAG,
    Candidate,
    SearchRecord,
    best_of,
    latency_provenance,
    latency_sources,
    leaderboard_row,
    pareto_points,
    rank,
    target_shares,
    trials_seconds,
)
from nas.core.sampling import Outcome, Sampler, StartFirst
from nas.core.table import accuracy_label, budget_used, format_best, format_table
from nas.data import ProxyData, TaskData, load_task
from nas.driver.final_pass import FinalPass, measuring_estimator, run_final_pass
from nas.driver.preflight import check_user_code, code_to_ship, user_refs
from nas.driver.progress import Progress, RungPlan, log, search_log, status
from nas.driver.resume import check_resumable, resume_command
from nas.driver.screen import LatencyScreen, make_screen
from nas.oneshot.subnet import check_supernet
from nas.runtime.signals import sigterm_as_interrupt
from nas.trial.evaluate import (
    TrialContext,
    fp32_config,
    latency_estimator,
    measure_preprocessing_cost,
    preprocessing_spec,
    with_preprocessing,
)
from nas.trial.faults import ENV_VAR as FAULTS_ENV_VAR
from nas.trial.faults import FaultPlan
from nas.trial.rungs import RungCheckpoints
from search_spaces import SearchSpace, SearchSpaceError, anchor_network, resolve_arch
from search_spaces.references import SMALL_INPUT_MAX

_PROJECT_ROOT = Path(__file__).resolve().parents[2]
DEMO_NOTE = (
    "Note: the accuracies above are on scikit-learn's digits, a demonstration proxy: 360 validation images "
    "cannot rank networks. For accuracy you can trust, search on real images, e.g. CIFAR-10:\n"
    "  python -m nas.search +space=cifar target_anchor=mobilenetv2_100@0.5 search.start=[resnet14] "
    "search.sampler=evolution search.population_size=4 search.tournament_size=2 search.latency_screen=1.2 "
    "search.fill_mutate_after=10 latency.input_shape=[1,3,32,32] data=cifar10_jpeg "
    "data.path=/path/to/cifar10-train-jpeg.tar.gz"
)
"""Printed after a search on the default digits data."""


@dataclass
class SearchResult:
    """What a search produced.

    Attributes:
        name: the search's name (MLflow parent run name, Ray Tune experiment name).
        status: ``FINISHED``, ``KILLED`` (interrupted) or ``FAILED``.
        best: the completed candidate with the highest reward (None if none completed).
        candidates: every evaluated candidate, in the order they finished (each with its
            MLflow ``run_id``).
        leaderboard: ranked rows (see :data:`nas.core.record.LEADERBOARD_COLUMNS`).
        parent_run_id: the MLflow parent run.
        experiment_id: the MLflow experiment.
        tracking_uri: the MLflow store.
        output_dir: this search's files (artifacts, Ray Tune state).
        ray_experiment_path: the Ray Tune experiment folder.
        duplicates: suggestions of already evaluated architectures (not run again).
        wall_seconds: the search's wall time, start-up included.
        files: the artifacts written to ``output_dir`` (and logged on the parent run).
        timings: seconds spent starting up (checks, dataset, Ray), in ``Tuner.fit``
            (``tune_seconds``), logging candidates to MLflow and writing the artifacts.
        resumed: candidates read back from the record of an earlier run of this search.
        stale_runs: child runs the earlier run left RUNNING, marked KILLED on resume.
        retries: trial processes that died and were started again (this run).
        ray_trials: trials Ray Tune ran (this run).
        optuna_states: Optuna trial states of the evaluated architectures (all runs).
        final_pass: the final latency pass (see :mod:`nas.driver.final_pass`).
    """

    name: str
    status: str
    best: Candidate | None
    candidates: list[Candidate]
    leaderboard: list[dict[str, Any]]
    parent_run_id: str
    experiment_id: str
    tracking_uri: str
    output_dir: Path
    ray_experiment_path: str
    duplicates: int = 0
    wall_seconds: float = 0.0
    files: dict[str, Path] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    resumed: int = 0
    stale_runs: int = 0
    retries: int = 0
    ray_trials: int = 0
    optuna_states: dict[str, int] = field(default_factory=dict)
    final_pass: FinalPass = field(default_factory=FinalPass)


# ---------------------------------------------------------------------- the record's context


def _flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict) and v:
            out.update(_flatten(v, key + "."))
        else:
            out[key] = v
    return out


def _git_commit() -> dict[str, str]:
    try:
        sha = subprocess.run(
            ["git", "-C", str(_PROJECT_ROOT), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5
        )
        if sha.returncode != 0:
            return {}
        dirty = subprocess.run(
            ["git", "-C", str(_PROJECT_ROOT), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True, text=True, timeout=5,
        )
    except (OSError, subprocess.TimeoutExpired):
        return {}
    return {"mlflow.source.git.commit": sha.stdout.strip(), "git_dirty": str(bool(dirty.stdout.strip())).lower()}


def _environment_tags(device: str) -> dict[str, str]:
    here = machine()
    tags = {
        "train_device": device, "cpu_model": here["cpu_model"], "python": here["python"],
        "gpu": ", ".join(torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())) or "none",
    }
    dists = ("torch", "numpy", "onnx", "onnxruntime", "onnxruntime-gpu", "ray", "optuna", "mlflow", "hydra-core",
             "scikit-learn")
    tags.update({f"version.{d}": v for d, v in versions(dists, installed_only=True).items()})
    return {**tags, **_git_commit()}


def _space_hash(cfg: SearchConfig) -> str:
    return hashlib.sha256(yaml.safe_dump(cfg.space, sort_keys=True).encode()).hexdigest()[:16]


def _params(cfg: SearchConfig, space: SearchSpace, dataset: dict[str, Any]) -> dict[str, str]:
    """The parent run's params: the flattened config (the space by name, size and hash)."""
    params = {k: v for k, v in _flatten(dataclasses.asdict(cfg)).items() if not k.startswith("space")}
    params.update(space=space.name, space_size=space.size(), dataset=dataset)
    return {k: str(v)[:6000] for k, v in params.items()}


def _check_latency(cfg: SearchConfig, num_classes: int, space: SearchSpace) -> str:
    """Build the latency estimator as a trial will; returns the device it is for (its name).

    Raises:
        LatencyError: a bad setting, naming the latency group's keys.
    """
    try:
        est = latency_estimator(cfg.latency, num_classes, space)
        as_fp32 = fp32_config(cfg.latency)
        if as_fp32 is not None:  # the fp32 figures logged beside: built as a trial will, too
            latency_estimator(as_fp32, num_classes, space)
    except LatencyConfigError as err:
        raise LatencyConfigError(
            f"latency (backend {cfg.latency.backend!r}): {err}; set these with latency.options.<key>=... and "
            "latency.measure.<key>=..."
        ) from None
    return est.environment().get("device_name", "unknown")


def _preprocessing_cost(cfg: SearchConfig, data: TaskData, on_cluster: bool, status: Callable[[str], None]
                        ) -> LatencyStats | None:
    """The input pipeline's cost (``latency.preprocessing``), measured once here; None when not asked for.

    Raises:
        ConfigError: asked for on a joined cluster, whose trials measure on other machines.
    """
    spec = preprocessing_spec(cfg.latency, data.mean, data.std)
    if spec is None:
        return None
    if on_cluster:
        raise ConfigError("latency.preprocessing", "is measured by the driver, and on a joined cluster the trials "
                          "measure on other machines: measure it where the network runs, or leave it null")
    status(f"measuring the input pipeline ({spec.describe()}): decode, resize, normalise")
    cost = measure_preprocessing_cost(cfg.latency, data.mean, data.std)
    assert cost is not None
    status(f"input pipeline {spec.describe()}: p50 {cost.p50:.3f} ms, p99 {cost.p99:.3f} ms; added to every "
           "candidate's latency")
    return cost


def _anchor_at_start(cfg: SearchConfig, num_classes: int, space: SearchSpace, preprocessing: LatencyStats | None,
                     on_cluster: bool, status: Callable[[str], None]) -> float | None:
    """The anchor network's figure at the target's statistic, measured once here before the trials
    (None: no anchor, or a joined cluster, whose trials measure on other machines).

    It shows that the anchor runs where the candidates are measured, and says what a target relative
    to it comes to now; the candidates are judged on their ratio to the anchor measured beside them.

    Raises:
        LatencyError: the anchor cannot be measured here.
    """
    if cfg.anchor is None or (on_cluster and cfg.latency.backend != "remote"):
        return None
    est = measuring_estimator(cfg, num_classes, space)
    if est is None:  # a predictor alone: refused with an anchor by validate()
        return None
    lat = cfg.latency
    hw = max(lat.input_shape[2:])
    layout = f"{cfg.anchor}, in its 32x32 layout" if hw <= SMALL_INPUT_MAX else cfg.anchor
    status(f"measuring the anchor network ({layout})")
    result = with_preprocessing(est.measure(anchor_network(cfg.anchor, hw)), lat, preprocessing)
    ms = stat_value(result, lat.target_stat)
    if cfg.target_anchor is not None:
        status(f"target: no slower than x{cfg.target_x:g} the anchor {cfg.anchor} ({lat.target_stat} {ms:.3f} ms "
               f"here now, so about {cfg.target_x * ms:.3f} ms), judged on each candidate's ratio to the anchor "
               "measured beside it (x_anchor)")
    else:
        status(f"anchor {cfg.anchor}: {lat.target_stat} {ms:.3f} ms here now; every measured candidate gets "
               "x_anchor, its latency over the anchor's measured beside it")
    return ms


def _fault_plan(output_dir: Path) -> FaultPlan | None:
    plan = FaultPlan.from_env()
    if plan is None:
        return None
    print(f"warning: {FAULTS_ENV_VAR}={plan.spec!r}: faults are injected into trials on purpose (testing only); "
          f"unset {FAULTS_ENV_VAR} for a real search", file=sys.stderr, flush=True)
    return plan.with_marker_dir(output_dir / "faults")


def _search_name(cfg: SearchConfig, space: SearchSpace) -> str:
    if cfg.name:
        return cfg.name
    target = (f"x{cfg.target_x:g}-{cfg.target_anchor.replace('@', '-x')}" if cfg.target_anchor is not None
              else f"{cfg.target_ms:g}ms")
    # The random part keeps two searches started in the same second apart.
    return f"{space.name}-{target}-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(2)}"


# ---------------------------------------------------------------------- artifacts


def _write_artifacts(
    out: Path, cfg: SearchConfig, space: SearchSpace, name: str, candidates: list[Candidate],
    rows: list[dict[str, Any]],
) -> dict[str, Path]:
    out.mkdir(parents=True, exist_ok=True)
    files = {"config": out / "config.yaml", "space": out / "space.yaml", "leaderboard": out / "leaderboard.csv"}
    files["config"].write_text(yaml.safe_dump(dataclasses.asdict(cfg), sort_keys=False))
    files["space"].write_text(yaml.safe_dump(cfg.space, sort_keys=False))
    with files["leaderboard"].open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(LEADERBOARD_COLUMNS))
        w.writeheader()
        w.writerows(rows)
    best = best_of(candidates)
    if best is not None:
        files["best_json"] = out / "best_arch.json"
        files["best_txt"] = out / "best_arch.txt"
        files["best_json"].write_text(json.dumps({
            "arch": best.arch, "arch_id": best.arch_id, "space": space.name, "space_source": space.source,
            "decisions": best.decisions, "input_shape": list(cfg.latency.input_shape), "target_ms": cfg.target_ms,
            **({"target_anchor": cfg.target_anchor, "target_x": cfg.target_x} if cfg.target_anchor else {}),
            **({"latency_anchor": cfg.anchor} if cfg.anchor else {}),
            "reward_fn": cfg.search.reward, "accuracy_estimator": best.tags.get("accuracy_estimator"),
            "dataset": cfg.data.display_name, "metrics": best.metrics, "latency": best.latency,
            "search": name, "run_id": best.run_id,
        }, indent=2))
        files["best_txt"].write_text(best.arch + "\n")
    return files


# ---------------------------------------------------------------------- the search


def run_search(cfg: SearchConfig, command: list[str] | None = None) -> SearchResult:
    """Run one search as ``cfg`` describes and record it in MLflow (or continue it: ``cfg.resume``).

    Args:
        cfg: the full configuration (``cfg.space`` is the space mapping).
        command: the command line that started the search (program and overrides); when the
            search is interrupted, the command that resumes it is printed: this one with
            ``name=<name> resume=true`` (None: the driver names the settings to add).

    Returns:
        The candidates, the best one and where everything was recorded.

    Raises:
        NASError: a bad configuration or unreachable service (before any trial), or a trial
            that crashed on an unexpected error (the search stops).
        SearchSpaceError: an invalid search space.
        LatencyError: a latency backend that cannot be built here.
    """
    t_start = time.perf_counter()
    validate(cfg)
    space = SearchSpace.from_dict(cast(dict[str, Any], cfg.space), source=cfg.space_source)
    start_archs(cfg.search.start, space, _input_hw(cfg))  # a start outside the space: refused before anything is made
    name = _search_name(cfg, space)
    uri = cfg.tracking.uri or default_tracking_uri()
    # Everything is checked before anything is created: a refused search leaves no folder, store or log.
    check_reachable(uri)
    ray_cluster.check_cluster(cfg.ray)
    previous, moved_from = _recorded_search(uri, cfg.tracking.experiment, name)
    if previous is not None and not cfg.resume:
        raise ConfigError(
            "name", f"a search named {name!r} is already recorded in {uri} (run {previous.run_id}, "
            f"{previous.status}); continue it with resume=true, or choose another name"
        )
    if previous is None and cfg.resume:
        raise ConfigError(
            "resume", f"no search named {name!r} in experiment {cfg.tracking.experiment!r} of {uri}: check name= "
            "and tracking.uri=, or drop resume=true to start it"
        )
    output_dir = _search_folder(cfg.output_dir, name, previous, moved_from, uri)
    problem = unwritable(output_dir)
    if problem:
        raise ConfigError("output_dir", f"cannot write {str(output_dir)!r}: {problem}; choose a folder you can write")

    where = cfg.data.path or cfg.data.fn
    status(f"search {name}: loading data ({cfg.data.display_name}{', ' + where if where else ''})")
    data = load_task(cfg.data)
    check_top_rung(cfg.search.rungs, data.n_train)
    check_user_code(cfg, space, data, lambda text: status(f"search {name}: {text}"))
    ship = code_to_ship(cfg)
    if cfg.accuracy.estimator == "supernet":  # a checkpoint for another setting is refused before any trial
        check_supernet(cast(str, cfg.accuracy.checkpoint), space, cast(ProxyData, data), cfg.data)
    params = _params(cfg, space, data.summary())
    changed = check_resumable(previous, params, _space_hash(cfg)) if previous is not None else {}
    faults = _fault_plan(output_dir)
    on_cluster = ray_cluster.joins_cluster(cfg.ray)
    if not on_cluster:
        status(f"search {name}: checking the latency backend ({cfg.latency.backend})")
    stat = cfg.latency.target_stat
    if stat != "p50" and cfg.latency.backend != "predictor":
        given = cfg.latency.measure.get("min_runs")
        if given is None or int(given) < MIN_RUNS[stat]:
            status(f"search {name}: latency.target_stat={stat}: each candidate is timed at least {MIN_RUNS[stat]} "
                   f"times (latency.measure.min_runs {given if given is not None else 'default'} raised, the "
                   "per-attempt time cap lifted), so that its percentile rests on enough runs")
    device_name = None if on_cluster else _check_latency(cfg, data.num_classes, space)
    preprocessing = _preprocessing_cost(cfg, data, on_cluster, lambda text: status(f"search {name}: {text}"))
    anchor_ms = _anchor_at_start(cfg, data.num_classes, space, preprocessing, on_cluster,
                                 lambda text: status(f"search {name}: {text}"))
    if not on_cluster and cfg.train.device.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError("train.device", f"{cfg.train.device} but this machine has no CUDA GPU; use auto or cpu")

    screen = make_screen(cfg, data.num_classes, space, _target_ms(cfg, anchor_ms), preprocessing, on_cluster,
                         lambda text: status(f"search {name}: {text}"))
    sampler = make_sampler(cfg, space, name, screen)  # opens search.storage: a URL Optuna cannot open is refused here
    writer = StoreWriter(uri, cfg.tracking.experiment)  # creates the store first, in this process only
    if moved_from is not None:  # the store was moved with its folder: what follows is written where it is now
        status(f"search {name}: the store has moved from {moved_from} since the search began; its folder and "
               f"artifacts now go beside it, in {cast(Path, sqlite_path(uri)).parent}")
        writer.follow_move(moved_from)
    created = not output_dir.exists()
    output_dir.mkdir(parents=True, exist_ok=True)
    begun = False
    try:
        with search_log(output_dir / "search.log"):
            status(f"search {name}: starting Ray ({cfg.ray.address or 'a local cluster'}); files in {output_dir}"
                   + (f"; sending {', '.join(p.name for p in ship)} to the trials" if ship else ""))
            # Trials on an x86-64 CPU train channels-last with oneDNN held at AVX2 (nas.accuracy.training)
            cpu_timing = (cfg.latency.backend == "torch"
                          and not str(cfg.latency.options.get("device", "cpu")).lower().startswith("cuda"))
            cluster = ray_cluster.connect(cfg.ray, ship, trial_environment(cfg.train, cpu_timing))
            try:
                # From here a scheduler's SIGTERM is a Ctrl-C, not ray.init's handler (the process aborted,
                # silently): also while a cluster's trial node is checked, before the search begins.
                with sigterm_as_interrupt():
                    resources = ray_cluster.trial_resources(cfg.ray, cluster, cfg.search.max_concurrent)
                    if on_cluster:
                        # Checked where trials run: the driver's machine may lack their device (a CPU-only head).
                        device_name = ray_cluster.check_latency_on_trial_node(
                            cfg.latency, data.num_classes, space, resources)
                        if user_refs(cfg):  # and their Python: what was sent, what is installed there
                            ray_cluster.check_user_code_on_trial_node(user_refs(cfg), resources)
                    if cfg.train.device.startswith("cuda") and resources["gpu"] == 0:
                        raise ConfigError("ray.gpus_per_trial",
                                          f"is 0 but train.device={cfg.train.device}: give trials a GPU")
                    # What the trials will train on: Ray shows a trial only the GPUs it reserved.
                    gpu = resources["gpu"] > 0
                    device = cfg.train.device if cfg.train.device != "auto" else ("cuda" if gpu else "cpu")
                    ctx = TrialContext(
                        space, data, cfg.train, cfg.accuracy, cfg.latency, _target_ms(cfg, anchor_ms),
                        cfg.search.reward, threads=max(1, int(resources["cpu"])),
                        trial_timeout_s=cfg.search.trial_timeout_s, faults=faults,
                        preprocessing=preprocessing, rungs=tuple(cfg.search.rungs),
                        reduction_factor=cfg.search.reduction_factor,
                        checkpoints=RungCheckpoints(output_dir / "checkpoints") if cfg.search.rungs else None,
                        workdir=output_dir / "trials",
                        anchor=cfg.anchor, target_x=cfg.target_x if cfg.target_anchor is not None else None,
                    )
                    run = _Run(name, output_dir, params, previous, changed, resume_command(command, name),
                               device_name or "", anchor_ms, screen)
                    begun = True  # from here on the search has records: its folder stays whatever happens
                    return _search(cfg, space, run, writer, ctx, sampler, resources, cluster, device, t_start)
            finally:
                ray_cluster.disconnect(cluster)
    except KeyboardInterrupt:
        if not begun:
            status(f"search {name}: interrupted before the search began; nothing was recorded")
        raise
    finally:
        if created and not begun:  # refused before the search began: leave no folder behind
            shutil.rmtree(output_dir, ignore_errors=True)


def _target_ms(cfg: SearchConfig, anchor_ms: float | None) -> float:
    """The target in ms the trials hold (hybrid mode confirms candidates near it): ``target_ms``, or for
    a target relative to the anchor what it came to at the start (NaN when the anchor was not measured)."""
    if cfg.target_ms is not None:
        return cfg.target_ms
    return cfg.target_x * anchor_ms if anchor_ms is not None else float("nan")


def _input_hw(cfg: SearchConfig) -> int:
    return max(cfg.latency.input_shape[2:])


def start_archs(texts: list[str], space: SearchSpace, input_hw: int = 224) -> list[str]:
    """``search.start`` as canonical strings of ``space``'s members (a reference member such as
    ``resnet14@1.5`` is resolved for inputs of ``input_hw`` pixels a side).

    Raises:
        ConfigError: an entry that is not an architecture, or not in the space (naming the decision).
    """
    out = []
    for i, text in enumerate(texts):
        try:
            arch = space.validate(resolve_arch(str(text), input_hw))
        except SearchSpaceError as err:
            raise ConfigError(f"search.start[{i}]", f"{str(text)[:60]!r} cannot start a search of space "
                              f"{space.name!r}: {err}") from None
        out.append(arch.encode())
    return out


def make_sampler(cfg: SearchConfig, space: SearchSpace, name: str, screen: LatencyScreen | None = None) -> Sampler:
    """The search algorithm ``search.sampler`` names (regularised evolution, or an Optuna study), proposing
    ``search.start`` first when it is given; ``screen`` judges evolution's proposals (``search.latency_screen``)."""
    s = cfg.search
    inner: Sampler
    if s.sampler == "evolution":
        inner = EvolutionSampler(space, s.population_size, s.tournament_size, s.seed, s.max_duplicates, screen,
                                 s.max_refused, s.fill_mutate_after)
    else:
        inner = ArchSampler(space, s.sampler, s.seed, s.n_startup_trials, s.population_size, s.max_duplicates,
                            storage=s.storage, study_name=name)
    return StartFirst(inner, start_archs(s.start, space, _input_hw(cfg))) if s.start else inner


def _fill_mutations(sampler: Sampler) -> int:
    """Proposals evolution made by mutation while filling its first population (0: another sampler)."""
    inner = sampler.inner if isinstance(sampler, StartFirst) else sampler
    return inner.fill_mutations if isinstance(inner, EvolutionSampler) else 0


def _recorded_search(uri: str, experiment: str, name: str) -> tuple[SearchRecord | None, Path | None]:
    """The search called ``name`` in the store, if the store and the experiment exist (nothing is
    created), and the folder the store was in when it has moved since (:meth:`StoreReader.moved_from`)."""
    path = sqlite_path(uri)
    if path is not None and not path.is_file():
        return None, None
    try:
        reader = StoreReader(uri, experiment)
    except NotRecordedError:  # no such store or experiment yet: no search by that name either
        return None, None
    runs = reader.search_runs(name)
    return (reader.find_search(runs[0].run_id), reader.moved_from()) if runs else (None, None)


def _search_folder(given: str | None, name: str, previous: SearchRecord | None, moved_from: Path | None,
                   uri: str) -> Path:
    """Where the search's files go (Ray Tune's state among them): ``output_dir`` when given; on a
    resume, the folder recorded, or where it is now if it lay in the store's folder and the store
    has moved with that folder (``moved_from``); else ``searches/<name>`` in the project's home."""
    if given:
        return Path(given).resolve()
    recorded = Path(previous.tags["output_dir"]) if previous is not None and "output_dir" in previous.tags else None
    if recorded is None:
        return project_home() / "searches" / name
    store = sqlite_path(uri)
    if moved_from is not None and store is not None and recorded.is_relative_to(moved_from):
        return store.parent.resolve() / recorded.relative_to(moved_from)
    return recorded.resolve()


REVISED_TAGS = (FINAL_PASS_TAG, "latency_source", "latency_confirm_reason")
"""Tags the final latency pass may change on a candidate's run."""


@dataclass(frozen=True)
class _Run:
    """This run of a search: its name, folder, params, the record it resumes (if any), the device its
    latencies are for, and the anchor network's figure measured before the trials (None: not measured)."""

    name: str
    output_dir: Path
    params: dict[str, str]
    previous: SearchRecord | None
    changed: dict[str, str]
    resume_command: str | None
    device_name: str
    anchor_ms: float | None = None
    screen: LatencyScreen | None = None


def _open_record(
    run: _Run, writer: StoreWriter, sampler: Sampler, tags: dict[str, str]
) -> tuple[str, list[Candidate], int, int]:
    """Start the parent run, or reopen it and replay its candidates into ``sampler``.

    Returns:
        The parent run id, the recorded candidates, stale runs marked KILLED, and this run's
        resume number (0: a new search).
    """
    if run.previous is None:
        return writer.start_search(run.name, run.params, tags), [], 0, 0
    k = int(run.previous.tags.get("resume_count", "0")) + 1
    resume_tags = {**tags, "resume_count": str(k)}
    if run.changed:
        resume_tags[f"resume_{k}_changes"] = json.dumps(run.changed)
    finished, stale = writer.resume_search(run.previous, resume_tags)
    for cand in finished:
        cand.decisions = sampler.decisions(cand.arch)  # typed, from the space (params are strings)
        sampler.replay(cand.arch, Outcome.of(cand))
    return run.previous.run_id, finished, stale, k


def _search(
    cfg: SearchConfig, space: SearchSpace, run: _Run, writer: StoreWriter, ctx: TrialContext,
    sampler: Sampler, resources: dict[str, float], cluster: ray_cluster.Cluster, device: str,
    t_start: float,
) -> SearchResult:
    name, output_dir = run.name, run.output_dir
    tags = {
        **_environment_tags(device), "space": space.name, "dataset": cfg.data.display_name,
        "target": Objective.of_search(cfg).describe(),
        **({"target_ms": f"{cfg.target_ms:g}"} if cfg.target_ms is not None else {}),
        **({"target_anchor": cfg.target_anchor, "target_x": f"{cfg.target_x:g}"} if cfg.target_anchor else {}),
        **({"latency_anchor": cfg.anchor} if cfg.anchor else {}),
        "sampler": cfg.search.sampler, "accuracy_estimator": cfg.accuracy.estimator,
        "latency_backend": cfg.latency.backend, "latency_device_name": run.device_name,
        "ray_address": cluster.address, "output_dir": str(output_dir),
        "resources_per_trial": json.dumps(resources), "ray_nodes": str(cluster.nodes),
        "space_sha256": _space_hash(cfg),
    }
    if ctx.faults is not None:
        tags["fault_injection"] = ctx.faults.spec
    parent, candidates, stale, resume_k = _open_record(run, writer, sampler, tags)
    resumed = len(candidates)
    timings = {"startup_seconds": time.perf_counter() - t_start, "mlflow_seconds": 0.0}
    if run.previous is not None:  # before the bar, which it would otherwise run into
        print(f"Resuming search {name}: {resumed} of {cfg.search.n_trials} candidates recorded"
              + (f", {stale} half-written record(s) marked KILLED" if stale else "")
              + f"; the sampler's history rebuilt from them; {max(0, cfg.search.n_trials - resumed)} to run."
              + (f" Its last run stopped on: {run.previous.tags[STOP_REASON_TAG]}"
                 if STOP_REASON_TAG in run.previous.tags else ""),
              flush=True)
    plan = (RungPlan.of(cfg.search.rungs, cfg.search.reduction_factor, supernet=cfg.accuracy.estimator == "supernet")
            if cfg.search.rungs else None)
    progress = Progress(cfg.search.n_trials, enabled=cfg.progress, rungs=plan)
    for cand in candidates:
        progress.update(cand, earlier=True)

    hint = run.resume_command or f"run the same search again with resume=true name={name}"
    failed_write: list[NASError] = []  # the record (or the search's folder) took no more: nothing more is written

    def stop(err: NASError) -> None:
        if not failed_write:
            failed_write.append(err)
            _stop_after_failed_write(writer, parent, err, len(candidates), cfg.search.n_trials, hint)

    def on_record(cand: Candidate) -> None:
        t0 = time.perf_counter()
        try:
            cand.run_id = writer.log_candidate(parent, cand, name)
        except TrackingError as err:
            # The parent is ended at once, before Ray Tune's writes to its state folder (often on
            # the same disk) take what space is left; Ray Tune is then stopped (run_trials raises it).
            stop(err)
            raise
        timings["mlflow_seconds"] += time.perf_counter() - t0
        candidates.append(cand)
        progress.update(cand)
        log.info("candidate %d/%d %s %s: reward %.4f, %s %.4f, latency p50 %.3f ms, %s%s; run %s", len(candidates),
                 cfg.search.n_trials, cand.arch_id, cand.status.lower(), cand.reward, cfg.accuracy.estimator,
                 cand.accuracy, cand.latency_p50, latency_provenance(cand) or "-",
                 f", {cand.failure_reason}" if cand.failure_reason else "", cand.run_id)

    def record_revised(cand: Candidate, metrics: dict[str, float]) -> None:
        writer.log_revised(cand, metrics, {k: cand.tags[k] for k in REVISED_TAGS if k in cand.tags})

    final = FinalPass()
    run_status = "FAILED"
    ray_counts = {"n_ray_trials": 0.0}  # this run's, for the check that Ray Tune, the sampler and MLflow agree
    try:
        remaining = cfg.search.n_trials - resumed
        ray_name = name if resume_k == 0 else f"{name}-resume{resume_k}"
        if remaining > 0:
            hybrid = cfg.latency.backend == "predictor" and bool(cfg.latency.options.get("hybrid"))
            outcome = ray_tune.run_trials(
                ctx, sampler, cfg.search, resources, output_dir / "ray", ray_name, on_record, n_trials=remaining,
                front=(lambda: pareto_points(candidates)) if hybrid else None,
                earlier=[c.rung_rewards() for c in candidates] if cfg.search.rungs else None, watch=progress,
                start=start_archs(cfg.search.start, space, _input_hw(cfg)),
            )
        else:
            outcome = ray_tune.TuneOutcome(experiment_path="(no trials left to run)", finished_trials=0)
        timings["tune_seconds"] = outcome.wall_seconds
        ray_counts["n_ray_trials"] = outcome.ray_trials
        progress.close()  # the trials have ended: what follows starts on a line of its own
        if not outcome.interrupted:
            final = run_final_pass(candidates, cfg, ctx.data.num_classes, space, record_revised,
                                   lambda text: status(f"search {name}: {text}"), on_cluster=cluster.joined_here,
                                   preprocessing=ctx.preprocessing)
        run_status = "KILLED" if outcome.interrupted else ("FAILED" if outcome.crashes else "FINISHED")
    except KeyboardInterrupt:
        run_status = "KILLED"
        print(f"\nInterrupted; what ended is recorded and the parent run is KILLED. To resume it: {hint}",
              file=sys.stderr, flush=True)
        raise
    except TrackingError as err:  # a candidate's record (or a revised one) could not be written
        stop(err)
        raise
    finally:
        # Whatever else happened, record what finished and close the parent run with a status.
        progress.close()
        if not failed_write:
            try:
                t0 = time.perf_counter()
                rows = [leaderboard_row(r) for r in rank(candidates, include_unfinished=True)]
                try:
                    files = _write_artifacts(output_dir, cfg, space, name, candidates, rows)
                except OSError as err:
                    raise SearchError(f"cannot write the search's files in {output_dir}: {err.strerror or err}"
                                      ) from None
                writer.log_artifacts(parent, files.values())
                writer.log_table(parent, rows, "leaderboard_table.json")
                best = best_of(candidates)
                timings["artifacts_seconds"] = time.perf_counter() - t0
                summary = _summary(candidates, sampler, best, timings, t_start, Objective.of_search(cfg).target)
                if run.anchor_ms is not None:  # the anchor's figure before the trials
                    summary["anchor_latency_start_ms"] = run.anchor_ms
                summary.update(ray_counts, n_optuna_trials=sum(sampler.counts().values()))
                summary.update(final.metrics())
                if run.screen is not None:
                    summary.update(run.screen.metrics())
                if cfg.search.fill_mutate_after is not None:
                    summary["fill_mutations"] = float(_fill_mutations(sampler))
                writer.log_summary(parent, summary,
                                   {"best_arch_id": best.arch_id, "best_arch": best.arch} if best else {})
            except (TrackingError, SearchError) as err:  # not ended FINISHED: its summary is missing
                stop(err)
                raise
            writer.end_run(parent, run_status)

    result = SearchResult(
        name=name, status=run_status, best=best, candidates=candidates, leaderboard=rows,
        parent_run_id=parent, experiment_id=writer.experiment_id, tracking_uri=writer.uri, output_dir=output_dir,
        ray_experiment_path=outcome.experiment_path, duplicates=sampler.duplicates,
        wall_seconds=time.perf_counter() - t_start, files=files, timings=timings, resumed=resumed, stale_runs=stale,
        retries=outcome.retries, ray_trials=outcome.ray_trials, optuna_states=sampler.counts(),
        final_pass=final,
    )
    _print_summary(result, cfg, writer, outcome, run.resume_command, run.screen, _fill_mutations(sampler))
    if outcome.crashes:
        raise SearchError(
            "a trial raised an unexpected error (a bug, not a bad candidate); the search was stopped:\n"
            + "\n".join(outcome.crashes)
        )
    return result


def _stop_after_failed_write(
    writer: StoreWriter, parent: str, err: NASError, recorded: int, n_trials: int, hint: str
) -> None:
    """After a write failed, end the parent run FAILED with the error as its tag ``stop_reason``, as
    far as the store allows, and add to ``err`` (a note: the command prints it on the same line)
    what became of the search and how to continue it.

    Nothing else is written: on a full disk, every write would fail the same way.
    """
    try:
        writer.end_run(parent, "FAILED")
    except TrackingError:
        ending = "its parent run stays RUNNING (the store refused that write too)"
    else:
        try:
            writer.log_tags(parent, {STOP_REASON_TAG: str(err)})
            ending = f"its parent run is FAILED (tag {STOP_REASON_TAG})"
        except TrackingError:
            ending = "its parent run is FAILED"
    then = "free space on the store's disk, then" if isinstance(err, StoreFullError) else "once that write can succeed,"
    err.add_note(f"the search stopped with {recorded} of {n_trials} candidates recorded (intact) and {ending}; "
                 f"{then} continue it with: {hint}")


def _summary(
    candidates: list[Candidate], sampler: Sampler, best: Candidate | None, timings: dict[str, float],
    t_start: float, target: float,
) -> dict[str, float]:
    counts = {s: sum(c.status == s for c in candidates) for s in ("COMPLETED", "PRUNED", "FAILED")}
    summary = {
        "n_completed": counts["COMPLETED"], "n_pruned": counts["PRUNED"], "n_failed": counts["FAILED"],
        "n_duplicates": sampler.duplicates, "n_retries": sum(c.metrics.get("retries", 0.0) for c in candidates),
        "wall_seconds": time.perf_counter() - t_start, "trials_seconds": trials_seconds(candidates), **timings,
    }
    summary.update({f"n_latency_{k}": float(v) for k, v in latency_sources(candidates).items()})
    if best is not None:
        summary.update(best_reward=best.reward, best_accuracy=best.accuracy, best_latency_ms=best.latency_p50)
    summary.update({f"target_share_top{i + 1}": x for i, x in enumerate(target_shares(candidates, target))})
    return summary


def _print_summary(
    result: SearchResult, cfg: SearchConfig, writer: StoreWriter, outcome: ray_tune.TuneOutcome,
    resume_command: str | None, screen: LatencyScreen | None = None, fill_mutations: int = 0,
) -> None:
    objective = Objective.of_search(cfg)
    done = len(result.candidates)
    label = accuracy_label(cfg.accuracy.estimator)
    lines = [""]
    if outcome.interrupted:
        how = resume_command or f"run the same search again with resume=true name={result.name}"
        lines += [
            f"Interrupted: {done} of {cfg.search.n_trials} trials ended; what ended is recorded and the parent run "
            "is KILLED.",
            f"To resume it: {how}",
        ]
    elif outcome.exhausted and screen is not None and screen.gave_up:
        lines.append(f"The latency screen refused {screen.max_refused} proposals in a row ({screen.bounds()} the "
                     f"target), so the search ended after {done} trials: the space holds little within that; "
                     "widen search.latency_screen or search.latency_floor, or move the target.")
    elif outcome.exhausted:
        lines.append(f"The space has no architecture left to try after {done} trials.")
    dup = f", {result.duplicates} repeated suggestions answered from earlier results" if result.duplicates else ""
    if result.resumed:
        # This run's wall time is one part of the search: say so, and give the time every recorded
        # candidate's trial took, whichever part ran it.
        lines.append(
            f"Search {result.name}: {done} trials, {done - result.resumed} of them in this part, which took "
            f"{result.wall_seconds:.0f} s{dup} (earlier parts recorded {result.resumed}; their time is not in "
            f"that figure). The recorded trials took {trials_seconds(result.candidates):.0f} s in all, "
            f"up to {cfg.search.max_concurrent} at a time."
        )
    else:
        lines.append(f"Search {result.name}: {done} trials in {result.wall_seconds:.0f} s{dup}.")
    if result.candidates:
        table = rank(result.candidates, top_k=cfg.top_k, include_unfinished=True)[: cfg.top_k]
        lines += ["", format_table(table, accuracy_label=label), ""]
    lines.append(format_best(result.candidates, objective.target, label))
    used = budget_used(result.candidates, objective.target)
    if used:
        lines.append(used)
    if objective.relative:
        lines.append(f"Target: x{objective.target_x:g} the anchor {cfg.anchor} ({cfg.latency.target_stat}): the reward "
                     "and 'meets' use each candidate's x_anchor, its latency over the anchor's measured beside it; "
                     "the milliseconds are shown beside it.")
    if cfg.data.name == "digits":
        lines += ["", DEMO_NOTE]
    if result.final_pass.summary_line():
        lines.append(str(result.final_pass.summary_line()))
    if screen is not None:
        lines.append(screen.summary_line())
    if cfg.search.fill_mutate_after is not None:
        lines.append(f"Evolution's first population: {fill_mutations} proposal(s) in this run were mutations of its "
                     f"members, each after {cfg.search.fill_mutate_after} uniform draws in a row were refused "
                     "(search.fill_mutate_after).")
    sources = latency_sources(result.candidates)
    if "predicted" in sources:
        confirmed = {k.removeprefix("confirmed_"): v for k, v in sources.items() if k.startswith("confirmed_")}
        why = ", ".join(f"{k} {v}" for k, v in sorted(confirmed.items()))
        lines.append(f"Latency: {sources['predicted']} predicted, {sources.get('measured', 0)} measured"
                     + (f" to confirm the prediction ({why})" if why else "") + ".")
    lines += [
        "",
        "Results:",
        f"  MLflow   experiment {cfg.tracking.experiment!r}, parent run {result.name!r} ({result.parent_run_id})",
        f"           in {result.tracking_uri}",
        f"  files    {result.output_dir} (leaderboard.csv, best_arch.json, config.yaml)",
        f"  Ray Tune {result.ray_experiment_path}",
        f"Open in the MLflow UI: {writer.ui_command()}",
        f"  then its candidates, best reward first: {writer.ui_link(result.parent_run_id)}",
        f"  reward and accuracy against latency:     {writer.ui_link(result.parent_run_id, charts=True)}",
    ]
    text = "\n".join(lines)
    print(text, flush=True)
    log.info("the search ended:%s", text)
