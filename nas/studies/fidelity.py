"""``python -m nas.fidelity``: does a cheap accuracy estimate rank architectures like real training does?

The study samples ``k`` architectures across a space (seeded; the smallest and the largest by
MACs, the rest spread evenly over the MACs range of a large uniform sample), trains each with a
*reference* budget (``reference.train_samples`` images for ``reference.epochs`` epochs, with the
``train`` group's recipe, validated on the carved validation split), and scores the same
architectures with each cheap estimator:

* ``train_<e>ep``: the same recipe for ``e`` epochs on ``cheap_train_samples`` images (one
  estimator per entry of ``cheap_epochs``; the learning-rate schedule spans its own epochs);
* the training-free scores of ``zero_cost`` (:mod:`nas.accuracy.zero_cost`);
* the trivial baselines ``params`` and ``macs``;
* with ``supernet.checkpoint``, ``supernet``: each architecture's subnet of that trained supernet,
  BatchNorm recalibrated, validated on the same split (:mod:`nas.oneshot.subnet`); its records name
  the checkpoint's digest, so another checkpoint is estimated anew, and its cost per candidate
  leaves out the supernet's training, which the JSON record reports beside it.

For every estimator it reports Kendall's tau and Spearman's rho against the reference with
bootstrap confidence intervals, the overlap of the top 10%, and its cost per candidate (median
seconds, and as a share of the reference's), as a table, a JSON record and a plot in the study's
folder, and as an MLflow run (tag ``latnas.role=fidelity``). Every estimate is appended to
``records.jsonl`` as soon as it exists, so a stopped study resumes where it stopped: nothing
recorded (a reference training least of all) is computed again.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch
from tqdm import tqdm

from latency_predictor.prediction.features import FeatureExtractor
from nas.accuracy.training import resolve_device, train_briefly
from nas.accuracy.zero_cost import zero_cost_score
from nas.adapters.mlflow_writer import StoreWriter
from nas.core.config import (
    DataConfig,
    FidelityConfig,
    RungConfig,
    SupernetEstimateConfig,
    TrainConfig,
    validate_fidelity,
)
from nas.core.errors import NASError
from nas.core.paths import default_tracking_uri, project_home
from nas.data import ProxyData, load_dataset
from nas.oneshot.subnet import LoadedSupernet, SupernetTarget, check_supernet, load_supernet, subnet_accuracy
from nas.runtime.workers import die_with_parent, in_workers
from nas.studies.stats import Agreement, agreement, noise_ceiling
from search_spaces import Arch, SearchSpace, build

REFERENCE = "reference"
"""The reference training with ``train.seed``; ``reference_seed<s>`` for each of ``reference.extra_seeds``,
and the study's reference is then the mean of them all."""
SUPERNET = "supernet"
RECORDS = "records.jsonl"
_POOL = 4000  # uniform samples the k architectures are spread over (by MACs)


class FidelityError(NASError):
    """A fidelity study cannot run (e.g. its folder holds another study)."""


# ---------------------------------------------------------------------- which architectures


def choose_archs(space: SearchSpace, k: int, seed: int, input_shape: tuple[int, ...], num_classes: int) -> list[Arch]:
    """``k`` distinct architectures of ``space``: its smallest and largest corner networks by MACs, and
    ``k - 2`` from a seeded uniform sample, one nearest to each of ``k - 2`` evenly spaced MACs quantiles."""
    rng = np.random.default_rng(seed)
    features = FeatureExtractor(input_shape, num_classes)
    col = features.names.index("total.macs")
    corners = list(dict.fromkeys(space.extremes()))
    corner_macs = features.transform(corners)[:, col]
    chosen = [corners[int(np.argmin(corner_macs))], corners[int(np.argmax(corner_macs))]]
    pool = list(dict.fromkeys(space.sample(rng) for _ in range(_POOL)))
    pool = [a for a in pool if a not in chosen]
    macs = features.transform(pool)[:, col]
    taken: set[int] = set()
    for q in np.linspace(0, 1, k - 2 + 2)[1:-1]:  # interior quantiles: the corners cover the ends
        target = np.quantile(macs, q)
        for i in np.argsort(np.abs(macs - target), kind="stable"):
            if int(i) not in taken:
                taken.add(int(i))
                chosen.append(pool[int(i)])
                break
    return chosen[:k]


# ---------------------------------------------------------------------- the estimates


@dataclass(frozen=True)
class Task:
    """One estimate to compute: an architecture and an estimator's name."""

    arch: str
    estimator: str


