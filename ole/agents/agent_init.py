"""The first program inside a command agent's sandbox (stdlib only; run as `python -I -S`).

    agent_init.py [--api HOST PORT SOCKET] -- CMD ARGS...

With `--api`, it listens on HOST:PORT inside the sandbox's own network namespace (where
nothing else listens and nothing leads out) and forwards each connection to SOCKET, a Unix
socket bound in from outside, behind which OLE forwards to the run's host and only to it
(`ole.agents.sandbox.ApiBridge`). So the agent reaches its run's API at the URL it was given,
`http://HOST:PORT`, and nothing else. Then it runs CMD with its own environment and exits
with CMD's status; bubblewrap then ends the sandbox's pid namespace, and with it everything
CMD started.

This file is bound read-only into the sandbox; nothing of OLE is importable there.
"""
from __future__ import annotations

import socket
import subprocess
import sys
import threading

MAX_CONNECTIONS = 64
"""Connections forwarded at once; more are closed at once (a flood costs the agent, not OLE)."""
CHUNK = 1 << 16


def pump(src: socket.socket, dst: socket.socket) -> None:
    """Copy `src` to `dst` until either side ends, then half-close both (OLE's bridge uses it too)."""
    try:
        while chunk := src.recv(CHUNK):
            dst.sendall(chunk)
    except OSError:  # either side went away: the exchange is over
        pass
    finally:
        for sock, how in ((dst, socket.SHUT_WR), (src, socket.SHUT_RD)):
            try:
                sock.shutdown(how)
            except OSError:
                pass


def _forward(client: socket.socket, target: str, slots: threading.BoundedSemaphore) -> None:
    try:
        with client, socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as upstream:
            upstream.connect(target)
            back = threading.Thread(target=pump, args=(upstream, client), daemon=True)
            back.start()
            pump(client, upstream)
            back.join()
    except OSError:  # the bridge outside is gone (the run ended): the agent sees a reset
        pass
    finally:
        slots.release()


def serve_api(host: str, port: int, target: str) -> socket.socket:
    """Listen on host:port (before the agent starts, so its first request finds the port open)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    listener = socket.socket(family, socket.SOCK_STREAM)
    listener.bind((host, port))
    listener.listen(MAX_CONNECTIONS)
    slots = threading.BoundedSemaphore(MAX_CONNECTIONS)

    def accept() -> None:
        while True:
            client, _ = listener.accept()
            if not slots.acquire(blocking=False):
                client.close()
                continue
            threading.Thread(target=_forward, args=(client, target, slots), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    return listener


def main(argv: list[str]) -> int:
    if "--" not in argv:
        print("agent_init: usage: agent_init.py [--api HOST PORT SOCKET] -- CMD ...", file=sys.stderr)
        return 2
    split = argv.index("--")
    options, command = argv[:split], argv[split + 1:]
    if options[:1] == ["--api"]:
        host, port, target = options[1], int(options[2]), options[3]
        serve_api("127.0.0.1" if host == "localhost" else host, port, target)
    try:
        return subprocess.call(command)
    except OSError as exc:
        print(f"agent_init: cannot start {command[0]!r}: {exc}", file=sys.stderr)
        return 127


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
