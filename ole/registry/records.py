"""The registry's records: what it stores and what it answers, apart from the store itself.

Everything here is a frozen value (pydantic records with `extra="forbid"`, frozen dataclasses,
`Literal` vocabularies). This module sits below every other module of `ole.registry`: the
journal, the state view, scopes, fsck and lineage import their records from here, never from
each other or from the `Registry` handle (Optuna keeps `FrozenTrial` apart from `Study` the
same way), so no import circle can form through a type.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, NamedTuple, get_args

from pydantic import BaseModel, ConfigDict

from ole.bundle import GENERAL_SCOPE, Bundle, format_ref
from ole.trace import SelectionRecord

DEFAULT_CHANNEL = "default"
"""The channel every other channel inherits its pointers from."""
Key = tuple[str, int]
"""(bundle name, version): a registered version inside the registry."""
Slot = tuple[str, str]
"""(channel, scope key): where a champion pointer lives."""
Status = Literal["registered", "evaluated", "gated", "released", "canary", "active", "rejected", "rolled_back", "retired"]
EventKind = Literal["registration", "evaluation", "gate_decision", "release", "activation", "rollback", "stage"]
EVENT_KINDS: tuple[str, ...] = get_args(EventKind)
"""Every event kind, in the order the CLI lists them."""
POINTER_KINDS = ("release", "rollback", "activation", "stage")
"""Event kinds that act on a (channel, scope) and therefore carry a channel."""
Cause = Literal["default", "inherited", "release", "rollback"]


class Event(BaseModel):
    """One recorded registry event; the registry's only source of truth."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    seq: int
    """Strictly increasing sequence number (SQLite AUTOINCREMENT)."""
    ts: datetime
    """UTC time the event was committed."""
    kind: EventKind
    """registration, evaluation, gate_decision, release, activation, rollback or stage."""
    name: str
    """Bundle name the event is about."""
    version: int
    """Bundle version the event is about (for a rollback: the version rolled back to)."""
    channel: str | None
    """Release channel (release, activation, rollback, stage); null for the others."""
    payload: dict[str, Any]
    """Kind-specific JSON: parents/edge, evaluation results, gate decision, reason, ..."""

    @property
    def ref(self) -> str:
        """`NAME@VERSION` of the bundle this event is about."""
        return format_ref(self.name, self.version)

    @property
    def key(self) -> Key:
        """(name, version) of the bundle this event is about."""
        return self.name, self.version

    @property
    def scope(self) -> str:
        """Scope key of a release, rollback, activation or stage (`general` for events written
        before scopes existed, which carry none)."""
        return self.payload.get("scope") or GENERAL_SCOPE


class IndexRow(NamedTuple):
    """One row of the `bundles` index: where a registered version's bytes are."""

    name: str
    """Bundle name."""
    version: int
    """Version index assigned at registration."""
    content_hash: str
    """sha256 of loop policy + applicability (`Bundle.content_hash`)."""
    blob_hash: str
    """sha256 of the stored YAML bytes (the blob's file name)."""
    registered_seq: int
    """Seq of the version's registration event."""


@dataclass(frozen=True)
class Planned:
    """An event planned from the record (by a task boundary, or by bounding a legacy release), not
    yet appended; the registry appends it on the channel it acts on."""

    kind: EventKind
    """Kind of the event."""
    key: Key
    """The version it names."""
    payload: dict[str, Any]
    """Its payload."""


