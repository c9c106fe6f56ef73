"""``python -m nas.leaderboard``: :class:`LeaderboardConfig` and :func:`validate_leaderboard`."""

from __future__ import annotations

from dataclasses import dataclass, field

from nas.core.config.fields import check_choices, int_at_least, one_of
from nas.core.config.groups import TrackingConfig
from nas.core.record import SORT_KEYS

LEADERBOARD_FORMATS = ("table", "csv", "json")
REFERENCE_MODES = ("logged", "measure", "none")


@dataclass
class LeaderboardConfig:
    """Everything ``python -m nas.leaderboard`` takes.

    Attributes:
        search: the search's name or parent run id; None: the latest search.
        top_k: candidates shown.
        sort: the ranking key (latency, params and MACs ascending, the rest descending).
        feasible: only candidates that meet the latency target.
        pareto: only the Pareto front (accuracy vs latency p50).
        failed: also list failed and pruned candidates with their reason.
        format: how the candidates are printed (or written to ``output``).
        output: write the CSV/JSON/table to this file instead of printing it.
        plot: save the Pareto plot and log it on the search's parent run.
        plot_path: where to save it; None: ``<home>/plots/pareto-<search>.png`` (:mod:`nas.core.paths`).
        references: reference networks on the plot: ``logged`` (those recorded on the parent run),
            ``measure`` (measure them now with the search's backend on this machine, which must be
            the search's device, and record them on the parent run) or ``none``.
        tracking: the MLflow store and experiment.
    """

    search: str | None = None
    top_k: int = 10
    sort: str = one_of(SORT_KEYS, "reward")
    feasible: bool = False
    pareto: bool = False
    failed: bool = False
    format: str = one_of(LEADERBOARD_FORMATS, "table")
    output: str | None = None
    plot: bool = True
    plot_path: str | None = None
    references: str = one_of(REFERENCE_MODES, "logged")
    tracking: TrackingConfig = field(default_factory=TrackingConfig)


def validate_leaderboard(cfg: LeaderboardConfig) -> None:
    """Check the leaderboard's choices and counts.

    Raises:
        ConfigError: naming the key and what is allowed.
    """
    check_choices(cfg)
    int_at_least("top_k", cfg.top_k, 1)
