"""The registry's journal in PostgreSQL: the SQLite journal's tables and semantics, on a server.

Same contract as `ole.registry.journal.Journal` (the `ole.registry.backend.JournalBackend`
protocol): one write transaction at a time (the advisory lock `WRITE_LOCK`, taken first in
every write, plays SQLite's `BEGIN IMMEDIATE`), so `seq` is the previous maximum + 1 and dense;
a writer killed mid-transaction leaves nothing (the server rolls back a dropped connection and
frees its lock); events, keys, index rows and blobs are append-only by trigger
(`ole.storage.postgres`). Blobs are rows, written in the transaction that indexes them.
"""
from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

from ole.bundle import format_ref
from ole.errors import IntegrityError, StorageError, ValidationError
from ole.registry.backend import JournalDump
from ole.registry.journal import (MAX_PAYLOAD_BYTES, RegistryBusy, _event, crash_point, now, sha256)
from ole.registry.records import Event, IndexRow, Key
from ole.storage import postgres
from ole.storage.url import redact

_EVENT_COLUMNS = "seq, ts, kind, name, version, channel"


class PgJournal:
    """The registry journal in the PostgreSQL database at `url`; one connection per instance.

    `home` is the registry folder under the root (`<root>/.registry`): nothing is stored there
    by this backend, but callers that name the registry by its folder keep working.
    """

    def __init__(self, url: str, home: Path) -> None:
        self.url, self.home = url, home
        self.blobs = home / "blobs"
        self.read_only = False
        self._psycopg = postgres._psycopg()
        self._db = postgres.connect(url)
        try:
            postgres.create(self._db, postgres.REGISTRY_DDL)
            with self._db.transaction():
                self._db.execute("SELECT pg_advisory_xact_lock(%s)", (postgres.SCHEMA_LOCK,))
                self._db.execute("INSERT INTO ole_meta VALUES ('registry_schema', %s) ON CONFLICT DO NOTHING",
                                 (str(postgres.REGISTRY_SCHEMA_VERSION),))
                found = self._db.execute("SELECT value FROM ole_meta WHERE key = 'registry_schema'").fetchone()[0]
        except self._psycopg.Error as exc:
            self._db.close()
            raise StorageError(f"cannot open the registry in {self.where}: {str(exc).strip()}",
                               hint="check that the user may create tables in that database") from None
        if found != str(postgres.REGISTRY_SCHEMA_VERSION):
            self._db.close()
            raise StorageError(f"registry schema version {found} in {self.where}, expected "
                               f"{postgres.REGISTRY_SCHEMA_VERSION}", hint="use the OLE version that wrote it")

    @property
    def where(self) -> str:
        """The database URL without its password."""
        return redact(self.url)

    @property
    def connection(self) -> Any:
        """The open `psycopg.Connection`, for inspection only."""
        return self._db

    def close(self) -> None:
        self._db.close()

    def _one(self, sql: str, args: tuple[Any, ...] = ()) -> Any:
        return self._db.execute(sql, args).fetchone()

    # ----- write transactions -----------------------------------------------------------

    @contextmanager
    def write(self, op: str) -> Iterator[None]:
        """One write transaction named `op`, under the registry's write lock."""
        psycopg = self._psycopg
        try:
            with self._db.transaction():
                try:
                    self._db.execute("SELECT pg_advisory_xact_lock(%s)", (postgres.WRITE_LOCK,))
                except psycopg.errors.LockNotAvailable:
                    raise RegistryBusy(f"the registry in {self.where} is busy: another process held its write lock "
                                       f"for {postgres.LOCK_TIMEOUT_MS / 1000:g} s while {op} waited; nothing was "
                                       "changed", hint="retry when it is done; see pg_stat_activity for the holder") \
                        from None
                yield
                crash_point(f"{op}_before_commit")
        except psycopg.Error as exc:
            raise StorageError(f"{op} failed, nothing was recorded: {str(exc).strip()}",
                               hint="check the database server and its free space") from None
        crash_point(f"{op}_after_commit")

    def append(self, kind: str, name: str, version: int, payload: dict[str, Any], channel: str | None = None,
               key: str | None = None) -> int:
        """Append one event (inside `write`); its seq is the last + 1 (the write lock makes it dense)."""
        text = json.dumps(payload, sort_keys=True, allow_nan=False)
        if len(text) > MAX_PAYLOAD_BYTES:
            raise ValidationError(f"{kind} payload is {len(text)} bytes (at most {MAX_PAYLOAD_BYTES})",
                                  hint="store bulky data in the trace archive and reference it by id")
        seq = int(self._one("INSERT INTO events SELECT COALESCE(MAX(seq), 0) + 1, %s, %s, %s, %s, %s, %s FROM events "
                            "RETURNING seq", (now().isoformat(), kind, name, version, channel, text))[0])
        if key is not None:
            self._db.execute("INSERT INTO event_keys VALUES (%s, %s)", (key, seq))
        return seq

    def replayed(self, key: str | None) -> Event | None:
        if key is None:
            return None
        row = self._one("SELECT seq FROM event_keys WHERE key = %s", (key,))
        return self.event(row[0]) if row else None

    def index(self, name: str, version: int, content_hash: str, blob_hash: str, seq: int) -> None:
        self._db.execute("INSERT INTO bundles VALUES (%s, %s, %s, %s, %s)",
                         (name, version, content_hash, blob_hash, seq))

    # ----- blobs --------------------------------------------------------------------------

    def write_blob(self, data: bytes, blob_hash: str) -> None:
        """Store `data` as blob `blob_hash` (inside `write`); a damaged row there is quarantined first."""
        stored = self.blob_bytes(blob_hash)
        if stored is not None and sha256(stored) == blob_hash:
            return
        if stored is not None:
            self.quarantine_blob(blob_hash)
        self._db.execute("INSERT INTO blobs VALUES (%s, %s)", (blob_hash, data))

    def blob_bytes(self, blob_hash: str) -> bytes | None:
        row = self._one("SELECT data FROM blobs WHERE hash = %s", (blob_hash,))
        return bytes(row[0]) if row else None

    def read_blob(self, row: IndexRow) -> bytes:
        ref = format_ref(row.name, row.version)
        data = self.blob_bytes(row.blob_hash)
        if data is None:
            raise IntegrityError(f"blob of {ref} is missing ({row.blob_hash[:12]}…)",
                                 hint="restore it from a backup with `ole fsck --restore FILE`, or release "
                                      "another version; see docs/registry.md")
        if sha256(data) != row.blob_hash:
            raise IntegrityError(f"blob of {ref} fails its hash check",
                                 hint="run `ole fsck` to quarantine it; other versions are unaffected")
        return data

    def blob_damage(self, blob_hash: str) -> str | None:
        data = self.blob_bytes(blob_hash)
        if data is None:
            return "blob missing"
        return "blob fails its hash check" if sha256(data) != blob_hash else None

    def quarantine_blob(self, blob_hash: str) -> str:
        """Move the blob row into `blob_quarantine` (inside `write`); returns `blob_quarantine/<id>`."""
        self._db.execute("SELECT set_config('ole.quarantine', 'on', true)")
        found = self._one("INSERT INTO blob_quarantine (hash, data, moved_at) SELECT hash, data, %s FROM blobs "
                          "WHERE hash = %s RETURNING id", (now().isoformat(), blob_hash))
        self._db.execute("DELETE FROM blobs WHERE hash = %s", (blob_hash,))
        self._db.execute("SELECT set_config('ole.quarantine', 'off', true)")
        return f"blob_quarantine/{found[0] if found else '-'}"

    def sweep(self, referenced: set[str], repair: bool) -> list[str]:
        """Blob rows no index row names. None arise from a dead writer (a blob commits with its
        index row); a row inserted by hand is one."""
        orphans = [h for (h,) in self._db.execute("SELECT hash FROM blobs ORDER BY hash") if h not in referenced]
        if repair:
            for blob_hash in orphans:
                self.quarantine_blob(blob_hash)
        return [f"blobs/{h}" for h in orphans]

    # ----- reads --------------------------------------------------------------------------

    def events(self, *, name: str | None = None, version: int | None = None, channel: str | None = None,
               kind: str | None = None, since: int = 0) -> list[Event]:
        clauses, args = ["seq > %s"], list[str | int]([since])
        for column, value in (("name", name), ("version", version), ("channel", channel), ("kind", kind)):
            if value is not None:
                clauses.append(f"{column} = %s")
                args.append(value)
        rows = self._db.execute(f"SELECT {_EVENT_COLUMNS}, payload FROM events WHERE {' AND '.join(clauses)} "
                                "ORDER BY seq", args).fetchall()
        return [_event(r, json.loads(r[6])) for r in rows]

    def event(self, seq: int) -> Event:
        return self.events(since=seq - 1)[0]

    def committed_at(self, seq: int) -> datetime:
        return datetime.fromisoformat(self._one("SELECT ts FROM events WHERE seq = %s", (seq,))[0])

    def pointer_events(self) -> list[Event]:
        """Every event with evaluation payloads left empty (`Journal.pointer_events`)."""
        rows = self._db.execute(f"SELECT {_EVENT_COLUMNS}, CASE WHEN kind = 'evaluation' THEN '{{}}' "
                                "ELSE payload END FROM events ORDER BY seq").fetchall()
        return [_event(r, json.loads(r[6]), checked=False) for r in rows]

    def names(self) -> list[str]:
        return [r[0] for r in self._db.execute("SELECT DISTINCT name FROM bundles ORDER BY name")]

    def rows(self, name: str | None = None) -> list[IndexRow]:
        where, args = ("WHERE name = %s", (name,)) if name is not None else ("", ())
        return [IndexRow(*r) for r in self._db.execute(
            f"SELECT name, version, content_hash, blob_hash, registered_seq FROM bundles {where} "
            "ORDER BY registered_seq", args)]

    def row(self, key: Key) -> IndexRow | None:
        found = self._one("SELECT name, version, content_hash, blob_hash, registered_seq FROM bundles "
                          "WHERE name = %s AND version = %s", key)
        return IndexRow(*found) if found else None

    def latest(self, name: str) -> int:
        return int(self._one("SELECT MAX(version) FROM bundles WHERE name = %s", (name,))[0] or 0)

    def find_content(self, name: str, content_hash: str) -> int | None:
        found = self._one("SELECT version FROM bundles WHERE name = %s AND content_hash = %s", (name, content_hash))
        return int(found[0]) if found else None

    def find_blob(self, blob_hash: str) -> Key | None:
        found = self._one("SELECT name, version FROM bundles WHERE blob_hash = %s", (blob_hash,))
        return (found[0], int(found[1])) if found else None

    def integrity_check(self) -> str:
        """`ok` when every append-only trigger is in place, else which are gone."""
        present = {r[0] for r in self._db.execute("SELECT tgname FROM pg_trigger WHERE NOT tgisinternal")}
        missing = [t for t in postgres.TRIGGERS if t not in present]
        return "ok" if not missing else f"append-only triggers missing: {', '.join(missing)}"

    # ----- raw copy (`ole storage migrate`) -------------------------------------------------

    def dump(self) -> JournalDump:
        events = [tuple(r) for r in self._db.execute(f"SELECT {_EVENT_COLUMNS}, payload FROM events ORDER BY seq")]
        keys = [(str(k), int(s)) for k, s in self._db.execute("SELECT key, seq FROM event_keys ORDER BY key")]
        rows = self.rows()
        blobs = {r.blob_hash: data for r in rows if (data := self.blob_bytes(r.blob_hash)) is not None}
        return JournalDump(events=events, keys=keys, bundles=rows, blobs=blobs)

    def load(self, dump: JournalDump) -> None:
        with self.write("load"):
            if self._one("SELECT COUNT(*) FROM events")[0]:
                raise StorageError(f"the registry in {self.where} already holds events: a copy goes into an empty one",
                                   hint="create a new database (createdb) for the destination")
            with self._db.cursor() as cur:
                cur.executemany(f"INSERT INTO events ({_EVENT_COLUMNS}, payload) VALUES (%s, %s, %s, %s, %s, %s, %s)",
                                dump.events)
                cur.executemany("INSERT INTO event_keys VALUES (%s, %s)", dump.keys)
                cur.executemany("INSERT INTO bundles VALUES (%s, %s, %s, %s, %s)", [tuple(r) for r in dump.bundles])
                cur.executemany("INSERT INTO blobs VALUES (%s, %s) ON CONFLICT DO NOTHING", list(dump.blobs.items()))
