"""Predictor-driven screening speed: how many candidates per second a search can score without
training or measuring anything.

A candidate's score here is its predicted latency (one batch through the learned predictor) plus
the NASWOT score (build the network, one forward pass on a 32-image minibatch). Both are timed
separately over the same ``n`` uniformly sampled ``mobile`` architectures, then together as a
search would use them; the wall time for 1,000 candidates is measured when ``n >= 1000`` and
otherwise projected from the measured rate (the record says which).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np

from benchmarks.common import spread
from benchmarks.search.proxy import ProxyEvaluator
from search_spaces import load_space


def run(n: int, seed: int = 7, log: Callable[[str], None] = print) -> dict[str, Any]:
    """Score ``n`` sampled architectures; candidates per second for each part and together."""
    space = load_space("mobile")
    evaluator, origin = ProxyEvaluator.create(space)
    rng = np.random.default_rng(seed)
    t0 = time.perf_counter()
    archs = [space.sample(rng) for _ in range(n)]
    sample_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    lat = evaluator.latency_ms(archs)
    latency_s = time.perf_counter() - t0
    per_arch = []
    t0 = time.perf_counter()
    for a in archs:
        t1 = time.perf_counter()
        evaluator.score(a)
        per_arch.append(time.perf_counter() - t1)
    naswot_s = time.perf_counter() - t0
    total = sample_s + latency_s + naswot_s
    rate = n / total
    figures = {
        "n": n, "space": "mobile", "predictor_origin": origin, **evaluator.describe(),
        "sample_seconds": sample_s, "latency_seconds": latency_s, "naswot_seconds": naswot_s,
        "latency_only_per_s": n / latency_s, "naswot_per_s": n / naswot_s, "combined_per_s": rate,
        "naswot_seconds_per_arch": spread(per_arch),
        "wall_seconds_1000": total * 1000 / n, "wall_1000_measured": n >= 1000,
        "predicted_ms_range": [float(lat.min()), float(lat.max())],
    }
    log(f"  {n} candidates: predicted latency {n / latency_s:,.0f}/s, NASWOT {n / naswot_s:.2f}/s "
        f"(median {np.median(per_arch) * 1e3:.0f} ms each), together {rate:.2f}/s; "
        f"1,000 candidates {'take' if n >= 1000 else 'would take'} {total * 1000 / n:.0f} s")
    return figures


def render(rec: dict[str, Any]) -> str:
    """The section of a record of this benchmark on its area's page (docs/benchmarks/<area>.md)."""
    from benchmarks.render import _f, table
    f = rec["figures"]
    w = "measured" if f["wall_1000_measured"] else f"projected from {f['n']} candidates"
    per = {k: _f(f["naswot_seconds_per_arch"][k], 3) for k in ("median", "q25", "q75")}
    return f"""How fast a search can screen candidates without training or measuring: predicted latency (the learned
predictor, one batch) plus the NASWOT score (build the network, one forward pass), over {f['n']} uniformly
sampled `mobile` architectures on one CPU thread.

{table(['part', 'candidates per second'], [
        ['predicted latency only', _f(f['latency_only_per_s'], 0)],
        ['NASWOT only', _f(f['naswot_per_s'])],
        ['both (sampling included)', _f(f['combined_per_s'])],
    ])}

NASWOT per network: median {per['median']} s (IQR {per['q25']} - {per['q75']} s).
**1,000 candidates: {_f(f['wall_seconds_1000'], 0)} s** ({w}); the
latency prediction is a negligible part, building each network and its forward pass are the cost."""
