"""The agent's program: what the workspace starts with and what a submit captures of it.

- `seed_workspace`: an empty `system/` gets the starting program: the operator's
  (`--program DIR`), else, for a session run, the baseline (`evogym/baseline_policy.py`), as
  EvoPolicyGym main starts every run from its benchmark's baseline;
- `program_problem`: why the workspace program cannot be captured at all (upstream's free
  `program_invalid`);
- `snapshot`: the copy of `system/` a charged submit runs (its checkpoint).
"""
from __future__ import annotations

import hashlib
import os
import shutil
import stat
from importlib import resources
from pathlib import Path

from evogym.errors import ConfigError

SNAPSHOT_MAX_FILES = 2000
SNAPSHOT_MAX_BYTES = 64 << 20
SNAPSHOT_SKIP_DIRS = {"__pycache__", ".git", ".pytest_cache", ".mypy_cache", ".ruff_cache"}


class SnapshotError(Exception):
    pass


COPY_CHUNK = 1 << 20


def snapshot(src: Path, dst: Path) -> str:
    """Copy regular files of `src` into the empty directory `dst`: no symlinks, FIFOs or
    devices, no caches, capped (over the caps `dst` is left empty and SnapshotError raised).
    Returns the sha256 of what was copied (every directory's and file's relative path, and each
    file's bytes as written): two snapshots with the same digest are the same tree.

    `dst` exists before the copy so a sandbox can be launched on it meanwhile; a host that
    dies mid-copy leaves a checkpoint without feedback, which the next start records as
    `host_interrupted` and refunds."""
    if os.path.islink(src):  # os.walk follows a linked top folder: the copy would be of whatever it names
        raise SnapshotError(f"{Path(src).name}/ is a symbolic link; it must be a folder in the workspace")
    files = size = 0
    digest = hashlib.sha256()
    for dirpath, dirnames, filenames in os.walk(src, followlinks=False):
        dirnames[:] = sorted(d for d in dirnames if d not in SNAPSHOT_SKIP_DIRS
                             and not os.path.islink(os.path.join(dirpath, d)))
        rel = Path(dirpath).relative_to(src)
        (dst / rel).mkdir(parents=True, exist_ok=True)
        _framed(digest, b"D", rel.as_posix().encode("utf-8", "surrogateescape"))
        for name in sorted(filenames):
            path = Path(dirpath) / name
            st = path.lstat()
            if not path.is_file() or path.is_symlink():
                continue
            files += 1
            size += st.st_size
            if files > SNAPSHOT_MAX_FILES or size > SNAPSHOT_MAX_BYTES:
                for child in list(dst.iterdir()):
                    if child.is_dir() and not child.is_symlink():
                        shutil.rmtree(child)
                    else:
                        child.unlink()
                raise SnapshotError(f"system/ exceeds the snapshot limits ({SNAPSHOT_MAX_FILES} files, "
                                    f"{SNAPSHOT_MAX_BYTES >> 20} MiB)")
            # O_NONBLOCK: a file swapped for a FIFO after the check must not block the host
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                os.close(fd)
                continue
            _framed(digest, b"F", (rel / name).as_posix().encode("utf-8", "surrogateescape"))
            content = hashlib.sha256()
            # never looser than the source (a hard link to a 0600 file stays 0600), always readable to its owner
            mode = (st.st_mode & 0o777) | stat.S_IRUSR
            out = os.open(dst / rel / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
            with os.fdopen(fd, "rb") as f_in, open(out, "wb") as f_out:
                while chunk := f_in.read(COPY_CHUNK):
                    content.update(chunk)
                    f_out.write(chunk)
            digest.update(content.digest())
    return digest.hexdigest()


def program_problem(src: Path) -> str | None:
    """Why the workspace program cannot be captured at all, or None (EvoPolicyGym main's
    `program_invalid`, free there: no submission is made). It must be a folder (not a link)
    holding a regular `policy.py`, within the snapshot limits. Checked before a v3 submit is
    charged; a change between this check and the snapshot is the snapshot's verdict (charged)."""
    if os.path.islink(src) or not os.path.isdir(src):
        return "the program is not a folder of the workspace"
    entry = Path(src) / "policy.py"
    if entry.is_symlink() or not entry.is_file():
        return "the program has no regular file policy.py"
    files = size = 0
    for dirpath, dirnames, filenames in os.walk(src, followlinks=False):
        dirnames[:] = [d for d in dirnames if d not in SNAPSHOT_SKIP_DIRS]
        for name in filenames:
            st = os.lstat(os.path.join(dirpath, name))
            files, size = files + stat.S_ISREG(st.st_mode), size + (st.st_size if stat.S_ISREG(st.st_mode) else 0)
        if files > SNAPSHOT_MAX_FILES or size > SNAPSHOT_MAX_BYTES:
            return (f"the program exceeds the snapshot limits ({SNAPSHOT_MAX_FILES} files, "
                    f"{SNAPSHOT_MAX_BYTES >> 20} MiB)")
    return None


def _framed(h, tag: bytes, data: bytes) -> None:
    h.update(tag + len(data).to_bytes(8, "little") + data)


BASELINE = "baseline_policy.py"


def baseline_source() -> bytes:
    return resources.files("evogym").joinpath(BASELINE).read_bytes()


def seed_workspace(system: Path, program: Path | None, baseline: bool) -> Path | None:
    """Put the starting program into an empty `system/`: the regular files of `program`
    (checked like a submit's snapshot), else the baseline when `baseline`; a `system/` that
    holds anything already (a resumed run) is left alone. Returns what it copied from (None:
    nothing was copied)."""
    if any(system.iterdir()):
        return None
    if program is not None:
        problem = program_problem(program)
        if problem is not None:
            raise ConfigError(f"--program {program}: {problem}", hint="name a folder holding policy.py")
        snapshot(program, system)
        return program
    if baseline:
        (system / "policy.py").write_bytes(baseline_source())
        return system
    return None
