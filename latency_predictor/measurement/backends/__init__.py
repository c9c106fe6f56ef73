"""Measuring backends behind one registry.

Build one from plain config values::

    from latency_predictor.measurement.backends import make_estimator
    est = make_estimator("onnxruntime", input_shape=(1, 3, 224, 224), intra_op_threads=1,
                         measure={"min_runs": 100, "min_time_s": 1.0})
    result = est.measure(arch)          # a LatencyResult; result.latency_ms is the p50

Every backend implements :class:`~latency_predictor.LatencyEstimator` and checks its options
when constructed, before any export or build, so a bad config fails at start.
"""

from __future__ import annotations

import inspect
from typing import Any

from latency_predictor.errors import ConfigError
from latency_predictor.measurement.backends.base import CommonOptions, MeasuredBackend, Prepared
from latency_predictor.measurement.backends.litert_backend import LiteRTBackend
from latency_predictor.measurement.backends.openvino_backend import OpenVinoBackend
from latency_predictor.measurement.backends.ort_backend import OnnxRuntimeBackend
from latency_predictor.measurement.backends.tensorrt_backend import TensorRTBackend
from latency_predictor.measurement.backends.torch_backend import TorchBackend

BACKENDS: dict[str, type[MeasuredBackend]] = {
    OnnxRuntimeBackend.name: OnnxRuntimeBackend,
    TorchBackend.name: TorchBackend,
    TensorRTBackend.name: TensorRTBackend,
    OpenVinoBackend.name: OpenVinoBackend,
    LiteRTBackend.name: LiteRTBackend,
}
DEFAULT_BACKEND = OnnxRuntimeBackend.name


def backend_options(backend: str) -> list[str]:
    """The keyword options ``backend`` accepts.

    Raises:
        ConfigError: unknown backend (the known ones are listed).
    """
    own = inspect.signature(_backend_class(backend).__init__).parameters.values()
    return [*(p.name for p in own if p.name != "self" and p.kind is not p.VAR_KEYWORD), *CommonOptions.__annotations__]


def make_estimator(backend: str = DEFAULT_BACKEND, **options: Any) -> MeasuredBackend:
    """Construct a measuring backend by name from plain option values.

    Args:
        backend: ``onnxruntime``, ``torch``, ``tensorrt``, ``openvino`` or ``litert``.
        **options: the backend's constructor options (``input_shape``, ``measure``, ``precision``, ...).
            ``input_shape`` may be a list (as it comes from YAML); ``measure`` a mapping.

    Raises:
        ConfigError: unknown backend or option, or invalid values.
        BackendUnavailableError: the backend, provider, device or precision is not available here.
    """
    cls = _backend_class(backend)
    accepted = backend_options(backend)
    unknown = sorted(set(options) - set(accepted))
    if unknown:
        raise ConfigError(f"backend {backend!r} does not take option(s) {unknown}; it takes {accepted}")
    if "input_shape" in options and options["input_shape"] is not None:
        options["input_shape"] = tuple(options["input_shape"])
    return cls(**options)


def _backend_class(backend: str) -> type[MeasuredBackend]:
    try:
        return BACKENDS[backend]
    except KeyError:
        raise ConfigError(f"unknown latency backend {backend!r}; known: {sorted(BACKENDS)}") from None


__all__ = [
    "BACKENDS", "DEFAULT_BACKEND", "CommonOptions", "LiteRTBackend", "MeasuredBackend", "OnnxRuntimeBackend",
    "OpenVinoBackend", "Prepared", "TensorRTBackend", "TorchBackend", "backend_options", "make_estimator",
]
