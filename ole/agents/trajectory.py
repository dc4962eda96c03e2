"""An inspected episode's trajectory lines, with the observations wherever the host stored them.

The host writes a step's observation inline (`obs` in `trajectory.jsonl`) or, when an
episode's stacked observations exceed the reference's size rule, to
`observations.npy` (one row per step: row t is what `act()` saw at step t) or
`observations.npz` (one array per top-level key) with `obs: null` on every line
(reference §3.5). Both agents read feedback through this module, so an inspected step
means the same thing to each of them: its observation, action and reward, however the
observation was stored.
"""
from __future__ import annotations

import json
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

TRAJECTORY = "trajectory.jsonl"
NPY = "observations.npy"
NPZ = "observations.npz"


def tail_lines(episode_dir: Path, window: int, max_chars: int | None = None) -> list[str]:
    """The last `window` lines of the episode's trajectory, each with its observation.

    A line whose `obs` is null gets row `t` of the externalized observations, and is
    written back as JSON; every other line is returned exactly as stored. Unreadable
    or mismatched observation files leave `obs` null (the line is still returned).
    With `max_chars`, only the last lines whose characters fit in it are returned (the
    first line from the end that does not fit ends the read). When even the last step
    does not fit with its observation (a camera frame is ~100,000 characters), the
    window is read as stored, without the external observations: its actions and
    rewards are still feedback.
    """
    path = episode_dir / TRAJECTORY
    if window <= 0 or not path.is_file() or (max_chars is not None and max_chars <= 0):
        return []
    lines = path.read_text(errors="replace").splitlines()[-window:]
    external: _External | None = None
    out: list[str] = []
    used = 0
    for k, line in enumerate(reversed(lines)):
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            row = None
        if isinstance(row, dict) and row.get("obs") is None and isinstance(row.get("t"), int):
            external = external or _External(episode_dir)
            obs = external.row(row["t"])
            if obs is not None:
                filled = json.dumps({**row, "obs": obs})
                if k == 0 and max_chars is not None and len(filled) > max_chars:
                    return within(lines, max_chars)  # observations too large to read: as stored
                line = filled
        if max_chars is not None and used + len(line) > max_chars:
            break
        out.append(line)
        used += len(line)
    return out[::-1]


def within(lines: list[str], max_chars: int) -> list[str]:
    """The last of `lines` whose characters fit in `max_chars`."""
    out: list[str] = []
    used = 0
    for line in reversed(lines):
        if used + len(line) > max_chars:
            break
        out.append(line)
        used += len(line)
    return out[::-1]


def flat_numbers(value: Any) -> list[int | float] | None:
    """A step's observation or action as its numbers in order (nested lists flattened), or None
    when it holds anything else (a bool, a string such as a non-finite float, a dict).

    The numbers keep their type: a reader that wants floats converts them, and a prompt
    shows an integer action as the integer it is.
    """
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return [value]
    if isinstance(value, (list, tuple)):
        out: list[int | float] = []
        for item in value:
            sub = flat_numbers(item)
            if sub is None:
                return None
            out += sub
        return out
    return None


class _External:
    """Row access to an episode's observations.npy / observations.npz (opened lazily, once)."""

    def __init__(self, episode_dir: Path):
        self.array = None
        self.columns: dict[str, np.ndarray] | None = None
        try:
            if (episode_dir / NPY).is_file():
                # memory-mapped: a tail window of a long image episode reads only its rows
                self.array = np.load(episode_dir / NPY, mmap_mode="r", allow_pickle=False)
            elif (episode_dir / NPZ).is_file():
                with np.load(episode_dir / NPZ, allow_pickle=False) as data:
                    self.columns = {k: data[k] for k in data.files}
        except (OSError, ValueError, zipfile.BadZipFile, EOFError):
            self.array, self.columns = None, None

    def row(self, t: int) -> Any:
        if t < 0:
            return None
        if self.array is not None:
            return _plain(self.array[t]) if t < len(self.array) else None
        if self.columns:
            if any(t >= len(col) for col in self.columns.values()):
                return None
            return {k: _plain(col[t]) for k, col in self.columns.items()}
        return None


def _plain(value: np.ndarray) -> Any:
    """A row as JSON values: numbers, strings, nested lists (non-finite floats as the host's strings)."""
    value = np.asarray(value)
    if value.dtype.kind == "f" and not np.all(np.isfinite(value)):
        return _finite_strings(value.tolist())
    return value.tolist()


def _finite_strings(v: Any) -> Any:
    if isinstance(v, list):
        return [_finite_strings(x) for x in v]
    if isinstance(v, float) and not np.isfinite(v):
        return "nan" if np.isnan(v) else ("inf" if v > 0 else "-inf")
    return v


__all__ = ["flat_numbers", "tail_lines", "within"]
