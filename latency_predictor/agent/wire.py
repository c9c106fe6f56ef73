"""What travels between a client and an agent: typed JSON requests, the error reply, the limits.

Requests are pydantic models that forbid unknown keys and accept plain JSON values only (numbers,
strings, booleans, lists of integers): nothing received is unpickled or evaluated. An ONNX model
travels base64-encoded inside the JSON request and is read by ONNX Runtime only; an architecture
travels as its canonical string and is read by the strict decoder (:meth:`search_spaces.Arch.decode`).

Every reply is JSON: a :class:`~latency_predictor.LatencyResult` record (``to_dict()``), a device
description, or an error ``{"error": <kind>, "type": <error class>, "message": <text>}`` with a
4xx or 5xx status (:data:`STATUS`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from pydantic import (
    Base64Bytes,
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
    model_validator,
)

from latency_predictor.errors import ConfigError

API = "/v1"
"""Prefix of the agent's endpoints: ``POST /v1/describe``, ``POST /v1/measure``."""

TOKEN_ENV = "LATNAS_AGENT_TOKEN"
"""The environment variable the agent and its clients read the shared token from by default."""

MIN_TOKEN_CHARS = 16
"""Shortest token accepted: anything shorter is too easy to guess to guard a machine."""

NEW_TOKEN = "python -c 'import secrets; print(secrets.token_urlsafe(32))'"
"""A command that prints a good token."""


def read_token(token_env: str = TOKEN_ENV, token_file: str | Path | None = None, token: str | None = None, *,
               file_setting: str = "token file", other_ways: str = "") -> str:
    """The shared token, as the agent and its clients read it: ``token`` itself, else the file
    ``token_file``, else ``$token_env``.

    Args:
        token_env: the environment variable to read.
        token_file: a file that holds the token (its whitespace stripped).
        token: the token itself.
        file_setting: what the user calls the file's setting (``--token-file``,
            ``latency.options.token_file``), for messages.
        other_ways: said after "set $<token_env>" when there is no token (how else to give one).

    Raises:
        ConfigError: none of them holds a token of at least :data:`MIN_TOKEN_CHARS` characters.
    """
    where = "the token given"
    if token is None and token_file is not None:
        where = f"{file_setting} {str(token_file)!r}"
        try:
            token = Path(token_file).read_text().strip()
        except OSError as err:
            raise ConfigError(f"{where}: cannot read it ({err.strerror})") from None
    elif token is None:
        where = f"${token_env}"
        token = os.environ.get(token_env, "").strip()
        if not token:
            raise ConfigError(f"no token: set ${token_env}{other_ways}")
    if len(token) < MIN_TOKEN_CHARS:
        raise ConfigError(f"{where} holds {len(token)} characters; use at least {MIN_TOKEN_CHARS}, e.g. `{NEW_TOKEN}`")
    return token

DEFAULT_PORT = 8765

AGENT_OWNED_OPTIONS: frozenset[str] = frozenset({"slot", "slot_dir", "cache_dir", "calibration_data", "keep_samples"})
"""Backend options that name files or the measurement slot on the device: set when the agent starts,
never by a request (a client must not choose where the agent reads or writes)."""

STATUS: dict[str, int] = {
    "unauthorised": 401,
    "request_too_large": 413,
    "invalid_request": 422,
    "unknown_arch_token": 422,
    "invalid_arch": 422,
    "malformed_onnx": 422,
    "bad_settings": 422,
    "backend_unavailable": 422,
    "measurement_failed": 422,
    "internal_error": 500,
    "worker_died": 503,
    "queue_full": 503,
    "time_limit": 504,
}
"""The agent's error kinds and their HTTP statuses. 4xx: the request is at fault, and another agent
would refuse it too. 5xx: this agent could not serve it now; another agent may."""

RETRYABLE_KINDS: frozenset[str] = frozenset({"worker_died", "queue_full", "time_limit"})
"""Error kinds after which a client tries the measurement again on another agent of its pool."""

OptionValue = StrictBool | StrictInt | StrictFloat | StrictStr | None
MeasureValue = StrictBool | StrictInt | StrictFloat | StrictStr | list[StrictInt] | None


class DescribeRequest(BaseModel):
    """Which measuring setup to describe (or, in :class:`MeasureRequest`, to measure with).

    Attributes:
        backend: a measuring backend's name (``onnxruntime``, ``torch``, ``tensorrt``).
        options: its options, as for a local measurement, except :data:`AGENT_OWNED_OPTIONS`.
        input_shape: the deployment shape ``[N, C, H, W]``.
        num_classes: classifier width of the measured networks.
        measure: the measurement protocol's settings (:class:`~latency_predictor.MeasureConfig` fields).
    """

    model_config = ConfigDict(extra="forbid")

    backend: StrictStr = "onnxruntime"
    options: dict[str, OptionValue] = Field(default_factory=dict)
    input_shape: list[StrictInt] = Field(min_length=4, max_length=4)
    num_classes: StrictInt = Field(default=1000, ge=1, le=100_000)
    measure: dict[str, MeasureValue] = Field(default_factory=dict)


class MeasureRequest(DescribeRequest):
    """A network to measure: an architecture string (built on the device) or an ONNX model.

    Attributes:
        arch: the canonical architecture string.
        onnx: a serialised ONNX model (base64 in JSON), measured as it is with ``onnxruntime``.
        name: what the record of an ONNX model is called (default: a hash of the model).
    """

    arch: StrictStr | None = Field(default=None, max_length=100_000)
    onnx: Base64Bytes | None = None
    name: StrictStr | None = Field(default=None, max_length=200)

    @model_validator(mode="after")
    def _one_network(self) -> MeasureRequest:
        if (self.arch is None) == (self.onnx is None):
            raise ValueError("give exactly one of 'arch' (an architecture string) and 'onnx' (a base64 ONNX model)")
        return self

    def settings(self) -> dict[str, Any]:
        """The request without the network: what picks (and caches) the measuring backend."""
        return self.model_dump(include={"backend", "options", "input_shape", "num_classes", "measure"})


def error_body(kind: str, message: str, error_type: str = "") -> dict[str, str]:
    """The JSON of an error reply."""
    return {"error": kind, "type": error_type or kind, "message": message}