@dataclass(frozen=True)
class _Context:
    """What a worker needs to compute estimates (shipped once per worker)."""

    data: DataConfig
    train: TrainConfig
    reference: tuple[int, int]
    cheap_train_samples: int
    zero_cost_batch: int
    num_classes: int
    threads: int
    space: SearchSpace | None = None
    supernet: SupernetEstimateConfig | None = None
    rungs: tuple[RungConfig, ...] = ()


_WORKER: dict[str, Any] = {}


def _init_worker(ctx: _Context) -> None:
    die_with_parent()  # a killed study leaves no worker training on
    torch.set_num_threads(ctx.threads)
    _WORKER["ctx"] = ctx
    _WORKER["data"] = load_dataset(ctx.data)


def _trained_accuracy(arch: Arch, data: ProxyData, train: TrainConfig, epochs: int, samples: int,
                      num_classes: int) -> tuple[float, dict[str, Any]]:
    torch.manual_seed(train.seed)
    net = build(arch, num_classes=num_classes, dropout=train.dropout)
    subset = data.take_train(samples, train.seed)
    history = train_briefly(net, subset, dataclasses.replace(train, epochs=epochs), resolve_device(train.device))
    last = history[-1]
    return last.accuracy, {"val_loss": last.val_loss, "train_images": subset.n_train, "epochs": epochs,
                           "accuracy_per_epoch": [h.accuracy for h in history]}


def _rung_accuracies(arch: Arch, data: ProxyData, train: TrainConfig, rungs: tuple[RungConfig, ...],
                     num_classes: int) -> list[tuple[float, float, dict[str, Any]]]:
    """Each rung's accuracy, trained rung after rung as a search does (:mod:`nas.trial.rungs`: nested
    subsets, each rung continuing from the weights of the one below), in one training: rung ``k``'s
    estimate is this training's figure at the end of rung ``k``, and its cost the seconds until then
    (what a search pays for it). One ``(value, seconds, detail)`` per rung."""
    t0 = time.perf_counter()
    torch.manual_seed(train.seed)
    net = build(arch, num_classes=num_classes, dropout=train.dropout)
    per_rung: list[float] = []
    out = []
    for k, r in enumerate(rungs):
        history = train_briefly(net, data.take_train(r.train_images, train.seed),
                                dataclasses.replace(train, epochs=r.epochs), resolve_device(train.device))
        per_rung.append(history[-1].accuracy)
        out.append((per_rung[-1], time.perf_counter() - t0,
                    {"rungs": [dataclasses.asdict(x) for x in rungs[: k + 1]], "accuracy_per_rung": list(per_rung)}))
    return out


def compute(task: Task, ctx: _Context | None = None, data: ProxyData | None = None) -> list[dict[str, Any]]:
    """The estimates of one task, each ``{"arch", "arch_id", "estimator", "value", "seconds", "load_average",
    "detail"}`` (``load_average``: the machine's 1-minute load when the task ended, so that a cost
    measured on a busy machine can be told): one, or for ``rung<k>`` those of rungs ``0..k`` from one
    training (a search's rungs build on each other).

    Runs in a worker process (whose initialiser loaded the data) or in this one (``ctx`` and ``data``).
    """
    ctx = ctx or cast(_Context, _WORKER["ctx"])
    data = data or cast(ProxyData, _WORKER["data"])
    arch = Arch.decode(task.arch)
    if task.estimator.startswith("rung"):
        rungs = ctx.rungs[: int(task.estimator[len("rung"):]) + 1]
        per_rung = _rung_accuracies(arch, data, ctx.train, rungs, ctx.num_classes)
        load = os.getloadavg()[0]
        return [{"arch": task.arch, "arch_id": arch.arch_id, "estimator": f"rung{k}", "value": float(value),
                 "seconds": seconds, "load_average": load, "detail": detail}
                for k, (value, seconds, detail) in enumerate(per_rung)]
    t0 = time.perf_counter()
    detail: dict[str, Any] = {}
    if task.estimator == REFERENCE or task.estimator.startswith(f"{REFERENCE}_seed"):
        seed = int(task.estimator.removeprefix(f"{REFERENCE}_seed")) if task.estimator != REFERENCE else ctx.train.seed
        value, detail = _trained_accuracy(arch, data, dataclasses.replace(ctx.train, seed=seed), ctx.reference[1],
                                          ctx.reference[0], ctx.num_classes)
        detail["seed"] = seed
    elif task.estimator == SUPERNET:
        assert ctx.supernet is not None and ctx.space is not None  # the study names the estimator only with both
        sn = ctx.supernet
        loaded = load_supernet(cast(str, sn.checkpoint), ctx.space, SupernetTarget.of(ctx.space, data))
        res = subnet_accuracy(loaded, arch, data, sn.bn_batches, sn.batch_size, resolve_device(ctx.train.device),
                              ctx.train.seed)
        value, detail = res.accuracy, {"val_loss": res.val_loss, "checkpoint_sha256": loaded.sha256,
                                       "recalibration_images": res.recalibration_images}
    elif task.estimator.startswith("train_") and task.estimator.endswith("ep"):
        epochs = int(task.estimator[len("train_"):-len("ep")])
        value, detail = _trained_accuracy(arch, data, ctx.train, epochs, ctx.cheap_train_samples, ctx.num_classes)
    else:
        torch.manual_seed(ctx.train.seed)
        net = build(arch, num_classes=ctx.num_classes)
        value = zero_cost_score(task.estimator, net, data, ctx.zero_cost_batch, resolve_device(ctx.train.device),
                                ctx.train.seed)
    return [{"arch": task.arch, "arch_id": arch.arch_id, "estimator": task.estimator, "value": float(value),
             "seconds": time.perf_counter() - t0, "load_average": os.getloadavg()[0], "detail": detail}]


