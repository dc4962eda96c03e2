"""Opening a SQLite file that other processes may be opening at the same moment.

SQLite answers "database is locked" without calling the busy handler in one case that matters
here: switching a file to WAL (and the first schema statements after it) while another process
opens the same fresh file. Every store that several processes share opens through `connect`.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")

BUSY_TIMEOUT_S = 30.0
"""How long a writer waits for the lock; 8 concurrent writers on 2 cores need well under 1 s."""
RETRY_SLEEP_S = 0.02
"""Pause between tries of a statement refused as locked without the busy handler."""


def retry_locked(statement: Callable[[], T], timeout_s: float = BUSY_TIMEOUT_S) -> T:
    """Run `statement()`, retrying while SQLite refuses it as locked, until `timeout_s` has passed."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return statement()
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(RETRY_SLEEP_S)


def connect(path: Path | str, schema: str | None = None, *,
            timeout_s: float = BUSY_TIMEOUT_S) -> sqlite3.Connection:
    """An autocommit connection to `path` in WAL mode with full sync, `schema` applied if given
    (a caller that versions its schema applies it in its own transaction).

    The journal switch and the schema script are retried while another opener holds the file;
    errors other than a lock propagate as `sqlite3.Error`.
    """
    db = sqlite3.connect(path, timeout=timeout_s, isolation_level=None)
    try:
        retry_locked(lambda: db.execute("PRAGMA journal_mode=WAL"), timeout_s)
        db.execute("PRAGMA synchronous=FULL")
        if schema is not None:
            retry_locked(lambda: db.executescript(schema), timeout_s)
    except BaseException:
        db.close()
        raise
    return db
