"""The bundle registry: an append-only SQLite (WAL) event store beside immutable blobs.

Layout under the root (`--root`, else `$OLE_ROOT`, else the project's `bundles/`, else the
per-user root; `ole.roots`):

    <root>/*.yaml                      seed bundles, auto-registered as version 1 on first use
    <root>/.registry/registry.sqlite3  tables `events` (append-only) and `bundles` (index)
    <root>/.registry/blobs/ab/<sha256>.yaml   the registered YAML, content-addressed, read-only
    <root>/.registry/quarantine/       blobs that failed their hash check (moved by fsck)

Registration assigns the stable version and is not release (OLE §III-D). Statuses,
champions and lineage are views derived from the events (STYLE pattern 7); no row is
ever updated or deleted (SQLite triggers enforce it). A channel holds one champion per
scope (a bundle's applicability; `ole.scopes`): releases, rollbacks and activations
carry the scope key in their payload (absent = `general`, so registries written before
scopes load unchanged), and `select` routes a task to the most specific matching
champion. Every write is one `BEGIN IMMEDIATE` transaction with `synchronous=FULL` (reliability.md S2, S3); a blob is
written temp + fsync + rename + directory fsync *inside* that transaction, so an
unreferenced blob or temp file seen by `fsck` (which holds the same lock) is always the
residue of a dead writer and is swept (C1). Concurrent writers serialize on the lock (C3,
C4). Named crash points (`OLE_CRASH_AT=<step>` with `OLE_TEST_MODE=1`) let tests kill a
writer at each step.
"""
from __future__ import annotations

import difflib
import hashlib
import json
import os
import re
import sqlite3
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict

from ole import scopes, sqlite_open
from ole.bundle import (EDGE_MODE, EDGE_MODES, GENERAL_SCOPE, NAME_PATTERN, Bundle, Provenance, TaskContext,
                        bundle_from_data, check_hash,
                        dump_bundle_yaml, format_ref, load_bundle_yaml, parse_ref, parse_scope, validate_data)
from ole.errors import Conflict, IntegrityError, NotFound, OleError, StorageError, ValidationError
from ole.coverage import evidence_line
from ole.fsck import FsckReport, check
from ole.registry_state import State, derive_state, is_staged
from ole.scopes import ScopeChampion, Selection

REGISTRY_DIR = ".registry"
DB_FILE = "registry.sqlite3"
DB_SCHEMA_VERSION = 1
"""SQLite `user_version` of the table layout below; another value is refused, never migrated silently."""
BLOB_DIR = "blobs"
QUARANTINE_DIR = "quarantine"
ROOT_ENV = "OLE_ROOT"
DEFAULT_CHANNEL = "default"
DEFAULT_BUNDLE = "coder"
"""Seed registered first, hence the champion of every channel until a release activates."""
MAX_PAYLOAD_BYTES = 1 << 20
"""Largest JSON payload of one event (evaluations carry per-pair values)."""
CRASH_ENV = "OLE_CRASH_AT"
TEST_MODE_ENV = "OLE_TEST_MODE"
CRASH_EXIT = 137
CRASH_POINTS = ("blob_temp_written", "blob_fsynced", "blob_renamed", "register_before_commit",
                "register_after_commit", "evaluation_before_commit", "gate_decision_before_commit",
                "release_before_commit", "rollback_before_commit", "activation_before_commit")
