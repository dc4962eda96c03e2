"""The trace archive in PostgreSQL, and the one place that picks an archive for a folder.

`PgTraceArchive` has `ole.trace.TraceArchive`'s interface and guarantees (`ole.trace.Archive`)
with the traces in the database, so the trace ids a decision names resolve on every machine that
reaches it, and the processes of one stream on several machines read each other's traces:

- the archive of folder `root` is the schema `ole.storage.postgres.trace_schema(root)`, named by
  the folder's name and its parent's (as an evaluation store is named by its workspace folder):
  processes share an archive by naming folders of the same names, and nothing else of them;
- each trace is one row holding the JSON text the file archive would write
  (`ole.trace.trace_text`), so a copy either way is byte-identical;
- append-only: `append` refuses a trace the host did not record and an existing id
  (`TraceExists`, one `INSERT … ON CONFLICT DO NOTHING`: concurrent appenders of one id get one
  row); the database refuses UPDATE, DELETE and TRUNCATE of `traces` (triggers);
- a row that does not load as a trace (inserted by hand, or changed with the triggers bypassed)
  degrades only itself, as a damaged file does: `get` raises `DamagedTrace` naming it
  (`<schema>/<id>.json`), iteration skips it into `skipped`, `damaged()` lists them, and
  `quarantine` (`ole fsck --traces-dir`) moves the row into `trace_quarantine` in one
  transaction, the only delete the trigger lets through (`ole.quarantine = on`, as for blobs).

Reading creates nothing: the tables are made by the first write, so `ole trace ls` with a
mistyped folder leaves no schema behind.
"""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path, PurePath, PurePosixPath
from typing import Any

from ole.errors import IntegrityError, NotFound, StorageError, ValidationError
from ole.storage import postgres
from ole.storage.url import redact, storage_url
from ole.trace import (Archive, DamagedTrace, Trace, TraceArchive, TraceExists, is_trace_id, not_found, parse_trace,
                       refuse_unrecorded, trace_text, utc_now)

QUARANTINE_TABLE = "trace_quarantine"
"""Where `PgTraceArchive.quarantine` moves damaged rows."""
DAMAGE_HINT = "`ole fsck --traces-dir DIR` lists damaged traces and moves them to the trace_quarantine table"


def open_archive(root: Path | str, storage: str | None = None) -> Archive:
    """The trace archive of the folder `root`: a `TraceArchive` (files, the default) unless the storage
    (`storage`, else `$OLE_STORAGE`; `ole.storage.url.storage_url`) names PostgreSQL, then a
    `PgTraceArchive` in that database. Close it when done (`with open_archive(…) as archive:`)."""
    url = storage_url(storage)
    return TraceArchive(root) if url is None else PgTraceArchive(root, url)


