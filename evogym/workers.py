"""Hidden-evaluation workers of a warm host: the host's end (`evaluation_workers`) and the worker's loop (`serve`).

A host forked by the warm template (`evogym.warm`) holds a channel to that template. On the
host's request the template forks fresh worker processes and hands each over on its own socket
pair; from then on jobs travel between the host and its worker only, as length-prefixed pickles.
A worker runs `rollout.run_episodes` on each job and nothing else, and is SIGKILLed by the
template when its host's channel closes. This module sits below `finalize` (which asks for
workers) and below `warm` (which binds the channel and runs the worker loop), so neither needs
the other.
"""
from __future__ import annotations

import pickle
import select
import socket
import struct
from collections.abc import Callable
from typing import Any

from evogym.rollout import BatchResult, EpisodeJob, run_episodes

_LENGTH = struct.Struct("<Q")

_channel: socket.socket | None = None
"""In a host forked by a template: its channel to that template (None in any other process)."""


def bind(channel: socket.socket) -> None:
    """Called once in a host the template forked: `evaluation_workers` asks over `channel`."""
    global _channel
    _channel = channel


class EvaluationWorkers:
    """Worker processes forked by the template for this host; `run(jobs)` runs `run_episodes` on each.

    A worker that dies mid-job (its template was stopped) has its job run here, in this
    process: `run_episodes` is a function of the job, so the result is the same.
    """

    def __init__(self, channel: socket.socket, n: int) -> None:
        self.socks: list[socket.socket] = []
        for _ in range(n):
            ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                socket.send_fds(channel, [b"worker"], [theirs.fileno()])
            finally:
                theirs.close()
            self.socks.append(ours)

    def run(self, jobs: list[EpisodeJob], local: Callable[[EpisodeJob], BatchResult],
            failed: Callable[[BaseException], BatchResult]) -> list[BatchResult]:
        """One result per job, in order. `local(job)` runs a job in this process (a worker that
        cannot take it or died on it); `failed(exc)` is the result of a job that raised."""
        results: dict[int, BatchResult] = {}
        queue = list(range(len(jobs)))[::-1]
        busy: dict[socket.socket, int] = {}
        idle = list(self.socks)
        while queue or busy:
            while queue and idle:
                sock, i = idle.pop(), queue.pop()
                if _send(sock, jobs[i]):
                    busy[sock] = i
                else:
                    results[i] = local(jobs[i])
            if not busy:
                continue
            for sock in select.select(list(busy), [], [])[0]:
                i = busy.pop(sock)
                reply = _recv(sock)
                if reply is None:  # the worker is gone: run its job here, stop using it
                    results[i] = local(jobs[i])
                    continue
                ok, value = reply
                results[i] = value if ok else failed(value)
                idle.append(sock)
        return [results[i] for i in range(len(jobs))]

    def close(self) -> None:
        for sock in self.socks:
            sock.close()

    def __enter__(self) -> EvaluationWorkers:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def evaluation_workers(n: int) -> EvaluationWorkers | None:
    """`n` warm workers for this host, or None when this host was not forked by a template."""
    if _channel is None:
        return None
    try:
        return EvaluationWorkers(_channel, n)
    except OSError:  # the template is gone: the caller evaluates another way
        return None


def serve(sock: socket.socket) -> int:
    """The worker's loop: run each job its host sends until the host closes the socket; exit status 0."""
    while True:
        job = _recv(sock)
        if job is None:
            return 0
        reply: tuple[bool, BatchResult | Exception]
        try:
            reply = (True, run_episodes(job))
        except Exception as exc:  # noqa: BLE001 - the host records it as that candidate's failure
            reply = (False, exc)
        if not _send(sock, reply):
            return 0


def _send(sock: socket.socket, obj: object) -> bool:
    blob = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    try:
        sock.sendall(_LENGTH.pack(len(blob)) + blob)
    except OSError:
        return False
    return True


def _recv(sock: socket.socket) -> Any:
    """One message, or None at EOF (the peer is gone)."""
    try:
        head = _recv_exact(sock, _LENGTH.size)
        if head is None:
            return None
        body = _recv_exact(sock, _LENGTH.unpack(head)[0])
        return pickle.loads(body) if body is not None else None
    except (OSError, EOFError, TypeError):
        return None


def _recv_exact(sock: socket.socket, n: int) -> bytes | None:
    chunks, got = [], 0
    while got < n:
        chunk = sock.recv(min(n - got, 1 << 20))
        if not chunk:
            if got:
                raise EOFError("truncated message")
            return None
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)