class RegisteredBundle(BaseModel):
    """A registered bundle version with its current (derived) status."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    name: str
    """Bundle name."""
    version: int
    """Stable version index assigned at registration."""
    content_hash: str
    """sha256 of loop policy + applicability (`Bundle.content_hash`)."""
    blob_hash: str
    """sha256 of the stored YAML bytes (the blob's file name)."""
    status: Status
    """Derived from events: registered ... active, rejected, rolled_back, retired."""
    registered_at: datetime
    """UTC time of registration."""
    bundle: Bundle
    """The bundle as stored (provenance stamped at registration)."""

    @property
    def ref(self) -> str:
        """`NAME@VERSION`."""
        return format_ref(self.name, self.version)


@dataclass(frozen=True)
class Selection:
    """The bundle a task gets and why (what `Registry.select` returns)."""

    channel: str
    """Channel the choice was made on."""
    ref: str
    """`NAME@VERSION` of the chosen bundle."""
    scope: str
    """Scope key it was chosen for (`general` for the channel's general champion)."""
    reason: str
    """One sentence: why this bundle, which other champions matched, which did not."""
    bundle: RegisteredBundle
    """The chosen registered bundle (hash-checked)."""
    matched: tuple[str, ...] = ()
    """Scope keys whose champion matched the task, most specific first (`general` last)."""
    in_scope: bool = True
    """False only when the bundle's own applicability does not admit the task (a forced explicit
    bundle, or a general champion released before scopes existed with a narrow applicability)."""
    forced: bool = False
    """True when an explicit out-of-scope bundle was run anyway (`--force`)."""
    explicit: bool = False
    """True when the caller named the bundle instead of asking the registry."""

    def record(self) -> SelectionRecord:
        """The small frozen record kept with the trace."""
        return SelectionRecord(ref=self.ref, scope=self.scope, reason=self.reason, forced=self.forced,
                               channel=None if self.explicit else self.channel)


class ScopeChampion(BaseModel):
    """One scope of a channel: its active champion and any change waiting for the next task boundary."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    channel: str
    """Channel asked about."""
    scope: str
    """Scope key (`general` included)."""
    active: str | None
    """`NAME@VERSION` active in this scope now; null when the scope is empty (e.g. after a removal)."""
    inherited: bool
    """True when the channel has no pointer of its own in this scope and follows `default`'s."""
    pending: str | None
    """Version a recorded release/rollback makes active at the next task boundary; null if none."""
    pending_removal: bool
    """True when the next task boundary removes this scope's pointer (a rollback out of the scope)."""
    evidence: str | None = None
    """What bounds the scope's current release: the gate decision and what its pairs covered, or
    that it was released without gate evidence; null when nothing was released there (the seed)."""
    canary: str | None = None
    """`NAME@VERSION` of a staged release running as this scope's canary (null: none)."""
    stage: str | None = None
    """The canary's stage in words: its share of the scope's task boundaries, its control and the
    monitor's last look; or how the scope's last stage ended (promoted, rolled back)."""


class Tenure(BaseModel):
    """One period during which a version was the active champion of a channel's scope."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    channel: str
    """Channel the champion served."""
    scope: str = GENERAL_SCOPE
    """Scope key it was champion of (`general`: the channel's fallback for every task)."""
    ref: str
    """`NAME@VERSION` of the champion."""
    since: datetime
    """Start (UTC): the activation, or the seed's registration for the default champion."""
    until: datetime | None
    """End (UTC); null while still active."""
    cause: Cause
    """Why it became active: default (first seed), inherited (from `default`), release, rollback."""
    reason: str
    """The reason recorded with the release or rollback (empty for default/inherited)."""
    cause_seq: int | None
    """Seq of the release/rollback event that caused it."""


class FsckReport(BaseModel):
    """Outcome of one registry check."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    ok: bool
    """True when no problem was found (swept orphans are repairs, not problems)."""
    problems: tuple[str, ...]
    """One line per inconsistency that needs attention."""
    swept: tuple[str, ...]
    """Orphan temp files and unreferenced blobs removed (relative paths)."""
    quarantined: tuple[str, ...]
    """Corrupt blobs moved to quarantine (relative paths)."""
    bundles: int
    """Registered versions checked."""
    events: int
    """Events checked."""
    channels: dict[str, str]
    """Champion `NAME@VERSION` per channel after the check."""
    scopes: dict[str, dict[str, str]] = {}
    """Scope champions (scope key -> `NAME@VERSION`) per channel that has any, `general` left out."""
    traces: int = 0
    """Trace files checked in the trace archive (0 when no archive was checked)."""
