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
