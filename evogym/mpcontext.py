"""The forkserver context of every process pool (hidden evaluation's, the OLE local executor's).

Python 3.11's forkserver listens on a Unix socket under a folder it makes in the temporary
directory (`$TMPDIR/pymp-XXXXXXXX/listener-XXXXXXXX`). A Unix socket path holds at most 108
bytes, so a deep `TMPDIR` (a CI job's scratch folder, a test's tmp_path, a harness's per-task
folder) made every pool fail with `OSError: AF_UNIX path too long`, and a run's finalization with
it. Python 3.13 falls back to `/tmp` by itself; this does the same for the versions before it,
once per process, before the first pool starts. Standard library only: `ole` imports it at start.
"""
from __future__ import annotations

import multiprocessing
import os
import tempfile
from multiprocessing import context, util

SOCKET_PATH_MAX = 107
"""Bytes a Unix socket path may hold (sun_path is 108 with its terminating NUL)."""
LISTENER_TAIL = len("/pymp-xxxxxxxx/listener-xxxxxxxx")
"""What multiprocessing appends to the temporary directory for its listener's address."""
SHORT_CANDIDATES = ("/tmp", "/var/tmp", "/dev/shm")
"""Where a pool's socket folder goes when the temporary directory is too deep for one."""


def fits(base: str) -> bool:
    """Whether a listener under `base` stays within the Unix socket path limit."""
    return len(os.fsencode(base)) + LISTENER_TAIL <= SOCKET_PATH_MAX


def forkserver() -> context.BaseContext:
    """The forkserver context, with multiprocessing's socket folder where its socket path fits.

    The folder is chosen once per process (multiprocessing keeps it in the process's config and
    removes it at exit): the temporary directory when it is shallow enough, else the first of
    `SHORT_CANDIDATES` that is a writable folder. With none, multiprocessing's own error stands.
    """
    config = getattr(multiprocessing.current_process(), "_config", {})  # where multiprocessing keeps it
    if config.get("tempdir") is None:
        base = tempfile.gettempdir()
        if not fits(base):
            short = next((p for p in SHORT_CANDIDATES
                          if os.path.isdir(p) and os.access(p, os.W_OK | os.X_OK) and fits(p)), None)
            if short is not None:
                previous = tempfile.tempdir
                tempfile.tempdir = short
                try:
                    util.get_temp_dir()  # made (and kept for this process) under the short folder
                finally:
                    tempfile.tempdir = previous
    return multiprocessing.get_context("forkserver")
