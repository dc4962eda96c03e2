"""Durability of a rename: fsync the directory that holds the new name (stdlib only).

A file written to a temporary name, fsynced and renamed into place is on disk only once the
directory entry is: after `os.replace`, the directory itself must be fsynced. The host's
atomic writes (`evogym.feedback`) and the registry's blob writes (`ole.registry.journal`) both
end this way; this module is kept free of numpy so the registry can use it without loading it.
"""
from __future__ import annotations

import os
from pathlib import Path


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
