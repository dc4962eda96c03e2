"""HTTP transport for a `Host`: starlette routes served by uvicorn on loopback only.

Who may ask: every request must carry the run's credential (`evogym.credential`), checked
before anything else, so a request without it (another local user who found the port)
gets 401 whatever it asks, and changes nothing.

Request hygiene (issue 18: a slow, idle or oversized client must not starve the agent or
the host): a request head must arrive within
HEADER_TIMEOUT_S and fit MAX_HEADER_BYTES; at most MAX_CONNECTIONS connections are open,
a new one closing the oldest still waiting for its head, so idle or slow clients cannot
starve the agent; the body is read with a byte cap (413) and a wall-clock cap (408)
before any parsing; `Content-Length` must be present and sane; JSON with NaN/Infinity or
invalid UTF-8 is a 400. Submits and finishes wait their turn in the event loop (not in a
worker thread), and `/info` and `/task` are answered on the loop itself, so `/info`
answers while submits queue. The server refuses to bind anything but a loopback address.
A host fault while answering is a 503 with its reason, never a 500.
"""
from __future__ import annotations

import asyncio
import ipaddress
import json
import re
import socket
import threading

import anyio
import uvicorn
from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from uvicorn.protocols.http.h11_impl import H11Protocol

from evogym.credential import Credential
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
HEADER_TIMEOUT_S = 2.0
"""A connection whose request head (request line and headers) is not complete this long after
it opened, or after its previous response, is closed. A local client sends its head in
microseconds; a slow one only holds a connection (issue 18: 64 half-open requests made the
agent's own requests get 503)."""
MAX_HEADER_BYTES = 16 << 10
"""Largest request head: a longer one still arriving is answered 400 (h11), one that arrived
whole 431."""
MAX_CONNECTIONS = 512
"""Open connections at once; one more closes the oldest connection still waiting for its head
(never one being answered). With 80 slow clients held open the agent's /info takes
milliseconds (tests/evogym/test_server_guard.py)."""
IDEMPOTENCY_KEY_CHARS = 200
"""Longest accepted `Idempotency-Key` (printable ASCII)."""


class SortedJSON(JSONResponse):
    media_type = "application/json; charset=utf-8"  # the reference's Content-Type

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
    if length is not None and re.fullmatch(r"[0-9]{19,}", length):  # a length no body here can have
        return await _too_large(request, 0)
    if length is None or not re.fullmatch(r"[0-9]{1,18}", length):
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
    except UnicodeDecodeError:
        return _error(400, "bad_request", "body must contain env_instances (the body is not UTF-8)")
    except RecursionError:
        return _error(400, "bad_request", "body must contain env_instances (JSON nested too deep to parse)")
    except ValueError as exc:  # a JSONDecodeError names the position; int() refuses numbers of over 4300 digits
        why = "a number with too many digits" if "digits" in str(exc) else f"invalid JSON: {exc}"
        return _error(400, "bad_request", f"body must contain env_instances ({why[:200]})")
    if not isinstance(body, dict):
        return _error(400, "bad_request", "body must contain env_instances")
    return body


def build_app(host: Host, credential: Credential) -> "Guard":
    """The ASGI app: the credential check (`Guard`) in front of the routes."""
    turn = asyncio.Lock()
    """Submits and finishes wait here, in the event loop: a queue of them holds no worker
    thread, so nothing they do can keep /info from answering (issue 18: with one slow submit
    and 45 queued requests /info took ~10 s, the queued ones holding every worker thread)."""

    async def serialized(call, *args):
        async with turn:
            return await anyio.to_thread.run_sync(call, *args)

    async def answer(call):
        """`call()` on the event loop once the host is warm (a few dictionary reads, never queued
        behind anything), in a worker thread before (its first computation must not stall the loop)."""
        return call() if host.warm.is_set() else await anyio.to_thread.run_sync(call)

    async def info(request: Request):
        return SortedJSON(await answer(host.info))

    async def task(request: Request):
        return Response(await answer(host.task), media_type="text/markdown; charset=utf-8")

    async def submit(request: Request):
        body = await _read_json(request)
        if isinstance(body, Response):
            return body
        if "env_instances" not in body:
            return _error(400, "bad_request", "body must contain env_instances")
        key = request.headers.get("idempotency-key")
        if key is not None and not re.fullmatch(rf"[\x21-\x7e]{{1,{IDEMPOTENCY_KEY_CHARS}}}", key):
            return _error(400, "bad_request", f"Idempotency-Key must be 1-{IDEMPOTENCY_KEY_CHARS} printable "
                          "ASCII characters without spaces")
        status, payload = await serialized(host.judge.submit, body, key)
        return SortedJSON(payload, status_code=status)

    async def finish(request: Request):
        status, payload = await serialized(host.finish)
        return SortedJSON(payload, status_code=status)

    async def finalize(request: Request, exc=None):
        response = _error(405, "method_not_allowed", "finalize is server-owned")
        response.headers["Allow"] = ""  # no method may finalize (RFC 9110: an empty Allow)
        return response

    async def not_found(request: Request, exc=None):
        return _error(404, "not_found", "unknown endpoint")

    async def method_not_allowed(request: Request, exc=None):
        if request.url.path == "/finalize":  # any method: the server finalizes, never a client
            return await finalize(request)
        allowed = next((sorted((r.methods or set()) - {"HEAD"}) for r in routes if r.path == request.url.path), [])
        response = _error(405, "method_not_allowed", f"{request.method} {request.url.path} is not allowed; "
                          f"use {' or '.join(allowed)}")
        response.headers["Allow"] = ", ".join(allowed)
        return response

    routes = [Route("/info", _contained(info), methods=["GET"]), Route("/task", _contained(task), methods=["GET"]),
              Route("/submit", _contained(submit), methods=["POST"]),
              Route("/finish", _contained(finish), methods=["POST"]),
              Route("/finalize", finalize, methods=["POST", "GET", "PUT", "DELETE"])]
    app = Starlette(routes=routes, exception_handlers={404: not_found, 405: method_not_allowed})
    app.router.redirect_slashes = False  # `/submit/` is a 404, as in the reference (no 307 to a client-named host)
    return Guard(app, credential)


