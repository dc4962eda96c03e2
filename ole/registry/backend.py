"""The interface every journal backend implements, and the raw copy that moves a journal between them.

Two backends store a registry's journal: SQLite files (`ole.registry.journal.Journal`, the
embedded default) and PostgreSQL (`ole.storage.pgjournal.PgJournal`). Both keep the same four
tables with the same columns (events, event_keys, bundles, leases) plus content-addressed
blobs, enforce append-only in the database, and give every event a dense `seq` (a writer
holds the one write lock from its first read to its commit). `Registry` and `ole fsck` speak
only this protocol; `ole storage migrate` copies a `JournalDump` from one to the other.
"""
from __future__ import annotations

import hashlib
import json
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

from ole.registry.records import Event, IndexRow, Key

EventRow = tuple[int, str, str, str, int, str | None, str]
"""One stored event as its columns: seq, ts (ISO text), kind, name, version, channel, payload (JSON text)."""


@dataclass(frozen=True)
class JournalDump:
    """Every row of a journal, byte for byte (payloads as stored text, blobs as stored bytes)."""

    events: list[EventRow]
    """Events in seq order."""
    keys: list[tuple[str, int]]
    """Idempotency keys and the seq each names, by key."""
    bundles: list[IndexRow]
    """The bundle index in registration order."""
    blobs: dict[str, bytes] = field(default_factory=dict)
    """Blob hash -> bytes, for every blob the index names."""

    def digest(self) -> str:
        """sha256 over every event (seq and columns), key, index row and blob hash: equal digests
        and blobs that hash to their names mean an identical journal."""
        h = hashlib.sha256()
        for part in (self.events, self.keys, [tuple(r) for r in self.bundles], sorted(self.blobs)):
            h.update(json.dumps(part, separators=(",", ":")).encode() + b"\n")
        return h.hexdigest()

    def problems(self) -> list[str]:
        """Why this dump is not a sound journal: a seq that is not dense from 1, a blob that does not
        hash to its name, an indexed blob that is absent (empty when sound)."""
        out = [f"event at position {i} has seq {row[0]}" for i, row in enumerate(self.events, 1) if row[0] != i][:3]
        out += [f"blob {h[:12]}… fails its hash check" for h, data in self.blobs.items()
                if hashlib.sha256(data).hexdigest() != h]
        out += [f"blob {r.blob_hash[:12]}… of {r.name}@{r.version} is absent" for r in self.bundles
                if r.blob_hash not in self.blobs]
        return out


class JournalBackend(Protocol):
    """What `Registry`, `ole fsck` and `ole storage migrate` use of a journal."""

    home: Path
    """The registry's folder under the root (SQLite keeps its files there; PostgreSQL only names it)."""
    blobs: Path
    """The SQLite backend's blob folder (PostgreSQL keeps blobs as rows and only names it)."""
    read_only: bool
    """True when writes are refused (a read-only SQLite file system)."""

    @property
    def where(self) -> str:
        """Where the journal lives, for messages (a folder, or a URL without its password)."""
        ...

    @property
    def connection(self) -> Any:
        """The open database connection, for inspection only."""
        ...

    def close(self) -> None: ...

    def write(self, op: str) -> AbstractContextManager[None]:
        """One write transaction under the journal's write lock: everything in it commits, or nothing."""
        ...

    def append(self, kind: str, name: str, version: int, payload: dict[str, Any], channel: str | None = None,
               key: str | None = None) -> int: ...

    def replayed(self, key: str | None) -> Event | None: ...

    def index(self, name: str, version: int, content_hash: str, blob_hash: str, seq: int) -> None: ...

    def write_blob(self, data: bytes, blob_hash: str) -> None: ...

    def read_blob(self, row: IndexRow) -> bytes: ...

    def blob_bytes(self, blob_hash: str) -> bytes | None:
        """The stored bytes named `blob_hash` unchecked, or None when there is no such blob."""
        ...

    def blob_damage(self, blob_hash: str) -> str | None: ...

    def quarantine_blob(self, blob_hash: str) -> str:
        """Move the blob out of service, kept for inspection; returns where it went."""
        ...

    def sweep(self, referenced: set[str], repair: bool) -> list[str]:
        """Blobs and temp files no index row names (removed on `repair`); returns their names."""
        ...

    def events(self, *, name: str | None = None, version: int | None = None, channel: str | None = None,
               kind: str | None = None, since: int = 0) -> list[Event]: ...

    def event(self, seq: int) -> Event: ...

    def committed_at(self, seq: int) -> datetime: ...

    def pointer_events(self) -> list[Event]: ...

    def names(self) -> list[str]: ...

    def rows(self, name: str | None = None) -> list[IndexRow]: ...

    def row(self, key: Key) -> IndexRow | None: ...

    def latest(self, name: str) -> int: ...

    def find_content(self, name: str, content_hash: str) -> int | None: ...

    def find_blob(self, blob_hash: str) -> Key | None: ...

    def integrity_check(self) -> str: ...

    def dump(self) -> JournalDump:
        """Every row and blob as stored."""
        ...

    def load(self, dump: JournalDump) -> None:
        """Write `dump` into this journal, which must hold no event (one transaction)."""
        ...

