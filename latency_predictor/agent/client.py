"""Measuring through agents: one agent's client, and a pool of them as a :class:`~latency_predictor.LatencyEstimator`.

:class:`RemoteEstimator` is ``latency=remote``: the search (or ``collect``) sends each candidate's
architecture string, with the backend, its options, the input shape and the protocol settings, to
an agent (``python -m latency_predictor.agent``) on the device to measure on, which builds and
measures it there and returns the same :class:`~latency_predictor.LatencyResult` a local
measurement gives, with the device's environment (so its fingerprint is the device's).

Several URLs are a pool of identical devices, used round-robin. When an agent does not answer,
dies during the request, is busy (its queue is full) or runs past its time limit, that attempt
fails with a typed reason (:class:`~latency_predictor.errors.AgentUnavailableError`,
:class:`~latency_predictor.errors.AgentTimeoutError`) and the measurement is tried on the next
agent of the pool; the agent is then skipped for ``down_s`` seconds. A result always comes from an
agent: never from this machine. The attempts that failed are kept in the result's
``extra["agent_failures"]``; when every agent fails, the measurement fails with all their reasons.
A request the agent refuses (wrong token, too large, an unknown architecture token) or a network
that cannot be measured (export failed, ...) is not retried: the next agent would answer the same.

:meth:`RemoteEstimator.environment` (what a search checks at its start, and what ``collect``
records) asks every agent of the pool and insists that all answer, with the same device
fingerprint; :meth:`RemoteEstimator.measure` needs only one agent alive.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import logging
import time
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit

import requests

from latency_predictor.agent.wire import AGENT_OWNED_OPTIONS, API, RETRYABLE_KINDS
from latency_predictor.errors import (
    AgentError,
    AgentMismatchError,
    AgentRefusedError,
    AgentTimeoutError,
    AgentUnavailableError,
    BackendUnavailableError,
    ConfigError,
    EngineBuildError,
    ExportError,
    InvalidModelError,
    LatencyError,
    MeasurementError,
)
from latency_predictor.measurement.fingerprint import DeviceFingerprint
from latency_predictor.measurement.protocol import LatencyResult
from search_spaces import Arch

log = logging.getLogger(__name__)

_TYPED: dict[str, type[LatencyError]] = {
    cls.__name__: cls for cls in (
        ConfigError, BackendUnavailableError, ExportError, EngineBuildError, MeasurementError, InvalidModelError,
    )
}
"""Errors the agent met measuring a network, raised here as the same type a local measurement raises."""


def check_url(url: object) -> str:
    """``url`` without a trailing slash, if it is ``http(s)://host:port``.

    Raises:
        ConfigError: anything else.
    """
    if not isinstance(url, str):
        raise ConfigError(f"an agent URL must be a string like http://127.0.0.1:8765, got {url!r}")
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.path not in ("", "/"):
        raise ConfigError(f"agent URL {url!r} must look like http://HOST:PORT (no path)")
    try:
        parts.port  # noqa: B018 - raises on a port that is not a number
    except ValueError:
        raise ConfigError(f"agent URL {url!r} has an invalid port") from None
    return url.strip().rstrip("/")


class AgentClient:
    """One agent, over HTTP (a kept-alive ``requests`` session).

    Args:
        url: ``http://HOST:PORT`` of the agent.
        token: the shared token.
        timeout_s: longest wait for a reply (the agent's own time limit plus the queue).
        connect_timeout_s: longest wait for the connection.
    """

    def __init__(self, url: str, token: str, timeout_s: float = 900.0, connect_timeout_s: float = 5.0) -> None:
        self.url = check_url(url)
        self.timeout_s = timeout_s
        self.connect_timeout_s = connect_timeout_s
        self._session = requests.Session()
        # Straight to the agent: never through a proxy named in the environment (the agent is reached
        # on 127.0.0.1, through an SSH tunnel or over a VPN), and no credentials from ~/.netrc.
        self._session.trust_env = False
        self._session.headers["Authorization"] = f"Bearer {token}"

    def __repr__(self) -> str:
        return f"AgentClient({self.url!r})"

    def _call(self, method: str, path: str, body: Mapping[str, Any] | None = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        headers = None if data is None else {"Content-Type": "application/json"}
        try:
            reply = self._session.request(method, self.url + API + path, data=data, headers=headers,
                                          timeout=(self.connect_timeout_s, self.timeout_s))
        except requests.ConnectTimeout:
            raise AgentUnavailableError(
                f"agent {self.url} did not accept a connection within {self.connect_timeout_s:g} s"
            ) from None
        except requests.ReadTimeout:
            raise AgentTimeoutError(f"agent {self.url} sent no reply within {self.timeout_s:g} s") from None
        except requests.RequestException as err:
            raise AgentUnavailableError(f"agent {self.url} did not answer: {_why(err)}") from None
        if reply.status_code != 200:
            raise _error(self.url, reply)
        try:
            return reply.json()
        except ValueError:
            raise AgentError(f"agent {self.url} sent a reply that is not JSON: {reply.text[:200]!r}") from None

    def health(self) -> dict[str, Any]:
        """The agent's limits and load (``GET /v1/health``)."""
        out: dict[str, Any] = self._call("GET", "/health")
        return out

    def describe(self, request: Mapping[str, Any]) -> dict[str, Any]:
        """The device description of a measuring setup (``POST /v1/describe``)."""
        out: dict[str, Any] = self._call("POST", "/describe", request)
        return out

    def measure(self, request: Mapping[str, Any]) -> LatencyResult:
        """One measurement (``POST /v1/measure``); ``request`` holds ``arch`` or a base64 ``onnx``.

        Raises:
            AgentUnavailableError: no answer, a dropped connection, a busy agent, a dead measuring process.
            AgentTimeoutError: past the agent's time limit or this client's timeout.
            AgentRefusedError: the agent refused the request (4xx).
            LatencyError: the network could not be measured there (the same type as locally).
        """
        d = self._call("POST", "/measure", request)
        try:
            return LatencyResult.from_dict(d)
        except (KeyError, TypeError, ValueError) as err:
            raise AgentError(f"agent {self.url} sent a malformed latency record: {err!r}") from None


def _why(err: BaseException) -> str:
    """The innermost operating-system reason of a connection failure (``connection refused``, ...)."""
    seen: set[int] = set()
    todo: list[object] = [err]
    while todo:
        e = todo.pop(0)
        if not isinstance(e, BaseException) or id(e) in seen:
            continue
        seen.add(id(e))
        if isinstance(e, OSError) and e.strerror:
            return e.strerror.lower()
        todo += [getattr(e, "reason", None), e.__cause__, e.__context__, *e.args]
    return f"{type(err).__name__}: {str(err)[:300]}"


def _error(url: str, reply: requests.Response) -> LatencyError:
    try:
        body = reply.json()
        kind, error_type, message = str(body["error"]), str(body.get("type", "")), str(body["message"])
    except (ValueError, KeyError, TypeError):
        kind, error_type, message = f"http_{reply.status_code}", "", reply.text[:300] or reply.reason
    text = f"agent {url} answered {reply.status_code} {kind}: {message}"
    if kind == "time_limit":
        return AgentTimeoutError(text)
    if kind in RETRYABLE_KINDS or reply.status_code in (502, 503):
        return AgentUnavailableError(text)
    if kind in ("measurement_failed", "bad_settings", "backend_unavailable", "malformed_onnx") and error_type in _TYPED:
        return _TYPED[error_type](text)
    if reply.status_code >= 500:
        return AgentError(text)
    if reply.status_code == 404:
        text += " (is a LatNAS agent, python -m latency_predictor.agent, listening at this address?)"
    return AgentRefusedError(text, reply.status_code, kind)


class RemoteEstimator:
    """Latency measured on another device by a pool of agents (``latency=remote``).

    Args:
        urls: the agents, ``http://HOST:PORT`` each; several make a pool of identical devices.
        token: the shared token (see :func:`~latency_predictor.agent.wire.read_token`).
        backend: the measuring backend the agents use (``onnxruntime``, ``torch``, ``tensorrt``).
        backend_options: its options, as for a local measurement (``intra_op_threads``, ``provider``,
            ...); files and the slot are the agents' own settings.
        input_shape: the deployment shape, batch first.
        num_classes: classifier width of the measured networks.
        measure: the protocol settings (:class:`~latency_predictor.MeasureConfig` fields).
        timeout_s: longest wait for one agent's reply.
        connect_timeout_s: longest wait for a connection.
        down_s: how long an agent that failed is tried last.

    Raises:
        ConfigError: no URL, a malformed or repeated URL, an unknown backend, option or protocol
            setting (checked here, before any agent is asked).
    """

    def __init__(
        self,
        urls: str | Sequence[str],
        *,
        token: str,
        backend: str = "onnxruntime",
        backend_options: Mapping[str, Any] | None = None,
        input_shape: Sequence[int] = (1, 3, 224, 224),
        num_classes: int = 1000,
        measure: Mapping[str, Any] | None = None,
        timeout_s: float = 900.0,
        connect_timeout_s: float = 5.0,
        down_s: float = 60.0,
    ) -> None:
        from latency_predictor.measurement.backends import backend_options as accepted_options
        from latency_predictor.measurement.export import validate_input_shape
        from latency_predictor.measurement.timing import MeasureConfig

        url_list = [urls] if isinstance(urls, str) else list(urls)
        if not url_list:
            raise ConfigError("no agent URL: give at least one http://HOST:PORT")
        checked = [check_url(u) for u in url_list]
        repeated = sorted({u for u in checked if checked.count(u) > 1})
        if repeated:
            raise ConfigError(f"agent URL(s) {repeated} listed more than once")
        options = dict(backend_options or {})
        known = [o for o in accepted_options(backend) if o not in {"input_shape", "measure", "num_classes"}]
        owned = sorted(set(options) & AGENT_OWNED_OPTIONS)
        if owned:
            raise ConfigError(f"backend option(s) {owned} are set on the agent (when it starts), not by its clients")
        unknown = sorted(set(options) - set(known))
        if unknown:
            raise ConfigError(f"backend {backend!r} does not take option(s) {unknown}; it takes "
                              f"{[o for o in known if o not in AGENT_OWNED_OPTIONS]}")
        for name, value in (("timeout_s", timeout_s), ("connect_timeout_s", connect_timeout_s), ("down_s", down_s)):
            if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
                raise ConfigError(f"{name} must be a number > 0, got {value!r}")
        measure_dict = dict(measure or {})
        MeasureConfig.from_dict(dict(measure_dict))  # a bad protocol setting fails here, not on every agent
        self.name = backend
        # Any channel count: the networks are built for the shape's (one channel for a spectrogram, say).
        self.input_shape: tuple[int, ...] = validate_input_shape(input_shape, in_chans=None)
        self.num_classes = int(num_classes)
        self.backend_options = options
        self.measure_settings = measure_dict
        self.agents = [AgentClient(u, token, timeout_s, connect_timeout_s) for u in checked]
        self.down_s = down_s
        self._next = 0
        self._down_until: dict[str, float] = {}
        self._described: dict[str, Any] | None = None
        self._fingerprint: DeviceFingerprint | None = None

    def __repr__(self) -> str:
        return f"RemoteEstimator({[a.url for a in self.agents]}, backend={self.name!r})"

    @property
    def urls(self) -> list[str]:
        """The pool's agents."""
        return [a.url for a in self.agents]

    def settings(self) -> dict[str, Any]:
        """The measuring setup every request carries."""
        return {"backend": self.name, "options": self.backend_options, "input_shape": list(self.input_shape),
                "num_classes": self.num_classes, "measure": self.measure_settings}

    # ---------------------------------------------------------------- the device
    def describe(self) -> dict[str, Any]:
        """What every agent of the pool measures on; all must answer, with the same fingerprint.

        Raises:
            AgentUnavailableError: an agent did not answer (all such agents are named).
            AgentRefusedError: an agent refused (a wrong token, ...).
            ConfigError, BackendUnavailableError: the agents cannot measure with these settings.
            AgentMismatchError: the agents are not identical devices (the differences are named).
        """
        if self._described is not None:
            return self._described
        answers: list[tuple[str, dict[str, Any]]] = []
        missing: list[str] = []
        for agent in self.agents:
            try:
                answers.append((agent.url, agent.describe(self.settings())))
            except AgentUnavailableError as err:
                missing.append(str(err))
        if missing:
            raise AgentUnavailableError(
                f"{len(missing)} of {len(self.agents)} agent(s) of latency=remote did not answer: " + "; ".join(missing)
            )
        first_url, first = answers[0]
        reference = _fingerprint(first)
        for url, d in answers[1:]:
            diffs = reference.differences(_fingerprint(d), here=f"at {first_url}", there=f"at {url}")
            if diffs:
                raise AgentMismatchError(
                    f"the agents of latency=remote are not identical devices: {'; '.join(diffs)}; a pool must be one "
                    "kind of device (start a search per device instead)"
                )
        self._described, self._fingerprint = first, reference
        return first

    @property
    def device(self) -> str:
        """The agents' device (``cpu``, ``cuda:0``, ...)."""
        return str(self.describe()["device"])

    @property
    def precision(self) -> str:
        """The precision the agents measure at."""
        return str(self.describe()["precision"])

    def environment(self) -> dict[str, str]:
        """The agents' device environment (CPU or GPU model, runtime versions, threads); asks every agent."""
        return {str(k): str(v) for k, v in self.describe()["environment"].items()}

    def final_latency(
        self, arch: Arch, result: LatencyResult, objective: float, front: Sequence[Sequence[float]]
    ) -> LatencyResult:
        """A measured latency is final (see :class:`~latency_predictor.LatencyEstimator`)."""
        return result

    # ---------------------------------------------------------------- measuring
    def _order(self) -> list[AgentClient]:
        n = len(self.agents)
        start = self._next % n
        self._next += 1
        rotated = self.agents[start:] + self.agents[:start]
        now = time.monotonic()
        up = [a for a in rotated if self._down_until.get(a.url, 0.0) <= now]
        return up + [a for a in rotated if a not in up]

    def _request(self, body: Mapping[str, Any], what: str) -> LatencyResult:
        failures: list[dict[str, str]] = []
        for agent in self._order():
            t0 = time.perf_counter()
            try:
                result = agent.measure(body)
            except AgentUnavailableError as err:
                failures.append({"agent": agent.url, "error": type(err).__name__, "reason": str(err)})
                self._down_until[agent.url] = time.monotonic() + self.down_s
                log.warning("%s: %s; trying the next agent", what, err)
                continue
            self._down_until.pop(agent.url, None)
            self._check_device(agent.url, result)
            extra = {**result.extra, "agent": agent.url, "round_trip_s": time.perf_counter() - t0}
            if failures:
                extra["agent_failures"] = failures
            return dataclasses.replace(result, extra=extra)
        raise AgentUnavailableError(
            f"no agent of the pool could measure {what}: " + "; ".join(f"{f['error']}: {f['reason']}" for f in failures)
        )

    def _check_device(self, url: str, result: LatencyResult) -> None:
        fp = DeviceFingerprint.of_result(result)
        if self._fingerprint is None:
            self._fingerprint = fp
            return
        diffs = self._fingerprint.differences(fp, here="in this pool", there=f"at {url}")
        if diffs:
            raise AgentMismatchError(f"agent {url} measured on another device than the pool's: {'; '.join(diffs)}")

    def measure(self, arch: Arch) -> LatencyResult:
        """Measure ``arch`` on an agent of the pool (the next one round-robin; the others if it fails).

        Raises:
            AgentUnavailableError: every agent failed (each one's reason is in the message).
            AgentRefusedError: the request was refused (not retried).
            AgentMismatchError: an agent answered for another device than the pool's.
            LatencyError: the network could not be measured (the same type as a local measurement).
        """
        return self._request({**self.settings(), "arch": arch.encode()}, f"{arch.arch_id} ({arch.encode()})")

    def measure_onnx(self, model: bytes, name: str | None = None) -> LatencyResult:
        """Measure an ONNX model as it is, on an agent of the pool (``backend`` must be ``onnxruntime``).

        Raises:
            InvalidModelError: the agent could not read the model, or it takes another input shape.
            AgentUnavailableError, AgentRefusedError: as :meth:`measure`.
        """
        body = {**self.settings(), "onnx": base64.b64encode(model).decode("ascii"), "name": name}
        return self._request(body, f"ONNX model {name or ''} ({len(model):,} bytes)".replace("  ", " "))


def _fingerprint(described: Mapping[str, Any]) -> DeviceFingerprint:
    return DeviceFingerprint.create(str(described["backend"]), str(described["device"]), str(described["precision"]),
                                    {str(k): str(v) for k, v in described["environment"].items()})
