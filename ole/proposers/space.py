"""The loop-policy search space, read from the schema: one dimension per movable field.

Every proposer that samples or perturbs a policy (the built-in proposer's exploration, the
random-search and TPE baselines) uses these dimensions, so they search the same space.
Numeric ranges are the schema's own `ge`/`le` bounds; a range spanning more than
`LOG_RATIO` is searched on a log scale (a submit size of 1 vs 2 matters as much as 32 vs
64), the way Optuna's `log=True` treats scale parameters. Tuple fields become categorical
dimensions: `planning.phases` over its ordered non-empty subsets, `observation.summary_fields`
as one include/exclude switch per summary field. Fields the host agent does not read (the
LLM caps for the built-in agent) are left out, so no proposer spends candidates on them.
"""
from __future__ import annotations

import functools
import itertools
import math
import random
import typing
from dataclasses import dataclass
from typing import Literal, TypeAlias

from pydantic.fields import FieldInfo

from ole.loop_policy import COMPONENTS, SUMMARY_FIELDS, LoopPolicy

LOG_RATIO = 20.0
"""A numeric range whose high/low ratio exceeds this is searched on a log scale."""

LLM_ONLY = ("budget.max_llm_calls", "budget.max_tokens", "budget.max_usd")
"""Fields read only by the LLM client (see docs/loop-policy.md, "Readers")."""

READ_BY = {"builtin": lambda path: path not in LLM_ONLY, "llm": lambda path: True, "command": lambda path: True}
"""Which fields each host agent reads (every field moves the LLM and command agents)."""

NOT_SEARCHED = ("budget.reference_episodes", "recovery.max_rejects", "stopping.best_last")
"""Fields no proposer moves. `budget.reference_episodes`: the budget the run-length counts are stated
for is set by the engine to the search budget whenever a proposal moves one of them
(`anchor_run_lengths`). `recovery.max_rejects`: a guard against a host that refuses well-formed
submits, not a way to score better. `stopping.best_last`: the agents' behaviour before it became a
field (the built-in agent's always), kept out of the search so that adding it left every seeded
proposal, and so `make evolve`'s decisions, unchanged; a search over it is a separate change."""

Kind = Literal["categorical", "int", "float", "bool", "include"]

Value: TypeAlias = bool | int | float | str | tuple[str, ...]
"""One dimension's value: a choice (a `Literal` string, a bool, a tuple of `planning.phases`), a
number, or an include switch (a bool)."""


@dataclass(frozen=True)
class Dim:
    """One searchable dimension of the loop policy."""

    path: str
    """`component.field`, or `observation.summary_fields:<name>` for one include switch."""
    kind: Kind
    choices: tuple[Value, ...] = ()
    """Categorical values (tuples for `planning.phases`)."""
    low: float | None = None
    high: float | None = None
    log: bool = False
    strict_low: bool = False
    """The bound is `gt` (the value must stay above `low`)."""

    @property
    def field(self) -> str:
        return self.path.split(":")[0]


def field_info(component: str, field: str) -> FieldInfo:
    """The schema of one loop-policy field (`component.field`)."""
    return type(getattr(LoopPolicy(), component)).model_fields[field]


def bounds(info: FieldInfo) -> tuple[float | None, float | None, bool]:
    """(low, high, low_is_strict) of a numeric field, from its pydantic metadata (`ge`, `gt`, `le`)."""
    low = high = None
    strict = False
    for m in info.metadata:
        if getattr(m, "ge", None) is not None:
            low = m.ge
        if getattr(m, "gt", None) is not None:
            low, strict = m.gt, True
        if getattr(m, "le", None) is not None:
            high = m.le
    return low, high, strict


@functools.cache
def dims(host: str = "builtin") -> tuple[Dim, ...]:
    """The dimensions for one host agent, in schema order."""
    out: list[Dim] = []
    reads = READ_BY[host]
    for comp in COMPONENTS:
        for name, info in type(getattr(LoopPolicy(), comp)).model_fields.items():
            path = f"{comp}.{name}"
            if not reads(path) or path in NOT_SEARCHED:
                continue
            ann = info.annotation
            origin, args = typing.get_origin(ann), typing.get_args(ann)
            if path == "observation.summary_fields":
                out += [Dim(f"{path}:{f}", "include") for f in SUMMARY_FIELDS]
            elif origin is tuple:
                items = typing.get_args(args[0])
                subsets = [c for k in range(1, len(items) + 1) for c in itertools.combinations(items, k)]
                out.append(Dim(path, "categorical", tuple(subsets)))
            elif origin is Literal:
                out.append(Dim(path, "categorical", tuple(args)))
            elif ann is bool:
                out.append(Dim(path, "bool", (False, True)))
            elif ann in (int, float):
                low, high, strict = bounds(info)
                # ints: counts and sizes (1 vs 2 as far apart as 32 vs 64); floats only when bounded
                # away from zero (a step size, a wall clock) — fractions and margins stay linear
                scale_like = ann is int or strict or (low or 0.0) > 0
                lo_pos = max(low or 0.0, 1.0 if ann is int else 1e-3)
                log = scale_like and high is not None and high / lo_pos > LOG_RATIO
                out.append(Dim(path, "int" if ann is int else "float", low=low, high=high, log=log, strict_low=strict))
    return tuple(out)


