"""Where shared state lives: the storage URL (`--storage`, else `$OLE_STORAGE`, else SQLite files).

Two backends keep the registry's journal (events, idempotency keys, the bundle index, blobs,
leases) and the evaluation store (resume rows and the stream counters):

- SQLite (the default, embedded): files under the registry root (`ole.registry.journal`) and
  one file per evolution workspace (`ole.evolve.store`). Nothing to run; one machine.
- PostgreSQL (`postgresql://…`, `ole.storage.postgres`): the same tables in one database every
  machine reaches; blobs are rows of it too (bytea), so nothing but the URL is shared.

`--root` still names the folder of seed files; a trace archive's folder only names its schema in
PostgreSQL (`ole.storage.traces`). The URL only moves what several processes must share. `OLE_STORAGE` is how the choice travels to the processes a command
starts (the CLI exports `--storage` into it), so a Ray worker or an agent process opens the same
storage as its driver.
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ole.registry.backend import JournalBackend

from ole.storage.url import SCHEMES, STORAGE_ENV, is_postgres, redact, storage_url

__all__ = ["SCHEMES", "STORAGE_ENV", "is_postgres", "open_journal", "redact", "storage_url"]


def open_journal(home: Path, url: str | None) -> JournalBackend:
    """The journal of the registry folder `home`: SQLite files there (`url` None), or the PostgreSQL
    database at `url` (imported only then: the SQLite default never loads psycopg)."""
    if url is None:
        from ole.registry.journal import Journal
        return Journal(home)
    from ole.storage.pgjournal import PgJournal
    return PgJournal(url, home)
