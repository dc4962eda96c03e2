"""Mechanisms: program families with named, scaled parameters, and program rendering.

A mechanism is a policy-program template (source text that reads its constants from
a `PARAMS` table) plus the list of its parameters with generic defaults and scales.
Structural synthesis picks mechanisms; parametric tuning moves only the parameter
values, so a tuning edit leaves the program's AST topology hash unchanged and a
synthesis edit changes it (the trace classifies edits that way).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

from ole.agents.builtin.prelude import PRELUDE

PARAM_DIGITS = 6
"""Significant digits kept for a parameter value in the program text."""


@dataclass(frozen=True)
class Param:
    """One named parameter (scalar or vector) of a mechanism."""

    name: str
    default: tuple[float, ...]
    scale: float
    """Search unit: a step of 1.0 in normalized coordinates moves the value by `scale`."""
    low: float = -1e9
    high: float = 1e9
    group: str = "act"
    """Function of the program the parameter belongs to (the unit of a `function` edit)."""

    @property
    def size(self) -> int:
        return len(self.default)


@dataclass(frozen=True)
class Mechanism:
    """A program family: name, source body (a `Policy` class) and its parameters."""

    name: str
    body: str
    params: tuple[Param, ...]
    note: str = ""
    """Why the library proposed it (schema and brief features that matched)."""

    @property
    def dim(self) -> int:
        return sum(p.size for p in self.params)

    def groups(self) -> tuple[str, ...]:
        seen: list[str] = []
        for p in self.params:
            if p.group not in seen:
                seen.append(p.group)
        return tuple(seen)

    def group_mask(self, group: str) -> np.ndarray:
        return np.concatenate([np.full(p.size, p.group == group) for p in self.params])

    def defaults(self) -> np.ndarray:
        return np.zeros(self.dim)

    def values(self, x: np.ndarray) -> dict[str, list[float]]:
        """Normalized coordinates x (0 = defaults) -> clipped parameter values."""
        out: dict[str, list[float]] = {}
        i = 0
        for p in self.params:
            raw = np.asarray(p.default) + p.scale * np.asarray(x[i:i + p.size])
            out[p.name] = [float(f"{v:.{PARAM_DIGITS}g}") for v in np.clip(raw, p.low, p.high)]
            i += p.size
        return out


@dataclass(frozen=True)
class Program:
    """A rendered program: what goes into `system/policy.py`."""

    mechanism: str
    x: tuple[float, ...]
    source: str
    values: dict[str, list[float]] = field(default_factory=dict)


def render(mech: Mechanism, x: np.ndarray, *, inline: bool = False) -> Program:
    """Write the program text for a mechanism at normalized parameters x.

    `inline=False` emits a `PARAMS` table (a tuning edit touches only that table);
    `inline=True` writes each value where it is used (a whole-file edit).
    """
    values = mech.values(np.asarray(x, dtype=float))
    body = mech.body
    table = "PARAMS = {\n" + "".join(f"    {k!r}: {v!r},\n" for k, v in values.items()) + "}\n"
    if inline:
        table = "PARAMS = {}\n"
        for name, v in values.items():
            body = re.sub(rf'P\["{name}"\]', f"np.array({v!r})", body)
    head = f'"""Policy program written by the OLE built-in agent (mechanism: {mech.name})."""\n'
    source = head + PRELUDE + "\n\n" + table + "P = PARAMS\n\n" + body.strip() + "\n"
    return Program(mech.name, tuple(float(v) for v in x), source, values)

