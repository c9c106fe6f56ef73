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


class InvalidModelError(LatencyError, ValueError):
    """A model given to be measured as it is (ONNX bytes) is malformed, or does not take the input
    the settings describe."""


class MeasurementError(LatencyError):
    """Running or timing the network failed, or produced an invalid number."""


class PredictorMismatchError(LatencyError):
    """A learned predictor was trained for another space, device, backend or input shape."""


class DatasetError(LatencyError):
    """A latency dataset is missing, malformed, or too small for what was asked of it."""


class PredictorFileError(LatencyError):
    """A saved predictor file cannot be read: not JSON, unknown format or version, unexpected content."""


class AgentError(LatencyError):
    """A measurement through a remote agent failed (:mod:`latency_predictor.agent`)."""


class AgentUnavailableError(AgentError):
    """An agent did not answer, died during the request, was busy (its queue full) or its worker
    crashed; the measurement is tried again on another agent of the pool."""


class AgentTimeoutError(AgentUnavailableError):
    """An agent ran past its time limit for one request (or the client's own timeout)."""


class AgentRefusedError(AgentError):
    """An agent refused the request (wrong token, request too large, malformed ONNX, unknown
    architecture token, ...): another agent would refuse it too, so it is not retried.

    Attributes:
        status: the HTTP status the agent answered.
        kind: the agent's name for the problem (``unauthorised``, ``request_too_large``, ...).
    """

    def __init__(self, message: str, status: int = 0, kind: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.kind = kind


class AgentMismatchError(AgentError):
    """The agents of a pool are not identical devices (their fingerprints differ), or an agent
    answered for another device than the pool's."""
