"""Files written durably and read back safely (stdlib only).

Writing: durability of a rename, fsync the directory that holds the new name.

A file written to a temporary name, fsynced and renamed into place is on disk only once the
directory entry is: after `os.replace`, the directory itself must be fsynced. The host's
atomic writes (`evogym.feedback`) and the registry's blob writes (`ole.registry.journal`) both
end this way; this module is kept free of numpy so the registry can use it without loading it.

Reading: a file in a workspace an agent can write may be anything (a FIFO that never answers, a
link to `/dev/zero`, four gigabytes): `read_regular` opens it without blocking or following a
final link, reads only a regular file and at most `limit` bytes of it. The host's finalization,
its feedback recovery and report, and OLE's agent side read such files through it.
"""
from __future__ import annotations

import os
import stat
from pathlib import Path

SUMMARY_MAX_BYTES = 4 << 20
"""Largest feedback summary read back (one per submit, returns of at most a few hundred episodes)."""


class NotRegularFile(OSError):
    """The path names a FIFO, a device, a socket or a folder (never read)."""


class TooLarge(ValueError):
    """The file is longer than the reader's limit (not read past it)."""


def read_regular(path: str | Path, limit: int, *, follow: bool = False) -> bytes:
    """The bytes of the regular file `path`, which must be at most `limit` long.

    Opened non-blocking (a FIFO never stalls the reader), not through a final symbolic link unless
    `follow`, and checked with fstat after opening (a file swapped meanwhile is what is checked).
    Raises `OSError` when it cannot be opened or read, `NotRegularFile` (an OSError) for anything
    but a regular file, `TooLarge` (a ValueError) past `limit`.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow else os.O_NOFOLLOW))
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise NotRegularFile(f"{path} is not a regular file")
        chunks, got = [], 0
        while got <= limit:
            chunk = os.read(fd, min(1 << 16, limit + 1 - got))
            if not chunk:
                break
            chunks.append(chunk)
            got += len(chunk)
    finally:
        os.close(fd)
    if got > limit:
        raise TooLarge(f"{path} is larger than {limit} bytes")
    return b"".join(chunks)


def fsync_dir(path: Path) -> None:
    """Flush the directory entry changes under `path` (a rename into it, a new file) to disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: Path, data: bytes | str, *, durable: bool = True, mode: int | None = None) -> None:
    """Write `data` (str: UTF-8) to `path` so a reader sees the old file or the new one, never a torn
    one: a uniquely named temporary beside it (created 0600, never over an existing name), written,
    fsynced, given `mode`, renamed over `path`, then the directory fsynced. `durable=False` skips both
    fsyncs (still atomic, not yet on disk: caches, pages, files whose caller syncs the folder later).
    The temporary is removed when anything fails. The one atomic write of evogym and OLE; the
    registry's blob writes (`ole.registry.journal`) keep their own for their crash-injection points."""
    import tempfile
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data.encode("utf-8") if isinstance(data, str) else data)
            if durable:
                handle.flush()
                os.fsync(handle.fileno())
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    if durable:
        fsync_dir(path.parent)
