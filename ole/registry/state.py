"""Statuses and champion pointers, derived from the registry's event log (a pure view).

Status rules, applied in event order per version:

* registration -> `registered`; evaluation -> `evaluated` (unless already further on);
* gate decision -> `evaluated` when its verdict is `release`, `rejected` when not;
* release -> `released`; rollback -> the version rolled back from becomes `rolled_back`
  and the target `released`;
* activation -> the previously active version of that channel and scope becomes
  `retired` (unless it was rolled back);
* a version that is the champion of any channel and scope reads `active`, whatever came before.

Pointers are kept per (channel, scope). A scope is a bundle's applicability, named by its
scope key (`Applicability.scope_key`); `general` is the scope that admits every task. The
scope of a release, rollback or activation is its payload's `scope`, absent in events
written before scopes existed, which therefore all read as `general` (no migration).

Champion of (channel, scope): the version of its last activation there (a scope rollback
to a version outside the scope *removes* the pointer: the scope is then owned but empty);
a channel never activated in that scope inherits `default`'s pointer of the same scope;
`default`'s general scope never activated is led by the first registered bundle (the seed
`coder`, registered first on purpose); other scopes of `default` start empty.
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from ole.bundle import GENERAL_SCOPE, parse_ref
from ole.registry.records import Event, Key, Slot, Status
from ole.verdicts import is_release, verdict_of

_ABSENT = object()


def is_staged(event: Event) -> bool:
    """True for a release that starts as a canary (`exposure` set), not on every task at once."""
    return event.kind == "release" and event.payload.get("exposure") is not None


def event_outcome(event: Event) -> Key | None:
    """The pointer a release or rollback asks for: its version, or None for a scope removal."""
    return None if event.payload.get("clear") else event.key


@dataclass
class State:
    """Derived view: base statuses, active pointers and pending targets per (channel, scope)."""

    default_channel: str
    """The channel others inherit pointers from (`default`)."""
    base: dict[Key, Status] = field(default_factory=dict)
    """Status of each version from its own events, before `active` and `canary` (`status_of`)."""
    first: Key | None = None
    """The first registered version: the general champion of `default` until an activation."""
    pointers: dict[Slot, Key | None] = field(default_factory=dict)
    """Own pointer of a (channel, scope) after its last activation; None = removed."""
    pending: dict[Slot, Event] = field(default_factory=dict)
    """Last release or rollback event of a (channel, scope), whether activated yet or not."""
    canaries: dict[Slot, Event] = field(default_factory=dict)
    """The `stage` event that started a staged release's canary in (channel, scope), while it runs."""
    staged: set[int] = field(default_factory=set)
    """Seqs of staged releases taken up at a task boundary (a canary started, or ended, for them)."""

    # ----- general scope (the pre-scope API, unchanged for its callers) --------------------

    @property
    def active(self) -> dict[str, Key]:
        """Own general-scope pointer per channel (channels that activated something general)."""
        return {c: k for (c, s), k in self.pointers.items() if s == GENERAL_SCOPE and k is not None}

    @property
    def targets(self) -> dict[str, Event]:
        """Last general-scope release or rollback event per channel."""
        return {c: e for (c, s), e in self.pending.items() if s == GENERAL_SCOPE}

    def champion(self, channel: str, scope: str = GENERAL_SCOPE) -> Key | None:
        """Active version of (`channel`, `scope`), with the inheritance rules of the module docstring."""
        if (channel, scope) in self.pointers:
            return self.pointers[(channel, scope)]
        if channel != self.default_channel:
            return self.champion(self.default_channel, scope)
        return self.first if scope == GENERAL_SCOPE else None

    def target(self, channel: str, scope: str = GENERAL_SCOPE) -> Key | None:
        """Version named by the last release or rollback of (channel, scope) (pending or already
        active); None when there is none or it removed the scope."""
        event = self.pending.get((channel, scope))
        return event_outcome(event) if event is not None else None

    def target_event(self, channel: str, scope: str = GENERAL_SCOPE) -> Event | None:
        """The last release or rollback event of (channel, scope), or None."""
        return self.pending.get((channel, scope))

    def pinned(self, channel: str, scope: str = GENERAL_SCOPE) -> Key | None:
        """What the channel itself asks for in `scope`: its last release/rollback, else its own pointer."""
        event = self.pending.get((channel, scope))
        if event is not None:
            return event_outcome(event)
        own = self.pointers.get((channel, scope))
        return own

    def is_pending(self, channel: str, scope: str = GENERAL_SCOPE) -> bool:
        """True when the next task boundary of `channel` would change the pointer of `scope`, or start
        the canary of a staged release."""
        event = self.pending.get((channel, scope))
        if event is None or event.seq in self.staged:
            return False
        if is_staged(event):
            return True
        return self.pointers.get((channel, scope), _ABSENT) != event_outcome(event)

    def canary(self, channel: str, scope: str = GENERAL_SCOPE) -> Event | None:
        """The `stage` event of the canary running in (channel, scope), or None (own or `default`'s)."""
        own = self.canaries.get((channel, scope))
        if own is not None or channel == self.default_channel or (channel, scope) in self.pointers:
            return own
        return self.canaries.get((self.default_channel, scope))

    # ----- scopes ------------------------------------------------------------------------

    def scopes(self, channel: str) -> list[str]:
        """Scope keys with an own or inherited pointer or a pending change on `channel`, general first."""
        owners = {channel, self.default_channel}
        found = {s for (c, s) in (*self.pointers, *self.pending) if c in owners}
        return [GENERAL_SCOPE] + sorted(found - {GENERAL_SCOPE})

    def champions(self, channel: str, *, pending: bool = False) -> dict[str, Key]:
        """Active version per scope of `channel` (scopes without a champion left out).

        With `pending`, as they would be right after this channel's next task boundary
        (its own pending releases and rollbacks applied; `default`'s stay `default`'s).
        """
        out: dict[str, Key] = {}
        for scope in self.scopes(channel):
            key = self.champion(channel, scope)
            if pending and self.is_pending(channel, scope):
                key = self.target(channel, scope)
            if key is not None:
                out[scope] = key
        return out

    def channels(self) -> list[str]:
        """`default` plus every channel named by an event."""
        return sorted({self.default_channel, *(c for c, _ in self.pointers), *(c for c, _ in self.pending)})

    def status_of(self, name: str, version: int) -> Status:
        """Current status of one version."""
        key = (name, version)
        if any(key in self.champions(c).values() for c in self.channels()):
            return "active"
        if any((e.name, e.version) == key for e in self.canaries.values()):
            return "canary"
        return self.base.get(key, "registered")


