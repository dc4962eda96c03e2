"""A lease in the registry's database: one holder at a time across processes and machines' processes.

Online proposal rounds of a channel must not run twice at once (two harness tasks that finish
together would both propose, evaluate and gate). The round holder takes the lease in a
`BEGIN IMMEDIATE` transaction on the registry's SQLite file, so acquisition is serialized by
SQLite's write lock; a heartbeat thread renews it while the round runs. A holder that dies
(kill -9, a harness timeout) stops renewing and its lease expires after `LEASE_TTL_S` (at once
when the holder was a process of this host that no longer exists), so the next process takes
over; the work it finished is in the evaluation store and is not repeated. The `leases` table
(part of the journal's schema, `ole.registry.journal`) holds only this mutable state — the
registry's events stay append-only.

With PostgreSQL storage (`ole.storage`) the same row lives in the shared database: acquisition
locks it (`SELECT … FOR UPDATE` in one transaction, so two machines never both take it), and
expiry is read on the *server's* clock, so hosts with skewed clocks agree on when a lease ran out.
A lease is in PostgreSQL when it is given that URL, or when `$OLE_STORAGE` names one (a caller
that names the registry by its SQLite file then follows the storage the registry itself opened).
"""
from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path

from typing import Any

from ole.errors import Conflict
from ole.registry.journal import connect_leases
from ole.storage import is_postgres, storage_url

LEASE_TTL_S = 120.0
"""A lease not renewed for this long is free (the holder died); renewals come every TTL/4."""
LEASE_WAIT_S = 7200.0
"""Longest wait for a lease held by a live holder (a gate round of real runs takes minutes)."""
POLL_S = 0.5
"""How often a waiting process retries."""


def _dead_here(holder: str) -> bool:
    """True when `holder` (`host:pid:tag`, see `ole.evolve.online.holder_id`) is a process of this
    host that no longer exists: its lease is stale now, not only after the TTL."""
    host, _, rest = holder.partition(":")
    pid = rest.partition(":")[0]
    if host != socket.gethostname() or not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # alive, another user's
        return False
    return False


class LeaseTimeout(Conflict):
    """The lease stayed held by another live holder for longer than the wait allowed."""


class Lease:
    """`with Lease(db, name, holder): ...` holds `name` for the block (waiting for it first)."""

    def __init__(self, db_path: Path | str, name: str, holder: str, *, ttl_s: float = LEASE_TTL_S,
                 wait_s: float = LEASE_WAIT_S, on_wait: Callable[[str], object] = lambda holder: None) -> None:
        self.url = str(db_path) if is_postgres(str(db_path)) else storage_url()
        """The PostgreSQL database holding the lease row, or None: the SQLite file `db_path`."""
        self.db_path, self.name, self.holder = Path(db_path), name, holder
        self.ttl_s, self.wait_s, self.on_wait = ttl_s, wait_s, on_wait
        self._stop = threading.Event()
        self._beat: threading.Thread | None = None

    def try_acquire(self) -> str | None:
        """Take the lease if it is free, expired or ours; returns None on success, else the holder."""
        if self.url is not None:
            return self._try_acquire_pg()
        db = connect_leases(self.db_path)
        try:
            db.execute("BEGIN IMMEDIATE")
            row = db.execute("SELECT holder, expires_at FROM leases WHERE name = ?", (self.name,)).fetchone()
            now = time.time()
            if row is not None and row[0] != self.holder and row[1] > now and not _dead_here(row[0]):
                db.execute("ROLLBACK")
                return row[0]
            db.execute("INSERT OR REPLACE INTO leases VALUES (?, ?, ?)", (self.name, self.holder, now + self.ttl_s))
            db.execute("COMMIT")
            return None
        finally:
            db.close()

    def _pg(self) -> Any:
        from ole.storage import postgres
        db = postgres.connect(self.url or "")
        postgres.create(db, postgres.REGISTRY_DDL)
        return db

    def _try_acquire_pg(self) -> str | None:
        db = self._pg()
        try:
            with db.transaction():
                # one statement inserts the row or locks the one there: a separate INSERT … DO NOTHING then
                # SELECT … FOR UPDATE found no row when its holder's release deleted it in between
                # (experiments/storage_concurrency.py, 8 writers)
                holder, expires, now = db.execute(
                    "INSERT INTO leases VALUES (%s, '', 0) ON CONFLICT (name) DO UPDATE SET holder = leases.holder "
                    "RETURNING holder, expires_at, extract(epoch FROM clock_timestamp())::float8",
                    (self.name,)).fetchone()
                if holder not in ("", self.holder) and expires > now and not _dead_here(holder):
                    return str(holder)
                db.execute("UPDATE leases SET holder = %s, expires_at = %s WHERE name = %s",
                           (self.holder, now + self.ttl_s, self.name))
            return None
        finally:
            db.close()

    def hold(self) -> bool:
        """Take the lease now if free (and keep renewing it); False, without waiting, when it is held."""
        if self.try_acquire() is not None:
            return False
        self._start()
        return True

    def acquire(self) -> None:
        """Wait until the lease is ours (at most `wait_s`), then keep renewing it in the background."""
        deadline = time.monotonic() + self.wait_s
        told = None
        while (other := self.try_acquire()) is not None:
            if other != told:
                self.on_wait(other)
                told = other
            if time.monotonic() > deadline:
                raise LeaseTimeout(f"lease `{self.name}` is still held by {other} after {self.wait_s:.0f} s",
                                   hint="a live process is running a proposal round; try again later")
            time.sleep(POLL_S)
        self._start()

    def _start(self) -> None:
        self._stop.clear()
        self._beat = threading.Thread(target=self._renew, name=f"lease:{self.name}", daemon=True)
        self._beat.start()

    def _renew(self) -> None:
        db = self._pg() if self.url is not None else connect_leases(self.db_path)
        try:
            while not self._stop.wait(self.ttl_s / 4):
                if self.url is not None:
                    db.execute("UPDATE leases SET expires_at = extract(epoch FROM clock_timestamp()) + %s "
                               "WHERE name = %s AND holder = %s", (self.ttl_s, self.name, self.holder))
                else:
                    db.execute("UPDATE leases SET expires_at = ? WHERE name = ? AND holder = ?",
                               (time.time() + self.ttl_s, self.name, self.holder))
        finally:
            db.close()

    def release(self) -> None:
        """Stop renewing and free the lease (only if still ours)."""
        self._stop.set()
        if self._beat is not None:
            self._beat.join(timeout=10)
            self._beat = None
        db = self._pg() if self.url is not None else connect_leases(self.db_path)
        try:
            marker = "%s" if self.url is not None else "?"
            db.execute(f"DELETE FROM leases WHERE name = {marker} AND holder = {marker}", (self.name, self.holder))
        finally:
            db.close()

    def __enter__(self) -> "Lease":
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
