"""The one text table of candidates, used by the search's final table and by the leaderboard."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from nas.core.record import (
    IN_SEARCH,
    Candidate,
    Ranked,
    best_of,
    latency_provenance,
    measured_in_search,
    rank,
    target_shares,
)


def accuracy_label(estimator: str | None) -> str:
    """What the ``accuracy`` figure is called for an accuracy estimator (a score is not an accuracy)."""
    return "accuracy" if estimator in (None, "", "train", "supernet") else f"{estimator} score"


def human(n: float | None, unit: str = "") -> str:
    """``1234567`` -> ``1.23M`` (``-`` for None or NaN)."""
    if n is None or not math.isfinite(n):
        return "-"
    for factor, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(n) >= factor:
            return f"{n / factor:.2f}{suffix}{unit}"
    return f"{n:.0f}{unit}"


def _num(spec: str) -> Callable[[Candidate, str], str]:
    def cell(c: Candidate, key: str) -> str:
        v = c.metric(key)
        return "-" if not math.isfinite(v) else format(v, spec)

    return cell


def _meets(c: Candidate, _key: str) -> str:
    m = c.meets_target
    return "-" if m is None else ("yes" if m else "no")


def _source(c: Candidate, _key: str) -> str:
    return latency_provenance(c) or "-"


_CELLS: dict[str, Callable[[Candidate, str], str]] = {
    "arch_id": lambda c, _k: c.arch_id,
    "status": lambda c, _k: c.status.lower(),
    "rung": lambda c, _k: c.rung_label or "-",
    "accuracy": _num(".4f"),
    "val_loss": _num(".4f"),
    "latency_p50": _num(".2f"),
    "latency_p90": _num(".2f"),
    "latency_p99": _num(".2f"),
    "latency_in_search_p50": _num(".2f"),
    "x_anchor": _num(".3f"),
    "anchor_latency_ms": _num(".2f"),
    "latency_source": _source,
    "precision": lambda c, _k: c.precision or "-",
    "params": lambda c, k: human(c.metric(k)),
    "macs": lambda c, k: human(c.metric(k)),
    "reward": _num(".4f"),
    "meets_target": _meets,
    "failure_reason": lambda c, _k: c.failure_reason or "-",
}
_HEADERS = {
    "latency_p50": "p50_ms", "latency_p90": "p90_ms", "latency_p99": "p99_ms", "latency_source": "latency",
    "latency_in_search_p50": "in_search_p50", "anchor_latency_ms": "anchor_ms",
    "meets_target": "meets",
}
TABLE_COLUMNS = (
    "rank", "arch_id", "rung", "accuracy", "latency_p50", "latency_p99", "latency_source", "precision",
    "latency_in_search_p50",
    "x_anchor", "anchor_latency_ms", "params", "macs", "reward", "meets_target", "status", "failure_reason",
)
_LEFT = {"arch_id", "status", "latency_source", "precision", "failure_reason"}


def format_table(rows: Sequence[Ranked], columns: Sequence[str] | None = None, accuracy_label: str = "accuracy") -> str:
    """An aligned text table of ranked candidates.

    Args:
        rows: the candidates with their rank.
        columns: column keys (default :data:`TABLE_COLUMNS`; the status and failure columns
            are left out when every row completed).
        accuracy_label: the header of the ``accuracy`` column (a training-free score is not an
            accuracy: ``naswot score``, written without spaces in the header).
    """
    cols = list(columns or TABLE_COLUMNS)
    if columns is None and all(r.candidate.completed for r in rows):
        cols = [c for c in cols if c not in ("status", "failure_reason")]
    if columns is None and not any(r.candidate.rung_label for r in rows):
        cols.remove("rung")  # not a multi-fidelity search
    if columns is None and not any(math.isfinite(r.candidate.metric("latency_in_search_p50")) for r in rows):
        cols.remove("latency_in_search_p50")  # no final latency pass: one latency per candidate
    if columns is None and all(r.candidate.precision in ("", "fp32") for r in rows):
        cols.remove("precision")  # every figure in fp32: nothing to say
    if columns is None and not any(math.isfinite(r.candidate.x_anchor) for r in rows):
        cols = [c for c in cols if c not in ("x_anchor", "anchor_latency_ms")]  # no anchor network
    headers = dict(_HEADERS, accuracy=accuracy_label.replace(" ", "_"))
    lines = [[headers.get(c, c) for c in cols]]
    for r in rows:
        lines.append([
            ("-" if r.rank is None else str(r.rank)) if c == "rank" else _CELLS[c](r.candidate, c) for c in cols
        ])
    widths = [max(len(line[i]) for line in lines) for i in range(len(cols))]
    out = [
        "  ".join(cell.ljust(w) if col in _LEFT else cell.rjust(w)
                  for cell, w, col in zip(line, widths, cols, strict=True)).rstrip()
        for line in lines
    ]
    out.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(out)


def _target_text(c: Candidate, target: float) -> str:
    """The target ``c``'s search bounds, in words: ``1 ms``, ``1 ms p99``, ``x1 mobilenetv2_100@0.35``."""
    stat = "" if c.target_stat == "p50" else f" {c.target_stat}"
    if c.relative_target:
        return f"x{target:g} {c.tags['target_anchor']}{stat}"
    return f"{target:g} ms{stat}"


def budget_used(candidates: Sequence[Candidate], target: float, top: int = 3) -> str:
    """How much of the latency target the best ``top`` candidates use, e.g.
    ``Latency budget used by the top 3: 92%, 71%, 44% of the 1 ms p50 target.`` (empty: none completed).

    ``target`` is ``target_ms``, or ``target_x`` when the search's target is relative to an anchor
    network (the candidates' paired ratio to it is then what uses the budget)."""
    shares = target_shares(candidates, target, top)
    if not shares:
        return ""
    first = rank(candidates, top_k=1)[0].candidate
    used = ", ".join(f"{x:.0%}" if x >= 0.1 else f"{x:.1%}" for x in shares)
    if first.relative_target:
        return f"Latency budget used by the top {len(shares)}: {used} of the {_target_text(first, target)} target."
    return f"Latency budget used by the top {len(shares)}: {used} of the {target:g} ms {first.target_stat} target."


def format_best(candidates: Sequence[Candidate], target: float, accuracy_label: str = "accuracy") -> str:
    """One line on the best candidate (or why there is none).

    ``target`` is ``target_ms``, or ``target_x`` for a target relative to an anchor network: the line
    then gives the candidate's ``x_anchor`` and the anchor's milliseconds beside its own."""
    best = best_of(candidates)
    if best is None:
        return "No candidate completed."
    verdict = "meets" if best.meets_target else "misses"
    stat = best.target_stat  # the statistic the target bounds is the one shown beside it
    at = f" at rung {best.rung_label}" if best.rung_label else ""
    when = f" {IN_SEARCH}" if measured_in_search(best) else ""
    latency = f"latency {stat} {best.metric(f'latency_{stat}'):.2f} ms{when}"
    if best.relative_target:
        figure = f"x_anchor {best.x_anchor:.3f} ({latency}, the anchor {best.metric('anchor_latency_ms'):.2f} ms)"
        tail = ""
    else:
        figure = latency
        tail = "" if stat == "p50" else f"; p50 {best.latency_p50:.2f} ms"
    return (
        f"Best: {best.arch_id}  reward {best.reward:.4f}  {accuracy_label} {best.accuracy:.4f}{at}  "
        f"{figure} ({verdict} the {_target_text(best, target)} target{tail})"
        f"\n      {best.arch}"
    )
