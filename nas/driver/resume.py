"""Resuming a search from its MLflow record (``resume=true name=<name>``).

The record is the one store every finished candidate is written to before anything else learns
of it, so a search is re-driven from it: the settings that decide results must match the
recorded ones (:func:`check_resumable`), every recorded candidate is replayed into a fresh
sampler (those architectures are never proposed again), and a new Ray Tune experiment runs the
trials still missing. Ray Tune's own ``Tuner.restore`` is not used: its snapshot of the
experiment lags the record by up to its checkpoint period, so a driver killed in between would
run recorded candidates again.
"""

from __future__ import annotations

import shlex

from nas.core.errors import ConfigError
from nas.core.record import SearchRecord

RESUMABLE_KEYS = (
    "name", "output_dir", "top_k", "progress", "resume", "search.n_trials", "search.max_concurrent",
    "search.max_retries", "search.trial_timeout_s", "search.max_duplicates", "search.storage",
)
"""Settings a resumed search may change; every other one (and anything under ``ray.`` or
``tracking.``, which may change too) must match the recorded search, or results would mix."""


def check_resumable(previous: SearchRecord, params: dict[str, str], space_hash: str) -> dict[str, str]:
    """The resumable settings that changed; raise when another one differs from the record.

    Args:
        previous: the recorded search.
        params: this run's flattened config params (as the parent run records them).
        space_hash: the hash of this run's search-space definition.

    Raises:
        ConfigError: naming each setting that differs from the recorded search.
    """
    changed, differ = {}, []
    for key, value in params.items():
        if key not in previous.params or previous.params[key] == value:
            continue
        if key in RESUMABLE_KEYS or key.startswith(("ray.", "tracking.")):
            changed[key] = f"{previous.params[key]} -> {value}"
        else:
            differ.append(f"{key}={previous.params[key]} (now {value})")
    recorded_hash = previous.tags.get("space_sha256")
    if recorded_hash is not None and recorded_hash != space_hash:
        differ.append("the search space definition")
    if differ:
        raise ConfigError(
            "resume", f"search {previous.name!r} was recorded with other settings: {'; '.join(differ)}; resume with "
            "the recorded settings, or start a new search with another name"
        )
    return changed


def resume_command(command: list[str] | None, name: str) -> str | None:
    """The command line that resumes the search ``name``: ``command`` with ``name=`` and ``resume=true``."""
    if command is None:
        return None
    kept = [a for a in command if a.lstrip("+").split("=", 1)[0] not in ("name", "resume")]
    return shlex.join([*kept, f"name={name}", "resume=true"])
