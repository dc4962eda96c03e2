"""Where shared state lives: the storage URL (`--storage`, else `$OLE_STORAGE`, else SQLite files).

Two backends keep the registry's journal (events, idempotency keys, the bundle index, blobs,
leases) and the evaluation store (resume rows and the stream counters):

- SQLite (the default, embedded): files under the registry root (`ole.registry.journal`) and
  one file per evolution workspace (`ole.evolve.store`). Nothing to run; one machine.
- PostgreSQL (`postgresql://…`, `ole.storage.postgres`): the same tables in one database every
  machine reaches; blobs are rows of it too (bytea), so nothing but the URL is shared.

`--root` still names the folder of seed files and the trace archive; the URL only moves what
several processes must share. `OLE_STORAGE` is how the choice travels to the processes a command
starts (the CLI exports `--storage` into it), so a Ray worker or an agent process opens the same
storage as its driver.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ole.registry.backend import JournalBackend

STORAGE_ENV = "OLE_STORAGE"
"""The storage URL every process reads when none is passed (unset or empty: SQLite files)."""
SCHEMES = ("postgresql://", "postgres://")
"""URL prefixes of the PostgreSQL backend (libpq's two spellings)."""


def storage_url(explicit: str | None = None) -> str | None:
    """The chosen storage URL: `explicit`, else `$OLE_STORAGE`; None means SQLite files (the default)."""
    url = explicit if explicit else os.environ.get(STORAGE_ENV, "")
    if not url or url == "sqlite":
        return None
    if not is_postgres(url):
        from ole.errors import ValidationError
        raise ValidationError(f"unknown storage URL {redact(url)!r}: expected postgresql://… or `sqlite`",
                              hint="e.g. --storage postgresql://ole@db.example/ole, or unset OLE_STORAGE for files")
    return url


def is_postgres(url: str) -> bool:
    """True for a PostgreSQL URL."""
    return url.startswith(SCHEMES)


def redact(url: str) -> str:
    """`url` with any password replaced by `***` (for messages and reports)."""
    scheme, sep, rest = url.partition("://")
    userinfo, at, host = rest.rpartition("@")
    if not sep or not at or ":" not in userinfo:
        return url
    return f"{scheme}://{userinfo.split(':', 1)[0]}:***@{host}"


def open_journal(home: Path, url: str | None) -> JournalBackend:
    """The journal of the registry folder `home`: SQLite files there (`url` None), or the PostgreSQL
    database at `url` (imported only then: the SQLite default never loads psycopg)."""
    if url is None:
        from ole.registry.journal import Journal
        return Journal(home)
    from ole.storage.pgjournal import PgJournal
    return PgJournal(url, home)
