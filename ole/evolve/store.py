"""Resume state of an evolution run: completed evaluations and completed steps.

One SQLite file per evolution workspace. `evaluations` maps (bundle hash, task,
condition) to the run's `RunResult`, so the champion cache and resumption are the same
thing: a run that is stored is never paid for again. `steps` records driver steps that
wrote to the registry (an evaluation record, a gate decision, a release), so a resumed
driver does not append them twice. Rows are only inserted, each in its own
transaction; a crash loses at most the run in flight.
"""
from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from ole.errors import StorageError
from ole.paired import RunResult
from ole.trace import utc_now

BUSY_TIMEOUT_S = 30.0
"""How long a writer waits for the database lock."""

_SCHEMA = """
CREATE TABLE IF NOT EXISTS evaluations (
  key TEXT PRIMARY KEY, bundle_hash TEXT NOT NULL, instance TEXT NOT NULL, family TEXT NOT NULL,
  result TEXT NOT NULL, created_at TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS steps (
  step TEXT PRIMARY KEY, payload TEXT NOT NULL, created_at TEXT NOT NULL);
"""


class EvaluationStore:
    """Completed evaluations and driver steps of one evolution workspace."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")
            self._db.executescript(_SCHEMA)
        except (OSError, sqlite3.Error) as exc:
            raise StorageError(f"cannot open evaluation store {self.path}: {exc}",
                               hint="check the --workdir path, its permissions and free space") from None

    def close(self) -> None:
        self._db.close()

    def get(self, key: str) -> tuple[RunResult, str] | None:
        """(result, family) of a stored evaluation, or None."""
        row = self._db.execute("SELECT result, family FROM evaluations WHERE key = ?", (key,)).fetchone()
        return (RunResult.model_validate_json(row[0]), row[1]) if row else None

    def put(self, key: str, instance: str, family: str, result: RunResult) -> None:
        """Store one evaluation; a key stored before keeps its first result."""
        self._db.execute("INSERT OR IGNORE INTO evaluations VALUES (?, ?, ?, ?, ?, ?)",
                         (key, result.bundle_hash, instance, family, result.model_dump_json(), utc_now()))

    def count(self) -> int:
        return int(self._db.execute("SELECT COUNT(*) FROM evaluations").fetchone()[0])

    def step(self, step: str) -> dict | None:
        """Payload of a completed driver step, or None when it has not run."""
        row = self._db.execute("SELECT payload FROM steps WHERE step = ?", (step,)).fetchone()
        return json.loads(row[0]) if row else None

    def mark(self, step: str, payload: dict) -> None:
        """Record a completed driver step (first record wins)."""
        self._db.execute("INSERT OR IGNORE INTO steps VALUES (?, ?, ?)",
                         (step, json.dumps(payload, sort_keys=True), utc_now()))
