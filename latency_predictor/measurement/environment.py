"""What a latency was measured on: recorded with every result so numbers can be compared honestly."""

from __future__ import annotations

import functools
import importlib.metadata
import os
import platform
from pathlib import Path

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


def package_version(dist: str) -> str:
    """Installed version of a distribution, or ``"not installed"``."""
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def base_environment() -> dict[str, str]:
    """Facts common to every backend: Python, OS, CPU, and the versions of the numeric stack."""
    return {
        "python": platform.python_version(),
        "os": f"{platform.system()} {platform.release()}",
        "machine": platform.machine(),
        "cpu_model": cpu_model(),
        "cpus_usable": str(usable_cpus()),
        "cpus_total": str(os.cpu_count() or 0),
        "numpy": package_version("numpy"),
        "torch": package_version("torch"),
    }
