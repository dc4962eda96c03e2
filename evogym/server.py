"""HTTP transport for a `Host`: starlette routes served by uvicorn on loopback only.

Request hygiene (reliability.md H1–H6): the body is read with a byte cap (413) and a
wall-clock cap (408) before any parsing; `Content-Length` must be present and sane;
JSON with NaN/Infinity or invalid UTF-8 is a 400; submits run in a worker thread under
the judge's lock, so a slow submit never blocks `/info`. The server refuses to bind
anything but a loopback address. An optional run token (header `X-Evogym-Token`, or
`Authorization: Bearer`) can be required.
"""
from __future__ import annotations

import asyncio
import hmac
import ipaddress
import json
import socket
import threading

import anyio
import uvicorn
from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from evogym.errors import ConfigError
from evogym.host import Host

MAX_BODY_BYTES = 1 << 20
"""Largest accepted POST body; an id list for the largest allowed submit is far smaller."""
BODY_TIMEOUT_S = 10.0
"""A body that has not fully arrived after this long is answered 408 (slow-body clients)."""
DRAIN_BYTES = 16 << 20
DRAIN_S = 2.0
"""An oversized body is read and discarded up to these caps before the 413 goes out: closing a
connection with unread bytes resets it, and a client still sending then sees the reset, not the 413."""


class SortedJSON(JSONResponse):
    def render(self, content) -> bytes:
        return json.dumps(content, sort_keys=True, allow_nan=False).encode("utf-8")


def _error(status: int, code: str, message: str) -> SortedJSON:
    return SortedJSON({"status": code, "error": {"message": message}}, status_code=status)


def _reject_constant(name: str):
    raise ValueError(f"{name} is not valid JSON")


async def _too_large(request: Request, size: int) -> SortedJSON:
    """413, after discarding what the client is still sending (within DRAIN_BYTES / DRAIN_S)."""
    with anyio.move_on_after(DRAIN_S):
        try:
            async for chunk in request.stream():
                size += len(chunk)
                if size > DRAIN_BYTES:
                    break
        except (ClientDisconnect, RuntimeError):  # client gone, or the stream already ended
            pass
    return _error(413, "payload_too_large", f"body over {MAX_BODY_BYTES} bytes")


async def _read_json(request: Request) -> dict | SortedJSON:
    length = request.headers.get("content-length")
    if length is None or not length.isdigit():
        return _error(400, "bad_request", "body must contain env_instances (Content-Length required)")
    if int(length) > MAX_BODY_BYTES:
        return await _too_large(request, 0)
    chunks, size = [], 0
    try:
        with anyio.fail_after(BODY_TIMEOUT_S):
            async for chunk in request.stream():
                size += len(chunk)
                if size > MAX_BODY_BYTES:
                    return await _too_large(request, size)
                chunks.append(chunk)
    except TimeoutError:
        return _error(408, "request_timeout", f"body not received within {BODY_TIMEOUT_S:g}s")
    try:
        body = json.loads(b"".join(chunks).decode("utf-8"), parse_constant=_reject_constant)
    except (UnicodeDecodeError, ValueError, RecursionError):
        return _error(400, "bad_request", "body must contain env_instances (invalid JSON)")
    if not isinstance(body, dict):
        return _error(400, "bad_request", "body must contain env_instances")
    return body


