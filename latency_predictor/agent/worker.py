"""The agent's measuring process: where a request becomes a measurement, apart from the server.

The server hands one request at a time to this process over a pipe, as JSON bytes (and the ONNX
model's raw bytes after it), and waits for its JSON reply at most the agent's time limit. A
measurement past the limit, or one that takes the process down (a network too large for memory,
a runtime crash), costs the process, not the agent: :class:`Worker` kills it, starts a fresh one,
and the server answers that request with an error and goes on serving.

Inside, a request is handled exactly as a local measurement: the measuring backend is built by
:func:`latency_predictor.measurement.backends.make_estimator` from the request's backend name, options,
input shape and protocol settings (cached, so one setup is built once), and measures the
architecture (built here from its string) or the ONNX model with the same protocol and the same
measurement slot as any other process on this device.
"""

from __future__ import annotations

import importlib
import json
import logging
import multiprocessing as mp
import os
import signal
import sys
import time
import traceback
from collections import OrderedDict
from collections.abc import Iterator
from multiprocessing.connection import Connection
from typing import Any

from latency_predictor.agent.wire import AGENT_OWNED_OPTIONS
from latency_predictor.errors import (
    BackendUnavailableError,
    ConfigError,
    InvalidModelError,
    LatencyError,
)
from search_spaces import ArchDecodeError, SearchSpaceError

log = logging.getLogger("latency_predictor.agent")

_CACHED_BACKENDS = 8


class WorkerFailure(Exception):
    """The measuring process could not answer a request (it ran past the limit, or died).

    Attributes:
        kind: ``time_limit`` or ``worker_died`` (see :data:`latency_predictor.agent.wire.STATUS`).
    """

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


# ---------------------------------------------------------------------- inside the worker process

class _Backends:
    """The measuring backends this process has built, by request settings (most recent kept)."""

    def __init__(self, limits: dict[str, Any]) -> None:
        self.limits = limits
        self._cache: OrderedDict[str, Any] = OrderedDict()

    def get(self, settings: dict[str, Any]) -> Any:
        from latency_predictor.measurement.backends import make_estimator

        key = json.dumps(settings, sort_keys=True)
        est = self._cache.get(key)
        if est is not None:
            self._cache.move_to_end(key)
            return est
        options = dict(settings["options"])
        owned = sorted(set(options) & AGENT_OWNED_OPTIONS)
        if owned:
            raise ConfigError(
                f"option(s) {owned} are the agent's own settings (files and the measurement slot on the device), "
                "chosen when it starts; leave them out of the request"
            )
        shape = settings["input_shape"]
        elements = 1
        for d in shape:
            elements *= max(int(d), 0)
        if elements > self.limits["max_input_elements"]:
            raise ConfigError(
                f"input_shape {shape} has {elements:,} elements; this agent measures at most "
                f"{self.limits['max_input_elements']:,} (its --max-input-elements)"
            )
        est = make_estimator(
            settings["backend"], input_shape=shape, num_classes=settings["num_classes"], measure=settings["measure"],
            slot=self.limits["slot"], slot_dir=self.limits["slot_dir"], **options,
        )
        self._cache[key] = est
        if len(self._cache) > _CACHED_BACKENDS:
            self._cache.popitem(last=False)
        return est


def _describe(est: Any) -> dict[str, Any]:
    from latency_predictor.measurement.fingerprint import DeviceFingerprint

    return {
        "backend": est.name, "device": est.device, "precision": est.precision, "environment": est.environment(),
        "input_shape": list(est.input_shape), "num_classes": est.num_classes,
        "fingerprint": DeviceFingerprint.of_estimator(est).digest,
    }


def _graph_tensors(graph: Any) -> Iterator[Any]:
    yield from graph.initializer
    for sparse in graph.sparse_initializer:
        yield sparse.values
        yield sparse.indices
    for node in graph.node:
        for attr in node.attribute:
            if attr.HasField("t"):
                yield attr.t
            yield from attr.tensors
            if attr.HasField("g"):
                yield from _graph_tensors(attr.g)
            for g in attr.graphs:
                yield from _graph_tensors(g)


def check_self_contained(model: bytes) -> None:
    """Refuse an ONNX model whose tensors live in external files: the agent reads nothing but the request.

    Raises:
        InvalidModelError: the bytes are not an ONNX model, or a tensor refers to external data.
    """
    import onnx
    from google.protobuf.message import DecodeError

    try:
        proto = onnx.load_model_from_string(model)
    except (DecodeError, ValueError, RuntimeError) as err:
        raise InvalidModelError(f"not a valid ONNX model: it cannot be parsed ({err})") from None
    for tensor in _graph_tensors(proto.graph):
        if tensor.data_location == onnx.TensorProto.EXTERNAL:
            raise InvalidModelError(
                f"the ONNX model keeps tensor {tensor.name!r} in an external file; send a self-contained model "
                "(the agent reads nothing from its own disk on a request's behalf)"
            )


def _measure(backends: _Backends, request: dict[str, Any], model: bytes | None) -> dict[str, Any]:
    from latency_predictor.measurement.backends import OnnxRuntimeBackend
    from search_spaces import Arch

    settings = request["settings"]
    if model is not None and settings["backend"] != OnnxRuntimeBackend.name:
        raise ConfigError(f"an ONNX model is measured with the onnxruntime backend, not {settings['backend']!r}")
    est = backends.get(settings)
    if model is None:
        arch = Arch.decode(request["arch"])
        result = est.measure(arch)
    else:
        check_self_contained(model)
        result = est.measure_onnx(model, request.get("name"))
    out: dict[str, Any] = result.to_dict()
    return out


