"""The agent side's input and output primitives: its error, the answer to a submit, the limits
every call and every read binds to, and bounded reads of files nobody vouches for.

Nothing the agent side is handed is trusted (issue 31): a harness names files (the token, the
task text), a workspace holds summaries anyone working the run may have written, a host URL may
be a port that never answers. So a read takes only a regular file (a FIFO is opened without
blocking and refused, never waited on; `/dev/zero` is refused), never more than its named
limit, and a call never waits longer than its named deadline.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evogym.durable import NotRegularFile, TooLarge, read_regular
from ole.errors import OleError

CALL_TIMEOUT_S = 30.0
"""Longest wait for a whole `/info`, `/task` or `/finish` exchange (and a v3 finish), connect to
last byte. The host answers them from memory in milliseconds (finalization runs in the
background); a port that accepts and never answers made each request wait 3600 s (issue 31)."""
SUBMIT_TIMEOUT_S = 1800.0
"""Longest wait for one submit, whose episodes run inside the request (a 64-episode MuJoCo submit
on a loaded 2-core machine takes a few minutes)."""
RESPONSE_MAX_BYTES = 8 << 20
"""Largest answer body read from a host (answers are kilobytes; a longer one is refused, unread)."""
TOKEN_MAX_BYTES = 4096
"""Largest token file read (evogym's tokens are 43 characters; a 4 GiB file ended in MemoryError)."""
TASK_TEXT_MAX_BYTES = 1 << 20
"""Largest task text read (evogym's TASK.md is a few KB; `/dev/zero` ended in MemoryError)."""


class HostError(OleError):
    """The host could not be reached or refused the request outright."""


@dataclass(frozen=True)
class SubmitAnswer:
    """The host's answer to one `/submit`."""

    http_status: int
    submit_id: int | None
    status: str
    summary: dict[str, Any]

    @property
    def charged(self) -> int:
        return int(self.summary.get("n_episodes") or 0)


def read_bounded(path: str | Path, limit: int, what: str, *, follow: bool = True) -> bytes:
    """The bytes of the regular file `path` (`evogym.durable.read_regular`); `HostError` (naming
    `what`) when it is missing, not a regular file, longer than `limit`, or (`follow=False`) a
    symbolic link."""
    try:
        return read_regular(path, limit, follow=follow)
    except NotRegularFile:
        raise HostError(f"{what} {path} is not a regular file",
                        hint="name a plain file (not a FIFO, a device or a folder)") from None
    except TooLarge:
        raise HostError(f"{what} {path} is larger than {limit} bytes", hint="is it the file the harness named?") from None
    except OSError as err:
        raise HostError(f"cannot read {what} {path}: {err.strerror or err}", hint="check the path") from None


def read_json(path: str | Path, limit: int) -> object:
    """The JSON document in a bounded regular file (a final symbolic link is not followed), or None
    when there is none to read (missing, no regular file, too long, not JSON, nested too deep)."""
    try:
        return json.loads(read_bounded(path, limit, "the file", follow=False))
    except (HostError, ValueError, RecursionError):
        return None


def is_int(value: object) -> bool:
    """An int that is no bool (JSON's `true` is no episode count)."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: object) -> bool:
    """A finite int or float that is no bool."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


ENV_META_FIELDS = ("env", "obs_space", "action_space")
"""What every agent reads of `env_meta` (a text and two objects); an `/info` or task text without
them is no host's (a task text without `obs_space` was an internal error of `ole agent work`)."""


def env_meta_ok(meta: object) -> bool:
    """Whether `meta` is an `env_meta` object with `ENV_META_FIELDS` of the right types."""
    return isinstance(meta, dict) and isinstance(meta.get("env"), str) and isinstance(meta.get("obs_space"), dict) \
        and isinstance(meta.get("action_space"), dict)


def clean_summary(summary: object) -> dict:
    """A submit's summary as agents read it: the fields they use kept only with the right type
    (counts non-negative ints, `returns` a list of finite numbers, `mean_return` a finite number,
    texts strings), every other field as it came. A host answering `"returns": ["x"]` or
    `"remaining_budget": "many"` made the agent raise outside its recorded-failure paths."""
    if not isinstance(summary, dict):
        return {}
    out = dict(summary)
    for key in ("n_episodes", "remaining_budget", "submit_index"):
        if key in out and not (is_int(out[key]) and out[key] >= 0):
            del out[key]
    for key in ("mean_return", "wall_time_seconds"):
        if key in out and not is_number(out[key]):
            out[key] = None
    for key in ("status", "submit_started_at"):
        if key in out and not isinstance(out[key], str):
            del out[key]
    if "returns" in out and not (isinstance(out["returns"], list) and all(is_number(r) for r in out["returns"])):
        out["returns"] = None
    if "env_instances" in out and not (isinstance(out["env_instances"], list)
                                       and all(is_int(i) for i in out["env_instances"])):
        out["env_instances"] = []
    return out