def build_app(host: Host, token: str | None = None) -> Starlette:
    def authorized(request: Request) -> bool:
        if token is None:
            return True
        given = request.headers.get("x-evogym-token") or request.headers.get("authorization", "")
        given = given.removeprefix("Bearer ").strip()
        return hmac.compare_digest(given.encode(), token.encode())

    def guard(handler):
        async def wrapped(request: Request):
            if not authorized(request):
                return _error(401, "unauthorized", "missing or wrong run token")
            return await handler(request)
        return wrapped

    async def info(request: Request):
        return SortedJSON(await anyio.to_thread.run_sync(host.info))

    async def task(request: Request):
        text = await anyio.to_thread.run_sync(host.task)
        return Response(text, media_type="text/markdown; charset=utf-8")

    async def submit(request: Request):
        body = await _read_json(request)
        if isinstance(body, Response):
            return body
        if "env_instances" not in body:
            return _error(400, "bad_request", "body must contain env_instances")
        key = request.headers.get("idempotency-key")
        status, payload = await anyio.to_thread.run_sync(host.judge.submit, body, key)
        return SortedJSON(payload, status_code=status)

    async def finish(request: Request):
        status, payload = await anyio.to_thread.run_sync(host.finish)
        return SortedJSON(payload, status_code=status)

    async def finalize(request: Request):
        return _error(405, "method_not_allowed", "finalize is server-owned")

    async def not_found(request: Request, exc=None):
        return _error(404, "not_found", "unknown endpoint")

    async def method_not_allowed(request: Request, exc=None):
        allowed = next((sorted(r.methods - {"HEAD"}) for r in routes if r.path == request.url.path), [])
        response = _error(405, "method_not_allowed", f"{request.method} {request.url.path} is not allowed; "
                          f"use {' or '.join(allowed)}")
        response.headers["Allow"] = ", ".join(allowed)
        return response

    routes = [Route("/info", guard(info), methods=["GET"]), Route("/task", guard(task), methods=["GET"]),
              Route("/submit", guard(submit), methods=["POST"]), Route("/finish", guard(finish), methods=["POST"]),
              Route("/finalize", guard(finalize), methods=["POST", "GET", "PUT", "DELETE"])]
    return Starlette(routes=routes, exception_handlers={404: not_found, 405: method_not_allowed})


def listen(bind: str = "127.0.0.1", port: int = 0) -> socket.socket:
    """A socket bound to a loopback address, made before anything is written (issue 13).

    A non-loopback address, a malformed one or a port in use is a `ConfigError`, so the
    CLI refuses with one line and no half-made run directory.
    """
    try:
        loopback = ipaddress.ip_address(bind).is_loopback
    except ValueError:
        raise ConfigError(f"--bind {bind!r} is not an IP address", hint="use 127.0.0.1 (default) or ::1") from None
    if not loopback:
        raise ConfigError(f"refusing to bind {bind}: the host serves loopback only",
                          hint="use 127.0.0.1 (default) or ::1")
    if not 0 <= port <= 65535:
        raise ConfigError(f"--port {port} is out of range", hint="0 picks a free port")
    sock = socket.socket(socket.AF_INET6 if ":" in bind else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((bind, port))
    except OSError as exc:
        sock.close()
        raise ConfigError(f"cannot listen on {bind}:{port}: {exc.strerror or exc}",
                          hint="pick another --port, or 0 for a free one") from None
    return sock


class Server:
    """A uvicorn server on a loopback socket, run in a background thread."""

    def __init__(self, host: Host, bind: str = "127.0.0.1", port: int = 0, token: str | None = None,
                 sock: socket.socket | None = None) -> None:
        self.sock = sock if sock is not None else listen(bind, port)
        family = self.sock.family
        self.port = self.sock.getsockname()[1]
        self.url = f"http://{bind if family == socket.AF_INET else f'[{bind}]'}:{self.port}"
        config = uvicorn.Config(build_app(host, token), log_level="warning", access_log=False,
                                timeout_keep_alive=5, limit_concurrency=64, lifespan="off")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self._serve, name="http", daemon=True)

    def _serve(self) -> None:
        asyncio.run(self.server.serve(sockets=[self.sock]))

    def start(self, timeout: float = 10.0) -> "Server":
        self.thread.start()
        deadline = threading.Event()
        for _ in range(int(timeout * 100)):
            if self.server.started:
                return self
            deadline.wait(0.01)
        raise ConfigError("HTTP server did not start", hint="see the host log")

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)
        self.sock.close()
