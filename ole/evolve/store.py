"""Resume state of an evolution workspace: completed evaluations, driver steps, the task stream.

One SQLite file per evolution workspace. `evaluations` maps (bundle hash, task,
condition) to the run's `RunResult`, so the champion cache and resumption are the same
thing: a run that is stored is never paid for again. `steps` records driver steps that
wrote to the registry (an evaluation record, a gate decision, a release, a monitor
pair, a rollback), so a resumed driver does not repeat them. `stream` holds the finished
tasks of an online stream, shared by every process that works the stream.

A stored result is only as good as the configuration that made it, so the store is
bound to a `Fingerprint` — a hash of everything that determines a step's result (evolve
and gate config, proposer identity, pools, budget, agent seeds, package versions, ...).
The first opener records it; an opener with another fingerprint is refused with the
differences and "use a new --workdir", never answered from stale rows. Every step row
carries the fingerprint it was made under, and `key(step)` gives the idempotency key the
registry stores with the event the step appends: a crash between the registry append
and `mark` cannot duplicate the event on resume.

Rows are only inserted, each in its own transaction; a crash loses at most the run in
flight.

With PostgreSQL storage (`storage=`, else `$OLE_STORAGE`; `ole.storage`) the same tables live in
the database, in a schema named after the workspace folder and the file's stem
(`ole.storage.postgres.store_schema`): processes on several machines share a stream's store by
naming the same workspace folder, and nothing else of their folders.
"""
from __future__ import annotations

import hashlib
import json
import platform
import re
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from ole import sqlite_open
from ole.dotted import flatten
from ole.errors import Conflict, StorageError
from ole.paired import RunResult
from ole.storage import storage_url
from ole.trace import utc_now

UNBOUND = "unbound"
"""Fingerprint recorded with steps of a store opened without one (tests, one-off tools)."""
SHOWN_DIFFERENCES = 4
"""How many differing settings a refusal names."""

_SCHEMA = """
CREATE TABLE IF NOT EXISTS evaluations (
  key TEXT PRIMARY KEY, bundle_hash TEXT NOT NULL, instance TEXT NOT NULL, family TEXT NOT NULL,
  result TEXT NOT NULL, created_at TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS steps (
  step TEXT PRIMARY KEY, payload TEXT NOT NULL, created_at TEXT NOT NULL, fingerprint TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS stream (
  n INTEGER PRIMARY KEY AUTOINCREMENT, trace_id TEXT NOT NULL UNIQUE, payload TEXT NOT NULL,
  created_at TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS draws (
  name TEXT NOT NULL, n INTEGER NOT NULL, created_at TEXT NOT NULL, PRIMARY KEY (name, n));
"""


StepKind = Literal["evaluation", "gate", "release", "widen", "round", "stage", "look", "monitor",
                   "watch-base", "watch-look", "watch-pair", "watch-end", "trial", "trial-pair", "trial-end"]
"""Every kind of driver step: one spelling each (the first part of a stored step's key)."""


@dataclass(frozen=True)
class Step:
    """One idempotent driver step: its kind and the parts that name it. `str(step)` is its key in the
    store (`kind|part|...`, the form every stored run holds), and the registry event it appends is
    keyed by `EvaluationStore.key(step)`."""

    kind: StepKind
    parts: tuple[str | int, ...] = ()

    def __str__(self) -> str:
        return "|".join((self.kind, *map(str, self.parts)))


def step(kind: StepKind, *parts: str | int) -> Step:
    """`Step(kind, parts)`: `step("gate", stage, ref, champion)`."""
    return Step(kind, parts)


class ResumeMismatch(Conflict):
    """The workspace holds results made under another configuration."""


