"""The search driver: :func:`run_search` takes a :class:`~nas.config.SearchConfig` and runs it.

Everything a user can get wrong is checked before the first trial: values and ranges, the
search space, the dataset path, the latency backend, the MLflow store, the Ray cluster. Then
the parent MLflow run is opened, the trials run on Ray Tune, each finished trial is recorded
as it finishes, and the parent run is closed with a status whatever happens.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import platform
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import torch
import yaml

from latency_predictor import LatencyError
from latency_predictor.environment import cpu_model, package_version
from nas import tune_adapter
from nas.config import SearchConfig, validate
from nas.data import load_dataset
from nas.errors import ConfigError, NASError, SearchError
from nas.record import LEADERBOARD_COLUMNS, CandidateRecord, best_of, leaderboard_rows
from nas.report import Progress, format_best, format_table
from nas.sampler import ArchSampler
from nas.tracking import Tracker, default_tracking_uri
from nas.trial import TrialContext, make_latency_estimator
from search_spaces import SearchSpace, SearchSpaceError

USER_ERRORS: tuple[type[Exception], ...] = (NASError, SearchSpaceError, LatencyError)
_PROJECT_ROOT = Path(__file__).resolve().parent.parent


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


def run_search(cfg: SearchConfig) -> SearchResult:
    """Run one search as ``cfg`` describes and record it in MLflow.

    Args:
        cfg: the full configuration (``cfg.space`` is the space mapping).

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
    output_dir = Path(cfg.output_dir).resolve() if cfg.output_dir else (launch_dir / "outputs" / name).resolve()
    uri = cfg.tracking.uri or default_tracking_uri(launch_dir)
    tracker = Tracker(uri, cfg.tracking.experiment)  # creates the store first, in this process only

    data = load_dataset(cfg.data)
    on_cluster = tune_adapter.joins_cluster(cfg.ray)
    if not on_cluster:
        make_latency_estimator(cfg.latency, data.num_classes, space)  # the backend's options are checked here
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
            threads=max(1, int(resources["cpu"])),
        )
        return _search(cfg, space, name, output_dir, tracker, ctx, sampler, resources, cluster, device, t_start)
    finally:
        tune_adapter.disconnect(cluster)


def _search(
    cfg: SearchConfig, space: SearchSpace, name: str, output_dir: Path, tracker: Tracker, ctx: TrialContext,
    sampler: ArchSampler, resources: dict[str, float], cluster: tune_adapter.Cluster, device: str,
    t_start: float,
) -> SearchResult:
    params = {k: v for k, v in _flatten(dataclasses.asdict(cfg)).items() if not k.startswith("space")}
    params.update(space=space.name, space_size=space.size(), dataset=ctx.data.summary())
    tags = {
        **_environment_tags(device), "space": space.name, "target_ms": f"{cfg.target_ms:g}",
        "sampler": cfg.search.sampler, "accuracy_estimator": cfg.accuracy.estimator,
        "latency_backend": cfg.latency.backend, "ray_address": cluster.address, "output_dir": str(output_dir),
        "resources_per_trial": json.dumps(resources), "ray_nodes": str(cluster.nodes),
    }
    parent = tracker.start_search(name, params, tags)
    records: list[CandidateRecord] = []
    run_ids: dict[str, str] = {}
    progress = Progress(cfg.search.n_trials, enabled=cfg.progress)
    timings = {"startup_seconds": time.perf_counter() - t_start, "mlflow_seconds": 0.0}

    def on_record(rec: CandidateRecord) -> None:
        t0 = time.perf_counter()
        run_ids[rec.trial_id] = tracker.log_candidate(rec, name)
        timings["mlflow_seconds"] += time.perf_counter() - t0
        records.append(rec)
        progress.update(rec)

    status = "FAILED"
    try:
        outcome = tune_adapter.run_trials(ctx, sampler, cfg.search, resources, output_dir / "ray", name, on_record)
        timings["tune_seconds"] = outcome.wall_seconds
        status = "KILLED" if outcome.interrupted else ("FAILED" if outcome.crashes else "FINISHED")
    except KeyboardInterrupt:
        status = "KILLED"
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
            tracker.log_summary(_summary(records, sampler, best, timings, t_start),
                                {"best_arch_id": best.arch_id, "best_arch": best.arch} if best else {})
        finally:
            tracker.end_search(status)

    result = SearchResult(
        name=name, status=status, best=best, candidates=records, leaderboard=rows, run_ids=run_ids,
        parent_run_id=parent, experiment_id=tracker.experiment_id, tracking_uri=tracker.uri, output_dir=output_dir,
        ray_experiment_path=outcome.experiment_path, duplicates=sampler.duplicates,
        wall_seconds=time.perf_counter() - t_start, files=files, timings=timings,
    )
    _print_summary(result, cfg, tracker, outcome)
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
        "n_duplicates": sampler.duplicates, "wall_seconds": time.perf_counter() - t_start, **timings,
    }
    if best is not None:
        summary.update(best_reward=best.metrics["reward"], best_accuracy=best.metrics["accuracy"],
                       best_latency_ms=best.metrics["latency_p50"])
    return summary


def _print_summary(
    result: SearchResult, cfg: SearchConfig, tracker: Tracker, outcome: tune_adapter.TuneOutcome
) -> None:
    target_ms = cast(float, cfg.target_ms)
    done = len(result.candidates)
    lines = [""]
    if outcome.interrupted:
        lines.append(f"Interrupted: {done} of {cfg.search.n_trials} trials ended; what ended is recorded.")
    elif outcome.exhausted:
        lines.append(f"The space has no architecture left to try after {done} trials.")
    dup = f", {result.duplicates} repeated suggestions answered from earlier results" if result.duplicates else ""
    lines.append(f"Search {result.name}: {done} trials in {result.wall_seconds:.0f} s{dup}.")
    if result.leaderboard:
        lines += ["", format_table(result.leaderboard, target_ms, cfg.top_k), ""]
    lines.append(format_best(result.candidates, target_ms))
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


