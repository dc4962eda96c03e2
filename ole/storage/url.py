"""The storage URL: which backend, and how a URL is shown (without its password)."""
from __future__ import annotations

import os

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