def _contained(handler):
    """`handler`, with a host fault answered 503 and its reason (an HTTP 500 says nothing)."""
    async def wrapped(request: Request):
        try:
            return await handler(request)
        except Exception as exc:  # noqa: BLE001 - the host's own fault; the request changed nothing more
            return _error(503, "host_error", f"the host failed on this request: {type(exc).__name__}: {exc}"[:2000])
    return wrapped


class Guard:
    """ASGI middleware: a request without the run's credential is answered 401 before any
    route runs or any body byte is read, whatever its path or method (and one whose head is
    over MAX_HEADER_BYTES 431)."""

    def __init__(self, app, credential: Credential) -> None:
        self.app, self.credential = app, credential

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "http" and len(scope["raw_path"]) + len(scope["query_string"]) + sum(
                len(k) + len(v) for k, v in scope["headers"]) > MAX_HEADER_BYTES:
            response = _error(431, "request_header_fields_too_large", f"request head over {MAX_HEADER_BYTES} bytes")
            response.headers["Connection"] = "close"
            await response(scope, receive, send)
            return
        if scope["type"] == "http" and not self._authorized(scope["headers"]):
            response = _error(401, "unauthorized", "this run answers only its own agent: send the run's token as "
                              "`Authorization: Bearer <token>` (it is in $EVOPOLICYGYM_TOKEN and in the file "
                              "$EVOPOLICYGYM_TOKEN_FILE)")
            response.headers["WWW-Authenticate"] = "Bearer"
            response.headers["Connection"] = "close"
            await response(scope, receive, send)
            return
        await self.app(scope, receive, send)

    def _authorized(self, headers) -> bool:
        for name, value in headers:
            if name in (b"authorization", b"x-evogym-token"):
                return self.credential.accepts(value.decode("latin-1"))
        return False


class GuardedH11(H11Protocol):
    """uvicorn's h11 protocol with a deadline for every request head (HEADER_TIMEOUT_S) and a
    cap on open connections (MAX_CONNECTIONS) that closes the oldest connection still waiting
    for its head. uvicorn alone has neither: a connection that never finishes its head stays
    open, and its `limit_concurrency` answers 503 to everyone once enough of them are open."""

    def connection_made(self, transport) -> None:
        super().connection_made(transport)
        self._head_timer: asyncio.TimerHandle | None = None
        self._awaiting_since = 0.0
        self._await_head()
        if len(self.connections) > MAX_CONNECTIONS:
            waiting = [c for c in self.connections if isinstance(c, GuardedH11) and c._head_timer is not None
                       and c is not self]
            if waiting:
                min(waiting, key=lambda c: c._awaiting_since).transport.close()

    def data_received(self, data: bytes) -> None:
        before = self.cycle
        super().data_received(data)
        if self.cycle is not before:  # a request head was complete
            self._head_seen()

    def on_response_complete(self) -> None:
        before = self.cycle
        super().on_response_complete()
        if self.transport.is_closing():
            self._head_seen()
        elif self.cycle is before:
            self._await_head()  # the next request's head has the same deadline
        else:
            self._head_seen()  # a pipelined request was already waiting

    def connection_lost(self, exc) -> None:
        self._head_seen()
        super().connection_lost(exc)

    def _await_head(self) -> None:
        self._head_seen()
        self._awaiting_since = self.loop.time()
        self._head_timer = self.loop.call_later(HEADER_TIMEOUT_S, self._head_late)

    def _head_seen(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_late(self) -> None:
        self._head_timer = None
        if not self.transport.is_closing():
            self.transport.close()


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
    """A uvicorn server on a loopback socket, run in a background thread.

    `credential`: the token requests must carry; by default a new random one, kept in
    `<run_dir>/control/` (0700) as 0600 files (`evogym.credential`)."""

    def __init__(self, host: Host, bind: str = "127.0.0.1", port: int = 0, credential: Credential | None = None,
                 sock: socket.socket | None = None) -> None:
        self.sock = sock if sock is not None else listen(bind, port)
        family = self.sock.family
        self.port = self.sock.getsockname()[1]
        self.url = f"http://{bind if family == socket.AF_INET else f'[{bind}]'}:{self.port}"
        self.credential = credential if credential is not None else Credential.create(host.run.control)
        config = uvicorn.Config(build_app(host, self.credential), log_level="warning", access_log=False,
                                http=GuardedH11, timeout_keep_alive=5, limit_concurrency=None,
                                h11_max_incomplete_event_size=MAX_HEADER_BYTES, lifespan="off")
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
