"""What a latency was measured on: recorded with every result so numbers can be compared honestly.

The one place machine facts and package versions are read, for measurements, search runs and
benchmark records alike.
"""

from __future__ import annotations

import functools
import importlib.metadata
import os
import platform
from collections.abc import Iterable
from pathlib import Path
from typing import Any

_CPUINFO = Path("/proc/cpuinfo")


@functools.cache
def cpu_model() -> str:
    """The CPU's model name (from ``/proc/cpuinfo`` on Linux, else what :mod:`platform` reports)."""
    if _CPUINFO.exists():
        for line in _CPUINFO.read_text(errors="replace").splitlines():
            key, _, value = line.partition(":")
            if key.strip() in ("model name", "Model", "Hardware") and value.strip():
                return value.strip()
    return platform.processor() or platform.machine() or "unknown"


def usable_cpus() -> int:
    """CPUs this process may run on (its affinity mask), not the machine's total."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


NOT_INSTALLED = "not installed"


def package_version(dist: str) -> str:
    """Installed version of a distribution, or :data:`NOT_INSTALLED`."""
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return NOT_INSTALLED


def versions(dists: Iterable[str], installed_only: bool = False) -> dict[str, str]:
    """The installed version of each distribution in ``dists`` (:data:`NOT_INSTALLED`, or left out
    with ``installed_only``, for one that is not)."""
    found = {d: package_version(d) for d in dists}
    return {d: v for d, v in found.items() if not (installed_only and v == NOT_INSTALLED)}


def machine() -> dict[str, Any]:
    """The machine: Python, OS, architecture, CPU model, usable and total CPUs (no host names, no paths)."""
    return {
        "python": platform.python_version(),
        "os": f"{platform.system()} {platform.release()}",
        "machine": platform.machine(),
        "cpu_model": cpu_model(),
        "cpus_usable": usable_cpus(),
        "cpus_total": os.cpu_count() or 0,
    }


def base_environment() -> dict[str, str]:
    """Facts common to every backend: :func:`machine`, and the versions of the numeric stack."""
    return {**{k: str(v) for k, v in machine().items()}, **versions(("numpy", "torch"))}
