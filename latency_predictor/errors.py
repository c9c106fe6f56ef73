"""Typed errors of the latency layer."""

from __future__ import annotations


class LatencyError(Exception):
    """Root of every error raised by :mod:`latency_predictor`."""


class BackendUnavailableError(LatencyError):
    """A backend, provider, device or precision this machine cannot give.

    The message names what is missing and how to get it (e.g. the extra to install).
    """


class ConfigError(LatencyError, ValueError):
    """Invalid measurement settings (unknown backend, bad input shape, bad counts)."""


class ExportError(LatencyError):
    """The network could not be exported (e.g. to ONNX) for this backend."""


class EngineBuildError(LatencyError):
    """An inference engine (TensorRT) could not be built; carries the parser/builder log."""


class MeasurementError(LatencyError):
    """Running or timing the network failed, or produced an invalid number."""


class PredictorMismatchError(LatencyError):
    """A learned predictor was trained for another space, device, backend or input shape."""


class DatasetError(LatencyError):
    """A latency dataset is missing, malformed, or too small for what was asked of it."""


class PredictorFileError(LatencyError):
    """A saved predictor file cannot be read: not JSON, unknown format or version, unexpected content."""
