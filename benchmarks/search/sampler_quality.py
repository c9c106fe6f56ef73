"""Sampler quality: the best reward each search algorithm finds at equal budgets.

On the ``mobile`` space, with predicted latency and the NASWOT score (:mod:`benchmarks.search.proxy`),
the reward is :func:`nas.reward.squared_penalty` at a target chosen so about half the space meets
it: the median predicted latency of uniformly sampled architectures. Compared, each for the same
number of distinct architectures and the same seeds:

* ``random``: uniform sampling (Optuna's RandomSampler through :class:`nas.sampler.ArchSampler`);
* ``tpe``: Optuna's multivariate TPE on the reward (through ArchSampler);
* ``nsga2``: Optuna's NSGA-II on (score up, latency down), then scalarised: the best *reward*
  among the architectures it evaluated;
* ``evolution``: regularised evolution on the space's ``mutate`` (:mod:`nas.evolution`).

Every budget is a prefix of one run of the largest budget (the best found after ``b``
evaluations). "Beats random" pairs runs of the same seed: a win is a strictly higher best reward.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from benchmarks.common import spread
from benchmarks.search.proxy import ProxyEvaluator
from nas.adapters.optuna_sampler import ArchSampler
from nas.core.evolution import RegularisedEvolution
from nas.core.reward import squared_penalty
from nas.core.sampling import Outcome
from search_spaces import Arch, SearchSpace, load_space

SAMPLERS = ("random", "tpe", "nsga2", "evolution")
TARGET_SAMPLE = 2000
TPE_STARTUP = 10
NSGA2_POPULATION = 16
EVOLUTION_POPULATION = 20
EVOLUTION_SAMPLE = 5


def target_for_half(space: SearchSpace, evaluator: ProxyEvaluator, n: int = TARGET_SAMPLE, seed: int = 12345) -> float:
    """The median predicted latency of ``n`` uniformly sampled architectures."""
    rng = np.random.default_rng(seed)
    return float(np.median(evaluator.latency_ms([space.sample(rng) for _ in range(n)])))


def run_one(space: SearchSpace, evaluator: ProxyEvaluator, sampler: str, seed: int, budget: int,
            target_ms: float) -> list[float]:
    """The best reward after each evaluation of one run (length ``budget`` unless the space runs out)."""
    best, trace = -np.inf, []

    def evaluate(arch: Arch) -> tuple[float, float, float]:
        score, lat = evaluator(arch)
        return score, lat, squared_penalty(score, lat, target_ms)

    if sampler == "evolution":
        evo = RegularisedEvolution(space, EVOLUTION_POPULATION, EVOLUTION_SAMPLE, seed=seed)
        for _ in range(budget):
            arch = evo.ask()
            if arch is None:
                break
            _, _, r = evaluate(arch)
            evo.tell(arch, r)
            best = max(best, r)
            trace.append(best)
        return trace
    s = ArchSampler(space, sampler, seed=seed, n_startup_trials=TPE_STARTUP, population_size=NSGA2_POPULATION)
    for _ in range(budget):
        text = s.ask()
        if text is None:
            break
        score, lat, r = evaluate(space.decode(text))
        s.tell(text, Outcome("complete", reward=r, accuracy=score, latency_ms=lat))
        best = max(best, r)
        trace.append(best)
    return trace


def run(budgets: Sequence[int], seeds: int, samplers: Sequence[str] = SAMPLERS,
        log: Callable[[str], None] = print) -> dict[str, Any]:
    """Run every sampler for ``max(budgets)`` evaluations with seeds ``0..seeds-1``; the figures."""
    space = load_space("mobile")
    evaluator, origin = ProxyEvaluator.create(space)
    target_ms = target_for_half(space, evaluator)
    log(f"  target_ms {target_ms:.2f} (median predicted latency of {TARGET_SAMPLE} sampled archs); "
        f"predictor: {origin}")
    top = max(budgets)
    traces: dict[str, list[list[float]]] = {s: [] for s in samplers}
    seconds: dict[str, float] = {s: 0.0 for s in samplers}
    for seed in range(seeds):
        for name in samplers:
            t0 = time.perf_counter()
            traces[name].append(run_one(space, evaluator, name, seed, top, target_ms))
            seconds[name] += time.perf_counter() - t0
        log(f"  seed {seed}: " + ", ".join(f"{n} {traces[n][-1][-1]:.2f}" for n in samplers))
    results: dict[str, Any] = {}
    for b in budgets:
        row: dict[str, Any] = {}
        for name in samplers:
            bests = [t[min(b, len(t)) - 1] for t in traces[name]]
            entry: dict[str, Any] = {"best_reward": spread(bests)}
            if name != "random" and "random" in traces:
                rnd = [t[min(b, len(t)) - 1] for t in traces["random"]]
                entry["vs_random"] = {"wins": sum(x > y for x, y in zip(bests, rnd, strict=True)),
                                      "ties": sum(x == y for x, y in zip(bests, rnd, strict=True)),
                                      "losses": sum(x < y for x, y in zip(bests, rnd, strict=True))}
            row[name] = entry
        results[str(b)] = row
        log(f"  budget {b}: " + "; ".join(
            f"{n} median {row[n]['best_reward']['median']:.2f} "
            f"[{row[n]['best_reward']['q25']:.2f}, {row[n]['best_reward']['q75']:.2f}]"
            + (f" beats random {row[n]['vs_random']['wins']}/{seeds}" if "vs_random" in row[n] else "")
            for n in samplers))
    return {
        "space": "mobile", "target_ms": target_ms, "target_rule": f"median predicted latency of {TARGET_SAMPLE} "
        "uniformly sampled architectures", "reward": "squared (score when the target is met, "
        "score * (target/latency)^2 when not)", "predictor_origin": origin, **evaluator.describe(),
        "budgets": list(budgets), "seeds": seeds,
        "settings": {"tpe_startup_trials": TPE_STARTUP, "tpe": "multivariate, group",
                     "nsga2_population": NSGA2_POPULATION, "evolution_population": EVOLUTION_POPULATION,
                     "evolution_sample_size": EVOLUTION_SAMPLE},
        "results": results,
        "seconds_per_sampler": seconds,
        "distinct_archs_scored": len(evaluator.cache),
        "seconds_per_scored_arch": evaluator.seconds["naswot"] / max(1, evaluator.seconds["calls"]),
    }


def render(rec: dict[str, Any]) -> str:
    """The section of a record of this benchmark on its area's page (docs/benchmarks/<area>.md)."""
    from benchmarks.render import _f, table
    f = rec["figures"]
    names = list(next(iter(f["results"].values())))
    rows = []
    for b, row in f["results"].items():
        for n in names:
            e = row[n]
            br = e["best_reward"]
            vs = e.get("vs_random")
            rows.append([b, n, _f(br["median"]), f"{_f(br['q25'])} - {_f(br['q75'])}",
                         f"{_f(br['min'])} - {_f(br['max'])}",
                         f"{vs['wins']}/{vs['ties']}/{vs['losses']}" if vs else "-"])
    top = str(max(f["budgets"]))
    ranked = sorted(names, key=lambda n: -f["results"][top][n]["best_reward"]["median"])
    beats = [f"{n} {f['results'][top][n]['vs_random']['wins']}/{f['seeds']}" for n in ranked
             if "vs_random" in f["results"][top][n]]
    verdict = (f"At {top} evaluations, by median best reward: {' > '.join(ranked)}; seeds on which each beats "
               f"random search: {', '.join(beats)}.")
    return f"""Which search algorithm finds the best reward for the same number of evaluated architectures? On the
`mobile` space, with {f['latency']} and, as the cheap accuracy estimate, the {f['accuracy_estimate']}. The
reward is {f['reward']} at target_ms = **{_f(f['target_ms'])}**, the {f['target_rule']}, so about half the
space meets it. Budgets {', '.join(map(str, f['budgets']))} distinct architectures, {f['seeds']} seeds each
(budgets are prefixes of one run); "vs random" counts seeds where the sampler's best is higher / equal /
lower than random search's with the same seed. TPE starts with {f['settings']['tpe_startup_trials']} random
trials and NSGA-II's first generation ({f['settings']['nsga2_population']}) is random too: with the same seed
they draw what random search draws, hence ties at small budgets. Rewards are NASWOT scores (about 300 for
this batch), so differences of a few units are real but small.

{table(['budget', 'sampler', 'median best reward', 'IQR', 'range', 'vs random (W/T/L)'], rows)}

{verdict}

{f['distinct_archs_scored']} distinct architectures scored, {_f(f['seconds_per_scored_arch'], 2)} s each."""
