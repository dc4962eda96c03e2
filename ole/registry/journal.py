"""The registry's journal: one SQLite (WAL) file of append-only events beside immutable blobs.

Layout under the registry's home (`<root>/.registry`):

    registry.sqlite3        tables `events` (append-only), `event_keys` (idempotency keys),
                            `bundles` (index of registered versions) and `leases` (the one
                            mutable table: `ole.registry.lease`)
    blobs/ab/<sha256>.yaml  the registered YAML, content-addressed, read-only
    quarantine/             blobs that failed their hash check (moved by fsck)

No event or index row is ever updated or deleted (SQLite triggers enforce it). Every write is
one `BEGIN IMMEDIATE` transaction with `synchronous=FULL`, so a commit that returned survives
power loss, and a writer that dies leaves nothing half-recorded. A blob is written temp +
fsync + rename + directory fsync *inside* that transaction, so an unreferenced blob or temp
file seen under the same lock is always the residue of a dead writer and may be swept.
Concurrent writers serialize on the lock. Named crash points (`OLE_CRASH_AT=<step>` with
`OLE_TEST_MODE=1`) let tests kill a writer at each step.

This module knows rows, bytes and events; what they mean (statuses, champions, scopes) is
derived above it (`ole.registry.state`, `ole.registry.api`).
"""
from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from evogym.durable import fsync_dir
from ole import sqlite_open
from ole.bundle import format_ref
from ole.errors import IntegrityError, StorageError, ValidationError
from ole.registry.backend import JournalDump
from ole.registry.records import Event, IndexRow, Key

DB_FILE = "registry.sqlite3"
DB_SCHEMA_VERSION = 1
"""SQLite `user_version` of the table layout below; another value is refused, never migrated silently."""
BLOB_DIR = "blobs"
QUARANTINE_DIR = "quarantine"
MAX_PAYLOAD_BYTES = 1 << 20
"""Largest JSON payload of one event (evaluations carry per-pair values)."""
CRASH_ENV = "OLE_CRASH_AT"
TEST_MODE_ENV = "OLE_TEST_MODE"
CRASH_EXIT = 137
CRASH_POINTS = ("blob_temp_written", "blob_fsynced", "blob_renamed", "register_before_commit",
                "register_after_commit", "evaluation_before_commit", "gate_decision_before_commit",
                "release_before_commit", "rollback_before_commit", "activation_before_commit")
"""Named steps of the write paths where a test may kill the writer."""

LEASES_SCHEMA = ("CREATE TABLE IF NOT EXISTS leases (name TEXT PRIMARY KEY, holder TEXT NOT NULL, "
                 "expires_at REAL NOT NULL)")
"""The one mutable table: who holds which lease until when (`ole.registry.lease`)."""
_APPEND_ONLY = {"event_keys": "event keys are append-only", "events": "events are append-only",
                "bundles": "bundle versions are immutable"}
"""Tables whose rows are never updated or deleted, and the error SQLite raises on an attempt."""
_SCHEMA = """
CREATE TABLE IF NOT EXISTS events (
  seq INTEGER PRIMARY KEY AUTOINCREMENT, ts TEXT NOT NULL, kind TEXT NOT NULL,
  name TEXT NOT NULL, version INTEGER NOT NULL, channel TEXT, payload TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS bundles (
  name TEXT NOT NULL, version INTEGER NOT NULL, content_hash TEXT NOT NULL, blob_hash TEXT NOT NULL,
  registered_seq INTEGER NOT NULL, PRIMARY KEY (name, version), UNIQUE (name, content_hash));
CREATE TABLE IF NOT EXISTS event_keys (
  key TEXT PRIMARY KEY, seq INTEGER NOT NULL);
""" + "".join(f"CREATE TRIGGER IF NOT EXISTS {table}_no_{op.lower()} BEFORE {op} ON {table}\n"
              f"  BEGIN SELECT RAISE(ABORT, '{why}'); END;\n"
              for table, why in _APPEND_ONLY.items() for op in ("UPDATE", "DELETE")) + f"{LEASES_SCHEMA};\n"
_EVENT_COLUMNS = "seq, ts, kind, name, version, channel"


def crash_point(step: str) -> None:
    """Die like `kill -9` at `step` when a test asked for it (never outside test mode)."""
    if os.environ.get(TEST_MODE_ENV) == "1" and os.environ.get(CRASH_ENV) == step:
        os._exit(CRASH_EXIT)