# ---------------------------------------------------------------------- the study


@dataclass
class FidelityResult:
    """What a study found.

    Attributes:
        name: the study's name.
        folder: its folder (records, JSON, table, plot).
        archs: the architectures, in sampling order.
        values: estimator -> arch string -> value (the reference's is the accuracy).
        seconds: estimator -> arch string -> seconds it took.
        agreements: estimator -> its agreement with the reference.
        cost: estimator -> median seconds per candidate.
        run_id: the MLflow run.
        computed: estimates computed by this run (the rest were read back from ``records.jsonl``).
        supernet: the checkpoint of the ``supernet`` estimator (path, digest, epochs, training seconds).
        reference_runs: with ``reference.extra_seeds``, each further reference run's agreement
            with the first (the reference's own repeatability).
        noise_ceiling: the tau an error-free estimator would reach against one reference run,
            from the runs' mean agreement (:func:`nas.studies.stats.noise_ceiling`); None with one run.
    """

    name: str
    folder: Path
    archs: list[str]
    values: dict[str, dict[str, float]]
    seconds: dict[str, dict[str, float]]
    agreements: dict[str, Agreement] = field(default_factory=dict)
    cost: dict[str, float] = field(default_factory=dict)
    run_id: str | None = None
    computed: int = 0
    supernet: dict[str, Any] | None = None
    reference_runs: dict[str, Agreement] = field(default_factory=dict)
    noise_ceiling: float | None = None


def estimator_names(cfg: FidelityConfig) -> list[str]:
    """The cheap estimators of a study, in the order they are reported."""
    return [*(f"rung{k}" for k in range(len(cfg.rungs))), *(f"train_{e}ep" for e in cfg.cheap_epochs),
            *([SUPERNET] if cfg.supernet.checkpoint else []), *cfg.zero_cost, "params", "macs"]


def reference_names(cfg: FidelityConfig) -> list[str]:
    """The reference trainings of a study: ``train.seed``'s and one per ``reference.extra_seeds``."""
    return [REFERENCE, *(f"{REFERENCE}_seed{s}" for s in cfg.reference.extra_seeds)]


