"""Statuses and champion pointers, derived from the registry's event log (a pure view).

Status rules, applied in event order per version:

* registration -> `registered`; evaluation -> `evaluated` (unless already further on);
* gate decision -> `evaluated` when accepted, `rejected` when not;
* release -> `released`; rollback -> the version rolled back from becomes `rolled_back`
  and the target `released`;
* activation -> the previously active version of that channel becomes `retired`
  (unless it was rolled back);
* a version that is the champion of any channel reads `active`, whatever came before.

Champion of a channel: the version of its last activation event; a channel never
activated inherits the champion of `default`; `default` never activated is led by the
first registered bundle (the seed `coder`, registered first on purpose).
"""
from __future__ import annotations

from dataclasses import dataclass, field

Key = tuple[str, int]


@dataclass
class State:
    """Derived view: base statuses, active pointers and pending targets per channel."""

    default_channel: str
    base: dict[Key, str] = field(default_factory=dict)
    first: Key | None = None
    active: dict[str, Key] = field(default_factory=dict)
    targets: dict[str, object] = field(default_factory=dict)

    def champion(self, channel: str) -> Key | None:
        """Active version of `channel`, with the inheritance rules of the module docstring."""
        if channel in self.active:
            return self.active[channel]
        if channel != self.default_channel:
            return self.champion(self.default_channel)
        return self.first

    def target(self, channel: str) -> Key | None:
        """Version named by the channel's last release or rollback (pending or already active)."""
        event = self.targets.get(channel)
        return (event.name, event.version) if event is not None else None

    def target_event(self, channel: str):
        """The last release or rollback event of `channel`, or None."""
        return self.targets.get(channel)

    def channels(self) -> list[str]:
        """`default` plus every channel named by an event."""
        return sorted({self.default_channel, *self.active, *self.targets})

    def status_of(self, name: str, version: int) -> str:
        """Current status of one version."""
        key = (name, version)
        if any(self.champion(c) == key for c in self.channels()):
            return "active"
        return self.base.get(key, "registered")


def derive_state(events: list, default_channel: str) -> State:
    """Fold the event log (seq order) into a `State`."""
    state = State(default_channel=default_channel)
    for event in events:
        _apply(state, event)
    return state


def _apply(state: State, event) -> None:
    key = (event.name, event.version)
    base = state.base
    if event.kind == "registration":
        base[key] = "registered"
        state.first = state.first or key
    elif event.kind == "evaluation" and base.get(key) == "registered":
        base[key] = "evaluated"
    elif event.kind == "gate_decision":
        base[key] = "evaluated" if event.payload.get("accepted") else "rejected"
    elif event.kind == "release":
        base[key] = "released"
        state.targets[event.channel] = event
    elif event.kind == "rollback":
        source = event.payload.get("from")
        if source and "@" in source:
            name, version = source.rsplit("@", 1)
            base[(name, int(version))] = "rolled_back"
        base[key] = "released"
        state.targets[event.channel] = event
    elif event.kind == "activation":
        previous = state.champion(event.channel)
        if previous is not None and previous != key and base.get(previous) != "rolled_back":
            base[previous] = "retired"
        state.active[event.channel] = key
