"""PostgreSQL connections and the schema the registry and the evaluation stores share.

The registry's tables keep SQLite's columns (`ole.registry.journal`): events with the payload
as the JSON *text* written (not jsonb, which would reorder keys and change what a content
digest of the journal sees), the idempotency keys, the bundle index and the lease rows. Blobs
are rows too (`blobs`: sha256 -> bytea): every machine that reaches the database reaches them,
and a blob commits in the same transaction as its index row, so no orphan can remain.

Append-only is enforced by the database: a trigger refuses UPDATE, DELETE and TRUNCATE on
`events`, `event_keys` and `bundles`, and UPDATE on `blobs`; a blob row may only be deleted
by `ole fsck` moving it to `blob_quarantine` (the session setting `ole.quarantine = on`, set
only inside that transaction). Only `leases` is mutable.

Each evaluation store (one per evolution workspace) is a schema of its own (`ole_store_<name>`)
with the SQLite store's tables, so two workspaces never mix rows and a stream's processes on
several machines share one by naming the same workspace.

Each trace archive (one per archive folder name, `trace_schema`) is a schema of its own too
(`ole_traces_<name>`): `traces` holds each trace's JSON text as written, append-only by the same
kind of trigger (a row may only be deleted by `ole fsck` moving it to `trace_quarantine`, under
`ole.quarantine = on`, as a blob row is).
"""
from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from ole.errors import StorageError

REGISTRY_SCHEMA_VERSION = 1
"""`ole_meta.registry_schema` of the table layout below; another value is refused, never migrated silently."""
LOCK_TIMEOUT_MS = 30_000
"""How long a writer waits for the write lock (SQLite's busy timeout, `ole.sqlite_open.BUSY_TIMEOUT_S`)."""
SCHEMA_LOCK = 0x4F4C4500
"""Advisory lock key held while creating tables: concurrent `CREATE … IF NOT EXISTS` race in PostgreSQL."""
WRITE_LOCK = 0x4F4C4501
"""Advisory lock key of the registry's write transaction (SQLite's `BEGIN IMMEDIATE`): one writer at a time,
so `seq` is MAX + 1 and dense; released at commit or rollback, and by the server when a writer dies."""
STORE_PREFIX = "ole_store_"
"""Schema name prefix of an evaluation store."""
TRACE_PREFIX = "ole_traces_"
"""Schema name prefix of a trace archive."""
APPEND_ONLY = {"events": "events are append-only", "event_keys": "event keys are append-only",
               "bundles": "bundle versions are immutable", "blobs": "blobs are content-addressed and immutable"}
"""Tables whose rows are never updated or deleted, and the error the database raises on an attempt."""

REGISTRY_DDL = """
CREATE TABLE IF NOT EXISTS ole_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS events (
  seq BIGINT PRIMARY KEY, ts TEXT NOT NULL, kind TEXT NOT NULL,
  name TEXT NOT NULL, version INTEGER NOT NULL, channel TEXT, payload TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS events_name_version ON events (name, version);
CREATE INDEX IF NOT EXISTS events_kind ON events (kind);
CREATE TABLE IF NOT EXISTS bundles (
  name TEXT NOT NULL, version INTEGER NOT NULL, content_hash TEXT NOT NULL, blob_hash TEXT NOT NULL,
  registered_seq BIGINT NOT NULL, PRIMARY KEY (name, version), UNIQUE (name, content_hash));
CREATE TABLE IF NOT EXISTS event_keys (key TEXT PRIMARY KEY, seq BIGINT NOT NULL);
CREATE TABLE IF NOT EXISTS blobs (hash TEXT PRIMARY KEY, data BYTEA NOT NULL);
CREATE TABLE IF NOT EXISTS blob_quarantine (
  id BIGSERIAL PRIMARY KEY, hash TEXT NOT NULL, data BYTEA NOT NULL, moved_at TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS leases (name TEXT PRIMARY KEY, holder TEXT NOT NULL, expires_at DOUBLE PRECISION NOT NULL);
CREATE OR REPLACE FUNCTION ole_append_only() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN
  IF TG_OP = 'DELETE' AND TG_TABLE_NAME = 'blobs' AND current_setting('ole.quarantine', true) = 'on'
  THEN RETURN OLD; END IF; RAISE EXCEPTION '%', TG_ARGV[0] USING ERRCODE = 'restrict_violation'; END $$
""" + "".join(f""";
CREATE OR REPLACE TRIGGER ole_{table}_append_only BEFORE UPDATE OR DELETE ON {table}
  FOR EACH ROW EXECUTE FUNCTION ole_append_only('{why}');
CREATE OR REPLACE TRIGGER ole_{table}_no_truncate BEFORE TRUNCATE ON {table}
  FOR EACH STATEMENT EXECUTE FUNCTION ole_append_only('{why}')""" for table, why in APPEND_ONLY.items())
