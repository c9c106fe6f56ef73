"""``python -m latency_predictor.agent``: run the measurement agent on the device to measure on.

Usage::

    export LATNAS_AGENT_TOKEN=$(python -c 'import secrets; print(secrets.token_urlsafe(32))')
    python -m latency_predictor.agent                        # 127.0.0.1:8765, this machine only
    python -m latency_predictor.agent --port 9000 --queue 32 --time-limit-s 300

The token comes from ``$LATNAS_AGENT_TOKEN`` (or ``--token-env NAME``, or ``--token-file PATH``),
never from the command line, where other users of the machine could read it. The agent listens
on 127.0.0.1 unless ``--host`` says otherwise; reach it from elsewhere through an SSH tunnel or a
VPN (docs/latency.md), not by opening it to a network. Once serving, it prints one line,
``latency agent listening on http://HOST:PORT``, and then logs one line per request on stderr.
"""

from __future__ import annotations

import argparse
import logging
import socket
import sys
from collections.abc import Sequence
from pathlib import Path

import uvicorn

from latency_predictor.agent.server import AgentSettings, create_app
from latency_predictor.agent.wire import DEFAULT_PORT, NEW_TOKEN, TOKEN_ENV, read_token
from latency_predictor.agent.worker import Worker
from latency_predictor.errors import ConfigError


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m latency_predictor.agent",
        description="Serve latency measurements of this device over HTTP to LatNAS searches and collectors.",
    )
    p.add_argument("--host", default="127.0.0.1",
                   help="address to listen on (default 127.0.0.1: this machine only; see docs/latency.md "
                        "for SSH tunnels and VPNs)")
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"TCP port (default {DEFAULT_PORT}; 0: any free one)")
    p.add_argument("--token-env", default=TOKEN_ENV,
                   help=f"environment variable holding the token (default {TOKEN_ENV})")
    p.add_argument("--token-file", type=Path, help="file holding the token (instead of the environment variable)")
    p.add_argument("--queue", type=int, default=16, help="requests that may wait behind the one measured (default 16)")
    p.add_argument("--time-limit-s", type=float, default=600.0,
                   help="most seconds one request may take before it is answered 504 (default 600)")
    p.add_argument("--max-request-mb", type=float, default=64.0, help="largest request body in MiB (default 64)")
    p.add_argument("--max-input-elements", type=int, default=2**25,
                   help=f"largest N*C*H*W a request may measure at (default {2**25:,})")
    p.add_argument("--slot-dir", help="measurement slot directory (default: the one every LatNAS process here uses)")
    p.add_argument("--no-slot", action="store_true", help="do not take the device's measurement slot")
    p.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    return p


def _listen(host: str, port: int) -> socket.socket:
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as err:
        raise ConfigError(f"--host {host!r}: not an address of this machine ({err})") from None
    family, _, _, _, address = infos[0]
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
    except OSError as err:
        sock.close()
        raise ConfigError(f"cannot listen on {host}:{port}: {err.strerror}") from None
    sock.listen(128)
    sock.set_inheritable(False)
    return sock


def main(argv: Sequence[str] | None = None) -> int:
    """Run the agent until it is stopped (Ctrl-C or SIGTERM); returns the exit status (2 on bad settings)."""
    args = _parser().parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s agent %(levelname)s %(message)s",
                        stream=sys.stderr)
    try:
        token = read_token(args.token_env, args.token_file, file_setting="--token-file", other_ways=(
            f" (e.g. export {args.token_env}=$({NEW_TOKEN})) or give --token-file; clients need the same token"))
        settings = AgentSettings(
            token=token, host=args.host, port=args.port, queue=args.queue,
            time_limit_s=args.time_limit_s, max_request_bytes=int(args.max_request_mb * 2**20),
            max_input_elements=args.max_input_elements, slot=not args.no_slot, slot_dir=args.slot_dir,
        )
        sock = _listen(settings.host, settings.port)
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return _serve(settings, sock, args.log_level)


def _serve(settings: AgentSettings, sock: socket.socket, log_level: str) -> int:
    worker = Worker(settings.worker_limits())
    try:
        worker.start()
    except RuntimeError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    host, port = sock.getsockname()[:2]
    if settings.host not in ("127.0.0.1", "::1", "localhost"):
        print(f"warning: listening on {settings.host}, reachable from other machines: keep it behind a VPN or a "
              "firewall, or listen on 127.0.0.1 and use an SSH tunnel (docs/latency.md)", file=sys.stderr)
    shown = f"[{host}]" if ":" in host else host
    print(f"latency agent listening on http://{shown}:{port} (one measurement at a time, queue {settings.queue}, "
          f"time limit {settings.time_limit_s:g} s, requests up to {settings.max_request_bytes / 2**20:g} MiB)",
          flush=True)
    config = uvicorn.Config(
        create_app(settings, worker), log_level=log_level, access_log=False, server_header=False,
        limit_concurrency=settings.queue + 8, timeout_keep_alive=75,
    )
    try:
        uvicorn.Server(config).run(sockets=[sock])
    finally:
        worker.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
