"""The host side of the wire format between a PolicyProcess and `worker.py`.

A frame is a 4-byte big-endian length and UTF-8 JSON. Requests are encoded compactly
with non-finite floats as the strings "nan" / "inf" / "-inf" (the observation encoding
of the reference), so NaN never crosses; replies are decoded with NaN/Infinity tokens
rejected (our worker never sends them, so one means a forged frame).
"""
from __future__ import annotations

import json

READ_CHUNK = 64 << 10
"""Bytes asked of os.read while a frame's size is still unknown."""


def _reject_constant(name: str):
    raise ValueError(f"non-finite number {name} in a frame")


def _tolist(obj):
    if hasattr(obj, "tolist"):  # numpy arrays and scalars
        return obj.tolist()
    raise TypeError(f"{type(obj).__name__} is not JSON-encodable")


# Built once: json.dumps/json.loads with non-default options build a new coder per call.
_ENCODER = json.JSONEncoder(separators=(",", ":"), allow_nan=False, default=_tolist)
DECODER = json.JSONDecoder(parse_constant=_reject_constant)


def dumps(value) -> bytes:
    """Compact JSON for a request; non-finite floats become "nan" / "inf" / "-inf"."""
    try:
        return _ENCODER.encode(value).encode()
    except ValueError:
        return _ENCODER.encode(_finite(value)).encode()


def _finite(x):
    if isinstance(x, float) and not (x == x and abs(x) != float("inf")):
        return repr(x)
    if isinstance(x, (list, tuple)):
        return [_finite(v) for v in x]
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    if hasattr(x, "tolist") and not isinstance(x, (int, str)):
        return _finite(x.tolist())
    return x


class Stream:
    """A capped capture of one output pipe."""

    def __init__(self, fd: int, cap: int) -> None:
        self.fd, self.cap = fd, cap
        self.kept = bytearray()
        self.dropped = 0

    def absorb(self, data: bytes) -> None:
        room = self.cap - len(self.kept)
        self.kept += data[:max(room, 0)]
        self.dropped += max(len(data) - max(room, 0), 0)

    def take(self) -> str:
        text = self.kept.decode("utf-8", "replace")
        if self.dropped:
            text += f"\n[truncated {self.dropped} bytes]"
        self.kept, self.dropped = bytearray(), 0
        return text


class Reply:
    """Accumulates one reply frame; `feed` returns the body, an error text, or None (more)."""

    def __init__(self, limit: int) -> None:
        self.buf = bytearray()
        self.size: int | None = None
        self.limit = limit

    def want(self) -> int:
        return READ_CHUNK if self.size is None else 4 + self.size - len(self.buf)

    def feed(self, chunk: bytes) -> bytes | str | None:
        self.buf += chunk
        if self.size is None and len(self.buf) >= 4:
            self.size = int.from_bytes(self.buf[:4], "big")
            if self.size > self.limit:
                return f"reply frame announces {self.size} bytes; the limit is {self.limit}"
        if self.size is None:
            return None
        if len(self.buf) > 4 + self.size:
            return "unrequested bytes after the reply frame"
        return bytes(self.buf[4:]) if len(self.buf) == 4 + self.size else None
