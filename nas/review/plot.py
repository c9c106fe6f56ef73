"""The Pareto plot of a search: accuracy against latency p50, the front, the target, the references."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

from matplotlib.axes import Axes
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
    """Save :func:`pareto_figure` of the search as a PNG at ``path``; returns ``path``."""
    fig = pareto_figure(candidates, search, references, reference_note, accuracy_label)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png")
    return path


def pareto_figure(
    candidates: Sequence[Candidate],
    search: SearchRecord,
    references: dict[str, float] | None = None,
    reference_note: str = "",
    accuracy_label: str = "accuracy",
) -> Figure:
    """Accuracy against latency p50 of the completed candidates.

    The Pareto front is drawn as a step line, the latency target as a vertical dashed line, and
    each reference network (name -> p50 ms measured on the search's device) as a dotted vertical
    line tagged R1, R2, ... in latency order, named with its latency in the legend (their
    accuracy on the search's task is not known). Tags of networks at similar latency are put on
    separate rows, so none overlaps another.

    Args:
        candidates: the search's candidates (failed ones are left out).
        search: the search (name and target).
        references: reference latencies to mark; None or empty: none.
        reference_note: a line under the title saying where reference latencies come from.
        accuracy_label: the name of the y axis's figure.

    Returns:
        The figure (drawn with Agg; pyplot is not used).

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
    ordered = sorted((references or {}).items(), key=lambda kv: kv[1])
    if ordered:
        # Short tags on the lines (R1, R2, ...) and the names with their latency in the legend:
        # full names written along the lines overlap as soon as two networks have similar latency.
        ax.plot([], [], color="tab:purple", ls=":", label="reference networks (latency; accuracy not known):")
        for i, (name, ms) in enumerate(ordered, 1):
            ax.axvline(ms, color="tab:purple", ls=":", lw=1)
            ax.plot([], [], ls="none", label=f"  R{i}  {name}: {ms:.3g} ms")
    lats = [c.latency_p50 for c in done] + [ms for _, ms in ordered]
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
    if ordered:  # placed once the axes have their final size and limits
        _reference_tags(fig, ax, [ms for _, ms in ordered])
    return fig


def reference_tag_levels(xs_px: Sequence[float], min_gap_px: float) -> list[int]:
    """The row each tag goes on (0 at the top), so tags closer than ``min_gap_px`` never share a row.

    ``xs_px`` are the tags' horizontal positions in pixels, in increasing order; a tag takes the
    highest row whose last tag is at least ``min_gap_px`` to its left.
    """
    last: list[float] = []  # per row, the position of its rightmost tag
    levels = []
    for x in xs_px:
        row = next((r for r, prev in enumerate(last) if x - prev >= min_gap_px), len(last))
        if row == len(last):
            last.append(x)
        else:
            last[row] = x
        levels.append(row)
    return levels


def _reference_tags(fig: Figure, ax: Axes, xs: Sequence[float]) -> None:
    fontsize = 7
    row_pt = fontsize + 3
    ax.get_xlim()  # settles the autoscaled limits the transform below uses
    xs_px = [float(ax.transData.transform((x, 0.0))[0]) for x in xs]
    # A tag is at most "R99": about 2.2 font sizes wide, plus a little air.
    gap_px = 2.6 * fontsize * fig.dpi / 72
    for i, (x, row) in enumerate(zip(xs, reference_tag_levels(xs_px, gap_px), strict=True), 1):
        ax.annotate(f"R{i}", (x, 1.0), xycoords=("data", "axes fraction"), fontsize=fontsize, color="tab:purple",
                    xytext=(0, -3 - row * row_pt), textcoords="offset points", ha="center", va="top",
                    bbox={"boxstyle": "round,pad=0.1", "fc": "white", "ec": "none", "alpha": 0.8})