"""Named steps of the write paths where a test may kill the writer."""
Status = Literal["registered", "evaluated", "released", "canary", "active", "rejected", "rolled_back", "retired"]
EventKind = Literal["registration", "evaluation", "gate_decision", "release", "activation", "rollback", "stage"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS events (
  seq INTEGER PRIMARY KEY AUTOINCREMENT, ts TEXT NOT NULL, kind TEXT NOT NULL,
  name TEXT NOT NULL, version INTEGER NOT NULL, channel TEXT, payload TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS bundles (
  name TEXT NOT NULL, version INTEGER NOT NULL, content_hash TEXT NOT NULL, blob_hash TEXT NOT NULL,
  registered_seq INTEGER NOT NULL, PRIMARY KEY (name, version), UNIQUE (name, content_hash));
CREATE TABLE IF NOT EXISTS event_keys (
  key TEXT PRIMARY KEY, seq INTEGER NOT NULL);
CREATE TRIGGER IF NOT EXISTS event_keys_no_update BEFORE UPDATE ON event_keys
  BEGIN SELECT RAISE(ABORT, 'event keys are append-only'); END;
CREATE TRIGGER IF NOT EXISTS event_keys_no_delete BEFORE DELETE ON event_keys
  BEGIN SELECT RAISE(ABORT, 'event keys are append-only'); END;
CREATE TRIGGER IF NOT EXISTS events_no_update BEFORE UPDATE ON events
  BEGIN SELECT RAISE(ABORT, 'events are append-only'); END;
CREATE TRIGGER IF NOT EXISTS events_no_delete BEFORE DELETE ON events
  BEGIN SELECT RAISE(ABORT, 'events are append-only'); END;
CREATE TRIGGER IF NOT EXISTS bundles_no_update BEFORE UPDATE ON bundles
  BEGIN SELECT RAISE(ABORT, 'bundle versions are immutable'); END;
CREATE TRIGGER IF NOT EXISTS bundles_no_delete BEFORE DELETE ON bundles
  BEGIN SELECT RAISE(ABORT, 'bundle versions are immutable'); END;
"""


def crash_point(step: str) -> None:
    """Die like `kill -9` at `step` when a test asked for it (never outside test mode)."""
    if os.environ.get(TEST_MODE_ENV) == "1" and os.environ.get(CRASH_ENV) == step:
        os._exit(CRASH_EXIT)


def default_root(explicit: str | Path | None = None) -> Path:
    """Resolve the registry root: `explicit`, else `$OLE_ROOT`, else the project's `bundles/`, else the
    per-user root, seeded on first use (`ole.roots`)."""
    from ole.roots import resolve
    return resolve(explicit)


def _now() -> datetime:
    return datetime.now(timezone.utc)


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class Event(BaseModel):
    """One recorded registry event; the registry's only source of truth."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    seq: int
    """Strictly increasing sequence number (SQLite AUTOINCREMENT)."""
    ts: datetime
    """UTC time the event was committed."""
    kind: EventKind
    """registration, evaluation, gate_decision, release, activation or rollback."""
    name: str
    """Bundle name the event is about."""
    version: int
    """Bundle version the event is about (for a rollback: the version rolled back to)."""
    channel: str | None
    """Release channel (release, activation, rollback); null for the others."""
    payload: dict
    """Kind-specific JSON: parents/edge, evaluation results, gate decision, reason, ..."""

    @property
    def ref(self) -> str:
        """`NAME@VERSION` of the bundle this event is about."""
        return format_ref(self.name, self.version)


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


class Registry:
    """Versioned bundles, their events, and champion pointers per channel and scope.

    One instance holds one SQLite connection: share a Registry between processes by
    opening it in each, not between threads.
    """

    def __init__(self, root: str | Path | None = None, *, seed: bool = True) -> None:
        self.root = default_root(root)
        self.warnings: list[str] = []  # root files skipped or ignored while seeding (the CLI shows them)
        self.home = self.root / REGISTRY_DIR
        self.blobs = self.home / BLOB_DIR
        self.quarantine = self.home / QUARANTINE_DIR
        self.read_only = False
        """True when the file system refused writes and the registry was opened for reading only."""
        try:
            self._open_read_write()
        except StorageError:
            if not self._open_read_only():
                raise
        self.bounded_on_open: list[str] = []
        """What `_bound_legacy_releases` recorded while opening (the CLI prints it)."""
        if self.read_only:  # nothing may be written: seeds stay unregistered, legacy releases unbounded
            legacy = self._legacy_releases(self.events())
            if legacy:
                self.warnings.append(f"{len(legacy)} release(s) recorded before releases were bounded by evidence "
                                     "reach further than their gate decisions here (read-only: not bounded; "
                                     "hint: open the registry writable once to bound them, as events)")
            return
        if seed:
            self._register_seeds()
        self._bound_legacy_releases()

    def _open_read_write(self) -> None:
        try:
            self.blobs.mkdir(parents=True, exist_ok=True)
            self._db = sqlite_open.connect(self.home / DB_FILE)
            with self._write("schema"):
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

    def _open_read_only(self) -> bool:
        """Open an existing registry for reading when it cannot be written (a read-only mount, another
        user's files). `mode=ro` needs the WAL index to be writable or present; a registry whose last
        writer closed cleanly has neither, and is opened `immutable` (nothing can change it here)."""
        path = self.home / DB_FILE
        if not path.is_file():
            return False
        for flags in ("mode=ro", "mode=ro&immutable=1"):
            try:
                db = sqlite3.connect(f"{path.resolve().as_uri()}?{flags}", uri=True, isolation_level=None)
                found = db.execute("PRAGMA user_version").fetchone()[0]
                db.execute("SELECT COUNT(*) FROM events").fetchone()
            except sqlite3.Error:
                continue
            if found != DB_SCHEMA_VERSION:
                db.close()
                return False
            self._db, self.read_only = db, True
            self.warnings.append(f"the registry at {self.home} is read-only here: reads work, every write "
                                 "is refused (hint: pass --root to a writable copy to release, register or import)")
            return True
        return False

    def close(self) -> None:
        """Close the database connection."""
        self._db.close()

    def __enter__(self) -> "Registry":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ----- write transactions and blobs -------------------------------------------------

    @contextmanager
    def _write(self, op: str) -> Iterator[sqlite3.Connection]:
        if self.read_only:
            raise StorageError(f"the registry at {self.home} is read-only: {op} needs write access",
                               hint="pass --root to a writable copy of it")
        try:
            self._db.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            raise StorageError(f"cannot lock the registry for {op}: {exc}", hint="retry; is a writer stuck?") from None
        try:
            yield self._db
            crash_point(f"{op}_before_commit")
            self._db.execute("COMMIT")
        except BaseException as exc:
            self._db.execute("ROLLBACK")
            if isinstance(exc, (sqlite3.Error, OSError)):
                raise StorageError(f"{op} failed, nothing was recorded: {exc}",
                                   hint="check free disk space and permissions") from None
            raise
        crash_point(f"{op}_after_commit")

    def blob_path(self, blob_hash: str) -> Path:
        """Where the blob with this sha256 lives."""
        return self.blobs / blob_hash[:2] / f"{blob_hash}.yaml"

    def _write_blob(self, data: bytes, blob_hash: str) -> None:
        final = self.blob_path(blob_hash)
        if final.is_file() and _sha256(final.read_bytes()) == blob_hash:
            return
        if final.exists():
            self._quarantine(final)
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
            _fsync_dir(final.parent)
        finally:
            temp.unlink(missing_ok=True)

    def _quarantine(self, path: Path) -> Path:
        self.quarantine.mkdir(exist_ok=True)
        target = self.quarantine / f"{path.name}.{uuid.uuid4().hex[:8]}"
        os.replace(path, target)
        return target

    def _replayed(self, key: str | None) -> Event | None:
        """The event already appended under idempotency `key` (inside the caller's transaction)."""
        if key is None:
            return None
        row = self._db.execute("SELECT seq FROM event_keys WHERE key = ?", (key,)).fetchone()
        return self.events(since=row[0] - 1)[0] if row else None

    def _append(self, kind: str, name: str, version: int, payload: dict, channel: str | None = None,
                key: str | None = None) -> int:
        text = json.dumps(payload, sort_keys=True, allow_nan=False)
        if len(text) > MAX_PAYLOAD_BYTES:
            raise ValidationError(f"{kind} payload is {len(text)} bytes (at most {MAX_PAYLOAD_BYTES})",
                                  hint="store bulky data in the trace archive and reference it by id")
        cursor = self._db.execute(
            "INSERT INTO events (ts, kind, name, version, channel, payload) VALUES (?, ?, ?, ?, ?, ?)",
            (_now().isoformat(), kind, name, version, channel, text))
        if key is not None:
            self._db.execute("INSERT INTO event_keys VALUES (?, ?)", (key, cursor.lastrowid))
        return int(cursor.lastrowid)

    # ----- registration -----------------------------------------------------------------

    def register(self, bundle: Bundle, *, parents: Sequence[int] = (), edge: str | None = None,
                 evidence_ids: Sequence[str] = (), note: str = "",
                 expected_hash: str | None = None) -> RegisteredBundle:
        """Register a bundle and assign the next version of its name (registration is not release).

        `parents`/`edge`/`evidence_ids` stamp the provenance (a bundle whose file already
        names different parents is a `Conflict`); parents given without an edge mean
        `manual` (one parent) or `recombination` (two). Identical content under the same
        name returns the existing version (dedupe). `expected_hash`, when given, must equal
        the content hash or start with it (`ole.bundle.check_hash`).
        """
        # a bundle built with model_copy skips validation: check it as if read from a file, so a
        # schema-breaking value is refused here instead of being stored and failing on every read
        bundle = bundle_from_data(bundle.model_dump(mode="json"), source=f"bundle {bundle.name!r}")
        if expected_hash is not None:  # a full hash or a unique prefix (`bundle list` prints 12 digits)
            check_hash(expected_hash, bundle.content_hash)
        stamped = self._stamp(bundle, parents, edge, evidence_ids)
        return self._register(stamped, note=note, seed=False)

    def _stamp(self, bundle: Bundle, parents: Sequence[int], edge: str | None,
               evidence_ids: Sequence[str]) -> Bundle:
        prov = bundle.provenance.model_dump(mode="json")
        parents = [int(p) for p in parents]
        if parents or edge:
            edge = edge or prov["edge"] or ("recombination" if len(parents) == 2 else "manual")
            for key, value in (("parents", parents), ("edge", edge)):
                if prov[key] not in ([], None, value):
                    raise Conflict(f"the bundle's provenance says {key}={prov[key]!r} but {value!r} was given",
                                   hint="drop the flag or fix the file's provenance")
            if not prov["parents"]:  # derived here, so the file's timestamp is the parent's
                prov["created_at"] = None
            mode = prov["mode"] if prov["mode"] in EDGE_MODES.get(edge, ()) else EDGE_MODE.get(edge, prov["mode"])
            prov.update(parents=parents, edge=edge, mode=mode)
        prov["evidence_ids"] = list(dict.fromkeys([*prov["evidence_ids"], *evidence_ids]))
        if prov["created_at"] is None:
            prov["created_at"] = _now().isoformat()
        provenance = validate_data(Provenance, prov, source=f"{bundle.name} provenance")
        return bundle.model_copy(update={"provenance": provenance})

    def _register(self, bundle: Bundle, *, note: str, seed: bool) -> RegisteredBundle:
        data = dump_bundle_yaml(bundle).encode()
        blob_hash = _sha256(data)
        with self._write("register"):
            row = self._db.execute("SELECT version FROM bundles WHERE name = ? AND content_hash = ?",
                                   (bundle.name, bundle.content_hash)).fetchone()
            latest = self._db.execute("SELECT MAX(version) FROM bundles WHERE name = ?",
                                      (bundle.name,)).fetchone()[0] or 0
            if row is None and not (seed and latest):
                self._check_parents(bundle, latest)
                if bundle.provenance.edge == "specialization" and bundle.provenance.parents:  # else external
                    parent = format_ref(bundle.name, bundle.provenance.parents[0])
                    scopes.check_specialization(bundle, self.get(parent).bundle)
                self._write_blob(data, blob_hash)
                version = latest + 1
                seq = self._append("registration", bundle.name, version, {
                    "content_hash": bundle.content_hash, "blob_hash": blob_hash,
                    "parents": list(bundle.provenance.parents), "edge": bundle.provenance.edge,
                    "evidence_ids": list(bundle.provenance.evidence_ids), "note": note, "seed": seed,
                    "scope": bundle.applicability.scope_key})
                self._db.execute("INSERT INTO bundles VALUES (?, ?, ?, ?, ?)",
                                 (bundle.name, version, bundle.content_hash, blob_hash, seq))
            else:
                version = row[0] if row else 1
        return self.get(format_ref(bundle.name, version))

    def _check_parents(self, bundle: Bundle, latest: int) -> None:
        for parent in bundle.provenance.parents:
            if not 1 <= parent <= latest:
                known = f"versions: 1–{latest}" if latest else "no versions yet"
                raise NotFound(f"parent {format_ref(bundle.name, parent)} is not registered ({known})",
                               hint="parents are earlier versions of the same bundle name; to move a bundle "
                                    "between registries use `ole bundle export` and `ole bundle import`")

    def _seed_files(self) -> tuple[list[tuple[Path, Bundle]], list[str]]:
        """Loadable seeds of the root (`coder` first) and one line per `*.yaml` that is not a seed.

        One bad file never stops the registry: it is skipped and reported (`warnings`, `fsck`).
        """
        files = sorted(self.root.glob("*.yaml"), key=lambda p: (p.stem != DEFAULT_BUNDLE, p.name))
        good, problems = [], []
        for path in files:
            try:
                bundle = load_bundle_yaml(path)
            except (OleError, OSError, UnicodeDecodeError) as exc:
                problems.append(f"seed {path.name} skipped: {exc}")
                continue
            if bundle.name != path.stem:
                problems.append(f"seed {path.name} skipped: it declares name `{bundle.name}` "
                                f"(hint: rename the file to {bundle.name}.yaml or fix its name)")
            elif bundle.provenance.parents:
                problems.append(f"seed {path.name} skipped: a seed has no parents, it names "
                                f"{list(bundle.provenance.parents)} (hint: register children with "
                                "`ole bundle register FILE --parent N`)")
            else:
                good.append((path, bundle))
        return good, problems

    def _register_seeds(self) -> None:
        good, self.warnings = self._seed_files()
        known = set(self.names())
        for path, bundle in good:
            if path.stem not in known:
                self._register(self._stamp(bundle, (), None, ()), note=f"seed {path.name}", seed=True)
            elif not self._has_content(bundle.name, bundle.content_hash):
                self.warnings.append(_edited_seed(path, bundle.name))

    def seed_problems(self) -> list[str]:
        """Root `*.yaml` files that are skipped (unloadable, misnamed, with parents) or were
        edited after their name was registered (the registry never re-reads a registered seed)."""
        good, problems = self._seed_files()
        known = set(self.names())
        return problems + [_edited_seed(path, bundle.name) for path, bundle in good
                           if path.stem in known and not self._has_content(bundle.name, bundle.content_hash)]

    def _has_content(self, name: str, content_hash: str) -> bool:
        return self._db.execute("SELECT 1 FROM bundles WHERE name = ? AND content_hash = ?",
                                (name, content_hash)).fetchone() is not None

    # ----- reads --------------------------------------------------------------------------

    def events(self, *, name: str | None = None, version: int | None = None, channel: str | None = None,
               kind: str | None = None, since: int = 0) -> list[Event]:
        """Recorded events in seq order, optionally filtered; `since` = only seq > since."""
        clauses, args = ["seq > ?"], [since]
        for column, value in (("name", name), ("version", version), ("channel", channel), ("kind", kind)):
            if value is not None:
                clauses.append(f"{column} = ?")
                args.append(value)
        rows = self._db.execute(f"SELECT seq, ts, kind, name, version, channel, payload FROM events "
                                f"WHERE {' AND '.join(clauses)} ORDER BY seq", args).fetchall()
        return [Event(seq=r[0], ts=datetime.fromisoformat(r[1]), kind=r[2], name=r[3], version=r[4],
                      channel=r[5], payload=json.loads(r[6])) for r in rows]

    def state(self) -> State:
        """Statuses and channel pointers derived from all events.

        Evaluation payloads (per-pair values, the bulk of a long-lived registry) are not read:
        an evaluation only moves a status to `evaluated`. With 3000 evaluation events this
        took `select` from 2.2 s to well under 0.5 s (measured on the shared 2-core machine).
        """
        rows = self._db.execute("SELECT seq, ts, kind, name, version, channel, CASE WHEN kind = 'evaluation' "
                                "THEN '{}' ELSE payload END FROM events ORDER BY seq").fetchall()
        events = [Event.model_construct(seq=r[0], ts=datetime.fromisoformat(r[1]), kind=r[2], name=r[3],
                                        version=r[4], channel=r[5], payload=json.loads(r[6])) for r in rows]
        return derive_state(events, DEFAULT_CHANNEL)

    def names(self) -> list[str]:
        """Registered bundle names, sorted."""
        return [r[0] for r in self._db.execute("SELECT DISTINCT name FROM bundles ORDER BY name")]

    def _row(self, name: str, version: int | None) -> tuple:
        rows = self._db.execute("SELECT version, content_hash, blob_hash, registered_seq FROM bundles "
                                "WHERE name = ? ORDER BY version", (name,)).fetchall()
        if not rows:
            close = difflib.get_close_matches(name, self.names(), n=2)
            raise NotFound(f"no bundle named `{name}` in {self.root}", suggestions=close,
                           hint="" if close else "see `ole bundle list`")
        if version is None:
            return rows[-1]
        for row in rows:
            if row[0] == version:
                return row
        raise NotFound(f"no version {version} of bundle `{name}`; versions: 1–{rows[-1][0]}",
                       hint=f"e.g. `{format_ref(name, rows[-1][0])}`")

    def get(self, ref: str, *, state: State | None = None) -> RegisteredBundle:
        """The bundle `NAME@VERSION` (or the latest version of `NAME`), hash-checked."""
        name, version = parse_ref(ref)
        version, content_hash, blob_hash, seq = self._row(name, version)
        path = self.blob_path(blob_hash)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            raise IntegrityError(f"blob of {format_ref(name, version)} is missing ({path.name})",
                                 hint=f"restore it from a backup with `ole fsck --restore FILE`, or release "
                                      f"another version; see docs/registry.md") from None
        if _sha256(data) != blob_hash:
            raise IntegrityError(f"blob of {format_ref(name, version)} fails its hash check",
                                 hint="run `ole fsck` to quarantine it; other versions are unaffected") from None
        bundle = load_bundle_yaml(data.decode())
        state = state or self.state()
        ts = self._db.execute("SELECT ts FROM events WHERE seq = ?", (seq,)).fetchone()[0]
        return RegisteredBundle(name=name, version=version, content_hash=content_hash, blob_hash=blob_hash,
                                status=state.status_of(name, version), registered_at=datetime.fromisoformat(ts),
                                bundle=bundle)

    def versions(self, name: str, *, skip_damaged: bool = False) -> list[RegisteredBundle]:
        """All versions of `name`, oldest first; `skip_damaged` leaves out those `damaged()` names."""
        state = self.state()
        latest = self._row(name, None)[0]
        out = []
        for v in range(1, latest + 1):
            try:
                out.append(self.get(format_ref(name, v), state=state))
            except IntegrityError:
                if not skip_damaged:
                    raise
        return out

    def damaged(self) -> dict[str, str]:
        """`NAME@VERSION` -> why, for every version whose blob is missing or fails its hash check.

        A damaged version degrades only itself: listing, lineage, events and every other
        version keep working; reading its YAML raises `IntegrityError`.
        """
        out = {}
        for name, version, blob_hash in self._db.execute("SELECT name, version, blob_hash FROM bundles "
                                                         "ORDER BY name, version"):
            path = self.blob_path(blob_hash)
            if not path.is_file():
                out[format_ref(name, version)] = "blob missing"
            elif _sha256(path.read_bytes()) != blob_hash:
                out[format_ref(name, version)] = "blob fails its hash check"
        return out

    def restore_blob(self, path: str | Path) -> str:
        """Put back the blob of a damaged version from a copy of its exact bytes (a backup).

        The copy's sha256 must be the blob hash the index recorded, so nothing but the
        original bytes can be restored. Returns the version's `NAME@VERSION`.
        """
        data = Path(path).read_bytes()
        blob_hash = _sha256(data)
        row = self._db.execute("SELECT name, version FROM bundles WHERE blob_hash = ?", (blob_hash,)).fetchone()
        if row is None:
            raise NotFound(f"{path} is not the stored YAML of any registered version (sha256 {blob_hash[:12]}…)",
                           hint="restore needs a byte-exact copy of .registry/blobs/…/<sha256>.yaml")
        with self._write("restore"):
            self._write_blob(data, blob_hash)
        return format_ref(row[0], row[1])

    def find_content(self, name: str, content_hash: str) -> RegisteredBundle | None:
        """The version of `name` with this content hash, if registered."""
        row = self._db.execute("SELECT version FROM bundles WHERE name = ? AND content_hash = ?",
                               (name, content_hash)).fetchone()
        return self.get(format_ref(name, row[0])) if row else None

    def champion(self, channel: str = DEFAULT_CHANNEL) -> RegisteredBundle:
        """The ACTIVE bundle of `channel` (see `registry_state.State.champion` for defaults)."""
        key = self.state().champion(channel)
        if key is None:
            raise NotFound(f"no bundle is registered in {self.root}",
                           hint="add a seed bundles/*.yaml or run `ole bundle register FILE`")
        return self.get(format_ref(*key))

    # ----- evaluation, gate, release, rollback, activation ----------------------------------

    def _existing(self, ref: str, *, explicit: bool = True) -> tuple[str, int]:
        name, version = parse_ref(ref)
        if explicit and version is None:
            latest = self._row(name, None)[0]
            raise ValidationError(f"`{ref}` needs an explicit version", hint=f"e.g. `{format_ref(name, latest)}`")
        return name, self._row(name, version)[0]

    def record_evaluation(self, ref: str, payload: dict, *, key: str | None = None) -> int:
        """Append an evaluation result (any JSON object) for a version; returns the event seq.

        `key` (on every write method) is an idempotency key: an event already appended under it
        is returned instead of appending another, so a writer that crashed after the commit can
        simply repeat the call.
        """
        name, version = self._existing(ref)
        with self._write("evaluation"):
            done = self._replayed(key)
            return done.seq if done else self._append("evaluation", name, version, dict(payload), key=key)

    def record_gate_decision(self, ref: str, decision: dict, *, key: str | None = None) -> int:
        """Append a release-gate decision; returns the event seq.

        `decision` must say `accepted: true|false` or `decision: "accept"|"reject"`; a
        rejection makes the status `rejected`, an acceptance `evaluated`.
        """
        accepted = decision.get("accepted", {"accept": True, "reject": False}.get(decision.get("decision")))
        if not isinstance(accepted, bool):
            raise ValidationError(f"gate decision needs accepted: true/false, got keys {sorted(decision)}",
                                  hint='pass {"accepted": true, ...} or {"decision": "accept", ...}')
        name, version = self._existing(ref)
        with self._write("gate_decision"):
            done = self._replayed(key)
            return done.seq if done else self._append("gate_decision", name, version,
                                                      {**decision, "accepted": accepted}, key=key)

    def release(self, ref: str, *, channel: str = DEFAULT_CHANNEL, reason: str,
                force: bool = False, key: str | None = None, exposure: float | None = None,
                analysis: str | None = None) -> RegisteredBundle:
        """Release a version on a channel; it becomes active at the next `activate_pending` / `select`.

        The release's scope is the version's applicability **narrowed to what its last gate
        decision's pairs covered** (`ole.coverage.bound_for_release`: hosts, env ids with an
        effect, the budget band), so a release never reaches tasks its evidence did not; the
        event records the decision it was bounded by. A version never gated keeps its own
        applicability, and the event says that no evidence bounds it.

        With `exposure` the release is **staged**: the next task boundary starts it as a canary
        (a `stage` event) instead of activating it; it takes that share of the in-scope task
        boundaries of an online stream, each paired with the control, until `stage()` records
        its promotion or rollback (`analysis`: the hash of the analysis that will judge it).
        """
        if exposure is not None and not 0.0 < exposure <= 1.0:
            raise ValidationError(f"exposure must be in (0, 1], got {exposure}", hint="e.g. 0.5: every second task")
        from ole.coverage import bound_for_release, decision_event
        name, version = self._existing(ref)
        _need_reason(reason, "release")
        _check_channel(channel)
        own = self.get(format_ref(name, version)).bundle.applicability  # also refuses a damaged version first
        with self._write("release"):
            if self._replayed(key) is not None:
                return self.get(format_ref(name, version))
            events = self.events(name=name, version=version)
            applied, evidence = bound_for_release(own, decision_event(events, name, version), scopes.family_of)
            scope = applied.scope_key
            state = self.state()
            this = (name, version)
            if state.status_of(name, version) == "rejected" and not force:
                raise Conflict(f"{format_ref(*this)} was rejected by the gate",
                               hint="release another version, or pass --force to override the gate")
            pinned = state.pinned(channel, scope)
            untouched = state.target_event(channel, scope) is None and (channel, scope) not in state.pointers
            seed_champion = untouched and channel == DEFAULT_CHANNEL and state.champion(channel, scope) == this
            if pinned == this or seed_champion:
                raise Conflict(f"{format_ref(*this)} is already the release of {_where(channel, scope)}",
                               hint="see `ole champion show`")
            current = state.champion(channel, scope)
            staged = {} if exposure is None else {"exposure": exposure, "analysis": analysis}
            self._append("release", name, version, {"reason": reason, "forced": force, "scope": scope,
                                                    "active": format_ref(*current) if current else None,
                                                    "evidence": evidence, **staged}, channel, key=key)
        return self.get(format_ref(name, version))

    def rollback(self, channel: str = DEFAULT_CHANNEL, *, scope: str = GENERAL_SCOPE, to: str | None = None,
                 reason: str, key: str | None = None) -> RegisteredBundle:
        """Roll one scope of a channel back to `to` (default: the active version's first parent).

        Other scopes are untouched. For a scope other than `general`, a target outside the
        scope (the default when the champion's parent is the general one, or it has no parent)
        *removes* the scope's pointer: its tasks fall back to the next matching champion. An
        explicit `to` must then belong to the scope. Recorded now; takes effect at the next
        `activate_pending` (a task boundary). Returns the target, or the removed champion.
        """
        _need_reason(reason, "rollback")
        _check_channel(channel)
        scope = parse_scope(scope).scope_key
        with self._write("rollback"):
            done = self._replayed(key)
            if done is not None:
                return self.get(done.ref)
            state = self.state()
            current = state.champion(channel, scope)
            if current is None:
                if scope == GENERAL_SCOPE:
                    raise NotFound("nothing to roll back: the registry is empty", hint="register a bundle first")
                known = [s for s in state.champions(channel) if s != GENERAL_SCOPE]
                raise NotFound(f"scope `{scope}` has no champion on channel `{channel}`",
                               suggestions=difflib.get_close_matches(scope, known, n=2),
                               hint="" if known else "see `ole champion show`")
            target = self._rollback_target(current, scope, to, channel)
            if target == current:
                raise Conflict(f"{format_ref(*target)} is already active in {_where(channel, scope)}",
                               hint="pass --to an earlier version")
            if target is None:
                self._append("rollback", current[0], current[1], {
                    "reason": reason, "from": format_ref(*current), "scope": scope, "clear": True}, channel, key=key)
                return self.get(format_ref(*current))
            if state.status_of(*target) == "rejected":
                raise Conflict(f"{format_ref(*target)} was rejected by the gate", hint="roll back to another version")
            self.get(format_ref(*target), state=state)  # the target must be readable: refuse before recording
            self._append("rollback", target[0], target[1], {"reason": reason, "from": format_ref(*current),
                                                            "scope": scope}, channel, key=key)
        return self.get(format_ref(*target))

    def _rollback_target(self, current: tuple[str, int], scope: str, to: str | None,
                         channel: str = DEFAULT_CHANNEL) -> tuple[str, int] | None:
        """The version to roll back to; None = remove the (non-general) scope's pointer."""
        if to is not None:
            target = self._existing(to)
            found = self._scope_of(target, channel)
            if scope != GENERAL_SCOPE and found != scope:
                raise Conflict(f"{format_ref(*target)} has scope `{found}`, not `{scope}`",
                               hint="roll back to a version of this scope, or omit --to to remove the scope's "
                                    "champion (its tasks then fall back to the general one)")
            return target
        parents = self._index_parents(current)  # the index, not the blob: a damaged champion can roll back
        if scope != GENERAL_SCOPE:
            if not parents or self._scope_of((current[0], parents[0]), channel) != scope:
                return None
        elif not parents:
            raise Conflict(f"{format_ref(*current)} has no parent to roll back to",
                           hint="pass --to NAME@VERSION")
        return current[0], parents[0]

    def _index_parents(self, key: tuple[str, int]) -> list[int]:
        """Parents of a version from its registration event (readable even when its blob is damaged)."""
        seq = self._db.execute("SELECT registered_seq FROM bundles WHERE name = ? AND version = ?", key).fetchone()[0]
        payload = self._db.execute("SELECT payload FROM events WHERE seq = ?", (seq,)).fetchone()[0]
        return list(json.loads(payload).get("parents") or [])

    def _scope_of(self, key: tuple[str, int], channel: str = DEFAULT_CHANNEL) -> str:
        """The scope a version serves on `channel`: where its last release (or rollback to it) put
        it — a release is bounded by its evidence, so this can be narrower than the bundle's own
        applicability — else its applicability's scope key."""
        placed = [e for e in self.events(name=key[0], version=key[1])
                  if e.kind in ("release", "rollback") and e.channel in (channel, DEFAULT_CHANNEL)
                  and not e.payload.get("clear")]
        if placed:
            return placed[-1].payload.get("scope") or GENERAL_SCOPE
        return self.get(format_ref(*key)).bundle.applicability.scope_key

    def activate_pending(self, channel: str = DEFAULT_CHANNEL) -> RegisteredBundle | None:
        """Task boundary: in every scope of `channel`, make the latest released-or-rolled-back-to
        version active, or remove the pointer a scope rollback removed (each one event).

        Returns the general champion of the channel, or None when nothing is registered.
        """
        state = self._boundary(channel)
        current = state.champion(channel)
        return self.get(format_ref(*current), state=state) if current else None

    def _boundary(self, channel: str) -> State:
        """Record the activations of `channel`'s task boundary; the state right after it."""
        _check_channel(channel)
        with self._write("activation"):
            state = self.state()
            pending = [s for s in state.scopes(channel) if state.is_pending(channel, s)]
            for scope in pending:  # an inherited champion may be pinned
                if is_staged(state.target_event(channel, scope)):
                    self._start_canary(state, channel, scope)
                else:
                    self._activate(state, channel, scope)
            return self.state() if pending else state

    def _start_canary(self, state: State, channel: str, scope: str) -> None:
        cause = state.target_event(channel, scope)
        control = state.champion(channel, scope)
        self._append("stage", cause.name, cause.version, {
            "stage": "canary", "scope": scope, "release_seq": cause.seq, "exposure": cause.payload["exposure"],
            "analysis": cause.payload.get("analysis"), "control": format_ref(*control) if control else None,
            "reason": cause.payload.get("reason", "")}, channel)

    def stage(self, channel: str, scope: str, step: Literal["look", "promoted", "rolled_back"], *, reason: str,
              monitor: dict | None = None, key: str | None = None) -> Event:
        """Record a step of the canary running in (channel, scope): a monitor `look` that holds, its
        promotion (it becomes the scope's champion at once: it has been serving tasks) or its
        rollback (the canary ends; the control never stopped being the champion)."""
        _need_reason(reason, f"stage {step}")
        scope = parse_scope(scope).scope_key
        with self._write("stage"):
            done = self._replayed(key)
            if done is not None:
                return done
            canary = self.state().canary(channel, scope)
            if canary is None:
                raise Conflict(f"no canary is running in scope `{scope}` of channel `{channel}`",
                               hint="a staged release starts as a canary at the next task boundary")
            seq = self._append("stage", canary.name, canary.version, {
                "stage": step, "scope": scope, "release_seq": canary.payload.get("release_seq"),
                "canary_seq": canary.seq, "reason": reason, "monitor": monitor or {},
                "analysis": canary.payload.get("analysis")}, channel, key=key)
        return self.events(since=seq - 1)[0]

    def canaries(self, channel: str = DEFAULT_CHANNEL) -> dict[str, Event]:
        """Scope key -> the `stage` event of each canary running on `channel`."""
        state = self.state()
        return {s: e for s in state.scopes(channel) if (e := state.canary(channel, s)) is not None}

    def _activate(self, state: State, channel: str, scope: str) -> None:
        current, cause = state.champion(channel, scope), state.target_event(channel, scope)
        payload = {"from": format_ref(*current) if current else None, "cause_seq": cause.seq, "cause": cause.kind,
                   "reason": cause.payload.get("reason", ""), "scope": scope}
        if cause.payload.get("clear"):
            payload["clear"] = True  # the scope's pointer goes; the event names the removed champion
        self._append("activation", cause.name, cause.version, payload, channel)

    def _legacy_releases(self, events: list[Event]) -> list[tuple[Event, str, str | None, dict, str]]:
        """Releases recorded before releases were bounded by evidence that still reach further than
        their gate decision covered: (release, its scope, the bounded scope or None, evidence, why)."""
        from ole.coverage import bound_for_release, decision_event
        state = derive_state(events, DEFAULT_CHANNEL)
        done = {e.payload.get("bounds_release") for e in events if e.kind in ("release", "rollback")}
        out = []
        for (channel, scope), target in sorted(state.pending.items(), key=lambda kv: kv[1].seq):
            if target.kind != "release" or "evidence" in target.payload or target.seq in done:
                continue
            decision = decision_event(events, target.name, target.version, before=target.seq)
            if decision is None:  # a release on a person's word: nothing to bound it from (shown as such)
                continue
            try:
                own = self.get(target.ref).bundle.applicability
            except OleError:  # a damaged blob: `ole fsck` reports it; opening must still work
                continue
            try:
                applied, evidence = bound_for_release(own, decision, scopes.family_of)
                new_scope, why = applied.scope_key, f"its gate decision #{decision.seq} covered only `{evidence['bound']}`"
            except ValidationError as exc:
                new_scope, evidence, why = None, {"decision_seq": decision.seq}, exc.message
            if new_scope != scope:
                out.append((target, scope, new_scope, evidence, why))
        return out

    def _bound_legacy_releases(self) -> None:
        """Bound releases recorded before this rule from their stored gate decisions, as events.

        For each such release that still names its scope's champion: a rollback of that scope to
        the version that was active before it (or the scope's removal), then a release of the same
        version into the scope its decision supports (none when it supports none). Both take
        effect at the next task boundary, like any release; both name the release they bound
        (`bounds_release`), so this happens once.
        """
        if not self._legacy_releases(self.events()):
            return
        with self._write("bound"):
            for release, scope, new_scope, evidence, why in self._legacy_releases(self.events()):
                ch, ref = release.channel, release.ref
                reason = (f"bounded on open: {ref}'s release #{release.seq} (recorded before releases were "
                          f"bounded by evidence) reached scope `{scope}`, but {why}")
                previous = release.payload.get("active")
                if not previous and scope == GENERAL_SCOPE and self.state().first is not None:
                    previous = format_ref(*self.state().first)  # the general scope is never left empty
                if previous and previous != ref:
                    back = parse_ref(previous)
                    self._append("rollback", back[0], int(back[1] or 0), {"reason": reason, "from": ref, "scope": scope,
                                                                        "bounds_release": release.seq}, ch)
                else:
                    self._append("rollback", release.name, release.version, {
                        "reason": reason, "from": ref, "scope": scope, "clear": True,
                        "bounds_release": release.seq}, ch)
                if new_scope is not None:
                    current = self.state().champion(ch, new_scope)
                    self._append("release", release.name, release.version, {
                        "reason": reason, "forced": False, "scope": new_scope,
                        "active": format_ref(*current) if current else None, "evidence": evidence,
                        "bounds_release": release.seq}, ch)
                self.bounded_on_open.append(reason + (f"; now released for `{new_scope}`" if new_scope
                                                      else "; not released anywhere"))

    # ----- scoped routing (ole.scopes) ------------------------------------------------------

    def select(self, channel: str, ctx: TaskContext, *, activate: bool = True) -> Selection:
        """Task boundary: the bundle a task `ctx` gets on `channel`, and why.

        With `activate` (the runner's call), first activates the pending changes of every scope
        of the channel (recorded), then returns the most specific active scope champion whose
        applicability matches the task, else the channel's general champion. With
        `activate=False` nothing is written: the answer is what the next task boundary *would*
        give (pending changes of this channel applied in memory), for `ole champion show`.
        An unknown channel is a `NotFound` with close names.
        """
        self.require_channel(channel)
        state = self._boundary(channel) if activate else self.state()
        found = scopes.route(channel, ctx, state.champions(channel, pending=not activate))
        pending = state.target_event(channel, found.scope) \
            if not activate and state.is_pending(channel, found.scope) else None
        return scopes.selection(channel, ctx, found, self.get(format_ref(*found.key), state=state),
                                pending_event=pending)

    def scope_champions(self, channel: str = DEFAULT_CHANNEL) -> list[ScopeChampion]:
        """Every scope of `channel` (general first, then most specific first) with its champion
        and any pending change."""
        _check_channel(channel)
        state = self.state()
        out = []
        ordered = [GENERAL_SCOPE] + scopes.rank(s for s in state.scopes(channel) if s != GENERAL_SCOPE)
        for scope in ordered:
            active = state.champion(channel, scope)
            pending = state.is_pending(channel, scope)
            target = state.target(channel, scope) if pending else None
            if active is None and not pending and state.canary(channel, scope) is None:
                continue
            out.append(ScopeChampion(channel=channel, scope=scope, active=format_ref(*active) if active else None,
                                     inherited=channel != state.default_channel
                                     and (channel, scope) not in state.pointers,
                                     pending=format_ref(*target) if target else None,
                                     pending_removal=pending and target is None,
                                     evidence=evidence_line(state.target_event(channel, scope)),
                                     **self._stage_of(state, channel, scope)))
        return out

    def _stage_of(self, state: State, channel: str, scope: str) -> dict:
        """`canary` and `stage` of a ScopeChampion: the running canary and the monitor's last look,
        else how the scope's last stage ended."""
        canary = state.canary(channel, scope)
        steps = [e for e in self.events(kind="stage", channel=channel) if e.payload.get("scope") == scope]
        if canary is not None:
            looks = [e for e in self.events(kind="evaluation", name=canary.name, version=canary.version)
                     if e.payload.get("stage") == "monitor-look" and e.payload.get("canary") == canary.seq]
            last = looks[-1].payload if looks else None
            control = canary.payload.get("control") or "the task's champion without it"
            text = (f"canary since #{canary.seq}: takes {canary.payload.get('exposure', 1):.0%} of this scope's task "
                    f"boundaries, each rerun by {control}; "
                    + (f"{last['n']} monitored pair(s), last look: {last['decision']} ({last['reason']})" if last
                       else "no monitored pair yet"))
            return {"canary": canary.ref, "stage": text}
        ended = [e for e in steps if e.payload.get("stage") in ("promoted", "rolled_back")]
        if ended:
            e = ended[-1]
            return {"canary": None, "stage": f"{e.ref} {e.payload['stage'].replace('_', ' ')} (#{e.seq}): "
                                              f"{e.payload.get('reason', '')}"}
        return {}

    def require_channel(self, channel: str, *, state: State | None = None) -> None:
        """Raise `NotFound` (with close names) unless `channel` is `default` or named by an event."""
        _check_channel(channel)
        known = (state or self.state()).channels()
        if channel not in known:
            close = difflib.get_close_matches(channel, known, n=2)
            raise NotFound(f"no channel `{channel}`; channels: {', '.join(known)}", suggestions=close,
                           hint="" if close else "a channel starts with `ole release REF --channel NAME`")

    def fsck(self, *, repair: bool = True, traces: Sequence[str | Path] = ()) -> FsckReport:
        """Check hashes, lineage DAG and pointers; sweep orphans and quarantine corrupt blobs. With
        `traces` (trace archive folders), every trace id an event names must be in one of them."""
        if self.read_only and not repair:
            return check(self, repair=False, traces=traces)  # nothing can write here: no lock needed to look
        with self._write("fsck"):
            return check(self, repair=repair, traces=traces)


def _edited_seed(path: Path, name: str) -> str:
    return (f"seed {path.name} was edited after `{name}` was registered from it: the registry ignores the edit "
            f"(hint: register it as a new version with `ole bundle register {path} --parent 1`, or restore the file)")


def _need_reason(reason: str, what: str) -> None:
    if not isinstance(reason, str) or not reason.strip():
        raise ValidationError(f"a {what} needs a reason", hint='pass --reason "why"')


def _where(channel: str, scope: str) -> str:
    return f"channel `{channel}`" + ("" if scope == GENERAL_SCOPE else f" scope `{scope}`")


def _check_channel(channel: str) -> None:
    if not isinstance(channel, str) or not re.fullmatch(NAME_PATTERN, channel):
        raise ValidationError(f"bad channel name `{channel}`",
                              hint="lower-case letters, digits, - and _, e.g. `default` or `classic_control`")
