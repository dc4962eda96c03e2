"""`env_instances` parsing: an int list or a spec string such as "7-10,16".

Sizes are computed from the ranges before anything is expanded, so "0-99999999999"
costs no memory: it is answered from its bounds alone (reference bug H2 fixed).
Deliberate deviations from the reference parser (docs/protocol-deviations.md): JSON
booleans are not ids (Python's `bool` is an `int`), and only ASCII digits count
(`"٣"` is a parse error, not the id 3).
"""
from __future__ import annotations

import re
from dataclasses import dataclass

_TOKEN = re.compile(r"^([0-9]+)(?:-([0-9]+))?$")
EXPAND_LIMIT = 1 << 16
"""Largest request that is ever expanded into a list (for the summary); bigger ones are rejected by size."""
ID_DIGITS = 18
"""Digits read of one id in a spec string; a longer number stands for BEYOND (issue 18: 5001
digits exceeded `int()`'s 4300-digit limit and the ValueError escaped as an HTTP 500)."""
BEYOND = 10**ID_DIGITS
"""The value of any id written with more than ID_DIGITS digits: beyond every pool."""


class ParseError(ValueError):
    """The body does not describe a list of episode ids (HTTP 400 `budget_invalid`)."""


@dataclass(frozen=True)
class Request:
    count: int
    """Episodes requested (duplicates count)."""
    ids: list[int] | None
    """Expanded ids in request order; None when the request is too large to expand."""
    out_of_range: bool
    """Some id is >= n_env_instances."""


def _ranges(raw) -> list[tuple[int, int]]:
    if isinstance(raw, list):
        out = []
        for item in raw:
            if isinstance(item, bool) or not isinstance(item, int) or item < 0:
                raise ParseError(f"env_instances items must be non-negative integers, got {item!r:.40}")
            out.append((item, item))
        return out
    if isinstance(raw, str):
        if not raw.strip():
            raise ParseError("empty env_instances spec")
        out = []
        for token in raw.split(","):
            m = _TOKEN.match(token.strip())
            if not m:
                raise ParseError(f"bad env_instances token {token.strip()!r:.40}: expected N or LO-HI")
            lo = _id(m.group(1))
            hi = _id(m.group(2)) if m.group(2) is not None else lo
            if hi < lo:
                raise ParseError(f"bad range {token.strip()!r}: HI < LO")
            out.append((lo, hi))
        return out
    raise ParseError(f"env_instances must be a list of ints or a spec string, got {type(raw).__name__}")


def _id(digits: str) -> int:
    return int(digits) if len(digits) <= ID_DIGITS else BEYOND


def parse(raw, n_env_instances: int) -> Request:
    ranges = _ranges(raw)
    count = sum(hi - lo + 1 for lo, hi in ranges)
    out_of_range = any(hi >= n_env_instances for _, hi in ranges)
    ids = None
    if count <= EXPAND_LIMIT:
        ids = [i for lo, hi in ranges for i in range(lo, hi + 1)]
    return Request(count, ids, out_of_range)
