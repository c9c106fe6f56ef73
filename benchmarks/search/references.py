"""Searched vs hand-designed networks at two latency targets on this machine's ONNX Runtime CPU.

For each target (1 thread, 1x3x224x224, measured):

* **searched**: a small search of the ``mobile`` space (regularised evolution for ``search_n``
  evaluations on the squared reward of the NASWOT score and predicted latency at the target);
  its best candidates by reward are measured and the best-rewarded one whose *measured* latency
  meets the target is kept;
* **hand-designed**: MobileNetV2, EfficientNet-B0 and MnasNet-B1 (:mod:`search_spaces.references`),
  each width-scaled (:func:`search_spaces.references.scale_width`) to the largest multiplier of
  :data:`~search_spaces.references.MULTIPLIERS` whose measured latency meets the target (the
  smallest one when none does).

Every network is then trained with the same budget (:func:`nas.accuracy.train_briefly`, same
optimiser, epochs and batch order) on the same proxy data (digits at 32x32), with several weight
seeds. Figures: accuracy at matched latency (each target), and latency at matched accuracy (the
fastest searched network at least as accurate as each reference, median over seeds).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from benchmarks.common import spread
from benchmarks.render import comparison_lines
from benchmarks.search.proxy import ProxyEvaluator
from latency_predictor.measurement.backends import make_estimator
from latency_predictor.measurement.timing import MeasureConfig
from nas.accuracy.training import train_briefly
from nas.core.config import TrainConfig
from nas.core.evolution import RegularisedEvolution
from nas.core.reward import squared_penalty
from search_spaces import REFERENCES, Arch, build, count_params, load_space
from search_spaces.references import MULTIPLIERS, scale_width

TARGETS_MS = (6.0, 10.0)
MEASURED_CANDIDATES = 6


def _measure(arch: Arch, cache: dict[Arch, float]) -> float:
    if arch not in cache:
        est = make_estimator("onnxruntime", input_shape=(1, 3, 224, 224), intra_op_threads=1,
                             measure=MeasureConfig(min_runs=50, min_time_s=0.5, max_time_s=3.0))
        cache[arch] = est.measure(arch).latency_ms
    return cache[arch]


def searched(target_ms: float, search_n: int, evaluator: ProxyEvaluator, measured: dict[Arch, float],
             seed: int = 0) -> tuple[Arch, dict[str, Any]]:
    """The best network of a small evolution search whose measured latency meets ``target_ms``.

    The search runs on predicted latency. Its candidates are then measured best-first; after each
    measurement the predictions are recalibrated by the median measured/predicted ratio so far
    (the machine's load moves measured latency away from the predictor's), and the candidates
    re-ranked by the reward at the recalibrated latency.
    """
    space = load_space("mobile")
    evo = RegularisedEvolution(space, population_size=20, sample_size=5, seed=seed)
    for _ in range(search_n):
        arch = evo.ask()
        if arch is None:
            break
        score, lat = evaluator(arch)
        evo.tell(arch, squared_penalty(score, lat, target_ms))
    ratios: list[float] = []
    chosen: Arch | None = None
    for _ in range(MEASURED_CANDIDATES):
        r = float(np.median(ratios)) if ratios else 1.0
        pool = [m.arch for m in evo.history if m.arch not in measured]
        best = max(pool, key=lambda a: squared_penalty(evaluator(a)[0], evaluator(a)[1] * r, target_ms))
        lat = _measure(best, measured)
        ratios.append(lat / evaluator(best)[1])
        if lat <= target_ms:
            chosen = best
            break
    tried = [a for a in measured if a in evo.history_archs()]
    if chosen is None:  # nothing measured within the target: the fastest of those measured
        chosen = min(tried, key=lambda a: measured[a])
    return chosen, {"evaluated": len(evo.history), "measured_ms": [measured[a] for a in tried],
                    "measured_over_predicted": ratios}


def scaled_reference(name: str, target_ms: float, measured: dict[Arch, float]) -> tuple[Arch, float]:
    """The widest width-scaled ``name`` that meets ``target_ms`` (measured), and its multiplier."""
    base = REFERENCES[name]()
    best: tuple[Arch, float] | None = None
    for m in MULTIPLIERS:
        arch = scale_width(base, m)
        if _measure(arch, measured) <= target_ms:
            best = (arch, m)
        else:
            break
    return best if best is not None else (scale_width(base, MULTIPLIERS[0]), MULTIPLIERS[0])


def accuracies(arch: Arch, evaluator: ProxyEvaluator, seeds: int, epochs: int) -> list[float]:
    """Validation accuracy on digits after ``epochs`` of the same training, for weight seeds 0..seeds-1."""
    out = []
    for s in range(seeds):
        torch.manual_seed(s)
        model = build(arch, num_classes=evaluator.data.num_classes, dropout=0.0)
        res = train_briefly(model, evaluator.data, TrainConfig(epochs=epochs, seed=s), torch.device("cpu"))
        out.append(res[-1].accuracy)
    return out


def run(seeds: int, epochs: int, search_n: int, quick: bool, log: Callable[[str], None] = print) -> dict[str, Any]:
    """Search, scale, measure and train at each target; the comparison."""
    space = load_space("mobile")
    evaluator, origin = ProxyEvaluator.create(space)
    measured: dict[Arch, float] = {}
    targets = []
    for t in TARGETS_MS:
        arch, info = searched(t, search_n, evaluator, measured)
        cands: list[dict[str, Any]] = [{"name": "searched", "arch": arch.encode(), "multiplier": None, "search": info}]
        for name in sorted(REFERENCES):
            a, m = scaled_reference(name, t, measured)
            cands.append({"name": f"{name} x{m:g}", "arch": a.encode(), "multiplier": m})
        for c in cands:
            a = Arch.decode(c["arch"])
            c["latency_ms"] = measured[a] if a in measured else _measure(a, measured)
            c["params_m"] = count_params(build(a, num_classes=10)) / 1e6
            accs = accuracies(a, evaluator, seeds, epochs)
            c["accuracy"] = {**spread(accs), "values": accs}
            log(f"  target {t:g} ms: {c['name']:<24} {c['latency_ms']:6.2f} ms  accuracy median "
                f"{np.median(accs):.4f} (min {min(accs):.4f}, max {max(accs):.4f})")
        targets.append({"target_ms": t, "candidates": cands})
    summary = comparison_lines(targets)
    for line in summary:
        log(f"  {line}")
    return {
        "targets": targets, "summary": summary, "seeds": seeds, "epochs": epochs, "predictor_origin": origin,
        "search": f"regularised evolution, {search_n} evaluations of NASWOT score and predicted latency, "
                  f"best {MEASURED_CANDIDATES} measured",
        "training": f"digits 32x32, SGD Nesterov lr 0.05 cosine, batch 64, {epochs} epoch(s)",
        "latency": "ONNX Runtime CPU, 1 intra-op thread, 1x3x224x224, p50 measured in this run",
        "multipliers": list(MULTIPLIERS),
    }


def render(rec: dict[str, Any]) -> str:
    """The section of a record of this benchmark on its area's page (docs/benchmarks/<area>.md)."""
    from benchmarks.render import _f, _pct, comparison_lines, table
    from benchmarks.search.references_cifar10 import render_figures
    f = rec["figures"]
    matched = "\n".join(f"- {line}" for line in comparison_lines(f["targets"]))
    if f.get("dataset") == "cifar10":
        return render_figures(f, matched)
    rows = []
    for t in f["targets"]:
        for c in t["candidates"]:
            acc = c["accuracy"]
            rows.append([f"{t['target_ms']:g}", c["name"], _f(c["latency_ms"]), _f(c.get("params_m"), 2),
                         f"{_pct(acc['median'])} ({_pct(acc['min'])} - {_pct(acc['max'])})"])
    over = [f"at {t['target_ms']:g} ms the searched network measured {c['latency_ms']:.2f} ms" for t in f["targets"]
            for c in t["candidates"] if c["name"] == "searched" and c["latency_ms"] > t["target_ms"]]
    if over:
        matched += ("\n\nThe searched networks missed their targets when measured here (" + "; ".join(over)
                    + "): none of the candidates measured met the target under this run's load, so the fastest "
                    "measured is shown, and the latencies are not exactly matched.")
    weak = [c["name"] for t in f["targets"] for c in t["candidates"] if c["accuracy"]["median"] < 0.5]
    if weak:
        matched += (f"\n\nWith {f['epochs']} epoch(s), {', '.join(sorted(set(weak)))} stayed under 50% accuracy: "
                    "deep, narrow networks barely start to learn in so short a budget (same optimiser and learning "
                    "rate for every network), so this compares what each network learns in a very short budget, "
                    "not what it can reach.")
    return f"""Does the search find networks that beat hand-designed ones at the same latency? At two latency targets on
this machine's ONNX Runtime CPU (1 thread, 1x3x224x224, measured), the best network of a small search
({f['search']}) against the reference networks width-scaled (channels x multiplier, rounded to 8) to the
largest multiplier that meets the target. All trained with the same budget on the same proxy data
({f['training']}), {f['seeds']} training seeds; accuracy median (min - max).

{table(['target ms', 'network', 'latency ms', 'params M', 'accuracy'], rows)}

{matched}

Digits is a weak proxy for ranking (one test image is 0.28 points, and seed-to-seed spread is about
as large as the differences between architectures); treat small differences as ties."""
