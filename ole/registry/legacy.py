"""Releases recorded before releases were bounded by evidence, and the events that bound them.

Since `ole.coverage.bound_for_release`, a release serves only the scope its last gate decision's
pairs covered. A release recorded earlier may still name a wider scope's champion. When a
registry is opened writable, each such release is bounded by events (never by rewriting the
old one): a rollback of its scope to the version active before it (or the scope's removal),
then a release of the same version into the scope its decision supports (none when it
supports none). Both name the release they bound (`bounds_release`), so this happens once;
both take effect at the next task boundary, like any release. This module plans those events
from the record; the registry appends them.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ole.bundle import GENERAL_SCOPE, Applicability, format_ref, parse_ref
from ole.coverage import bound_for_release, decision_event
from ole.errors import OleError, ValidationError
from ole.registry.records import DEFAULT_CHANNEL, Event, Planned
from ole.registry.scopes import features_of
from ole.registry.state import State, derive_state


@dataclass(frozen=True)
class LegacyRelease:
    """A release that reaches further than its gate decision covered."""

    release: Event
    """The release event (still its scope's last release)."""
    scope: str
    """The scope it was released into."""
    new_scope: str | None
    """The scope its decision supports; None when it supports none."""
    evidence: dict[str, Any]
    """What bounds it (`ole.coverage.bound_for_release`), or the decision's seq when nothing does."""
    why: str
    """Why it is bounded, in words."""


def legacy_releases(events: Sequence[Event], applicability_of: Callable[[str], Applicability]) -> list[LegacyRelease]:
    """Releases in `events` that reach further than their gate decision covered, oldest first.

    A release on a person's word (no decision) has nothing to bound it from; a version whose blob
    is damaged (`applicability_of` raises) is left for `ole fsck` to report: opening must work.
    """
    state = derive_state(events, DEFAULT_CHANNEL)
    done = {e.payload.get("bounds_release") for e in events if e.kind in ("release", "rollback")}
    out = []
    for (_, scope), target in sorted(state.pending.items(), key=lambda kv: kv[1].seq):
        if target.kind != "release" or "evidence" in target.payload or target.seq in done:
            continue
        decision = decision_event(events, target.name, target.version, before=target.seq)
        if decision is None:
            continue
        try:
            own = applicability_of(target.ref)
        except OleError:
            continue
        try:
            applied, evidence = bound_for_release(own, decision, features_of)
            new_scope: str | None = applied.scope_key
            why = f"its gate decision #{decision.seq} covered only `{evidence['bound']}`"
        except ValidationError as exc:
            new_scope, evidence, why = None, {"decision_seq": decision.seq}, exc.message
        if new_scope != scope:
            out.append(LegacyRelease(release=target, scope=scope, new_scope=new_scope, evidence=evidence, why=why))
    return out


def bounding_events(item: LegacyRelease, state: State) -> tuple[list[Planned], str]:
    """The events that bound `item` (given the registry's `state`: they change no pointer, so one
    state serves every item), and the line the CLI prints about it."""
    release, scope, channel = item.release, item.scope, item.release.channel or DEFAULT_CHANNEL
    ref = release.ref
    reason = (f"bounded on open: {ref}'s release #{release.seq} (recorded before releases were "
              f"bounded by evidence) reached scope `{scope}`, but {item.why}")
    previous = release.payload.get("active")
    if not previous and scope == GENERAL_SCOPE and state.first is not None:
        previous = format_ref(*state.first)  # the general scope is never left empty
    bound = {"reason": reason, "from": ref, "scope": scope, "bounds_release": release.seq}
    if previous and previous != ref:
        name, version = parse_ref(previous)
        out = [Planned("rollback", (name, version or 0), bound)]
    else:
        out = [Planned("rollback", release.key, {**bound, "clear": True})]
    if item.new_scope is not None:
        current = state.champion(channel, item.new_scope)
        out.append(Planned("release", release.key, {
            "reason": reason, "forced": False, "scope": item.new_scope,
            "active": format_ref(*current) if current else None, "evidence": item.evidence,
            "bounds_release": release.seq}))
    return out, reason + (f"; now released for `{item.new_scope}`" if item.new_scope else "; not released anywhere")
