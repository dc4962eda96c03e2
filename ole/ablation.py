"""Ablation: which of a candidate's field changes carry its measured gain.

A candidate usually moves several loop-policy fields at once (a proposal acts on one to three
evidence items, plus exploration). The gain it shows on the search instances is often carried
by one of them; the others are side effects that nobody showed to help, waiting for a
condition the sample did not cover (the budget-32 champion of issue "Releases that hold where
they land" carried +60 % from one-episode submits and lost it at 128 to `finish_early` and
patience 5 released with it). Before a candidate meets the gate, the driver removes changes one
unit at a time (backward elimination, `ole.evolve.ablate`) and gates what is left.

This module holds the pure parts: the records kept in the gate decision, the units a diff is
cut into, and the rule that decides whether a unit carries the gain.
"""
from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

from ole.loop_policy import COMPONENTS, RUN_LENGTH_FIELDS

REFERENCE_FIELD = "budget.reference_episodes"
"""The unit of the run-length counts: removed only together with them (`units`)."""

MIN_TOLERANCE = 0.01
"""A unit whose removal costs less than this much mean r (or `SHARE` of the gain, if larger) is
a side effect and is dropped: runs are deterministic for a fixed agent seed, so a difference
this small is a different trajectory through the same optimum, not a carried gain."""
SHARE = 0.1
"""...or less than this share of the gain measured with it."""


class _Record(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class AblationStep(_Record):
    """One unit tried: the candidate so far without it, on the ablation instances."""

    fields: tuple[str, ...]
    """The loop-policy fields removed together (reverted to the champion's values)."""
    values: dict[str, Any]
    """Their values in the candidate."""
    parent_values: dict[str, Any]
    """Their values in the champion."""
    variant: str | None
    """Ref of the variant without them that was evaluated (None: no valid policy without them)."""
    mean_r_with: float
    """Mean r of the candidate so far (with the unit)."""
    mean_r_without: float | None
    """Mean r of the variant (None when it could not be formed)."""
    kept: bool
    """True when the unit carries the gain (removing it costs more than the tolerance)."""
    reason: str
    """Why, as `measured vs required`."""


class Ablation(_Record):
    """What the driver removed from a candidate before gating it, and why."""

    source: str
    """The candidate as proposed."""
    instances: tuple[str, ...]
    """Instance keys the units were judged on (in-scope search instances)."""
    steps: tuple[AblationStep, ...]
    """Every unit tried, in order."""
    kept: tuple[str, ...]
    """Fields of the gated change (they carry the gain)."""
    dropped: tuple[str, ...]
    """Fields removed (side effects)."""
    mean_r_source: float
    """Mean r of the candidate as proposed on the instances."""
    mean_r_result: float
    """Mean r of what is gated, on the same instances."""

    def describe(self) -> str:
        """One line for reports and CLI output."""
        kept = ", ".join(self.kept) or "nothing"
        dropped = ", ".join(self.dropped) or "nothing"
        return (f"ablation of {self.source} on {len(self.instances)} search instances: kept {kept}; "
                f"dropped {dropped} (mean r {self.mean_r_source:+.3f} -> {self.mean_r_result:+.3f})")


def flat(policy: dict) -> dict[str, Any]:
    """`component.field -> value` of a loop policy's JSON (lists kept whole)."""
    return {f"{c}.{k}": v for c in COMPONENTS for k, v in policy.get(c, {}).items()}


def changed_fields(parent: dict, child: dict) -> list[str]:
    """Dotted fields whose values differ between two loop policies' JSON, in schema order."""
    a, b = flat(parent), flat(child)
    return [k for k in b if a.get(k) != b[k]]


def units(changed: list[str]) -> list[tuple[str, ...]]:
    """The changes cut into removable units, in schema order.

    Each field is its own unit, except that `budget.reference_episodes` (the budget the
    run-length counts are stated for) goes with the run-length fields that changed: removing the
    reference alone would silently rescale them at other budgets, which a sample at one budget
    cannot see.
    """
    runs = [f for f in changed if f in RUN_LENGTH_FIELDS]
    out: list[tuple[str, ...]] = []
    for f in changed:
        if f == REFERENCE_FIELD and runs:
            continue
        if f in RUN_LENGTH_FIELDS and REFERENCE_FIELD in changed:
            if f == runs[0]:
                out.append((*runs, REFERENCE_FIELD))
            continue
        out.append((f,))
    return out


def revert(child: dict, parent: dict, fields: tuple[str, ...]) -> dict:
    """The child's loop-policy JSON with `fields` set back to the parent's values."""
    out = {c: dict(v) if isinstance(v, dict) else v for c, v in child.items()}
    for path in fields:
        comp, name = path.split(".")
        out[comp][name] = parent[comp][name]
    return out


def tolerance(mean_r_with: float) -> float:
    """How much mean r a unit's removal may cost and still be a side effect."""
    return max(MIN_TOLERANCE, SHARE * abs(mean_r_with))


def carries(mean_r_with: float, mean_r_without: float) -> tuple[bool, str]:
    """Whether a unit carries the gain: removing it costs more than `tolerance`."""
    tol = tolerance(mean_r_with)
    loss = mean_r_with - mean_r_without
    if loss > tol:
        return True, f"without it mean r {mean_r_without:+.4f} (loss {loss:.4f} > tolerance {tol:.4f})"
    return False, f"without it mean r {mean_r_without:+.4f} (loss {loss:+.4f} <= tolerance {tol:.4f})"