_KINDS: tuple[tuple[type[BaseException], str], ...] = (
    (ArchDecodeError, "unknown_arch_token"),
    (SearchSpaceError, "invalid_arch"),
    (InvalidModelError, "malformed_onnx"),
    (ConfigError, "bad_settings"),
    (BackendUnavailableError, "backend_unavailable"),
    (LatencyError, "measurement_failed"),
)


def _handle(backends: _Backends, header: dict[str, Any], model: bytes | None) -> dict[str, Any]:
    try:
        if header["op"] == "describe":
            return {"ok": True, "result": _describe(backends.get(header["settings"]))}
        return {"ok": True, "result": _measure(backends, header, model)}
    except (SearchSpaceError, LatencyError) as err:
        kind = next(k for cls, k in _KINDS if isinstance(err, cls))
        return {"ok": False, "error": kind, "type": type(err).__name__, "message": str(err)}
    except Exception as err:  # a server answers every request: this one with a 500, the traceback to its log
        traceback.print_exc(file=sys.stderr)
        return {"ok": False, "error": "internal_error", "type": type(err).__name__,
                "message": f"the agent failed on this request ({type(err).__name__}: {err}); see its log"}


def worker_main(conn: Connection, limits: dict[str, Any]) -> None:
    """The measuring process's loop: one request in, one reply out, until the pipe closes."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C stops the agent, which stops this process
    backends = _Backends(limits)
    importlib.import_module("latency_predictor.measurement.backends")  # the runtimes load now, not in the first request

    conn.send_bytes(json.dumps({"ready": True, "pid": os.getpid()}).encode())
    while True:
        try:
            header = json.loads(conn.recv_bytes())
            model = conn.recv_bytes() if header.get("has_onnx") else None
        except (EOFError, OSError):
            return  # the agent is gone
        reply = _handle(backends, header, model)
        try:
            conn.send_bytes(json.dumps(reply).encode())
        except (BrokenPipeError, OSError):
            return


# ---------------------------------------------------------------------- in the server process

class Worker:
    """The handle the server holds on its measuring process.

    Args:
        limits: ``max_input_elements``, ``slot`` and ``slot_dir`` for the measuring backends.
        start_timeout_s: how long a fresh process may take to import its runtimes.
    """

    def __init__(self, limits: dict[str, Any], start_timeout_s: float = 300.0) -> None:
        self.limits = dict(limits)
        self.start_timeout_s = start_timeout_s
        self._ctx = mp.get_context("spawn")
        self._proc: Any = None
        self._conn: Connection | None = None
        self.restarts = 0

    @property
    def pid(self) -> int | None:
        """The measuring process's id (None before it started)."""
        return None if self._proc is None else int(self._proc.pid)

    def start(self) -> None:
        """Start the measuring process and wait until it has imported its runtimes.

        Raises:
            RuntimeError: it did not come up within ``start_timeout_s`` or died while starting.
        """
        parent, child = self._ctx.Pipe()
        proc = self._ctx.Process(target=worker_main, args=(child, self.limits), name="latnas-agent-worker",
                                 daemon=True)
        proc.start()
        child.close()
        try:
            if not parent.poll(self.start_timeout_s):
                raise RuntimeError(f"the measuring process did not start within {self.start_timeout_s:g} s")
            json.loads(parent.recv_bytes())
        except (EOFError, OSError, RuntimeError) as err:
            proc.kill()
            proc.join()
            raise RuntimeError(f"the measuring process failed to start (exit code {proc.exitcode}): {err}") from None
        self._proc, self._conn = proc, parent

    def stop(self) -> None:
        """End the measuring process (it exits when its pipe closes; killed if it does not)."""
        if self._proc is None:
            return
        if self._conn is not None:
            self._conn.close()
        self._proc.join(timeout=5)
        if self._proc.is_alive():
            self._proc.kill()
            self._proc.join()
        self._proc, self._conn = None, None

    def _replace(self) -> int | None:
        code = None
        if self._proc is not None:
            if self._proc.is_alive():
                self._proc.kill()
            self._proc.join()
            code = self._proc.exitcode
            if self._conn is not None:
                self._conn.close()
            self._proc, self._conn = None, None
        self.restarts += 1
        self.start()
        return code

    def call(self, header: dict[str, Any], model: bytes | None, limit_s: float) -> dict[str, Any]:
        """Send one request and wait for its reply (blocking; one caller at a time).

        Raises:
            WorkerFailure: ``time_limit`` when no reply came within ``limit_s`` (the process is
                killed and replaced), ``worker_died`` when it died on the request (replaced too).
        """
        if self._proc is None or self._conn is None or not self._proc.is_alive():
            self._replace()
        conn = self._conn
        if conn is None:
            raise WorkerFailure("worker_died", "the measuring process is not running")
        t0 = time.perf_counter()
        try:
            conn.send_bytes(json.dumps({**header, "has_onnx": model is not None}).encode())
            if model is not None:
                conn.send_bytes(model)
            if not conn.poll(limit_s):
                log.warning("request ran past the time limit of %g s: measuring process %s killed", limit_s, self.pid)
                self._replace()
                raise WorkerFailure(
                    "time_limit", f"the measurement ran past this agent's time limit of {limit_s:g} s "
                    "(its --time-limit-s); the measuring process was restarted"
                )
            reply: dict[str, Any] = json.loads(conn.recv_bytes())
            return reply
        except (EOFError, BrokenPipeError, ConnectionResetError) as err:
            code = self._replace()
            raise WorkerFailure(
                "worker_died", f"the measuring process died on this request after {time.perf_counter() - t0:.1f} s "
                f"(exit code {code}: {type(err).__name__}); it was restarted"
            ) from None
