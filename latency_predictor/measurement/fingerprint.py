"""The device fingerprint: the measuring setup a latency belongs to.

It is the backend's environment (CPU or GPU model, runtime and exporter versions, thread counts,
provider, optimisation level) minus the entries that do not change how fast a network runs
(:data:`IGNORED_ENVIRONMENT_KEYS`), plus backend, device and precision. Two measurements are
comparable when their fingerprints are equal; :meth:`DeviceFingerprint.differences` names what
differs (``onnxruntime 1.32.0 here, 1.31.1 there``).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from latency_predictor.errors import ConfigError
from latency_predictor.measurement.protocol import LatencyEstimator, LatencyResult

IGNORED_ENVIRONMENT_KEYS: frozenset[str] = frozenset({"python", "os", "numpy", "cpus_usable", "cpus_total"})
"""Environment entries left out of the device fingerprint: they do not change a network's speed
(the runtime's own thread counts, which do, are part of the fingerprint)."""


def stable_digest(obj: object) -> str:
    """A short hash of a JSON-serialisable value, independent of key order."""
    return hashlib.sha256(json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class DeviceFingerprint:
    """The measuring setup a latency belongs to.

    Attributes:
        backend: ``onnxruntime``, ``torch`` or ``tensorrt``.
        device: ``cpu`` or ``cuda:N``.
        precision: ``fp32``, ``fp16``, ...
        environment: the backend's environment minus :data:`IGNORED_ENVIRONMENT_KEYS`.
    """

    backend: str
    device: str
    precision: str
    environment: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def create(cls, backend: str, device: str, precision: str, environment: Mapping[str, str]) -> DeviceFingerprint:
        """Build from a full environment (ignored keys are dropped)."""
        env = {str(k): str(v) for k, v in sorted(environment.items()) if k not in IGNORED_ENVIRONMENT_KEYS}
        return cls(backend, device, precision, env)

    @classmethod
    def of_result(cls, result: LatencyResult) -> DeviceFingerprint:
        """The fingerprint of the setup that measured ``result``."""
        return cls.create(result.backend, result.device, result.precision, result.environment)

    @classmethod
    def of_estimator(cls, estimator: LatencyEstimator) -> DeviceFingerprint:
        """The fingerprint of a measuring backend, read without measuring anything.

        Raises:
            ConfigError: ``estimator`` does not expose ``device``, ``precision`` and ``environment()``
                (a measuring backend of :mod:`latency_predictor.measurement.backends` does).
        """
        env = getattr(estimator, "environment", None)
        device = getattr(estimator, "device", None)
        precision = getattr(estimator, "precision", None)
        if not callable(env) or not isinstance(device, str) or not isinstance(precision, str):
            raise ConfigError(
                f"{type(estimator).__name__} is not a measuring backend: it lacks device, precision or environment()"
            )
        return cls.create(estimator.name, device, precision, env())

    @property
    def digest(self) -> str:
        """A short stable hash of the fingerprint."""
        return stable_digest(self.to_dict())

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable record."""
        return {"backend": self.backend, "device": self.device, "precision": self.precision,
                "environment": dict(self.environment)}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> DeviceFingerprint:
        """Inverse of :meth:`to_dict`.

        Raises:
            ConfigError: a missing or mistyped field.
        """
        try:
            env = d["environment"]
            fields_ = (d["backend"], d["device"], d["precision"])
        except (KeyError, TypeError) as err:
            raise ConfigError(f"device fingerprint lacks field {err}") from None
        if not all(isinstance(x, str) for x in fields_) or not isinstance(env, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in env.items()
        ):
            raise ConfigError("device fingerprint fields must be strings")
        return cls(fields_[0], fields_[1], fields_[2], dict(env))

    def differences(self, other: DeviceFingerprint, here: str = "here", there: str = "there") -> list[str]:
        """What differs, one phrase per field (``self`` is ``here``, ``other`` is ``there``)."""
        out = []
        for name in ("backend", "device", "precision"):
            a, b = getattr(self, name), getattr(other, name)
            if a != b:
                out.append(f"{name} {a!r} {here}, {b!r} {there}")
        for key in sorted(set(self.environment) | set(other.environment)):
            a, b = self.environment.get(key, "<absent>"), other.environment.get(key, "<absent>")
            if a != b:
                out.append(f"{key} {a!r} {here}, {b!r} {there}")
        return out
