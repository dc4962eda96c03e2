"""What a call into the policy process returns, and which of the worker's replies are believable.

Everything the worker writes is untrusted (the policy runs in its process): an error reply
or a start report is checked field by field, and its texts are cut to the host's limits,
before it becomes a `CallResult`. A failing policy is a `CallResult`, never an exception.
"""
from __future__ import annotations

import reprlib
from dataclasses import dataclass

from evogym.verdicts import WORKER_CATEGORIES

TRACEBACK_CHARS = 64 << 10
"""Longest traceback kept from the worker (it cuts to this too; the host re-checks)."""
MESSAGE_CHARS = 4000


@dataclass(slots=True)
class CallResult:
    """Outcome of one call into the policy process; a failure is data, not an exception."""

    ok: bool
    value: object = None
    category: str | None = None
    """A `verdicts.CallCategory` when not ok."""
    message: str = ""
    traceback: str | None = None
    elapsed_s: float = 0.0
    array: bool = False
    """True when `value` is a numpy array (a raw numeric reply); `spaces.to_jsonable(value)`
    is then exactly the JSON value the policy's answer encodes to."""


def failure(category: str, message: str, traceback: str | None = None) -> CallResult:
    """A failed call: `category` (a `verdicts.CallCategory`), the message and the policy's traceback."""
    return CallResult(ok=False, category=category, message=message, traceback=traceback)


ERROR_FIELDS = frozenset({"category", "message", "traceback"})
"""The fields of an error reply (worker.failure); any other field marks a forged frame."""
START_REPORT = {"seccomp": str, "rlimits": dict, "pid": int, "dumpable": bool}
"""The start reply's fields and types (worker.main): the worker's claims about itself."""


def worker_error(value: object, phase: str) -> CallResult | str:
    """The failure an error reply reports, or why the reply is not one the worker sends.

    Checked field by field before anything is looked up: `category` a string the worker
    may report in `phase` (`verdicts.WORKER_CATEGORIES`), `message` a string, `traceback`
    a string or null, nothing else. Lengths are cut to the host's limits."""
    if type(value) is not dict:
        return f"error reply is a {type(value).__name__}, not an object"
    if not value.keys() <= ERROR_FIELDS or "category" not in value:
        return f"error reply has fields {sorted(map(str, value))[:8]}; expected {sorted(ERROR_FIELDS)}"
    category, message, tb = value["category"], value.get("message", ""), value.get("traceback")
    if type(category) is not str or category not in WORKER_CATEGORIES[phase]:
        return f"reply names category {_clip(category)} for {phase}"
    if type(message) is not str or not (tb is None or type(tb) is str):
        return f"error reply fields have types message={type(message).__name__}, traceback={type(tb).__name__}"
    return failure(category, message[:MESSAGE_CHARS], tb[-TRACEBACK_CHARS:] if tb is not None else None)


def start_report(value: object) -> dict | str:
    """The start reply's claims (`START_REPORT`), or why the reply is not the worker's."""
    if type(value) is not dict or value.keys() != START_REPORT.keys():
        return f"expected an object with fields {sorted(START_REPORT)}, got {_clip(value)}"
    for name, kind in START_REPORT.items():
        if type(value[name]) is not kind:
            return f"field {name} is a {type(value[name]).__name__}, expected {kind.__name__}"
    if len(value["seccomp"]) > MESSAGE_CHARS or len(value["rlimits"]) > 8 \
            or not all(type(k) is str and type(v) is int for k, v in value["rlimits"].items()):
        return "field seccomp or rlimits is out of shape"
    return value


def _clip(value: object) -> str:
    """A bounded repr of an untrusted value (for messages): at most 80 characters."""
    text = reprlib.repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
