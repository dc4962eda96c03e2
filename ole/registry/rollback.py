"""Where a rollback goes: back to what was serving before the release, never to an unvetted version.

A scope's pointer moves at task boundaries (activations, `ole.registry.boundary`). Its history
is a stack: an activation caused by a release pushes the released version, one caused by a
rollback pops back to its target, a scope removal empties it. The default rollback target is the
version under the top — **what served the scope before the current champion's release** — or,
when nothing did (a scope a release created, a widening), the removal of the scope's pointer, so
its tasks fall back to the next matching champion. The lineage parent is a target only when asked
(`to_parent`): a parent may never have been gated or released (issue "Every release is watched":
`ole rollback` after releasing `coder@3` activated its unvetted parent `coder@2` although
`coder@1` served before).

**Vetted.** A rollback target must have been released (on any channel), passed a gate, or be
the first registered seed (the default champion); anything else needs `force`. A rejected
version is never a target.

Pure: the registry passes the events and the state, inside its write transaction.
"""
from __future__ import annotations

import difflib
from collections.abc import Callable, Sequence
from typing import Any

from ole.bundle import GENERAL_SCOPE, Applicability, format_ref
from ole.errors import Conflict, NotFound
from ole.registry.records import Event, Key
from ole.registry.state import State
from ole.verdicts import is_release, verdict_of


def serving_stack(activations: Sequence[Event], start: Key | None) -> list[Key]:
    """The scope's serving history as a stack (module docstring), from its activation events in order;
    `start` is what served it before any activation (the seed in `default`'s general scope)."""
    stack: list[Key] = [start] if start is not None else []
    for e in activations:
        if e.payload.get("clear"):
            stack = []
            continue
        if e.payload.get("cause") == "rollback" and e.key in stack:
            del stack[stack.index(e.key) + 1:]
        elif not stack or stack[-1] != e.key:
            stack.append(e.key)
    return stack


def previous(activations: Sequence[Event], start: Key | None, current: Key) -> Key | None:
    """What served before `current` (the default rollback target); None: nothing did."""
    stack = serving_stack(activations, start)
    while stack and stack[-1] == current:
        stack.pop()
    return stack[-1] if stack else None


def vetted(key: Key, events: Sequence[Event], state: State) -> bool:
    """Released somewhere, passed a gate, or the first registered seed (module docstring)."""
    if key == state.first:
        return True
    return any(e.key == key and (e.kind == "release" or (e.kind == "gate_decision" and is_release(
        verdict_of(e.payload)))) for e in events)


def check_target(target: Key, events: Sequence[Event], state: State, *, force: bool) -> None:
    """Refuse a rejected target always, an unvetted one unless `force`."""
    if state.status_of(*target) == "rejected":
        raise Conflict(f"{format_ref(*target)} was rejected by the gate", hint="roll back to another version")
    if not force and not vetted(target, events, state):
        raise Conflict(f"{format_ref(*target)} was never released nor passed a gate: rolling back to it would put "
                       "an unvetted version into production",
                       hint="roll back to a released version (the default: what served before), or pass --force")


def placed_scopes(events: Sequence[Event], key: Key, channel: str, default_channel: str) -> set[str]:
    """Every scope a version was released (or rolled back) into on `channel` or the default channel."""
    return {e.scope for e in events if e.key == key and e.kind in ("release", "rollback")
            and e.channel in (channel, default_channel) and not e.payload.get("clear")}


def _where(channel: str, scope: str) -> str:
    return f"channel `{channel}`" + ("" if scope == GENERAL_SCOPE else f" scope `{scope}`")


def plan(state: State, events: Sequence[Event], channel: str, scope: str, default_channel: str, *,
         explicit: Key | None, to_parent: bool, parent_of: Callable[[Key], Key],
         own_scope: Callable[[Key], Applicability], force: bool) -> dict[str, Any]:
    """The target (`target`) and payload fields of a rollback of (channel, scope): `explicit`, the
    lineage parent (`to_parent`), the cancelled release's predecessor, or what served before."""
    current = state.champion(channel, scope)
    pending = state.target_event(channel, scope) if state.is_pending(channel, scope) else None
    cancelling = pending is not None and pending.kind == "release"
    leaving = state.target(channel, scope) if cancelling else current
    if leaving is None:
        if scope == GENERAL_SCOPE:
            raise NotFound("nothing to roll back: the registry is empty", hint="register a bundle first")
        known = [s for s in state.champions(channel) if s != GENERAL_SCOPE]
        raise NotFound(f"scope `{scope}` has no champion on channel `{channel}`",
                       suggestions=difflib.get_close_matches(scope, known, n=2),
                       hint="" if known else "see `ole champion show`")
    target: Key | None
    if explicit is not None or to_parent:
        target = explicit if explicit is not None else parent_of(leaving)
        check_placed(target, scope, placed_scopes(events, target, channel, default_channel),
                     own_scope(target).scope_key)
    elif cancelling:
        target = state.pointers.get((channel, scope), current if (channel, scope) not in state.pointers else None)
    else:
        activations = [e for e in events if e.kind == "activation" and e.channel == channel and e.scope == scope]
        start = state.first if (channel, scope) == (default_channel, GENERAL_SCOPE) else (
            state.champion(default_channel, scope) if channel != default_channel else None)
        target = previous(activations, start, leaving)
    if target == leaving and not cancelling:
        raise Conflict(f"{format_ref(*leaving)} is already active in {_where(channel, scope)}",
                       hint="pass --to an earlier version")
    if target is None:
        if scope == GENERAL_SCOPE:
            raise Conflict(f"nothing served {_where(channel, scope)} before {format_ref(*leaving)}",
                           hint="pass --to NAME@VERSION (or --to-parent)")
        return {"target": leaving, "from": format_ref(*leaving), "clear": True}
    if not (cancelling and target == current):
        check_target(target, events, state, force=force)
    return {"target": target, "from": format_ref(*leaving), **({"forced": True} if force else {})}


def check_placed(target: Key, scope: str, placed: set[str], own_scope: str) -> None:
    """An explicit target must have served `scope` (or, never placed, have it as its own scope)."""
    if scope in placed or (not placed and own_scope == scope):
        return
    found = ", ".join(f"`{s}`" for s in sorted(placed)) or f"`{own_scope}` (its own)"
    raise Conflict(f"{format_ref(*target)} has scope {found}, not `{scope}`",
                   hint="roll back to a version of this scope, or omit --to to go back to what served before"
                   if scope != GENERAL_SCOPE else "roll back to a version of the general scope")