def derive_state(events: Iterable[Event], default_channel: str) -> State:
    """Fold the event log (seq order) into a `State`."""
    state = State(default_channel=default_channel)
    for event in events:
        _apply(state, event)
    return state


def _apply(state: State, event: Event) -> None:
    key = event.key
    base = state.base
    if event.kind == "registration":
        base[key] = "registered"
        state.first = state.first or key
    elif event.kind == "evaluation" and base.get(key) == "registered":
        base[key] = "evaluated"
    elif event.kind == "gate_decision":
        base[key] = "gated" if is_release(verdict_of(event.payload)) else "rejected"
    elif event.kind == "release":
        base[key] = "released"
        state.pending[_slot(event)] = event
    elif event.kind == "rollback":
        source = event.payload.get("from")
        if source and "@" in source:
            name, version = parse_ref(source)
            base[(name, version or 0)] = "rolled_back"
        if not event.payload.get("clear"):
            base[key] = "released"
        state.pending[_slot(event)] = event
    elif event.kind == "activation":
        _point(state, _slot(event), None if event.payload.get("clear") else key)
    elif event.kind == "stage":
        _stage(state, event, key)


def _slot(event: Event) -> Slot:
    """(channel, scope) a release, rollback, activation or stage acts on."""
    return event.channel or "", event.scope


def _point(state: State, slot: Slot, new: Key | None) -> None:
    """Move a (channel, scope) pointer; the version it leaves is retired (unless rolled back)."""
    previous = state.champion(*slot)
    if previous is not None and previous != new and state.base.get(previous) != "rolled_back":
        state.base[previous] = "retired"
    state.pointers[slot] = new


def _stage(state: State, event: Event, key: Key) -> None:
    """A staged release's steps: `canary` (taken up at a boundary; the pointer stays with the
    control), `promoted` (the pointer moves to it) or `rolled_back` (the canary ends, the pointer
    never moved). A `look` changes nothing (it records a monitor decision to hold)."""
    slot = _slot(event)
    what = event.payload.get("stage")
    if what == "canary":
        state.canaries[slot] = event
        state.staged.add(int(event.payload.get("release_seq", -1)))
    elif what in ("promoted", "rolled_back"):
        state.canaries.pop(slot, None)
        state.staged.add(int(event.payload.get("release_seq", -1)))
        if what == "promoted":
            _point(state, slot, key)
        else:
            state.base[key] = "rolled_back"
