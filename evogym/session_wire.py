"""The agent-session/v3 wire: its constants and its frames (a 4-byte big-endian length, then a
UTF-8 JSON object). Light on purpose: the agent's `evopolicygym-session` command imports this,
not the host.
"""
from __future__ import annotations

import json

PROTOCOL = "agent-session/v3"
FRAME_BYTES = 64 << 10
"""Largest frame either way (upstream's SESSION_MAX_FRAME_BYTES)."""
MAX_EPISODE_INDICES = 2048
"""Most ids in one submit (upstream's SESSION_MAX_EPISODE_INDICES)."""


def error(code: str, message: str) -> dict:
    return {"protocol": PROTOCOL, "ok": False, "error": {"code": code, "message": message}}


def decode_frame(payload: bytes) -> dict | None:
    """The request object of a frame's payload, or None when it is not one."""
    try:
        value = json.loads(payload.decode("utf-8"), parse_constant=_no_constant)
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None
    return value if type(value) is dict else None


def _no_constant(name: str):
    raise ValueError(f"{name} is not JSON")


def encode_frame(message: dict) -> bytes:
    payload = json.dumps(message, allow_nan=False, ensure_ascii=False, separators=(",", ":"),
                         sort_keys=True).encode("utf-8")
    return len(payload).to_bytes(4, "big") + payload
