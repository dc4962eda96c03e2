"""`ole storage migrate SRC DST`: copy a registry (and evolve workspaces' stores) between backends.

SRC and DST are each a registry root folder (SQLite files under `<root>/.registry`) or a
PostgreSQL URL. Every row is copied as stored — events with their seq, timestamps and payload
text, idempotency keys, the bundle index, blob bytes — into a destination that holds no event,
in one transaction; then both sides are read back and must agree: the same digest over every
event, key, index row and blob hash (`JournalDump.digest`), a dense seq from 1, and every blob
hashing to its name. Nothing is written to the source. Leases are not copied: they are held by
live processes of the old storage, which must be stopped first.

An evaluation store (`--workdir DIR`: its `evaluations.sqlite3`, or that workspace's schema in
PostgreSQL) is copied the same way, table by table, and compared row by row. A trace archive
(`--traces DIR`: its files, or the schema its folder's name gives, `ole.storage.postgres.trace_schema`)
is copied trace by trace, each as its stored bytes, into an archive that holds none, then compared
by each trace's sha256 on both sides; an archive with a damaged trace is refused (`ole fsck
--traces-dir` first).
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ole.errors import IntegrityError, StorageError
from ole.registry.backend import JournalBackend
from ole.roots import REGISTRY_DIR
from ole.storage.url import is_postgres, redact

STORE_FILE = "evaluations.sqlite3"
"""The evaluation store of an evolve workspace (`ole.evolve.engine`)."""
STORE_TABLES = {"evaluations": "key", "steps": "step", "meta": "key", "stream": "n", "draws": "name, n"}
"""The evaluation store's tables and the order their rows are compared in."""


@dataclass(frozen=True)
class Migrated:
    """What one migration copied and how it was verified."""

    events: int
    last_seq: int
    bundles: int
    blobs: int
    digest: str
    """`JournalDump.digest` of the source, equal to the destination's after the copy."""
    stores: dict[str, int]
    """Workspace -> rows copied of its evaluation store (each compared row by row)."""
    traces: dict[str, int]
    """Trace archive folder -> traces copied (each compared by its sha256)."""


def open_journal(where: str) -> JournalBackend:
    """The journal at a registry root folder or a PostgreSQL URL (never seeded: a copy reads rows only)."""
    if is_postgres(where):
        from ole.storage.pgjournal import PgJournal
        return PgJournal(where, Path(".") / REGISTRY_DIR)
    from ole.registry.journal import Journal
    root = Path(where)
    if not root.is_dir():
        raise StorageError(f"{where} is neither a registry root folder nor a postgresql:// URL",
                           hint="pass the folder holding .registry/ (the --root), or a database URL")
    return Journal(root / REGISTRY_DIR)


def migrate(src: str, dst: str, workdirs: list[Path] | None = None, traces: list[Path] | None = None) -> Migrated:
    """Copy the registry at `src` into the empty one at `dst` and verify it; likewise each workspace store
    and each trace archive."""
    if src == dst:
        raise StorageError("the source and the destination are the same", hint="name a new, empty destination")
    source = open_journal(src)
    try:
        dump = source.dump()
        bad = dump.problems()
        if bad:
            raise IntegrityError(f"the source {source.where} is damaged, nothing was copied: {'; '.join(bad[:3])}",
                                 hint="run `ole fsck` on it first")
        target = open_journal(dst)
        try:
            target.load(dump)
            copied = target.dump()
        finally:
            target.close()
    finally:
        source.close()
    if copied.digest() != dump.digest() or copied.problems():
        raise IntegrityError(f"the copy in {_where(dst)} does not match its source (digest {copied.digest()[:12]} vs "
                             f"{dump.digest()[:12]}) {'; '.join(copied.problems()[:3])}",
                             hint="the destination holds a partial copy: drop it and retry")
    stores = {str(w): copy_store(w, src, dst) for w in workdirs or ()}
    copied_traces = {str(t): copy_traces(t, src, dst) for t in traces or ()}
    return Migrated(events=len(dump.events), last_seq=dump.events[-1][0] if dump.events else 0,
                    bundles=len(dump.bundles), blobs=len(dump.blobs), digest=dump.digest(), stores=stores,
                    traces=copied_traces)


