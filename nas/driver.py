"""The search driver: :func:`run_search` takes a :class:`~nas.config.SearchConfig` and runs it.

Everything a user can get wrong is checked before the first trial: values and ranges, the
search space, the dataset path, the latency backend, the MLflow store, the Ray cluster. Then
the parent MLflow run is opened, the trials run on Ray Tune, each finished trial is recorded
as it finishes, and the parent run is closed with a status whatever happens.

**Resuming** (``resume=true name=<name>``) re-drives the search from its MLflow record, the
one store every finished candidate is written to before anything else learns of it: the parent
run is reopened (a child run the killed driver left RUNNING is marked KILLED), the settings
that decide results must match the recorded ones, every recorded candidate is replayed into
a fresh sampler (:meth:`nas.sampler.ArchSampler.replay`: Optuna's history is rebuilt, and
those architectures are never proposed again), and a new Ray Tune experiment
(``<output_dir>/ray/<name>-resume<k>``) runs the trials still missing. Ray Tune's own
``Tuner.restore`` is not used: its snapshot of the experiment lags the record by up to its
checkpoint period, so a driver killed in between would run recorded candidates again.
"""

from __future__ import annotations

import csv
import dataclasses
import hashlib
import json
import os
import platform
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import torch
import yaml

from latency_predictor import ConfigError as LatencyConfigError
from latency_predictor import LatencyError
from latency_predictor.environment import cpu_model, package_version
from nas import tune_adapter
from nas.config import SearchConfig, validate
from nas.data import load_dataset
from nas.errors import ConfigError, NASError, SearchError
from nas.faults import ENV_VAR as FAULTS_ENV_VAR
from nas.faults import FaultPlan
from nas.record import LEADERBOARD_COLUMNS, CandidateRecord, best_of, latency_sources, leaderboard_rows, pareto_points
from nas.report import Progress, format_best, format_table
from nas.sampler import ArchSampler, Outcome
from nas.tracking import RunInfo, Tracker, candidate_from_run, default_tracking_uri
from nas.trial import TrialContext, make_latency_estimator
from search_spaces import SearchSpace, SearchSpaceError

USER_ERRORS: tuple[type[Exception], ...] = (NASError, SearchSpaceError, LatencyError)
_PROJECT_ROOT = Path(__file__).resolve().parent.parent
RESUMABLE_KEYS = (
    "name", "output_dir", "top_k", "progress", "resume", "search.n_trials", "search.max_concurrent",
    "search.max_retries", "search.trial_timeout_s", "search.max_duplicates",
)
"""Settings a resumed search may change; every other one (and anything under ``ray.`` or
``tracking.``, which may change too) must match the recorded search, or results would mix."""


@dataclass
class SearchResult:
    """What a search produced.

    Attributes:
        name: the search's name (MLflow parent run name, Ray Tune experiment name).
        status: ``FINISHED``, ``KILLED`` (interrupted) or ``FAILED``.
        best: the completed candidate with the highest reward (None if none completed).
        candidates: every evaluated candidate, in the order they finished.
        leaderboard: ranked rows (see :data:`nas.record.LEADERBOARD_COLUMNS`).
        run_ids: trial id -> MLflow child run id.
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
    """

    name: str
    status: str
    best: CandidateRecord | None
    candidates: list[CandidateRecord]
    leaderboard: list[dict[str, Any]]
    run_ids: dict[str, str]
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
    tags = {
        "train_device": device, "cpu_model": cpu_model(), "python": platform.python_version(),
        "gpu": ", ".join(torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())) or "none",
    }
    for dist in ("torch", "numpy", "onnx", "onnxruntime", "onnxruntime-gpu", "ray", "optuna", "mlflow", "hydra-core",
                 "scikit-learn"):
        version = package_version(dist)
        if version != "not installed":
            tags[f"version.{dist}"] = version
    return {**tags, **_git_commit()}


def _space_hash(cfg: SearchConfig) -> str:
    return hashlib.sha256(yaml.safe_dump(cfg.space, sort_keys=True).encode()).hexdigest()[:16]