class Fingerprint(BaseModel):
    """What determines the results stored in a workspace, and its hash."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    digest: str
    """sha256 of the canonical JSON of `parts`."""
    parts: dict
    """The inputs, by name (nested JSON), kept so a refusal can name what changed."""


def fingerprint(parts: dict) -> Fingerprint:
    """Fingerprint of a JSON-able mapping (canonical: sorted keys, no whitespace)."""
    text = json.dumps(parts, sort_keys=True, separators=(",", ":"), default=str)
    return Fingerprint(digest=hashlib.sha256(text.encode()).hexdigest(), parts=json.loads(text))


def package_versions() -> dict[str, str | None]:
    """Python, OLE and every pinned runtime dependency (plus litellm): what the runs were made with."""
    out: dict[str, str | None] = {"python": platform.python_version()}
    try:
        requires = metadata.requires("openloopevolve") or []
        out["openloopevolve"] = metadata.version("openloopevolve")
    except metadata.PackageNotFoundError:  # running from a source tree that is not installed
        requires, out["openloopevolve"] = [], None
    names = [m.group(0) for r in requires if "extra ==" not in r or "'llm'" in r or '"llm"' in r
             if (m := re.match(r"[A-Za-z0-9_.\-]+", r)) is not None]
    for name in sorted(set(names)):
        try:
            out[name.lower()] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name.lower()] = None
    return out


def source_digest() -> str:
    """sha256 over the source of the `ole` and `evogym` packages (every `.py` file, path + bytes).

    The pinned package versions do not change when the agent, host or engine code does (the
    project's own version string stays), yet a run's result depends on that code: a store made
    by other code must not answer for this one.
    """
    import evogym
    import ole
    h = hashlib.sha256()
    for pkg in (ole, evogym):
        root = Path(str(pkg.__file__)).parent
        for path in sorted(root.rglob("*.py")):
            h.update(str(path.relative_to(root.parent)).encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


def differences(stored: dict, now: dict) -> list[str]:
    """`name: stored X, now Y` for every setting that differs (flattened dotted names).

    Settings changed in place come first, then those only one side has (a newer OLE's field).
    """
    a, b = flatten(stored), flatten(now)
    keys = sorted(set(a) | set(b), key=lambda k: (not (k in a and k in b), k))
    return [f"{k}: stored {a.get(k, '(absent)')!r}, now {b.get(k, '(absent)')!r}"
            for k in keys if a.get(k, "(absent)") != b.get(k, "(absent)")]


class EvaluationStore:
    """Completed evaluations, driver steps and stream tasks of one evolution workspace.

    With `fingerprint`, the store is bound to that configuration at open (see the module
    docstring); without, it reads and writes evaluations and steps unchecked.
    """

    def __init__(self, path: Path | str, fingerprint: Fingerprint | None = None, *,
                 storage: str | None = None) -> None:
        self.path = Path(path)
        self.fingerprint = fingerprint
        url = storage_url(storage)
        self._db: Any = self._open_sqlite() if url is None else self._open_postgres(url)
        if url is None:
            self._refuse_unfingerprinted()
        if fingerprint is not None:
            self._bind(fingerprint)

    def _open_sqlite(self) -> sqlite3.Connection:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            return sqlite_open.connect(self.path, _SCHEMA)
        except (OSError, sqlite3.Error) as exc:
            raise StorageError(f"cannot open evaluation store {self.path}: {exc}",
                               hint="check the --workdir path, its permissions and free space") from None

    def _open_postgres(self, url: str) -> Any:
        from ole.storage import postgres
        schema = postgres.store_schema(f"{self.path.parent.name}_{self.path.stem}")
        conn = postgres.connect(url, search_path=schema)
        try:
            postgres.create(conn, postgres.STORE_DDL, schema=schema)
        except Exception as exc:  # noqa: BLE001 - psycopg's errors, imported lazily; reported as a storage fault
            conn.close()
            raise StorageError(f"cannot open evaluation store {schema}: {exc}",
                               hint="check that the user may create schemas in that database") from None
        return postgres.PgCursorAdapter(conn)

    def _refuse_unfingerprinted(self) -> None:
        columns = {r[1] for r in self._db.execute("PRAGMA table_info(steps)")}
        if "fingerprint" not in columns:
            raise ResumeMismatch(f"the store {self.path} was written by an older OLE that kept no config "
                                 "fingerprint: its results cannot be checked against this configuration",
                                 hint="use a new --workdir")

    @property
    def digest(self) -> str:
        return self.fingerprint.digest if self.fingerprint is not None else UNBOUND

    def _bind(self, fp: Fingerprint) -> None:
        """Record the fingerprint on first use; refuse another one (one transaction: openers race)."""
        self._db.execute("BEGIN IMMEDIATE")
        try:
            row = self._db.execute("SELECT value FROM meta WHERE key = 'fingerprint'").fetchone()
            if row is None:
                used = self.count() + int(self._db.execute("SELECT COUNT(*) FROM steps").fetchone()[0])
                if used:
                    raise ResumeMismatch(f"the store {self.path} holds {used} results made without a config "
                                         "fingerprint", hint="use a new --workdir")
                self._db.execute("INSERT INTO meta VALUES ('fingerprint', ?)", (fp.model_dump_json(),))
            else:
                stored = Fingerprint.model_validate_json(row[0])
                if stored.digest != fp.digest:
                    diff = differences(stored.parts, fp.parts)
                    more = f" (+{len(diff) - SHOWN_DIFFERENCES} more)" if len(diff) > SHOWN_DIFFERENCES else ""
                    raise ResumeMismatch(
                        f"{self.path.parent} holds results of another configuration: expected fingerprint "
                        f"{stored.digest[:12]} (stored), actual {fp.digest[:12]} (this run); "
                        + "; ".join(diff[:SHOWN_DIFFERENCES]) + more,
                        hint="use a new --workdir, or rerun with the stored settings to resume")
            self._db.execute("COMMIT")
        except BaseException:
            self._db.execute("ROLLBACK")
            raise

    def close(self) -> None:
        self._db.close()

    # ----- evaluations ----------------------------------------------------------------------
    def get(self, key: str) -> tuple[RunResult, str] | None:
        """(result, family) of a stored evaluation, or None."""
        row = self._db.execute("SELECT result, family FROM evaluations WHERE key = ?", (key,)).fetchone()
        return (RunResult.model_validate_json(row[0]), row[1]) if row else None

    def put(self, key: str, instance: str, family: str, result: RunResult) -> None:
        """Store one evaluation; a key stored before keeps its first result."""
        self._db.execute("INSERT INTO evaluations VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
                         (key, result.bundle_hash, instance, family, result.model_dump_json(), utc_now()))

    def count(self) -> int:
        return int(self._db.execute("SELECT COUNT(*) FROM evaluations").fetchone()[0])

    def results_of(self, bundle_hash: str) -> list[tuple[str, RunResult]]:
        """(instance key, result) of every stored evaluation of one bundle, oldest first."""
        rows = self._db.execute("SELECT instance, result FROM evaluations WHERE bundle_hash = ? "
                                "ORDER BY created_at, key", (bundle_hash,)).fetchall()
        return [(instance, RunResult.model_validate_json(result)) for instance, result in rows]

    # ----- driver steps ---------------------------------------------------------------------
    def step(self, step: Step) -> dict | None:
        """Payload of a completed driver step, or None when it has not run.

        A step stored under another fingerprint is refused (`ResumeMismatch`), never returned.
        """
        row = self._db.execute("SELECT payload, fingerprint FROM steps WHERE step = ?", (str(step),)).fetchone()
        if row is None:
            return None
        if self.fingerprint is not None and row[1] != self.digest:
            raise ResumeMismatch(f"step {str(step)!r} in {self.path} was made under fingerprint {row[1][:12]}, "
                                 f"this run is {self.digest[:12]}", hint="use a new --workdir")
        return json.loads(row[0])

    def mark(self, step: Step, payload: dict) -> None:
        """Record a completed driver step (first record wins)."""
        self._db.execute("INSERT INTO steps VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING",
                         (str(step), json.dumps(payload, sort_keys=True), utc_now(), self.digest))

    def key(self, step: Step) -> str:
        """Idempotency key of the registry event a step appends (fingerprint + step)."""
        return f"{self.digest[:16]}|{step}"

    def commit(self, step: Step, payload: dict, write: Callable[[str], object] | None = None) -> dict:
        """The one way a step is done: `write(key)` appends its registry event under the step's
        idempotency key, then the step is marked with `payload`. A crash between the two replays
        `write` on resume, which the registry answers with the event already there (never a second
        one). Returns `payload`. Callers check `step(...)` first and commit only a step not yet done."""
        if write is not None:
            write(self.key(step))
        self.mark(step, payload)
        return payload

    # ----- the task stream (online mode) ------------------------------------------------------
    def add_task(self, trace_id: str, payload: dict) -> int:
        """Record a finished stream task once; returns its 1-based finish number n.

        One exclusive transaction, so rows commit in the order of their `n`: PostgreSQL hands out
        serial numbers before commit, and two tasks committing out of order both counted the same
        finish number and skipped the next (3 of 571 rounds were never made with 8 writers,
        experiments/storage_concurrency.py)."""
        self._db.execute("BEGIN IMMEDIATE")
        try:
            self._db.execute("INSERT INTO stream (trace_id, payload, created_at) VALUES (?, ?, ?) "
                             "ON CONFLICT DO NOTHING", (trace_id, json.dumps(payload, sort_keys=True), utc_now()))
            n = int(self._db.execute("SELECT COUNT(*) FROM stream WHERE n <= (SELECT n FROM stream "
                                     "WHERE trace_id = ?)", (trace_id,)).fetchone()[0])
            self._db.execute("COMMIT")
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        return n

    def draw(self, name: str) -> int:
        """The next number 0, 1, 2, ... of counter `name`, unique across processes sharing the store
        (one `BEGIN IMMEDIATE` transaction: two task boundaries never get the same number)."""
        self._db.execute("BEGIN IMMEDIATE")
        try:
            n = int(self._db.execute("SELECT COALESCE(MAX(n), -1) + 1 FROM draws WHERE name = ?", (name,)).fetchone()[0])
            self._db.execute("INSERT INTO draws VALUES (?, ?, ?)", (name, n, utc_now()))
            self._db.execute("COMMIT")
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        return n

    def tasks(self, upto: int | None = None) -> list[tuple[int, dict]]:
        """Finished stream tasks (n, payload) in finish order, n = 1, 2, ...; optionally only n <= upto."""
        rows = self._db.execute("SELECT payload FROM stream ORDER BY n").fetchall()
        out = [(i, json.loads(p)) for i, (p,) in enumerate(rows, 1)]
        return out if upto is None else out[:upto]
