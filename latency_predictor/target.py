"""What a latency dataset or predictor is *for*: space, device, backend, precision, input shape.

A predictor is only valid for the setting its measurements came from. :class:`PredictorTarget`
records that setting; :meth:`PredictorTarget.mismatches` lists every field in which two targets
differ, so a refusal says exactly what differs (``device fingerprint: onnxruntime 1.32.0 here,
1.31.1 in the predictor``).

The device fingerprint is the backend's environment (CPU or GPU model, runtime and exporter
versions, thread counts, provider, optimisation level) minus the entries that do not change
how fast a network runs (:data:`IGNORED_ENVIRONMENT_KEYS`), plus backend, device and precision.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from latency_predictor.errors import ConfigError, PredictorMismatchError
from latency_predictor.measurement.protocol import LatencyEstimator, LatencyResult
from search_spaces import SearchSpace

IGNORED_ENVIRONMENT_KEYS: frozenset[str] = frozenset({"python", "os", "numpy", "cpus_usable", "cpus_total"})
"""Environment entries left out of the device fingerprint: they do not change a network's speed
(the runtime's own thread counts, which do, are part of the fingerprint)."""


def _digest(obj: object) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:16]


def space_digest(space: SearchSpace) -> str:
    """A hash of a space's definition (its choices; not its name, description or file path)."""
    d = dataclasses.asdict(space)
    for key in ("name", "description", "source"):
        d.pop(key, None)
    return _digest(d)


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
        return _digest(self.to_dict())

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


@dataclass(frozen=True)
class PredictorTarget:
    """The setting a dataset was measured in and a predictor is valid for.

    Attributes:
        space: the search space's name.
        space_digest: :func:`space_digest` of its definition.
        fingerprint: the measuring setup (backend, device, precision, environment).
        input_shape: the deployment shape ``(N, C, H, W)``.
        num_classes: classifier width of the measured networks.
    """

    space: str
    space_digest: str
    fingerprint: DeviceFingerprint
    input_shape: tuple[int, ...]
    num_classes: int = 1000

    @property
    def backend(self) -> str:
        """The measuring backend's name."""
        return self.fingerprint.backend

    @classmethod
    def create(cls, space: SearchSpace, estimator: LatencyEstimator) -> PredictorTarget:
        """The target of measurements of ``space`` made by the measuring backend ``estimator``."""
        num_classes = getattr(estimator, "num_classes", 1000)
        return cls(space.name, space_digest(space), DeviceFingerprint.of_estimator(estimator),
                   tuple(estimator.input_shape), int(num_classes))

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable record (with the fingerprint's digest, for people and MLflow tags)."""
        return {
            "space": self.space, "space_digest": self.space_digest, "fingerprint": self.fingerprint.to_dict(),
            "fingerprint_digest": self.fingerprint.digest, "input_shape": list(self.input_shape),
            "num_classes": self.num_classes,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> PredictorTarget:
        """Inverse of :meth:`to_dict`.

        Raises:
            ConfigError: a missing or mistyped field, or a digest that does not match the fingerprint.
        """
        try:
            space, sd, fp = d["space"], d["space_digest"], d["fingerprint"]
            shape, nc = d["input_shape"], d["num_classes"]
        except (KeyError, TypeError) as err:
            raise ConfigError(f"target lacks field {err}") from None
        if not isinstance(space, str) or not isinstance(sd, str) or not isinstance(fp, Mapping):
            raise ConfigError("target space, space_digest and fingerprint must be str, str and a mapping")
        if not _is_shape(shape) or isinstance(nc, bool) or not isinstance(nc, int) or nc < 1:
            raise ConfigError(f"target input_shape {shape!r} or num_classes {nc!r} is invalid")
        target = cls(space, sd, DeviceFingerprint.from_dict(fp), tuple(shape), nc)
        if "fingerprint_digest" in d and d["fingerprint_digest"] != target.fingerprint.digest:
            raise ConfigError("target fingerprint_digest does not match its fingerprint (edited or corrupted)")
        return target

    def mismatches(self, expected: PredictorTarget, what: str = "predictor") -> list[str]:
        """Every difference between this target and ``expected``, in words ("here" is ``expected``)."""
        there = f"in the {what}"
        out = []
        if self.space != expected.space:
            out.append(f"space {expected.space!r} here, {self.space!r} {there}")
        elif self.space_digest != expected.space_digest:
            out.append(f"space {self.space!r} has a different definition here than {there} (its choices changed)")
        if tuple(self.input_shape) != tuple(expected.input_shape):
            out.append(f"input shape {_shape(expected.input_shape)} here, {_shape(self.input_shape)} {there}")
        if self.num_classes != expected.num_classes:
            out.append(f"num_classes {expected.num_classes} here, {self.num_classes} {there}")
        out += [f"device fingerprint: {d}" for d in expected.fingerprint.differences(self.fingerprint, there=there)]
        return out

    def check(self, expected: PredictorTarget, what: str = "predictor") -> None:
        """Raise :class:`PredictorMismatchError` naming every difference from ``expected``."""
        diffs = self.mismatches(expected, what)
        if diffs:
            raise PredictorMismatchError(
                f"this {what} was made for another setting: " + "; ".join(diffs)
            )


def _is_shape(shape: object) -> bool:
    return isinstance(shape, Sequence) and len(shape) == 4 and all(
        isinstance(d, int) and not isinstance(d, bool) and d >= 1 for d in shape
    )


def _shape(shape: Sequence[int]) -> str:
    return "x".join(str(d) for d in shape)
