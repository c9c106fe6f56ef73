"""The configuration of every command: one dataclass schema per Hydra config group, one per command.

* :mod:`nas.core.config.groups`: the schema of each group (``latency``, ``data``, ``train``,
  ``accuracy``, ``search``, ``ray``, ``tracking``) and the blocks several commands share;
* :mod:`nas.core.config.checks`: one check per group (:func:`check_data`, :func:`check_train`, ...),
  each naming the offending key in full;
* :mod:`nas.core.config.fields`: a field's allowed values (:func:`one_of`, :func:`check_choices`)
  and the checks of one value the group checks are made of;
* one module per command, its whole config and its validator: :mod:`nas.core.config.search`
  (:class:`SearchConfig`, :func:`validate`), :mod:`nas.core.config.supernet`,
  :mod:`nas.core.config.fidelity`, :mod:`nas.core.config.leaderboard`,
  :mod:`nas.core.config.export` and :mod:`nas.core.config.optimize`.

:mod:`nas.cli` (the Hydra adapter; this package does not import Hydra) registers each command's
whole schema in Hydra's ConfigStore (``base_config`` for the search, ``<command>_schema`` for the
others), not one per group: the groups' YAML files under ``conf/<group>/`` merge into that typed
config, so a misspelt key or a wrong type fails when the config is composed, naming the key. The
``space`` group holds search-space YAML in the format of :mod:`search_spaces` (the built-in spaces,
``search_spaces/spaces/*.yaml``, registered as its options) and has no default: its schema is a
loose mapping here and :meth:`search_spaces.SearchSpace.from_dict` validates it. Ranges and
choices are checked by the command's validator (:func:`validate` for the search,
``validate_<command>`` for the others) before any work starts.

Library code receives plain dataclasses (``OmegaConf.to_object``), never a DictConfig. Every public
name is importable from here (``from nas.core.config import SearchConfig``).
"""

from __future__ import annotations

from nas.core.config.checks import (
    FUNCTION_REF,
    check_accuracy,
    check_anchor,
    check_data,
    check_export_latency,
    check_latency,
    check_ray,
    check_rungs,
    check_search_alg,
    check_supernet_estimate,
    check_top_rung,
    check_tracking,
    check_train,
)
from nas.core.config.export import ENGINE_PRECISIONS, INITS, CheckConfig, ExportConfig, validate_export
from nas.core.config.fidelity import FidelityConfig, ReferenceBudget, validate_fidelity
from nas.core.config.fields import CHOICES, HIDDEN, check_choices, one_of
from nas.core.config.groups import (
    AMP_MODES,
    AUGMENTS,
    CHANNELS_LAST,
    DATASETS,
    ESTIMATORS,
    GROUP_SCHEMAS,
    LATENCY_PRECISIONS,
    LR_SCHEDULES,
    OPTIMIZERS,
    SAMPLERS,
    SCHEDULERS,
    STREAM_MODES,
    ZERO_COST_ESTIMATORS,
    AccuracyConfig,
    DataConfig,
    ExportLatencyConfig,
    LatencyConfig,
    RayConfig,
    RungConfig,
    SearchAlgConfig,
    SupernetEstimateConfig,
    TrackingConfig,
    TrainConfig,
)
from nas.core.config.leaderboard import LEADERBOARD_FORMATS, REFERENCE_MODES, LeaderboardConfig, validate_leaderboard
from nas.core.config.optimize import (
    ACTIVATION_TYPES,
    CALIBRATION_METHODS,
    CalibrationConfig,
    OptimizeCheckConfig,
    OptimizeConfig,
    PruneConfig,
    validate_optimize,
)
from nas.core.config.search import SearchConfig, validate
from nas.core.config.supernet import DIST_BACKENDS, DistributedConfig, SupernetConfig, validate_supernet

__all__ = [
    "ACTIVATION_TYPES", "AMP_MODES", "AUGMENTS", "CALIBRATION_METHODS", "CHANNELS_LAST", "CHOICES", "DATASETS",
    "DIST_BACKENDS", "ENGINE_PRECISIONS", "ESTIMATORS", "FUNCTION_REF", "GROUP_SCHEMAS", "HIDDEN", "INITS",
    "LATENCY_PRECISIONS", "LEADERBOARD_FORMATS", "LR_SCHEDULES", "OPTIMIZERS", "REFERENCE_MODES", "SAMPLERS",
    "SCHEDULERS", "STREAM_MODES", "ZERO_COST_ESTIMATORS", "AccuracyConfig", "CalibrationConfig", "CheckConfig",
    "DataConfig", "DistributedConfig", "ExportConfig", "ExportLatencyConfig", "FidelityConfig", "LatencyConfig",
    "LeaderboardConfig", "OptimizeCheckConfig", "OptimizeConfig", "PruneConfig", "RayConfig", "ReferenceBudget",
    "RungConfig", "SearchAlgConfig", "SearchConfig", "SupernetConfig", "SupernetEstimateConfig", "TrackingConfig",
    "TrainConfig", "check_accuracy", "check_anchor", "check_choices", "check_data", "check_export_latency",
    "check_latency", "check_ray", "check_rungs", "check_search_alg", "check_supernet_estimate", "check_top_rung",
    "check_tracking", "check_train", "one_of", "validate", "validate_export", "validate_fidelity",
    "validate_leaderboard", "validate_optimize", "validate_supernet",
]
