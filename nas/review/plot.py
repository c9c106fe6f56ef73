"""The Pareto plot of a search: accuracy against latency p50, the front, the target, the references."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

from matplotlib.figure import Figure

from nas.core.errors import LeaderboardError
from nas.core.record import Candidate, SearchRecord, pareto_front


def plot_pareto(
    candidates: Sequence[Candidate],
    search: SearchRecord,
    path: Path,
    references: dict[str, float] | None = None,
    reference_note: str = "",
    accuracy_label: str = "accuracy",
) -> Path:
    """Save accuracy against latency p50 of the completed candidates as a PNG.

    The Pareto front is drawn as a step line, the latency target as a vertical dashed line, and
    each reference network (name -> p50 ms measured on the search's device) as a labelled
    marker on the latency axis: their accuracy on the search's task is not known.

    Args:
        candidates: the search's candidates (failed ones are left out).
        search: the search (name and target).
        path: where to write the PNG.
        references: reference latencies to mark; None or empty: none.
        reference_note: a line under the title saying where reference latencies come from.
        accuracy_label: the name of the y axis's figure.

    Returns:
        ``path``.

    Raises:
        LeaderboardError: no completed candidate with a latency to plot.
    """
    done = [c for c in candidates if c.completed and math.isfinite(c.latency_p50)]
    if not done:
        raise LeaderboardError(f"search {search.name!r} has no completed candidate to plot")
    front = pareto_front(done)
    # A bare Figure renders with Agg and leaves pyplot's global state (and any GUI) alone.
    fig = Figure(figsize=(9.5, 5), dpi=120)
    ax = fig.subplots()
    sources = sorted({c.latency_source or "unknown" for c in done})
    markers = {"measured": "o", "predicted": "^"}
    for src in sources:
        pts = [c for c in done if (c.latency_source or "unknown") == src]
        colors = ["tab:green" if c.meets_target else "tab:red" for c in pts]
        ax.scatter([c.latency_p50 for c in pts], [c.accuracy for c in pts], c=colors, alpha=0.6, s=28,
                   marker=markers.get(src, "s"), label=f"candidates, {src} latency (green: meets target)")
    ax.step([c.latency_p50 for c in front], [c.accuracy for c in front], where="post", color="black", lw=1.2,
            label="Pareto front")
    for c in front:
        ax.annotate(c.arch_id[:8], (c.latency_p50, c.accuracy), fontsize=7, xytext=(3, 3),
                    textcoords="offset points")
    if search.target_ms is not None:
        ax.axvline(search.target_ms, color="tab:blue", ls="--", lw=1, label=f"target {search.target_ms:g} ms")
    if references:
        for name, ms in sorted(references.items(), key=lambda kv: kv[1]):
            ax.axvline(ms, color="tab:purple", ls=":", lw=1)
            ax.annotate(name, (ms, 1.0), xycoords=("data", "axes fraction"), rotation=90, fontsize=7,
                        xytext=(-3, -4), textcoords="offset points", ha="right", va="top", color="tab:purple")
        ax.plot([], [], color="tab:purple", ls=":", label="reference networks (latency; accuracy not known)")
    lats = [c.latency_p50 for c in done] + list((references or {}).values())
    if max(lats) / min(lats) > 20:
        ax.set_xscale("log")
    ax.set_xlabel("latency p50 (ms)")
    ax.set_ylabel(accuracy_label)
    title = f"{search.name}: {accuracy_label} vs latency"
    if search.device_name:
        title += f"\non {search.device_name}"
    ax.set_title(title, fontsize=10)
    if reference_note:
        fig.text(0.01, 0.01, reference_note, fontsize=7, color="dimgray")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png")
    return path
