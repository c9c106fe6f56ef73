"""The agent's HTTP server (FastAPI on uvicorn): authentication, limits, the queue.

Endpoints (all need ``Authorization: Bearer <token>``):

* ``GET /v1/health``: the agent's limits and how many requests it holds; no measurement.
* ``POST /v1/describe`` (:class:`~latency_predictor.agent.wire.DescribeRequest`): the device
  fingerprint of a measuring setup (backend, device, precision, environment), without measuring.
* ``POST /v1/measure`` (:class:`~latency_predictor.agent.wire.MeasureRequest`): a
  :class:`~latency_predictor.LatencyResult` record.

Each request is checked in this order, and refused as soon as one check fails, before any work:
the token (compared in constant time; 401), the size of the body (read in chunks and never past
the limit; 413), the typed request (422), the queue (at most ``queue`` requests wait behind the one
being served; 503). Requests are then served one at a time by the measuring process
(:mod:`latency_predictor.agent.worker`), which also takes the device's measurement slot, so the
agent's measurements never overlap each other or other measurements on the device. A request that
runs past ``time_limit_s`` is answered 504 and its measuring process replaced. Whatever happens to
one request, the server keeps serving the next.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ValidationError

from latency_predictor.agent.wire import (
    API,
    DEFAULT_PORT,
    MIN_TOKEN_CHARS,
    NEW_TOKEN,
    STATUS,
    DescribeRequest,
    MeasureRequest,
    error_body,
)
from latency_predictor.agent.worker import Worker, WorkerFailure
from latency_predictor.errors import ConfigError
from latency_predictor.measurement.environment import package_version

log = logging.getLogger("latency_predictor.agent")


@dataclass(frozen=True)
class AgentSettings:
    """How an agent serves.

    Attributes:
        token: the shared secret every request must carry.
        host: the address to listen on (``127.0.0.1``: this machine only).
        port: the TCP port (0: any free port).
        queue: most requests that may wait behind the one being measured; more are refused (503).
        time_limit_s: most seconds one request may take in the measuring process (504 past it).
        max_request_bytes: largest request body (413 past it).
        max_input_elements: largest ``N*C*H*W`` a request may ask to measure at.
        slot: take the device's measurement slot around each measurement.
        slot_dir: the slot's lock-file directory (None: the default one, shared with every
            LatNAS process of this machine).
    """

    token: str
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    queue: int = 16
    time_limit_s: float = 600.0
    max_request_bytes: int = 64 * 2**20
    max_input_elements: int = 2**25
    slot: bool = True
    slot_dir: str | None = None

    def __post_init__(self) -> None:
        if len(self.token) < MIN_TOKEN_CHARS:
            raise ConfigError(
                f"the agent's token has {len(self.token)} characters; use at least {MIN_TOKEN_CHARS}, "
                f"e.g. `{NEW_TOKEN}`"
            )
        if not 0 <= self.port <= 65535:
            raise ConfigError(f"port must be in [0, 65535], got {self.port}")
        for name in ("queue", "max_request_bytes", "max_input_elements"):
            if getattr(self, name) < (0 if name == "queue" else 1):
                raise ConfigError(f"{name} must be {'>= 0' if name == 'queue' else '>= 1'}, got {getattr(self, name)}")
        if not self.time_limit_s > 0:
            raise ConfigError(f"time_limit_s must be > 0, got {self.time_limit_s}")

    def worker_limits(self) -> dict[str, Any]:
        """What the measuring process needs to know."""
        return {"max_input_elements": self.max_input_elements, "slot": self.slot, "slot_dir": self.slot_dir}


class AgentHTTPError(Exception):
    """A request refused (or failed) with one of the kinds of :data:`~latency_predictor.agent.wire.STATUS`."""

    def __init__(self, kind: str, message: str, error_type: str = "") -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.error_type = error_type


class _Admission:
    """One measurement at a time; at most ``queue`` waiting behind it."""

    def __init__(self, queue: int) -> None:
        self.queue = queue
        self.held = 0  # requests waiting or being served
        self.lock = asyncio.Lock()
        self.served = 0


def _check_token(request: Request, token: bytes) -> None:
    scheme, _, given = request.headers.get("authorization", "").partition(" ")
    # compare_digest takes as long for a wrong token as for a right one of the same length
    if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), token):
        raise AgentHTTPError(
            "unauthorised", "missing or wrong token: send 'Authorization: Bearer <token>' with this agent's token"
        )


async def _read_body(request: Request, limit: int) -> bytes:
    declared = request.headers.get("content-length")
    too_large = AgentHTTPError(
        "request_too_large", f"the request is larger than this agent accepts ({limit:,} bytes, its --max-request-mb)"
    )
    size, chunks = 0, []
    async for chunk in request.stream():
        size += len(chunk)
        if size <= limit and (declared is None or not declared.isdigit() or int(declared) <= limit):
            chunks.append(chunk)
    # The whole body was read (and the excess dropped) so the client gets this answer, not a reset connection.
    if size > limit or (declared is not None and declared.isdigit() and int(declared) > limit):
        raise too_large
    return b"".join(chunks)


def _parse(model: type[BaseModel], body: bytes) -> Any:
    try:
        return model.model_validate_json(body)
    except ValidationError as err:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'body'}: {e['msg']}" for e in err.errors(include_url=False)
        )
        raise AgentHTTPError("invalid_request", f"invalid {model.__name__}: {problems}") from None


def create_app(settings: AgentSettings, worker: Worker) -> FastAPI:
    """The agent's application, serving with ``worker`` (started by the caller, stopped at shutdown)."""
    token = settings.token.encode()
    admission = _Admission(settings.queue)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        yield
        worker.stop()

    app = FastAPI(title="LatNAS latency agent", docs_url=None, redoc_url=None, openapi_url=None, lifespan=lifespan)

    @app.exception_handler(AgentHTTPError)
    async def _refused(request: Request, err: AgentHTTPError) -> JSONResponse:
        headers = {"WWW-Authenticate": "Bearer"} if err.kind == "unauthorised" else None
        if err.kind == "queue_full":
            headers = {"Retry-After": "5"}
        log.info("%s %s refused: %s: %s", request.method, request.url.path, err.kind, err.message)
        return JSONResponse(error_body(err.kind, err.message, err.error_type), status_code=STATUS[err.kind],
                            headers=headers)

    async def admitted(request: Request, model: type[BaseModel]) -> Any:
        _check_token(request, token)
        return _parse(model, await _read_body(request, settings.max_request_bytes))

    async def serve(header: dict[str, Any], model: bytes | None, what: str) -> Response:
        if admission.held > admission.queue:
            raise AgentHTTPError(
                "queue_full", f"{admission.held} requests are already waiting or being measured (its --queue is "
                f"{admission.queue}); try another agent or later"
            )
        admission.held += 1
        t0 = time.perf_counter()
        try:
            async with admission.lock:
                waited = time.perf_counter() - t0
                log.info("%s start (waited %.2f s)", what, waited)
                try:
                    reply = await asyncio.to_thread(worker.call, header, model, settings.time_limit_s)
                except WorkerFailure as err:
                    raise AgentHTTPError(err.kind, str(err)) from None
                admission.served += 1
        finally:
            admission.held -= 1
        if not reply["ok"]:
            log.info("%s failed: %s: %s", what, reply["error"], reply["message"])
            raise AgentHTTPError(reply["error"], reply["message"], reply["type"])
        result: dict[str, Any] = reply["result"]
        if "extra" in result:
            result["extra"].update(agent_queue_s=waited, agent_s=time.perf_counter() - t0)
        log.info("%s done in %.2f s", what, time.perf_counter() - t0)
        # json.dumps, not JSONResponse: the record may hold NaN (written as NaN, which Python reads back)
        return Response(json.dumps(result), media_type="application/json")

    @app.get(API + "/health")
    async def health(request: Request) -> dict[str, Any]:
        _check_token(request, token)
        return {
            "status": "ok", "latnas": package_version("latnas"), "held": admission.held, "served": admission.served,
            "queue": settings.queue, "time_limit_s": settings.time_limit_s,
            "max_request_bytes": settings.max_request_bytes, "max_input_elements": settings.max_input_elements,
            "worker_restarts": worker.restarts,
        }

    @app.post(API + "/describe")
    async def describe(request: Request) -> Response:
        req: DescribeRequest = await admitted(request, DescribeRequest)
        return await serve({"op": "describe", "settings": req.model_dump()}, None, f"describe {req.backend}")

    @app.post(API + "/measure")
    async def measure(request: Request) -> Response:
        req: MeasureRequest = await admitted(request, MeasureRequest)
        header = {"op": "measure", "settings": req.settings(), "arch": req.arch, "name": req.name}
        what = f"measure arch={req.arch}" if req.arch is not None else f"measure onnx ({len(req.onnx or b''):,} bytes)"
        return await serve(header, req.onnx, what)

    return app