class PgTraceArchive:
    """The trace archive of the folder name `root` in the PostgreSQL database at `url`; one connection."""

    def __init__(self, root: Path | str, url: str) -> None:
        self.root, self.url = Path(root), url
        self.schema = postgres.trace_schema(self.root)
        """The schema holding this archive's tables."""
        self.skipped: list[tuple[PurePath, str]] = []
        """Damaged rows (location, why) the last iteration skipped."""
        self._psycopg = postgres._psycopg()
        self._db = postgres.connect(url, search_path=self.schema)
        self._made = False

    @property
    def where(self) -> str:
        return f"{self.schema} in {redact(self.url)}"

    def location(self, trace_id: str) -> PurePosixPath:
        """How a row is named in messages and `damaged()`: `<schema>/<id>.json` (`.stem` is the id)."""
        return PurePosixPath(self.schema, f"{trace_id}.json")

    def __enter__(self) -> PgTraceArchive:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._db.close()

    # ----- tables ----------------------------------------------------------------------------

    def exists(self) -> bool:
        """Whether this archive's tables are in the database (made by the first write)."""
        if not self._made:
            found = self._db.execute("SELECT to_regclass(%s)", (f'"{self.schema}".traces',)).fetchone()[0]
            self._made = found is not None
        return self._made

    def _create(self) -> None:
        if self.exists():
            return
        try:
            postgres.create(self._db, postgres.TRACE_DDL, schema=self.schema)
        except self._psycopg.Error as exc:
            raise StorageError(f"cannot create the trace archive {self.where}: {str(exc).strip()}",
                               hint="check that the user may create schemas in that database") from None
        self._made = True

    @contextmanager
    def _write(self, op: str) -> Iterator[None]:
        """One write transaction (the tables made first); a database error is a `StorageError`."""
        self._create()
        try:
            with self._db.transaction():
                yield
        except self._psycopg.Error as exc:
            raise StorageError(f"{op} in the trace archive {self.where} failed, nothing was recorded: "
                               f"{str(exc).strip()}", hint="check the database server and its free space") from None

    def _rows(self, sql: str, args: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        return [tuple(r) for r in self._db.execute(sql, args)] if self.exists() else []

    # ----- the archive -------------------------------------------------------------------------

    def append(self, trace: Trace) -> PurePosixPath:
        """Insert a host-recorded trace under a new id (`TraceExists` for an id already there, never replaced)."""
        refuse_unrecorded(trace)
        with self._write("append"):
            added = self._db.execute("INSERT INTO traces VALUES (%s, %s, %s, %s) ON CONFLICT (trace_id) DO NOTHING "
                                     "RETURNING trace_id", (trace.trace_id, trace.task.env, trace.bundle_hash,
                                                            trace_text(trace))).fetchone()
        if added is None:
            raise TraceExists(trace.trace_id)
        return self.location(trace.trace_id)

    def ids(self) -> list[str]:
        return sorted(r[0] for r in self._rows("SELECT trace_id FROM traces"))

    def __contains__(self, trace_id: object) -> bool:
        return isinstance(trace_id, str) and is_trace_id(trace_id) and \
            bool(self._rows("SELECT 1 FROM traces WHERE trace_id = %s", (trace_id,)))

    def _parse(self, trace_id: str, payload: str) -> Trace:
        return parse_trace(payload, self.location(trace_id), kind="row", hint=DAMAGE_HINT)

    def get(self, trace_id: str) -> Trace:
        """The trace `trace_id`; `NotFound` (with close ids) or `DamagedTrace` (naming the row)."""
        found = self._rows("SELECT payload FROM traces WHERE trace_id = %s", (trace_id,)) \
            if is_trace_id(trace_id) else []
        if not found:
            raise not_found(trace_id, self)
        return self._parse(trace_id, found[0][0])

    def _loaded(self, rows: list[tuple[Any, ...]]) -> Iterator[Trace | DamagedTrace]:
        for trace_id, payload in sorted(rows):
            try:
                yield self._parse(trace_id, payload)
            except DamagedTrace as exc:
                yield exc

    def __iter__(self) -> Iterator[Trace]:
        """Every readable trace in id order; damaged rows are skipped and listed in `skipped`."""
        yield from self._readable(self._rows("SELECT trace_id, payload FROM traces"))

    def _readable(self, rows: list[tuple[Any, ...]]) -> Iterator[Trace]:
        self.skipped = []
        for found in self._loaded(rows):
            if isinstance(found, DamagedTrace):
                self.skipped.append((found.path, found.why))
            else:
                yield found

    def select(self, *, env: str | None = None, bundle_hash: str | None = None) -> list[Trace]:
        """Readable traces of `env` and/or `bundle_hash` (damaged ones skipped, see `skipped`). The rows are
        chosen by the columns recorded at append, then checked against the trace itself; `skipped` lists
        the damaged rows among them (all of them without a filter, as `ole trace ls` shows)."""
        clauses, args = ["TRUE"], list[str]()
        for column, value in (("env", env), ("bundle_hash", bundle_hash)):
            if value is not None:
                clauses.append(f"({column} = %s OR {column} IS NULL)")
                args.append(value)
        rows = self._rows(f"SELECT trace_id, payload FROM traces WHERE {' AND '.join(clauses)}", tuple(args))
        return [t for t in self._readable(rows) if (env is None or t.task.env == env)
                and (bundle_hash is None or t.bundle_hash == bundle_hash)]

    def damaged(self) -> list[tuple[PurePath, str]]:
        """(location, why) for every row that does not load as a trace."""
        return [(f.path, f.why) for f in self._loaded(self._rows("SELECT trace_id, payload FROM traces"))
                if isinstance(f, DamagedTrace)]

    def quarantine(self, path: PurePath) -> PurePosixPath:
        """Move the row named `path` (`location`) into `trace_quarantine` in one transaction; returns
        `<schema>/trace_quarantine/<n>`. The trigger lets this delete through, and no other."""
        trace_id = path.stem
        if path != self.location(trace_id) or not is_trace_id(trace_id):
            raise NotFound(f"{path} names no trace row of {self.where}", hint="pass a location damaged() gave")
        with self._write("quarantine"):
            self._db.execute("SELECT set_config('ole.quarantine', 'on', true)")
            moved = self._db.execute(f"INSERT INTO {QUARANTINE_TABLE} (trace_id, payload, moved_at) SELECT trace_id, "
                                     "payload, %s FROM traces WHERE trace_id = %s RETURNING id",
                                     (utc_now(), trace_id)).fetchone()
            self._db.execute("DELETE FROM traces WHERE trace_id = %s", (trace_id,))
            self._db.execute("SELECT set_config('ole.quarantine', 'off', true)")
        if moved is None:
            raise NotFound(f"no trace row {trace_id!r} in {self.where}", hint="nothing was moved")
        return PurePosixPath(self.schema, QUARANTINE_TABLE, str(moved[0]))

    def integrity_check(self) -> str:
        """`ok` when both append-only triggers of `traces` are in place (or nothing was stored yet)."""
        if not self.exists():
            return "ok"
        present = {r[0] for r in self._db.execute("SELECT tgname FROM pg_trigger WHERE tgrelid = to_regclass(%s)",
                                                  (f'"{self.schema}".traces',))}
        missing = [t for t in postgres.TRACE_TRIGGERS if t not in present]
        return "ok" if not missing else f"append-only triggers missing on {self.schema}.traces: {', '.join(missing)}"

    # ----- raw copy (`ole storage migrate`) ----------------------------------------------------

    def dump(self) -> dict[str, bytes]:
        """Trace id -> the stored text's UTF-8 bytes, for every trace."""
        return {trace_id: payload.encode() for trace_id, payload in self._rows("SELECT trace_id, payload FROM traces")}

    def load(self, contents: dict[str, bytes]) -> None:
        """Insert every trace of `contents` (id -> bytes, as `dump` gives) into this archive, which must hold
        none, in one transaction; each must load as a trace (its text is stored as is)."""
        rows = []
        for trace_id, data in sorted(contents.items()):
            if not is_trace_id(trace_id):
                raise ValidationError(f"trace id {trace_id!r} cannot name a trace", hint="nothing was copied")
            try:
                text = data.decode()
                trace = parse_trace(text, self.location(trace_id))
            except (UnicodeDecodeError, DamagedTrace) as exc:
                raise IntegrityError(f"trace {trace_id} does not load: {exc}", hint="nothing was copied; "
                                     "run `ole fsck --traces-dir` on the source first") from None
            rows.append((trace_id, trace.task.env, trace.bundle_hash, text))
        with self._write("load"):
            if self._db.execute("SELECT COUNT(*) FROM traces").fetchone()[0]:
                raise ValidationError(f"the trace archive {self.where} already holds traces: a copy goes into an "
                                      "empty one", hint="copy into a new database, or another folder name")
            with self._db.cursor() as cur:
                cur.executemany("INSERT INTO traces VALUES (%s, %s, %s, %s)", rows)