TRIGGERS = tuple(f"ole_{t}_{what}" for t in APPEND_ONLY for what in ("append_only", "no_truncate"))
"""Every trigger the layout installs (`PgJournal.integrity_check` reports one that is gone)."""

STORE_DDL = """
CREATE TABLE IF NOT EXISTS evaluations (
  key TEXT PRIMARY KEY, bundle_hash TEXT NOT NULL, instance TEXT NOT NULL, family TEXT NOT NULL,
  result TEXT NOT NULL, created_at TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS steps (
  step TEXT PRIMARY KEY, payload TEXT NOT NULL, created_at TEXT NOT NULL, fingerprint TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS stream (
  n BIGSERIAL PRIMARY KEY, trace_id TEXT NOT NULL UNIQUE, payload TEXT NOT NULL, created_at TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS draws (
  name TEXT NOT NULL, n INTEGER NOT NULL, created_at TEXT NOT NULL, PRIMARY KEY (name, n))
"""
"""The evaluation store's tables (`ole.evolve.store`), in PostgreSQL's types."""

TRACES_APPEND_ONLY = "traces are append-only"
"""The error the database raises on an UPDATE, DELETE or TRUNCATE of `traces`."""
TRACE_DDL = """
CREATE TABLE IF NOT EXISTS traces (
  trace_id TEXT PRIMARY KEY, env TEXT, bundle_hash TEXT, payload TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS traces_env ON traces (env);
CREATE INDEX IF NOT EXISTS traces_bundle_hash ON traces (bundle_hash);
CREATE TABLE IF NOT EXISTS trace_quarantine (
  id BIGSERIAL PRIMARY KEY, trace_id TEXT NOT NULL, payload TEXT NOT NULL, moved_at TEXT NOT NULL);
CREATE OR REPLACE FUNCTION ole_traces_append_only() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN
  IF TG_OP = 'DELETE' AND current_setting('ole.quarantine', true) = 'on' THEN RETURN OLD; END IF; """ + f"""RAISE
  EXCEPTION '{TRACES_APPEND_ONLY}' USING ERRCODE = 'restrict_violation'; END $$;
CREATE OR REPLACE TRIGGER ole_traces_append_only BEFORE UPDATE OR DELETE ON traces
  FOR EACH ROW EXECUTE FUNCTION ole_traces_append_only();
CREATE OR REPLACE TRIGGER ole_traces_no_truncate BEFORE TRUNCATE ON traces
  FOR EACH STATEMENT EXECUTE FUNCTION ole_traces_append_only()
"""
"""A trace archive's tables (`ole.storage.traces`): `env` and `bundle_hash` are copied from the trace at
append for `select`; `payload` is the text the file archive would write (`ole.trace.trace_text`)."""
TRACE_TRIGGERS = ("ole_traces_append_only", "ole_traces_no_truncate")
"""The triggers of `traces` (`PgTraceArchive.integrity_check` reports one that is gone)."""