def _where(place: str) -> str:
    return redact(place) if is_postgres(place) else place


def _store(workdir: Path, where: str) -> Any:
    from ole.evolve.store import EvaluationStore
    return EvaluationStore(workdir / STORE_FILE, storage=where if is_postgres(where) else "sqlite")


def _rows(store: Any, table: str) -> list[tuple[Any, ...]]:
    return [tuple(r) for r in store._db.execute(f"SELECT * FROM {table} ORDER BY {STORE_TABLES[table]}").fetchall()]


def copy_store(workdir: Path, src: str, dst: str) -> int:
    """Copy the evaluation store of `workdir` from `src`'s backend to `dst`'s (an empty store there); returns
    the rows copied. Stream numbers `n` are kept, so finish order and counters continue where they were."""
    if not is_postgres(src) and not (workdir / STORE_FILE).is_file():
        raise StorageError(f"{workdir / STORE_FILE} is missing", hint="pass an evolve --workdir that holds a store")
    source, target = _store(workdir, src), _store(workdir, dst)
    try:
        rows = {t: _rows(source, t) for t in STORE_TABLES}
        if any(_rows(target, t) for t in STORE_TABLES):
            raise StorageError(f"the destination store of {workdir} is not empty", hint="copy into a new database")
        target._db.execute("BEGIN IMMEDIATE")
        try:
            for table, found in rows.items():
                for row in found:
                    marks = ", ".join("?" * len(row))
                    target._db.execute(f"INSERT INTO {table} VALUES ({marks})", row)
            if is_postgres(dst) and rows["stream"]:  # the serial continues after the copied numbers
                target._db.execute("SELECT setval(pg_get_serial_sequence('stream', 'n'), ?)",
                                   (max(r[0] for r in rows["stream"]),))
            target._db.execute("COMMIT")
        except BaseException:
            target._db.execute("ROLLBACK")
            raise
        copied = {t: _rows(target, t) for t in STORE_TABLES}
    finally:
        source.close()
        target.close()
    if _digest(copied) != _digest(rows):
        raise IntegrityError(f"the store copy of {workdir} does not match its source", hint="drop it and retry")
    return sum(len(v) for v in rows.values())


def _digest(tables: dict[str, list[tuple[Any, ...]]]) -> str:
    return hashlib.sha256(json.dumps(tables, sort_keys=True, default=str).encode()).hexdigest()


def trace_hashes(contents: dict[str, bytes]) -> dict[str, str]:
    """Trace id -> sha256 of its stored bytes: what both sides of a trace copy must agree on."""
    return {trace_id: hashlib.sha256(data).hexdigest() for trace_id, data in contents.items()}


def copy_traces(folder: Path, src: str, dst: str) -> int:
    """Copy the trace archive of `folder` from `src`'s backend to `dst`'s (an archive holding no trace there);
    returns the traces copied. Each keeps its bytes; both sides must then give the same sha256 per id."""
    from ole.storage.traces import open_archive
    if not is_postgres(src) and not folder.is_dir():
        raise StorageError(f"the trace archive {folder} is missing", hint="pass the folder `--traces` named")
    with open_archive(folder, src if is_postgres(src) else "sqlite") as source, \
            open_archive(folder, dst if is_postgres(dst) else "sqlite") as target:
        bad = source.damaged()
        if bad:
            raise IntegrityError(f"the trace archive {source.where} is damaged, nothing was copied: {bad[0][0]}: "
                                 f"{bad[0][1]}" + (f" (+{len(bad) - 1} more)" if len(bad) > 1 else ""),
                                 hint=f"run `ole fsck --traces-dir {folder}` on the source first")
        contents = source.dump()
        if target.ids():
            raise StorageError(f"the destination trace archive {target.where} is not empty",
                               hint="copy into a new database, or a new archive folder")
        target.load(contents)
        copied = target.dump()
    if trace_hashes(copied) != trace_hashes(contents):
        differ = sorted(set(trace_hashes(copied).items()) ^ set(trace_hashes(contents).items()))
        raise IntegrityError(f"the trace copy of {folder} does not match its source ({len(differ)} differing, "
                             f"e.g. {differ[0][0]})", hint="the destination holds a partial copy: drop it and retry")
    return len(contents)
