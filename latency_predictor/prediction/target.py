"""What a latency dataset or predictor is *for*: space, device, backend, precision, input shape.

A predictor is only valid for the setting its measurements came from. :class:`PredictorTarget`
records that setting; :meth:`PredictorTarget.mismatches` lists every field in which two targets
differ, so a refusal says exactly what differs (``device fingerprint: onnxruntime 1.32.0 here,
1.31.1 in the predictor``).

The device part of the setting is the measuring setup's fingerprint
(:class:`~latency_predictor.measurement.fingerprint.DeviceFingerprint`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from latency_predictor.errors import ConfigError, PredictorMismatchError
from latency_predictor.measurement.fingerprint import DeviceFingerprint, stable_digest
from latency_predictor.measurement.protocol import LatencyEstimator
from search_spaces import SearchSpace


def space_digest(space: SearchSpace) -> str:
    """A hash of a space's definition (its choices; not its name, description or file path)."""
    d = dataclasses.asdict(space)
    for key in ("name", "description", "source"):
        d.pop(key, None)
    return stable_digest(d)


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
