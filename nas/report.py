"""What the user sees: the progress bar and the final table of candidates."""

from __future__ import annotations

import sys
from typing import Any, TextIO

from tqdm import tqdm

from nas.record import CandidateRecord, best_of


def human(n: float | None, unit: str = "") -> str:
    """``1234567`` -> ``1.23M`` (``-`` for None)."""
    if n is None:
        return "-"
    for factor, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(n) >= factor:
            return f"{n / factor:.2f}{suffix}{unit}"
    return f"{n:.0f}{unit}"


class Progress:
    """Trials done out of the total, best reward so far, elapsed and remaining time.

    Args:
        total: the number of trials planned.
        enabled: False shows nothing (e.g. in tests).
        stream: where the bar is drawn (stderr by default).
    """

    def __init__(self, total: int, enabled: bool = True, stream: TextIO | None = None) -> None:
        self._bar = tqdm(
            total=total, unit="trial", desc="search", disable=not enabled, file=stream or sys.stderr,
            dynamic_ncols=True, bar_format="{desc}: {n_fmt}/{total_fmt} trials |{bar}| {elapsed}<{remaining}{postfix}",
        )
        self._best: float | None = None
        self._failed = 0

    def update(self, rec: CandidateRecord) -> None:
        """Count one finished trial."""
        if rec.status == "FAILED":
            self._failed += 1
        elif rec.reward is not None and (self._best is None or rec.reward > self._best):
            self._best = rec.reward
        best = "-" if self._best is None else f"{self._best:.4f}"
        self._bar.set_postfix_str(f"best reward {best}" + (f", {self._failed} failed" if self._failed else ""))
        self._bar.update(1)

    def close(self) -> None:
        """Finish the bar."""
        self._bar.close()


def _fmt(row: dict[str, Any], key: str, spec: str) -> str:
    v = row.get(key)
    return "-" if v is None else format(v, spec)


def format_table(rows: list[dict[str, Any]], target_ms: float, top_k: int) -> str:
    """The top ``top_k`` leaderboard rows as an aligned text table."""
    header = (
        "#", "arch_id", "status", "accuracy", "p50 ms", "p99 ms", "params", "MACs", "reward", f"<= {target_ms:g} ms"
    )
    lines = [header]
    for r in rows[:top_k]:
        meets = r.get("meets_target")
        lines.append((
            str(r["rank"]), r["arch_id"], r["status"].lower(), _fmt(r, "accuracy", ".4f"),
            _fmt(r, "latency_p50", ".2f"), _fmt(r, "latency_p99", ".2f"), human(r.get("params")),
            human(r.get("macs")), _fmt(r, "reward", ".4f"),
            "-" if meets is None else ("yes" if meets else "no"),
        ))
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    left = (1, 2)  # arch_id and status read better left-aligned
    out = [
        "  ".join(c.ljust(w) if i in left else c.rjust(w) for i, (c, w) in enumerate(zip(line, widths, strict=True)))
        for line in lines
    ]
    out.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(out)


def format_best(records: list[CandidateRecord], target_ms: float) -> str:
    """One line on the best candidate (or why there is none)."""
    best = best_of(records)
    if best is None:
        return "No candidate completed."
    m = best.metrics
    verdict = "meets" if m.get("meets_target") else "misses"
    return (
        f"Best: {best.arch_id}  reward {m['reward']:.4f}  accuracy {m['accuracy']:.4f}  "
        f"latency p50 {m['latency_p50']:.2f} ms ({verdict} the {target_ms:g} ms target)\n      {best.arch}"
    )