def now() -> datetime:
    """The current UTC time (the timestamp of an event written now)."""
    return datetime.now(timezone.utc)


def sha256(data: bytes) -> str:
    """Hex sha256 of `data` (a blob's name)."""
    return hashlib.sha256(data).hexdigest()


def connect_leases(path: Path | str) -> sqlite3.Connection:
    """A new connection to the registry database at `path` with the lease table present.

    Leases need connections of their own (a heartbeat thread renews them), opened the way every
    shared SQLite file is opened (`ole.sqlite_open.connect`), on a registry not opened yet too.
    """
    try:
        return sqlite_open.connect(path, LEASES_SCHEMA)
    except sqlite3.Error as exc:
        raise StorageError(f"cannot open the lease table in {path}: {exc}",
                           hint="check the registry's permissions and free space") from None


def _event(row: tuple[Any, ...], payload: dict[str, Any], *, checked: bool = True) -> Event:
    fields = dict(seq=row[0], ts=datetime.fromisoformat(row[1]), kind=row[2], name=row[3], version=row[4],
                  channel=row[5], payload=payload)
    return Event(**fields) if checked else Event.model_construct(**fields)


class RegistryBusy(StorageError):
    """Another process held the registry's write lock for the whole busy timeout."""


class Journal:
    """The SQLite file and blob folder of one registry home; one connection per instance.

    Opened for writing when the file system allows it, else for reading only (`read_only`):
    a read-only mount or another user's files still answer every read.
    """

    def __init__(self, home: Path) -> None:
        self.home = home
        self.blobs = home / BLOB_DIR
        self.quarantine_dir = home / QUARANTINE_DIR
        self.read_only = False
        """True when the file system refused writes and the journal was opened for reading only."""
        self._refuse_a_lost_index()
        try:
            self._db = self._open_read_write()
        except RegistryBusy:
            raise  # locked by another writer: not a read-only registry
        except StorageError:
            db = self._open_read_only()
            if db is None:
                raise
            self._db, self.read_only = db, True

    def _refuse_a_lost_index(self) -> None:
        """A missing or empty journal beside stored blobs is a lost index, not a new registry:
        opening it would start a fresh history over the old one (seeds registered again) and
        `fsck` would then sweep every blob as unreferenced. A new registry writes its journal
        before its first blob, so blobs without a journal only remain when the journal is gone."""
        path = self.home / DB_FILE
        try:
            empty = not path.exists() or path.stat().st_size == 0
            blobs = empty and self.blobs.is_dir() and next(self.blobs.iterdir(), None) is not None
        except OSError:
            return  # unreadable: the open below reports it
        if blobs:
            raise IntegrityError(
                f"the registry index {path} is {'empty' if path.exists() else 'missing'}, but {self.blobs} holds "
                "stored bundles: the index was lost; nothing was changed",
                hint=f"restore {DB_FILE} from a backup, or move {self.home} away to start a new registry")

    def _open_read_write(self) -> sqlite3.Connection:
        try:
            self.blobs.mkdir(parents=True, exist_ok=True)
            self._db = sqlite_open.connect(self.home / DB_FILE)
            with self.write("schema"):
                for statement in _SCHEMA.split(";\n"):
                    if statement.strip():
                        self._db.execute(statement)
                found = self._db.execute("PRAGMA user_version").fetchone()[0]
                if found == 0:
                    self._db.execute(f"PRAGMA user_version = {DB_SCHEMA_VERSION}")
                elif found != DB_SCHEMA_VERSION:
                    raise StorageError(f"registry schema version {found} at {self.home}, expected "
                                       f"{DB_SCHEMA_VERSION}", hint="use the OLE version that wrote it")
        except (OSError, sqlite3.Error) as exc:
            raise StorageError(f"cannot open registry at {self.home}: {exc}",
                               hint="check permissions and free space") from None
        return self._db

    def _open_read_only(self) -> sqlite3.Connection | None:
        """A reading connection to an existing journal that cannot be written, or None. `mode=ro`
        needs the WAL index to be writable or present; a journal whose last writer closed cleanly
        has neither, and is opened `immutable` (nothing can change it here)."""
        path = self.home / DB_FILE
        if not path.is_file():
            return None
        for flags in ("mode=ro", "mode=ro&immutable=1"):
            try:
                db = sqlite3.connect(f"{path.resolve().as_uri()}?{flags}", uri=True, isolation_level=None)
                found = db.execute("PRAGMA user_version").fetchone()[0]
                db.execute("SELECT COUNT(*) FROM events").fetchone()
            except sqlite3.Error:
                continue
            if found != DB_SCHEMA_VERSION:
                db.close()
                return None
            return db
        return None

    @property
    def where(self) -> str:
        """The registry's folder, for messages."""
        return str(self.home)

    @property
    def connection(self) -> sqlite3.Connection:
        """The open connection, for inspection only (e.g. `PRAGMA integrity_check`); writes go
        through `write` and the append/index methods."""
        return self._db

    def close(self) -> None:
        """Close the database connection."""
        self._db.close()

    # ----- write transactions -----------------------------------------------------------

    @contextmanager
    def write(self, op: str) -> Iterator[None]:
        """One write transaction named `op` (the name of its crash points and its errors): either
        everything written inside commits, or nothing does."""
        if self.read_only:
            raise StorageError(f"the registry at {self.home} is read-only: {op} needs write access",
                               hint="pass --root to a writable copy of it")
        try:
            self._db.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            if "locked" in str(exc) or "busy" in str(exc):
                raise RegistryBusy(f"the registry at {self.home} is busy: another process held its write lock for "
                                   f"{sqlite_open.BUSY_TIMEOUT_S:g} s while {op} waited; nothing was changed",
                                   hint="retry when it is done; a process stuck there can be found with "
                                        f"`fuser {self.home / DB_FILE}`") from None
            raise StorageError(f"cannot lock the registry for {op}: {exc}", hint="retry; is a writer stuck?") from None
        try:
            yield
            crash_point(f"{op}_before_commit")
            self._db.execute("COMMIT")
        except BaseException as exc:
            self._db.execute("ROLLBACK")
            if isinstance(exc, (sqlite3.Error, OSError)):
                raise StorageError(f"{op} failed, nothing was recorded: {exc}",
                                   hint="check free disk space and permissions") from None
            raise
        crash_point(f"{op}_after_commit")

    def append(self, kind: str, name: str, version: int, payload: dict[str, Any], channel: str | None = None,
               key: str | None = None) -> int:
        """Append one event (inside `write`); returns its seq. `key` is recorded as its idempotency key."""
        text = json.dumps(payload, sort_keys=True, allow_nan=False)
        if len(text) > MAX_PAYLOAD_BYTES:
            raise ValidationError(f"{kind} payload is {len(text)} bytes (at most {MAX_PAYLOAD_BYTES})",
                                  hint="store bulky data in the trace archive and reference it by id")
        cursor = self._db.execute(
            "INSERT INTO events (ts, kind, name, version, channel, payload) VALUES (?, ?, ?, ?, ?, ?)",
            (now().isoformat(), kind, name, version, channel, text))
        seq = int(cursor.lastrowid or 0)
        if key is not None:
            self._db.execute("INSERT INTO event_keys VALUES (?, ?)", (key, seq))
        return seq

    def replayed(self, key: str | None) -> Event | None:
        """The event already appended under idempotency `key` (inside the caller's transaction)."""
        if key is None:
            return None
        row = self._db.execute("SELECT seq FROM event_keys WHERE key = ?", (key,)).fetchone()
        return self.event(row[0]) if row else None

    def index(self, name: str, version: int, content_hash: str, blob_hash: str, seq: int) -> None:
        """Add the index row of a version registered by event `seq` (inside `write`)."""
        self._db.execute("INSERT INTO bundles VALUES (?, ?, ?, ?, ?)", (name, version, content_hash, blob_hash, seq))

    # ----- blobs --------------------------------------------------------------------------

    def blob_path(self, blob_hash: str) -> Path:
        """Where the blob with this sha256 lives."""
        return self.blobs / blob_hash[:2] / f"{blob_hash}.yaml"

    def write_blob(self, data: bytes, blob_hash: str) -> None:
        """Store `data` as the blob `blob_hash` (inside `write`); a damaged blob there is quarantined."""
        final = self.blob_path(blob_hash)
        if final.is_file() and sha256(final.read_bytes()) == blob_hash:
            return
        if final.exists():
            self.quarantine(final)
        final.parent.mkdir(exist_ok=True)
        temp = final.parent / f".tmp-{blob_hash[:12]}-{uuid.uuid4().hex}"
        try:
            with open(temp, "xb") as handle:
                handle.write(data)
                crash_point("blob_temp_written")
                handle.flush()
                os.fsync(handle.fileno())
            crash_point("blob_fsynced")
            os.chmod(temp, 0o444)
            os.replace(temp, final)
            crash_point("blob_renamed")
            fsync_dir(final.parent)
        finally:
            temp.unlink(missing_ok=True)

    def read_blob(self, row: IndexRow) -> bytes:
        """The stored bytes of an indexed version; `IntegrityError` when missing or not matching its hash."""
        ref = format_ref(row.name, row.version)
        path = self.blob_path(row.blob_hash)
        try:
            if path.exists() and not path.is_file():  # a folder or a pipe there: damage, never a hang
                raise IntegrityError(f"blob of {ref} is not a regular file ({path.name})",
                                     hint="run `ole fsck` to quarantine it, then `ole fsck --restore FILE`")
            data = path.read_bytes()
        except FileNotFoundError:
            raise IntegrityError(f"blob of {ref} is missing ({path.name})",
                                 hint="restore it from a backup with `ole fsck --restore FILE`, or release "
                                      "another version; see docs/registry.md") from None
        except OSError as exc:  # unreadable: this version is damaged, the others are not
            raise IntegrityError(f"blob of {ref} cannot be read ({path.name}: {exc.strerror or exc})",
                                 hint="check its permissions, or restore it with `ole fsck --restore FILE`") from None
        if sha256(data) != row.blob_hash:
            raise IntegrityError(f"blob of {ref} fails its hash check",
                                 hint="run `ole fsck` to quarantine it; other versions are unaffected") from None
        return data

    def blob_damage(self, blob_hash: str) -> str | None:
        """Why the blob `blob_hash` cannot be served (missing, fails its hash check), or None."""
        path = self.blob_path(blob_hash)
        if not path.exists():
            return "blob missing"
        if not path.is_file():
            return "blob is not a regular file"
        try:
            data = path.read_bytes()
        except OSError as exc:
            return f"blob cannot be read ({exc.strerror or exc})"
        return "blob fails its hash check" if sha256(data) != blob_hash else None

    def blob_bytes(self, blob_hash: str) -> bytes | None:
        """The stored bytes of blob `blob_hash` unchecked, or None when it is not a regular file."""
        path = self.blob_path(blob_hash)
        return path.read_bytes() if path.is_file() else None

    def quarantine_blob(self, blob_hash: str) -> str:
        """Move the blob file into the quarantine folder; returns its path relative to the home."""
        return str(self.quarantine(self.blob_path(blob_hash)).relative_to(self.home))

    def sweep(self, referenced: set[str], repair: bool) -> list[str]:
        """Temp files and blobs no index row names (relative paths); deleted on `repair`. Called
        under the write lock, so each is the residue of a writer that died before its commit."""
        swept = []
        for path in sorted(self.blobs.rglob("*")):
            if path.is_dir():
                continue
            orphan = path.name.startswith(".tmp-") or (path.suffix == ".yaml" and path.stem not in referenced)
            if orphan:
                swept.append(str(path.relative_to(self.home)))
                if repair:
                    path.unlink()
        return swept

    def quarantine(self, path: Path) -> Path:
        """Move a damaged file into the quarantine folder (never deleted); returns where it went."""
        self.quarantine_dir.mkdir(exist_ok=True)
        target = self.quarantine_dir / f"{path.name}.{uuid.uuid4().hex[:8]}"
        os.replace(path, target)
        return target

    # ----- reads --------------------------------------------------------------------------

    def events(self, *, name: str | None = None, version: int | None = None, channel: str | None = None,
               kind: str | None = None, since: int = 0) -> list[Event]:
        """Recorded events in seq order, optionally filtered; `since` = only seq > since."""
        clauses: list[str] = ["seq > ?"]
        args: list[str | int] = [since]
        for column, value in (("name", name), ("version", version), ("channel", channel), ("kind", kind)):
            if value is not None:
                clauses.append(f"{column} = ?")
                args.append(value)
        rows = self._db.execute(f"SELECT {_EVENT_COLUMNS}, payload FROM events "
                                f"WHERE {' AND '.join(clauses)} ORDER BY seq", args).fetchall()
        return [_event(r, json.loads(r[6])) for r in rows]

    def event(self, seq: int) -> Event:
        """The event with this seq."""
        return self.events(since=seq - 1)[0]

    def committed_at(self, seq: int) -> datetime:
        """When the event `seq` was committed (UTC)."""
        return datetime.fromisoformat(self._db.execute("SELECT ts FROM events WHERE seq = ?", (seq,)).fetchone()[0])

    def pointer_events(self) -> list[Event]:
        """Every event in seq order with evaluation payloads left empty: all a status or pointer
        depends on. Evaluation payloads (per-pair values) are the bulk of a long-lived registry;
        skipping them took `select` from 2.2 s to well under 0.5 s with 3000 evaluation events
        (measured on the shared 2-core machine)."""
        rows = self._db.execute(f"SELECT {_EVENT_COLUMNS}, CASE WHEN kind = 'evaluation' THEN '{{}}' "
                                "ELSE payload END FROM events ORDER BY seq").fetchall()
        return [_event(r, json.loads(r[6]), checked=False) for r in rows]

    def names(self) -> list[str]:
        """Registered bundle names, sorted."""
        return [r[0] for r in self._db.execute("SELECT DISTINCT name FROM bundles ORDER BY name")]

    def rows(self, name: str | None = None) -> list[IndexRow]:
        """Index rows (of `name`, else of every name) in registration order."""
        where, args = ("WHERE name = ?", (name,)) if name is not None else ("", ())
        return [IndexRow(*r) for r in self._db.execute(
            f"SELECT name, version, content_hash, blob_hash, registered_seq FROM bundles {where} "
            "ORDER BY registered_seq", args)]

    def row(self, key: Key) -> IndexRow | None:
        """The index row of one version, or None."""
        found = self._db.execute("SELECT name, version, content_hash, blob_hash, registered_seq FROM bundles "
                                 "WHERE name = ? AND version = ?", key).fetchone()
        return IndexRow(*found) if found else None

    def latest(self, name: str) -> int:
        """The highest registered version of `name` (0 when none)."""
        return int(self._db.execute("SELECT MAX(version) FROM bundles WHERE name = ?", (name,)).fetchone()[0] or 0)

    def find_content(self, name: str, content_hash: str) -> int | None:
        """The version of `name` registered with this content hash, or None."""
        found = self._db.execute("SELECT version FROM bundles WHERE name = ? AND content_hash = ?",
                                 (name, content_hash)).fetchone()
        return int(found[0]) if found else None

    def find_blob(self, blob_hash: str) -> Key | None:
        """The version whose stored bytes hash to `blob_hash`, or None."""
        found = self._db.execute("SELECT name, version FROM bundles WHERE blob_hash = ?", (blob_hash,)).fetchone()
        return (found[0], int(found[1])) if found else None

    def integrity_check(self) -> str:
        """SQLite's own verdict on the file (`ok` when sound)."""
        return str(self._db.execute("PRAGMA integrity_check").fetchone()[0])

    # ----- raw copy (`ole storage migrate`) -------------------------------------------------

    def dump(self) -> JournalDump:
        """Every row as stored and every indexed blob's bytes (a missing blob is left out)."""
        events = [tuple(r) for r in self._db.execute(f"SELECT {_EVENT_COLUMNS}, payload FROM events ORDER BY seq")]
        keys = [(str(k), int(s)) for k, s in self._db.execute("SELECT key, seq FROM event_keys ORDER BY key")]
        rows = self.rows()
        blobs = {r.blob_hash: data for r in rows if (data := self.blob_bytes(r.blob_hash)) is not None}
        return JournalDump(events=events, keys=keys, bundles=rows, blobs=blobs)

    def load(self, dump: JournalDump) -> None:
        """Write `dump` into this journal, which must hold no event (one transaction; seqs kept)."""
        with self.write("load"):
            if self._db.execute("SELECT COUNT(*) FROM events").fetchone()[0]:
                raise StorageError(f"the registry at {self.home} already holds events: a copy goes into an empty one",
                                   hint="pass a new --root folder as the destination")
            self._db.executemany(f"INSERT INTO events ({_EVENT_COLUMNS}, payload) VALUES (?, ?, ?, ?, ?, ?, ?)",
                                 dump.events)
            self._db.executemany("INSERT INTO event_keys VALUES (?, ?)", dump.keys)
            self._db.executemany("INSERT INTO bundles VALUES (?, ?, ?, ?, ?)", [tuple(r) for r in dump.bundles])
            for blob_hash, data in dump.blobs.items():
                self.write_blob(data, blob_hash)