def _read_records(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        return []
    rows = []
    for line in path.read_text().splitlines():
        if line.strip():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                continue  # a line cut short by a kill: computed again
    return rows


def _current(row: dict[str, Any], supernet: LoadedSupernet | None) -> bool:
    """Whether a record still holds: a supernet estimate only for the checkpoint in use."""
    if row.get("estimator") != SUPERNET:
        return True
    return supernet is not None and row.get("detail", {}).get("checkpoint_sha256") == supernet.sha256


def _study_key(cfg: FidelityConfig, space: SearchSpace, data_summary: dict[str, Any]) -> dict[str, Any]:
    """What must match for a folder's records to be reused."""
    # Only what changes a record's meaning: more reference seeds or rungs add records to a study.
    reference = {k: v for k, v in dataclasses.asdict(cfg.reference).items() if k != "extra_seeds"}
    return {"space": space.name, "space_size": space.size(), "k": cfg.k, "seed": cfg.seed,
            "reference": reference, "cheap_train_samples": cfg.cheap_train_samples,
            "data": data_summary, "train": {k: v for k, v in dataclasses.asdict(cfg.train).items() if k != "device"}}


def run_fidelity(cfg: FidelityConfig, log: Callable[[str], None] = print) -> FidelityResult:
    """Run (or resume) a fidelity study; see the module's text.

    Raises:
        ConfigError: a bad setting (before any training).
        DataError: the dataset cannot be loaded.
        FidelityError: the folder holds a study with other settings.
        TrackingError: the MLflow store cannot be written.
    """
    validate_fidelity(cfg)
    space = SearchSpace.from_dict(cast(dict[str, Any], cfg.space), source=cfg.space_source)
    log(f"fidelity: loading data ({cfg.data.display_name})")
    data = load_dataset(cfg.data)
    name = cfg.name or f"{space.name}-{cfg.data.name}-k{cfg.k}"
    folder = Path(cfg.output_dir).expanduser().resolve() if cfg.output_dir else project_home() / "fidelity" / name
    folder.mkdir(parents=True, exist_ok=True)
    key = _study_key(cfg, space, data.summary())
    key_file = folder / "study.json"
    if key_file.is_file() and json.loads(key_file.read_text()) != key:
        raise FidelityError(f"{folder} holds a fidelity study with other settings (see its study.json); choose "
                            "another output_dir or name")
    key_file.write_text(json.dumps(key, indent=1))
    supernet = check_supernet(cfg.supernet.checkpoint, space, data, cfg.data) if cfg.supernet.checkpoint else None
    shape = (1, 3, data.resolution, data.resolution)
    archs = [a.encode() for a in choose_archs(space, cfg.k, cfg.seed, shape, data.num_classes)]
    records_path = folder / RECORDS
    done = {(r["arch"], r["estimator"]): r for r in _read_records(records_path) if _current(r, supernet)}
    values: dict[str, dict[str, float]] = {}
    seconds: dict[str, dict[str, float]] = {}
    for (a, est), r in done.items():
        if a in archs:
            values.setdefault(est, {})[a] = r["value"]
            seconds.setdefault(est, {})[a] = r["seconds"]
    _baselines(archs, shape, data.num_classes, values, seconds)

    trained = [e for e in estimator_names(cfg) if e not in ("params", "macs")]
    # Architecture by architecture (its cheap estimates, then its reference): whatever load the
    # machine has at a time falls on every estimator alike, so the costs stay comparable.
    refs = reference_names(cfg)
    missing = [(a, e) for a in archs for e in (*trained, *refs) if (a, e) not in done]
    todo = _tasks(missing)
    log(f"fidelity {name}: {len(archs)} architectures of {space.name}, {len(done)} estimates recorded, "
        f"{len(missing)} to compute (reference: {cfg.reference.train_samples} images x {cfg.reference.epochs} epochs; "
        f"{cfg.workers} at a time); records in {records_path}")
    ctx = _Context(cfg.data, cfg.train, (cfg.reference.train_samples, cfg.reference.epochs), cfg.cheap_train_samples,
                   cfg.zero_cost_batch, data.num_classes, max(1, (os.cpu_count() or 1) // cfg.workers), space,
                   cfg.supernet if supernet else None, tuple(cfg.rungs))
    computed = 0
    try:
        with records_path.open("a") as out, tqdm(total=len(missing), desc="estimates", unit="est", file=sys.stderr,
                                                  dynamic_ncols=True) as bar:
            for row in _compute_all(todo, ctx, data, cfg.workers):
                if (row["arch"], row["estimator"]) in done:
                    continue  # a lower rung recorded before, trained again on the way to a higher one
                out.write(json.dumps(row) + "\n")
                out.flush()
                values.setdefault(row["estimator"], {})[row["arch"]] = row["value"]
                seconds.setdefault(row["estimator"], {})[row["arch"]] = row["seconds"]
                computed += 1
                bar.set_postfix_str(f"{row['estimator']} {row['arch_id']}: {row['value']:.4g}")
                bar.update(1)
    except KeyboardInterrupt:  # every estimate finished so far is on disk; the training under way is lost
        log(f"fidelity {name}: interrupted with {len(done) + computed} of {len(done) + len(missing)} estimates "
            f"recorded in {records_path}; the same command goes on from there")
        raise

    result = FidelityResult(name, folder, archs, values, seconds, computed=computed)
    runs = np.array([[values[r][a] for a in archs] for r in refs])
    ref = runs.mean(axis=0)  # one run, or the mean of the seeds' runs: less noisy than any one
    if len(refs) > 1:
        result.reference_runs = {r: agreement(runs[0], runs[i], cfg.bootstrap, cfg.seed)
                                 for i, r in enumerate(refs) if i > 0}
        between = float(np.mean([a.kendall_tau for a in result.reference_runs.values()]))
        result.noise_ceiling = noise_ceiling(between) if between > 0 else None
        values["reference_mean"] = dict(zip(archs, ref.tolist(), strict=True))
    for est in estimator_names(cfg):
        result.agreements[est] = agreement(ref, np.array([values[est][a] for a in archs]), cfg.bootstrap, cfg.seed)
        result.cost[est] = float(np.median([seconds[est][a] for a in archs]))
    result.cost[REFERENCE] = float(np.median([seconds[REFERENCE][a] for a in archs]))
    if len(refs) > 1:
        result.cost["reference_mean"] = result.cost[REFERENCE] * len(refs)
    if supernet is not None:
        result.supernet = {"checkpoint": str(supernet.path), "sha256": supernet.sha256, "epochs": supernet.epochs,
                           "train_seconds": supernet.train_seconds, "bn_batches": cfg.supernet.bn_batches,
                           "batch_size": cfg.supernet.batch_size}
    _write_outputs(result, cfg, space, data.summary())
    result.run_id = _log_mlflow(result, cfg, space, data.summary())
    return result


def _baselines(archs: list[str], shape: tuple[int, ...], num_classes: int, values: dict[str, dict[str, float]],
               seconds: dict[str, dict[str, float]]) -> None:
    features = FeatureExtractor(shape, num_classes)
    t0 = time.perf_counter()
    x = features.transform([Arch.decode(a) for a in archs])
    each = (time.perf_counter() - t0) / len(archs)
    for est, col in (("params", "total.params"), ("macs", "total.macs")):
        j = features.names.index(col)
        values[est] = {a: float(x[i, j]) * 1e6 for i, a in enumerate(archs)}
        seconds[est] = dict.fromkeys(archs, each)


def _tasks(missing: list[tuple[str, str]]) -> list[Task]:
    """The tasks that compute ``missing`` (architecture, estimator) pairs, in their order: an
    architecture's missing rungs are one task, its highest missing rung, whose training passes the
    others (a rung continues from the one below, so each rung's figure comes from one training)."""
    top: dict[str, int] = {}
    for a, e in missing:
        if e.startswith("rung"):
            top[a] = max(top.get(a, -1), int(e[len("rung"):]))
    tasks, seen = [], set()
    for a, e in missing:
        if e.startswith("rung"):
            if a in seen:
                continue
            seen.add(a)
            e = f"rung{top[a]}"
        tasks.append(Task(a, e))
    return tasks


def _compute_all(todo: list[Task], ctx: _Context, data: ProxyData, workers: int) -> Iterable[dict[str, Any]]:
    if workers <= 1 or len(todo) <= 1:
        torch.set_num_threads(ctx.threads)
        for t in todo:
            yield from compute(t, ctx, data)
        return
    # each estimate recorded as it finishes, so that a stop loses only the trainings under way
    for rows in in_workers(compute, todo, workers, ordered=False, initializer=_init_worker, initargs=(ctx,)):
        yield from rows


# ---------------------------------------------------------------------- outputs


def table(result: FidelityResult, cfg: FidelityConfig) -> str:
    """The study's figures as a Markdown table, best Kendall's tau first."""
    ref_cost = result.cost[REFERENCE]
    lines = ["| estimator | Kendall tau (95% CI) | Spearman (95% CI) | top-10% overlap | s per candidate "
             "| cost / reference |", "|---|---|---|---|---|---|"]
    order = sorted(result.agreements, key=lambda e: -result.agreements[e].kendall_tau)
    for est in order:
        a = result.agreements[est]
        lines.append(
            f"| {est} | {a.kendall_tau:.3f} ({a.kendall_ci[0]:.2f} to {a.kendall_ci[1]:.2f}) "
            f"| {a.spearman:.3f} ({a.spearman_ci[0]:.2f} to {a.spearman_ci[1]:.2f}) "
            f"| {a.top_overlap:.0%} of {a.top_n} | {result.cost[est]:.3g} | {result.cost[est] / ref_cost:.4f} |"
        )
    lines.append(f"| {REFERENCE} | 1 | 1 | - | {ref_cost:.3g} | 1 |")
    if result.reference_runs:
        lines += ["", "The reference is the mean of its runs. Each run against the first:", "",
                  "| run | Kendall tau (95% CI) | Spearman |", "|---|---|---|"]
        lines += [f"| {r} | {a.kendall_tau:.3f} ({a.kendall_ci[0]:.2f} to {a.kendall_ci[1]:.2f}) | {a.spearman:.3f} |"
                  for r, a in result.reference_runs.items()]
        if result.noise_ceiling is not None:
            lines += ["", f"Noise ceiling: an error-free estimator is expected to reach tau {result.noise_ceiling:.3f} "
                      "against one run (a Gaussian model of the runs' agreement)."]
    return "\n".join(lines)


def _record(result: FidelityResult, cfg: FidelityConfig, space: SearchSpace,
            data_summary: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": result.name, "space": space.name, "k": cfg.k, "seed": cfg.seed, "data": data_summary,
        "reference": dataclasses.asdict(cfg.reference), "cheap_train_samples": cfg.cheap_train_samples,
        "train": dataclasses.asdict(cfg.train),
        "estimators": {e: {**dataclasses.asdict(a), "seconds_per_candidate": result.cost[e],
                           "cost_share_of_reference": result.cost[e] / result.cost[REFERENCE]}
                       for e, a in result.agreements.items()},
        "reference_seconds_per_candidate": result.cost[REFERENCE], "supernet": result.supernet,
        "rungs": [dataclasses.asdict(r) for r in cfg.rungs],
        "reference_runs": {r: dataclasses.asdict(a) for r, a in result.reference_runs.items()},
        "noise_ceiling": result.noise_ceiling,
        "archs": [{"arch": a, "arch_id": Arch.decode(a).arch_id,
                   **{e: result.values[e][a] for e in (*reference_names(cfg), *result.agreements)}}
                  for a in result.archs],
    }


def _write_outputs(result: FidelityResult, cfg: FidelityConfig, space: SearchSpace,
                   data_summary: dict[str, Any]) -> None:
    (result.folder / "fidelity.json").write_text(json.dumps(_record(result, cfg, space, data_summary), indent=1) + "\n")
    (result.folder / "fidelity.md").write_text(table(result, cfg) + "\n")
    _plot(result, result.folder / "fidelity.png")


def _plot(result: FidelityResult, path: Path) -> None:
    from matplotlib.figure import Figure

    ests = list(result.agreements)
    cols = 4
    rows = math.ceil(len(ests) / cols)
    fig = Figure(figsize=(3.2 * cols, 2.8 * rows), dpi=110)
    ref = [result.values.get("reference_mean", result.values[REFERENCE])[a] for a in result.archs]
    for i, est in enumerate(ests):
        ax = fig.add_subplot(rows, cols, i + 1)
        ax.scatter([result.values[est][a] for a in result.archs], ref, s=14, alpha=0.7)
        a = result.agreements[est]
        ax.set_title(f"{est}: tau {a.kendall_tau:.2f}", fontsize=8)
        ax.set_xlabel(est, fontsize=7)
        ax.set_ylabel("reference accuracy", fontsize=7)
        ax.tick_params(labelsize=6)
        if est in ("params", "macs", "synflow") and min(result.values[est].values()) > 0:
            ax.set_xscale("log")
    fig.suptitle(f"{result.name}: cheap estimates against reference training ({len(result.archs)} networks)",
                 fontsize=9)
    fig.tight_layout()
    fig.savefig(path, format="png")


def _log_mlflow(result: FidelityResult, cfg: FidelityConfig, space: SearchSpace,
                data_summary: dict[str, Any]) -> str:
    writer = StoreWriter(cfg.tracking.uri or default_tracking_uri(), cfg.tracking.experiment)
    params = {"space": space.name, "k": cfg.k, "seed": cfg.seed, "reference.train_samples": cfg.reference.train_samples,
              "reference.epochs": cfg.reference.epochs, "cheap_train_samples": cfg.cheap_train_samples,
              "data": data_summary, "folder": str(result.folder)}
    metrics: dict[str, float] = {"reference_seconds_per_candidate": result.cost[REFERENCE]}
    for est, a in result.agreements.items():
        metrics.update({f"{est}.kendall_tau": a.kendall_tau, f"{est}.spearman": a.spearman,
                        f"{est}.top10_overlap": a.top_overlap, f"{est}.seconds_per_candidate": result.cost[est]})
    files = [result.folder / n for n in ("fidelity.json", "fidelity.md", "fidelity.png", RECORDS)]
    return writer.log_finished_run(f"fidelity-{result.name}", "fidelity", params, metrics, files)
