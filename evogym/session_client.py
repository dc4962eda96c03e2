"""`evopolicygym-session`: the agent's command for an agent-session/v3 socket.

The command EvoPolicyGym main ships under the same name, written here from its documented
behaviour (shared/reference/evopolicygym-v3-notes.md), so an agent written for upstream runs
unchanged in an evogym workspace:

    evopolicygym-session submit program --episodes "0:2,5"
    evopolicygym-session finish submission-000002 submission-000001

- `submit PROGRAM --episodes SELECTOR`: PROGRAM must resolve to `$EVOPOLICYGYM_WORKSPACE/program`;
  the selector is comma-separated items, each `N` or a half-open `START:END`, unsigned decimal,
  strictly increasing without overlap, at most MAX_EPISODE_INDICES ids;
- `finish ID [ID ...]`: the candidates, in order of preference.

The socket is `$EVOPOLICYGYM_SESSION_SOCKET` (relative to the working directory, the
workspace). One request per connection. Output and exit status, as upstream: an `ok` answer
is printed on stdout (compact JSON, sorted keys), exit 0; a refusal on stderr, exit 1; a
client-side failure (no session, no socket, a broken answer) on stderr as
`{"ok": false, "error": {"code": "client_error", ...}}`, exit 2; a malformed command line:
argparse's usage, exit 2.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import socket
import sys
from pathlib import Path

from evogym.session_wire import FRAME_BYTES, MAX_EPISODE_INDICES, PROTOCOL, decode_frame, encode_frame

SOCKET_VARIABLE = "EVOPOLICYGYM_SESSION_SOCKET"
WORKSPACE_VARIABLE = "EVOPOLICYGYM_WORKSPACE"
ANSWER_TIMEOUT_S = 3600.0
"""Longest wait for an answer: a submit runs its episodes before answering (up to the
episode wall-clock limit each)."""
MAX_INDEX = 2**64 - 1
DECIMAL = re.compile(r"[0-9]+")


class ClientError(Exception):
    """What keeps this command from getting an answer (printed as `client_error`, exit 2)."""


def parse_selector(text: str) -> list[int]:
    """The episode ids of a selector such as `0:2,4,6:8` (see the module docstring)."""
    if not text or any(c.isspace() for c in text):
        raise argparse.ArgumentTypeError("the episode selector must be non-empty and contain no whitespace")
    ids: list[int] = []
    for item in text.split(","):
        if not item:
            raise argparse.ArgumentTypeError("the episode selector has an empty item")
        bounds = item.split(":")
        if len(bounds) > 2:
            raise argparse.ArgumentTypeError(f"{item!r}: a range is START:END")
        start = _unsigned(bounds[0], MAX_INDEX)
        end = _unsigned(bounds[1], MAX_INDEX + 1) if len(bounds) == 2 else start + 1
        if end <= start:
            raise argparse.ArgumentTypeError(f"{item!r}: a range must be non-empty and increasing")
        if ids and start <= ids[-1]:
            raise argparse.ArgumentTypeError("episode ids must be strictly increasing, without overlap")
        if len(ids) + end - start > MAX_EPISODE_INDICES:
            raise argparse.ArgumentTypeError(f"at most {MAX_EPISODE_INDICES} episode ids per submission")
        ids.extend(range(start, end))
    return ids


def _unsigned(text: str, limit: int) -> int:
    if not DECIMAL.fullmatch(text):
        raise argparse.ArgumentTypeError(f"{text!r}: episode ids are unsigned decimal integers")
    value = int(text)
    if value > limit:
        raise argparse.ArgumentTypeError(f"{text}: beyond the unsigned 64-bit range")
    return value


def request(args: argparse.Namespace) -> dict:
    """The request frame's object for the parsed command line."""
    if args.command == "submit":
        workspace = _path(WORKSPACE_VARIABLE)
        try:
            same = Path(args.program).resolve(strict=True) == (workspace / "program").resolve(strict=True)
        except OSError as exc:
            raise ClientError(f"cannot resolve the program: {exc}") from None
        if not same:
            raise ClientError("the submitted program must be $EVOPOLICYGYM_WORKSPACE/program")
        return {"protocol": PROTOCOL, "method": "submit", "episode_indices": args.episodes}
    return {"protocol": PROTOCOL, "method": "finish", "submission_ids": list(args.submission_ids)}


def call(message: dict, timeout: float = ANSWER_TIMEOUT_S) -> dict:
    """Send one request to the session socket and return its answer object."""
    path = str(_path(SOCKET_VARIABLE))
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.settimeout(timeout)
        try:
            _connect(conn, path)
            conn.sendall(encode_frame(message))
            head = _exactly(conn, 4)
            length = int.from_bytes(head, "big")
            if not 0 < length <= FRAME_BYTES:
                raise ClientError(f"the session answered a frame of {length} bytes (1..{FRAME_BYTES})")
            answer = decode_frame(_exactly(conn, length))
        except OSError as exc:
            raise ClientError(f"session socket {path}: {exc.strerror or exc}") from None
    if answer is None or answer.get("protocol") != PROTOCOL or type(answer.get("ok")) is not bool:
        raise ClientError("the session returned an invalid protocol response")
    return answer


def _connect(conn: socket.socket, path: str) -> None:
    """A path longer than AF_UNIX allows (108 bytes) is reached through its directory's descriptor."""
    if len(os.fsencode(path)) < 100:
        conn.connect(path)
        return
    fd = os.open(os.path.dirname(path) or ".", os.O_RDONLY | os.O_DIRECTORY)
    try:
        conn.connect(f"/proc/self/fd/{fd}/{os.path.basename(path)}")
    finally:
        os.close(fd)


def _exactly(conn: socket.socket, n: int) -> bytes:
    chunks, left = [], n
    while left:
        chunk = conn.recv(left)
        if not chunk:
            raise ClientError("the session closed the connection before its answer was complete")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _path(variable: str) -> Path:
    raw = os.environ.get(variable)
    if not raw:
        raise ClientError(f"{variable} is not set; no agent session is active")
    return Path(raw)


def parser() -> argparse.ArgumentParser:
    from evogym import __version__
    p = argparse.ArgumentParser(prog="evopolicygym-session",
                                description="Submit programs to, and finish, the agent session of an evogym run.")
    p.add_argument("--version", action="version", version=f"%(prog)s (evogym {__version__})")
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("submit", help="evaluate the workspace program on training episodes")
    s.add_argument("program", help="must resolve to $EVOPOLICYGYM_WORKSPACE/program")
    s.add_argument("--episodes", type=parse_selector, required=True, metavar="SELECTOR",
                   help='episode ids, e.g. "0:2,4:8" (START:END is half open)')
    f = sub.add_parser("finish", help="end the search, naming the submissions to validate")
    f.add_argument("submission_ids", nargs="+")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        answer = call(request(args))
    except ClientError as exc:
        print(_compact({"ok": False, "error": {"code": "client_error", "message": str(exc)}}), file=sys.stderr)
        return 2
    print(_compact(answer), file=sys.stdout if answer["ok"] else sys.stderr)
    return 0 if answer["ok"] else 1


def _compact(value: dict) -> str:
    return json.dumps(value, allow_nan=False, ensure_ascii=False, separators=(",", ":"), sort_keys=True)


if __name__ == "__main__":
    sys.exit(main())
