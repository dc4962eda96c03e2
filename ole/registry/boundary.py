"""What a task boundary records: the events that take up a channel's pending releases and rollbacks.

Releases and rollbacks are recorded at once but take effect only at a task boundary (a runner's
`Registry.select`, `activate_pending`), so a task never sees its champion change under it. At a
boundary each scope of the channel with a pending change gets one event: an `activation` (the
pointer moves to the target, or goes when a scope rollback removed it) or, for a staged release,
a `stage` event that starts its canary while the pointer stays with the control. Planned from
the state alone; the registry appends them in one transaction.
"""
from __future__ import annotations

from typing import Any

from ole.bundle import format_ref
from ole.registry.records import Event, Planned
from ole.registry.state import State, is_staged


def boundary_events(state: State, channel: str) -> list[Planned]:
    """The events of `channel`'s next task boundary given `state`, general scope first. A scope
    counts when the channel's own pointer differs from its target, even where the champion it
    inherits from `default` is that target (the release pins it on this channel)."""
    out = []
    for scope in state.scopes(channel):
        if not state.is_pending(channel, scope):
            continue
        cause = state.target_event(channel, scope)
        assert cause is not None, "a pending scope has a release or rollback"
        out.append(_canary(state, cause, channel, scope) if is_staged(cause)
                   else _activation(state, cause, channel, scope))
    return out


def _canary(state: State, cause: Event, channel: str, scope: str) -> Planned:
    control = state.champion(channel, scope)
    return Planned("stage", cause.key, {
        "stage": "canary", "scope": scope, "release_seq": cause.seq, "exposure": cause.payload["exposure"],
        "analysis": cause.payload.get("analysis"), "control": format_ref(*control) if control else None,
        "reason": cause.payload.get("reason", "")})


def _activation(state: State, cause: Event, channel: str, scope: str) -> Planned:
    current = state.champion(channel, scope)
    payload: dict[str, Any] = {"from": format_ref(*current) if current else None, "cause_seq": cause.seq,
                               "cause": cause.kind, "reason": cause.payload.get("reason", ""), "scope": scope}
    if cause.payload.get("clear"):
        payload["clear"] = True  # the scope's pointer goes; the event names the removed champion
    return Planned("activation", cause.key, payload)
