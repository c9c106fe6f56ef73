"""``python -m nas.search``: :class:`SearchConfig`, the whole configuration of one search, and :func:`validate`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from nas.core.config.checks import (
    check_accuracy,
    check_anchor,
    check_data,
    check_latency,
    check_ray,
    check_search_alg,
    check_space,
    check_tracking,
    check_train,
)
from nas.core.config.fields import HIDDEN, check_choices, int_at_least, positive, run_name
from nas.core.config.groups import (
    AccuracyConfig,
    DataConfig,
    LatencyConfig,
    RayConfig,
    SearchAlgConfig,
    TrackingConfig,
    TrainConfig,
)
from nas.core.errors import ConfigError


@dataclass
class SearchConfig:
    """The whole configuration of one search.

    Attributes:
        space: the search-space mapping (``+space=<name>`` loads ``search_spaces/spaces/<name>.yaml``).
        space_source: where ``space`` came from, for error messages.
        target_ms: the latency target in milliseconds (or ``target_anchor``: one of the two).
        target_anchor: a latency target relative to a network, ``<reference>[@<width>]`` (e.g.
            ``mobilenetv2_100@0.35``: "no slower than MobileNetV2 x0.35 on this device"): that
            network is the anchor (``latency.anchor``), and the reward and "meets target" use each
            candidate's ``x_anchor`` against ``target_x`` in place of its milliseconds.
        target_x: the factor of ``target_anchor``: a candidate meets the target when its latency is
            at most ``target_x`` times the anchor's (1.0: no slower than it).
        name: the search's name (MLflow parent run name, Ray experiment name); None:
            ``<space>-<target>ms-<date>-<time>-<4 random hex digits>`` (a relative target:
            ``<space>-x<target_x>-<reference>[-x<width>]-...``).
        output_dir: absolute folder for this search's files (Ray Tune state, artifacts, log);
            None: ``<home>/searches/<name>`` (:mod:`nas.core.paths`).
        top_k: candidates shown in the final table.
        progress: show the search's progress (a bar on a terminal, a line per trial event otherwise).
        resume: continue the search called ``name`` recorded in the tracking store (its
            candidates are not evaluated again; the sampler's history is rebuilt from them).
    """

    space: dict[str, Any] | None = None
    space_source: str = field(default="<config>", metadata={HIDDEN: True})
    target_ms: float | None = None
    target_anchor: str | None = None
    target_x: float = 1.0
    name: str | None = None
    output_dir: str | None = None
    top_k: int = 10
    progress: bool = True
    resume: bool = False
    latency: LatencyConfig = field(default_factory=LatencyConfig)
    data: DataConfig = field(default_factory=DataConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    accuracy: AccuracyConfig = field(default_factory=AccuracyConfig)
    search: SearchAlgConfig = field(default_factory=SearchAlgConfig)
    ray: RayConfig = field(default_factory=RayConfig)
    tracking: TrackingConfig = field(default_factory=TrackingConfig)

    @property
    def anchor(self) -> str | None:
        """The anchor network the candidates are measured beside: ``target_anchor``, else ``latency.anchor``."""
        return self.target_anchor or self.latency.anchor


def validate(cfg: SearchConfig) -> None:
    """Check every value's range and choice; raise on the first bad one.

    The search's own keys (the space, the target, the name) first, then each group's check
    (:mod:`nas.core.config.checks`). Paths are checked where they are used (the dataset, the
    tracking store) before trials start.

    Raises:
        ConfigError: naming the key, the value and what is allowed.
    """
    check_space(cfg.space, "mobile")
    if cfg.target_ms is not None and cfg.target_anchor is not None:
        raise ConfigError("target_anchor", "target_ms and target_anchor are two targets: give one, target_ms=<ms> "
                          "or target_anchor=<reference>[@<width>] (relative to that network, measured beside the "
                          "candidates)")
    if cfg.target_ms is None and cfg.target_anchor is None:
        raise ConfigError("target_ms", "the latency target is required, e.g. target_ms=50, or target_anchor="
                          "mobilenetv2_100@0.35 (no slower than that network on this device)")
    if cfg.target_ms is not None:
        positive("target_ms", cfg.target_ms)
    check_anchor(cfg.latency, cfg.target_anchor, cfg.target_x)
    run_name(cfg.name)
    int_at_least("top_k", cfg.top_k, 1)
    if cfg.resume and cfg.name is None:
        raise ConfigError("resume", "resume=true continues a named search: add name=<the search's name>")
    check_choices(cfg)
    check_latency(cfg.latency)
    check_data(cfg.data)
    check_train(cfg.train)
    check_accuracy(cfg.accuracy, cfg.data.name)
    check_search_alg(cfg.search, cfg.accuracy.estimator, cfg.train.epochs)
    for key in ("latency_screen", "latency_floor"):
        if getattr(cfg.search, key) is not None and cfg.latency.scenario == "server":
            raise ConfigError(f"search.{key}", "screens a single-stream target; latency.scenario=server bounds "
                              f"each batch size's latency instead: leave search.{key} null")
    check_ray(cfg.ray)
    check_tracking(cfg.tracking)
