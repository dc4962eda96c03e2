"""Opening a SQLite file that other processes may be opening at the same moment.

SQLite answers "database is locked" without calling the busy handler in one case that matters
here: switching a file to WAL (and the first schema statements after it) while another process
opens the same fresh file. Every store that several processes share opens through `connect`.
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

BUSY_TIMEOUT_S = 30.0
RETRY_SLEEP_S = 0.02


def retry_locked(statement, timeout_s: float = BUSY_TIMEOUT_S):
    """Run `statement()`, retrying while SQLite refuses it as locked, until `timeout_s` has passed."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return statement()
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(RETRY_SLEEP_S)


def connect(path: Path | str, schema: str, *, wal: bool = True,
            timeout_s: float = BUSY_TIMEOUT_S) -> sqlite3.Connection:
    """An autocommit connection to `path` in WAL mode (when `wal`) with `schema` applied.

    The journal switch and the schema script are retried while another opener holds the file;
    errors other than a lock propagate as `sqlite3.Error`.
    """
    db = sqlite3.connect(path, timeout=timeout_s, isolation_level=None)
    try:
        if wal:
            retry_locked(lambda: db.execute("PRAGMA journal_mode=WAL"), timeout_s)
            db.execute("PRAGMA synchronous=FULL")
        retry_locked(lambda: db.executescript(schema), timeout_s)
    except BaseException:
        db.close()
        raise
    return db