def _psycopg() -> Any:
    from ole.extras import require
    return require("postgres", "PostgreSQL storage")


def connect(url: str, *, search_path: str | None = None) -> Any:
    """An autocommit connection to `url` (a `psycopg.Connection`), waiting at most `LOCK_TIMEOUT_MS` for a lock."""
    from ole.storage.url import redact
    psycopg = _psycopg()
    options = f"-c lock_timeout={LOCK_TIMEOUT_MS}" + (f" -c search_path={search_path}" if search_path else "")
    try:
        return psycopg.connect(url, autocommit=True, options=options)
    except psycopg.Error as exc:
        raise StorageError(f"cannot reach the PostgreSQL storage {redact(url)}: {str(exc).strip()}",
                           hint="check the URL (--storage / OLE_STORAGE), that the server runs and that the user "
                                "may connect; docs/registry.md, Storage and deployment") from None


def create(conn: Any, ddl: str, *, schema: str | None = None) -> None:
    """Run the `ddl` script (statements separated by `;` + newline; a function body keeps its `;` inside
    lines) in one transaction under `SCHEMA_LOCK`, creating `schema` first when given — unless its
    last table is there already (the script is one transaction: all of it or none). Never run on a
    database in use: `CREATE OR REPLACE TRIGGER` locks its table, and a writer holding rows of two
    tables then deadlocks with it (measured: storage_concurrency.py, 3 writers)."""
    last = re.findall(r"CREATE TABLE IF NOT EXISTS (\w+)", ddl)[-1]
    qualified = f'"{schema}".{last}' if schema else last
    if conn.execute("SELECT to_regclass(%s)", (qualified,)).fetchone()[0] is not None:
        return
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (SCHEMA_LOCK,))
        if conn.execute("SELECT to_regclass(%s)", (qualified,)).fetchone()[0] is not None:
            return  # another opener made it while this one waited
        if schema is not None:
            conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{schema}"')
        for statement in ddl.split(";\n"):
            if statement.strip():
                conn.execute(statement)


def _slug(name: str) -> str:
    return re.sub(r"[^a-z0-9_]+", "_", name.lower()).strip("_") or "default"


def store_schema(name: str) -> str:
    """The schema of the evaluation store named `name` (lower-case letters, digits and `_`)."""
    return (STORE_PREFIX + _slug(name))[:63]


def trace_schema(root: str | os.PathLike[str]) -> str:
    """The schema of the trace archive for the folder `root`, named as an evaluation store is named by its
    workspace: by the last two parts of the path as given, `<parent>_<folder>` (`os.path.normpath` first,
    so `./traces` is `traces`; nothing is resolved, so a link or another machine's folder of the same
    names is the same archive), slugged like `store_schema`. `runs/evolve-1/traces` and
    `/data/evolve-1/traces` give `ole_traces_evolve_1_traces`; `traces` gives `ole_traces_traces`."""
    path = Path(os.path.normpath(root))
    return (TRACE_PREFIX + _slug(f"{path.parent.name}_{path.name}"))[:63]


class PgCursorAdapter:
    """A psycopg connection that takes the evaluation store's SQLite-style statements (`?` markers).

    The store's statements are written once in the SQL both databases accept (`ON CONFLICT DO
    NOTHING`, `COALESCE`); only the parameter marker differs, and no statement has a `?` or `%`
    anywhere but as a marker.
    """

    def __init__(self, conn: Any) -> None:
        self.conn = conn

    def execute(self, sql: str, params: tuple[Any, ...] | list[Any] = ()) -> Any:
        if sql == "BEGIN IMMEDIATE":  # the store's exclusive transaction: one at a time, like SQLite's
            self.conn.execute("BEGIN")
            return self.conn.execute("SELECT pg_advisory_xact_lock(hashtext(current_schema()))")
        return self.conn.execute(sql.replace("?", "%s"), params)

    def close(self) -> None:
        self.conn.close()