def _params(cfg: SearchConfig, space: SearchSpace, dataset: dict[str, Any]) -> dict[str, str]:
    """The parent run's params: the flattened config (the space by name, size and hash)."""
    params = {k: v for k, v in _flatten(dataclasses.asdict(cfg)).items() if not k.startswith("space")}
    params.update(space=space.name, space_size=space.size(), dataset=dataset)
    return {k: str(v)[:6000] for k, v in params.items()}


def _check_resumable(previous: RunInfo, params: dict[str, str], space_hash: str, name: str) -> dict[str, str]:
    """The resumable settings that changed; raise when another one differs from the record.

    Raises:
        ConfigError: naming each setting that differs from the recorded search.
    """
    changed, differ = {}, []
    for key, value in params.items():
        if key not in previous.params or previous.params[key] == value:
            continue
        if key in RESUMABLE_KEYS or key.startswith(("ray.", "tracking.")):
            changed[key] = f"{previous.params[key]} -> {value}"
        else:
            differ.append(f"{key}={previous.params[key]} (now {value})")
    recorded_hash = previous.tags.get("space_sha256")
    if recorded_hash is not None and recorded_hash != space_hash:
        differ.append("the search space definition")
    if differ:
        raise ConfigError(
            "resume", f"search {name!r} was recorded with other settings: {'; '.join(differ)}; resume with the "
            "recorded settings, or start a new search with another name"
        )
    return changed


def _outcome_of_record(rec: CandidateRecord) -> Outcome:
    """What the sampler is told about a recorded candidate (a resumed search's history)."""
    m = rec.metrics
    step = int(m.get("epochs_completed", 0))
    if rec.status == "COMPLETED":
        return Outcome("complete", reward=m.get("reward"), accuracy=m.get("accuracy"), latency_ms=m.get("latency_p50"),
                       step=step)
    if rec.status == "PRUNED":
        return Outcome("pruned", reward=m.get("reward"), accuracy=m.get("accuracy"), latency_ms=m.get("latency_p50"),
                       step=step)
    return Outcome("fail")


def _check_output_dir(output_dir: Path) -> None:
    """Create the search's folder now, so that a bad ``output_dir`` fails before any trial."""
    try:
        output_dir.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise ConfigError(
            "output_dir", f"cannot create {str(output_dir)!r} ({err.strerror or err}); choose a folder you can write"
        ) from None
    if not os.access(output_dir, os.W_OK | os.X_OK):
        raise ConfigError("output_dir", f"{str(output_dir)!r} is not writable; choose a folder you can write")


def _check_latency(cfg: SearchConfig, num_classes: int, space: SearchSpace) -> None:
    """Build the latency backend as a trial will; a bad setting names the latency group's keys."""
    try:
        make_latency_estimator(cfg.latency, num_classes, space)
    except LatencyConfigError as err:
        raise LatencyConfigError(
            f"latency (backend {cfg.latency.backend!r}): {err}; set these with latency.options.<key>=... and "
            "latency.measure.<key>=..."
        ) from None


def _resume_command(command: list[str] | None, name: str) -> str | None:
    if command is None:
        return None
    kept = [a for a in command if a.lstrip("+").split("=", 1)[0] not in ("name", "resume")]
    return shlex.join([*kept, f"name={name}", "resume=true"])


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
    return f"{space.name}-{cfg.target_ms:g}ms-{time.strftime('%Y%m%d-%H%M%S')}"


# ---------------------------------------------------------------------- artifacts