def log_offset(d: Dim) -> float:
    """Shift that makes a log dimension's range positive: 1 when it starts at 0 (0 stays reachable)."""
    return 1.0 if d.log and (d.low or 0.0) <= 0 and not d.strict_low else 0.0


def _sample_numeric(d: Dim, rng: random.Random) -> float:
    low, high = float(d.low if d.low is not None else 0.0), float(d.high if d.high is not None else 1.0)
    if d.log:
        off = log_offset(d)
        lo_pos = max(low + off, 1e-3)
        value = math.exp(rng.uniform(math.log(lo_pos), math.log(high + off))) - off
    else:
        value = rng.uniform(low, high)
    return _clip(d, value)


def _clip(d: Dim, value: float) -> int | float:
    """Round ints, keep the value inside the schema bounds (strictly above a `gt` bound)."""
    if d.low is not None:
        value = max(value, d.low + (1e-3 if d.strict_low else 0.0))
    if d.high is not None:
        value = min(value, d.high)
    return int(round(value)) if d.kind == "int" else round(float(value), 4)


def sample_value(d: Dim, rng: random.Random) -> Value:
    """A uniform draw from one dimension (log-uniform on log dimensions)."""
    if d.kind in ("categorical", "bool"):
        return rng.choice(d.choices)
    if d.kind == "include":
        return rng.random() < 0.5
    return _sample_numeric(d, rng)


def perturb_value(d: Dim, current: Value, rng: random.Random, scale: float = 1.0) -> Value:
    """A local move: another choice, a flipped switch, or a multiplicative (log) / additive step.

    `scale` widens numeric steps: the log-step's spread is 0.7·scale (a factor of about 2 at
    scale 1, up to ~8 at scale 3), so a move can leave the neighbourhood when evidence says so.
    """
    if d.kind in ("categorical", "bool"):
        others = [c for c in d.choices if c != current]
        return rng.choice(others) if others else current
    if d.kind == "include":
        return not current
    assert isinstance(current, (int, float)), f"numeric dimension {d.path} holds {current!r}"
    if d.log or d.kind == "int":
        base = max(float(current), 1.0 if d.kind == "int" else 1e-3)
        factor = math.exp(rng.gauss(0.0, 0.7 * scale))
        new = base * factor
        if d.kind == "int" and int(round(new)) == int(current):
            new = current + (1 if factor >= 1 else -1)
        return _clip(d, new)
    span = float((d.high if d.high is not None else 1.0) - (d.low if d.low is not None else 0.0))
    return _clip(d, float(current) + rng.gauss(0.0, 0.25 * span * scale))


def get(policy: dict, d: Dim) -> Value:
    comp, name = d.field.split(".")
    value = policy[comp][name]
    if d.kind == "include":
        return d.path.split(":")[1] in value
    return tuple(value) if isinstance(value, list) else value


def put(policy: dict, d: Dim, value: Value) -> None:
    """Set one dimension in a policy dict (JSON form), keeping include lists in schema order."""
    comp, name = d.field.split(".")
    if d.kind == "include":
        item = d.path.split(":")[1]
        current = set(policy[comp][name])
        current = current | {item} if value else current - {item}
        policy[comp][name] = [f for f in SUMMARY_FIELDS if f in current]
    else:
        policy[comp][name] = list(value) if isinstance(value, tuple) else value


def repair(policy: dict) -> dict:
    """Bring a sampled policy back inside the schema's cross-field rules (in place).

    `summary_fields` must contain a score (`mean_return` or `returns`): `mean_return` is added.
    The synthesis and confirmation fractions must sum to at most 1: both are scaled down.
    """
    obs = policy["observation"]
    if "mean_return" not in obs["summary_fields"] and "returns" not in obs["summary_fields"]:
        obs["summary_fields"] = [f for f in SUMMARY_FIELDS if f in {*obs["summary_fields"], "mean_return"}]
    b = policy["budget"]
    total = b["synthesis_fraction"] + b["confirmation_fraction"]
    if total > 1.0:
        b["synthesis_fraction"] = round(b["synthesis_fraction"] / total, 4)
        b["confirmation_fraction"] = round(1.0 - b["synthesis_fraction"], 4)
    return policy


def anchor_run_lengths(parent: dict, child: dict, budget: int | None) -> dict:
    """State a child's run-length counts for the budget it was searched at (in place).

    When a proposal moves a run-length count (`ole.loop_policy.RUN_LENGTH_FIELDS`) or the
    stopping mode that gives patience and reserve their effect, and the child states no
    reference budget, the values it chose were chosen at `budget` (its search's): so they are
    stated for it (`budget.reference_episodes`), and mean the same share of the run at any other
    budget. Nothing changes without a budget or when no such field moved.
    """
    from ole.loop_policy import RUN_LENGTH_FIELDS
    if budget is None or child["budget"].get("reference_episodes") is not None:
        return child
    moved = [p for p in (*RUN_LENGTH_FIELDS, "stopping.mode")
             if parent[p.split(".")[0]][p.split(".")[1]] != child[p.split(".")[0]][p.split(".")[1]]]
    if moved:
        child["budget"]["reference_episodes"] = int(budget)
    return child


def sample_policy(rng: random.Random, host: str = "builtin", base: LoopPolicy | None = None) -> dict:
    """A uniform draw over every dimension the host reads (others keep `base`'s values)."""
    policy = (base or LoopPolicy()).model_dump(mode="json")
    for d in dims(host):
        put(policy, d, sample_value(d, rng))
    return repair(policy)