def _write_artifacts(
    out: Path, cfg: SearchConfig, space: SearchSpace, name: str, records: list[CandidateRecord],
    rows: list[dict[str, Any]], run_ids: dict[str, str],
) -> dict[str, Path]:
    out.mkdir(parents=True, exist_ok=True)
    files = {"config": out / "config.yaml", "space": out / "space.yaml", "leaderboard": out / "leaderboard.csv"}
    files["config"].write_text(yaml.safe_dump(dataclasses.asdict(cfg), sort_keys=False))
    files["space"].write_text(yaml.safe_dump(cfg.space, sort_keys=False))
    with files["leaderboard"].open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(LEADERBOARD_COLUMNS))
        w.writeheader()
        w.writerows(rows)
    best = best_of(records)
    if best is not None:
        files["best_json"] = out / "best_arch.json"
        files["best_txt"] = out / "best_arch.txt"
        files["best_json"].write_text(json.dumps({
            "arch": best.arch, "arch_id": best.arch_id, "space": space.name, "space_source": space.source,
            "decisions": best.decisions, "input_shape": list(cfg.latency.input_shape), "target_ms": cfg.target_ms,
            "reward_fn": cfg.search.reward, "accuracy_estimator": best.tags.get("accuracy_estimator"),
            "dataset": cfg.data.name, "metrics": best.metrics, "latency": best.latency,
            "search": name, "run_id": run_ids.get(best.trial_id),
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
    launch_dir = Path.cwd()
    name = _search_name(cfg, space)
    uri = cfg.tracking.uri or default_tracking_uri(launch_dir)
    tracker = Tracker(uri, cfg.tracking.experiment)  # creates the store first, in this process only
    previous = tracker.previous_search(name)
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
    out = cfg.output_dir or (previous.tags.get("output_dir") if previous is not None else None)
    output_dir = Path(out).resolve() if out else (launch_dir / "outputs" / name).resolve()
    _check_output_dir(output_dir)

    data = load_dataset(cfg.data)
    params = _params(cfg, space, data.summary())
    changed = _check_resumable(previous, params, _space_hash(cfg), name) if previous is not None else {}
    faults = _fault_plan(output_dir)
    on_cluster = tune_adapter.joins_cluster(cfg.ray)
    if not on_cluster:
        _check_latency(cfg, data.num_classes, space)
    if not on_cluster and cfg.train.device.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError("train.device", f"{cfg.train.device} but this machine has no CUDA GPU; use auto or cpu")

    cluster = tune_adapter.connect(cfg.ray)
    try:
        resources = tune_adapter.trial_resources(cfg.ray, cluster, cfg.search.max_concurrent)
        if on_cluster:
            # Checked where trials run: the driver's machine may lack their device (a CPU-only head node).
            tune_adapter.check_latency_on_trial_node(cfg.latency, data.num_classes, space, resources)
        if cfg.train.device.startswith("cuda") and resources["gpu"] == 0:
            raise ConfigError("ray.gpus_per_trial", f"is 0 but train.device={cfg.train.device}: give trials a GPU")
        # What the trials will train on: Ray shows a trial only the GPUs it reserved.
        device = cfg.train.device if cfg.train.device != "auto" else ("cuda" if resources["gpu"] > 0 else "cpu")
        sampler = ArchSampler(
            space, cfg.search.sampler, cfg.search.seed, cfg.search.n_startup_trials, cfg.search.population_size,
            cfg.search.max_duplicates,
        )
        ctx = TrialContext(
            space, data, cfg.train, cfg.accuracy, cfg.latency, cast(float, cfg.target_ms), cfg.search.reward,
            threads=max(1, int(resources["cpu"])), trial_timeout_s=cfg.search.trial_timeout_s, faults=faults,
        )
        run = _Run(name, output_dir, params, previous, changed, _resume_command(command, name))
        return _search(cfg, space, run, tracker, ctx, sampler, resources, cluster, device, t_start)
    finally:
        tune_adapter.disconnect(cluster)


@dataclass(frozen=True)
class _Run:
    """This run of a search: its name, folder, params, and the record it resumes (if any)."""

    name: str
    output_dir: Path
    params: dict[str, str]
    previous: RunInfo | None
    changed: dict[str, str]
    resume_command: str | None


def _open_record(
    run: _Run, tracker: Tracker, space: SearchSpace, sampler: ArchSampler, tags: dict[str, str]
) -> tuple[str, list[CandidateRecord], dict[str, str], int, int]:
    """Start the parent run, or reopen it and replay its candidates into ``sampler``.

    Returns:
        The parent run id, the recorded candidates, their run ids, stale runs marked KILLED, and
        this run's resume number (0: a new search).
    """
    if run.previous is None:
        return tracker.start_search(run.name, run.params, tags), [], {}, 0, 0
    k = int(run.previous.tags.get("resume_count", "0")) + 1
    resume_tags = {**tags, "resume_count": str(k)}
    if run.changed:
        resume_tags[f"resume_{k}_changes"] = json.dumps(run.changed)
    finished, stale = tracker.resume_search(run.previous, resume_tags)
    records, run_ids = [], {}
    for info in finished:
        arch = info.params["arch"]
        rec = candidate_from_run(info, space.to_decisions(space.decode(arch)))
        sampler.replay(arch, _outcome_of_record(rec))
        records.append(rec)
        run_ids[rec.trial_id] = info.run_id
    return run.previous.run_id, records, run_ids, stale, k


def _search(
    cfg: SearchConfig, space: SearchSpace, run: _Run, tracker: Tracker, ctx: TrialContext,
    sampler: ArchSampler, resources: dict[str, float], cluster: tune_adapter.Cluster, device: str,
    t_start: float,
) -> SearchResult:
    name, output_dir = run.name, run.output_dir
    tags = {
        **_environment_tags(device), "space": space.name, "target_ms": f"{cfg.target_ms:g}",
        "sampler": cfg.search.sampler, "accuracy_estimator": cfg.accuracy.estimator,
        "latency_backend": cfg.latency.backend, "ray_address": cluster.address, "output_dir": str(output_dir),
        "resources_per_trial": json.dumps(resources), "ray_nodes": str(cluster.nodes),
        "space_sha256": _space_hash(cfg),
    }
    if ctx.faults is not None:
        tags["fault_injection"] = ctx.faults.spec
    parent, records, run_ids, stale, resume_k = _open_record(run, tracker, space, sampler, tags)
    resumed = len(records)
    progress = Progress(cfg.search.n_trials, enabled=cfg.progress)
    for rec in records:
        progress.update(rec)
    timings = {"startup_seconds": time.perf_counter() - t_start, "mlflow_seconds": 0.0}
    if run.previous is not None:
        print(f"Resuming search {name}: {resumed} of {cfg.search.n_trials} candidates recorded"
              + (f", {stale} half-written record(s) marked KILLED" if stale else "")
              + f"; Optuna's history rebuilt from them; {max(0, cfg.search.n_trials - resumed)} to run.", flush=True)

    def on_record(rec: CandidateRecord) -> None:
        t0 = time.perf_counter()
        run_ids[rec.trial_id] = tracker.log_candidate(rec, name)
        timings["mlflow_seconds"] += time.perf_counter() - t0
        records.append(rec)
        progress.update(rec)

    status = "FAILED"
    ray_counts = {"n_ray_trials": 0.0}  # this run's, for the check that Ray Tune, Optuna and MLflow agree
    try:
        remaining = cfg.search.n_trials - resumed
        ray_name = name if resume_k == 0 else f"{name}-resume{resume_k}"
        if remaining > 0:
            hybrid = cfg.latency.backend == "predictor" and bool(cfg.latency.options.get("hybrid"))
            outcome = tune_adapter.run_trials(
                ctx, sampler, cfg.search, resources, output_dir / "ray", ray_name, on_record, n_trials=remaining,
                front=(lambda: pareto_points(records)) if hybrid else None,
            )
        else:
            outcome = tune_adapter.TuneOutcome(experiment_path="(no trials left to run)", finished_trials=0)
        timings["tune_seconds"] = outcome.wall_seconds
        ray_counts["n_ray_trials"] = outcome.ray_trials
        status = "KILLED" if outcome.interrupted else ("FAILED" if outcome.crashes else "FINISHED")
    except KeyboardInterrupt:
        status = "KILLED"
        hint = run.resume_command or f"run the same search again with resume=true name={name}"
        print(f"\nInterrupted; what ended is recorded and the parent run is KILLED. To resume it: {hint}",
              file=sys.stderr, flush=True)
        raise
    finally:
        # Whatever happened, record what finished and close the parent run with a status.
        try:
            progress.close()
            t0 = time.perf_counter()
            rows = leaderboard_rows(records, run_ids)
            files = _write_artifacts(output_dir, cfg, space, name, records, rows, run_ids)
            tracker.log_artifacts(files.values())
            best = best_of(records)
            timings["artifacts_seconds"] = time.perf_counter() - t0
            summary = _summary(records, sampler, best, timings, t_start)
            summary.update(ray_counts, n_optuna_trials=sum(sampler.counts().values()))
            tracker.log_summary(summary, {"best_arch_id": best.arch_id, "best_arch": best.arch} if best else {})
        finally:
            tracker.end_search(status)

    result = SearchResult(
        name=name, status=status, best=best, candidates=records, leaderboard=rows, run_ids=run_ids,
        parent_run_id=parent, experiment_id=tracker.experiment_id, tracking_uri=tracker.uri, output_dir=output_dir,
        ray_experiment_path=outcome.experiment_path, duplicates=sampler.duplicates,
        wall_seconds=time.perf_counter() - t_start, files=files, timings=timings, resumed=resumed, stale_runs=stale,
        retries=outcome.retries, ray_trials=outcome.ray_trials, optuna_states=sampler.counts(),
    )
    _print_summary(result, cfg, tracker, outcome, run.resume_command)
    if outcome.crashes:
        raise SearchError(
            "a trial raised an unexpected error (a bug, not a bad candidate); the search was stopped:\n"
            + "\n".join(outcome.crashes)
        )
    return result


def _summary(
    records: list[CandidateRecord], sampler: ArchSampler, best: CandidateRecord | None, timings: dict[str, float],
    t_start: float,
) -> dict[str, float]:
    counts = {s: sum(r.status == s for r in records) for s in ("COMPLETED", "PRUNED", "FAILED")}
    summary = {
        "n_completed": counts["COMPLETED"], "n_pruned": counts["PRUNED"], "n_failed": counts["FAILED"],
        "n_duplicates": sampler.duplicates, "n_retries": sum(r.metrics.get("retries", 0.0) for r in records),
        "wall_seconds": time.perf_counter() - t_start, **timings,
    }
    summary.update({f"n_latency_{k}": float(v) for k, v in latency_sources(records).items()})
    if best is not None:
        summary.update(best_reward=best.metrics["reward"], best_accuracy=best.metrics["accuracy"],
                       best_latency_ms=best.metrics["latency_p50"])
    return summary


def _print_summary(
    result: SearchResult, cfg: SearchConfig, tracker: Tracker, outcome: tune_adapter.TuneOutcome,
    resume_command: str | None,
) -> None:
    target_ms = cast(float, cfg.target_ms)
    done = len(result.candidates)
    lines = [""]
    if outcome.interrupted:
        how = resume_command or f"run the same search again with resume=true name={result.name}"
        lines += [
            f"Interrupted: {done} of {cfg.search.n_trials} trials ended; what ended is recorded and the parent run "
            "is KILLED.",
            f"To resume it: {how}",
        ]
    elif outcome.exhausted:
        lines.append(f"The space has no architecture left to try after {done} trials.")
    dup = f", {result.duplicates} repeated suggestions answered from earlier results" if result.duplicates else ""
    lines.append(f"Search {result.name}: {done} trials in {result.wall_seconds:.0f} s{dup}.")
    if result.leaderboard:
        lines += ["", format_table(result.leaderboard, target_ms, cfg.top_k), ""]
    lines.append(format_best(result.candidates, target_ms))
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
        f"Open in the MLflow UI: {tracker.run_url_hint()}",
    ]
    print("\n".join(lines), flush=True)


