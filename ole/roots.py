"""Where the registry lives when no root is named: the project's `bundles/`, else the user's.

The first that applies:

1. `--root DIR`, else `$OLE_ROOT`: used as given. A named root that is missing is an error,
   never a fallback to another registry.
2. The project's `bundles/`: in the current directory or its nearest parent, a `bundles/`
   folder that holds seed bundles (`*.yaml`) or a registry (`.registry/`). A source
   checkout is such a project, so `make evolve` keeps using `<checkout>/bundles/`.
3. The per-user root, `$XDG_DATA_HOME/ole/bundles` (default `~/.local/share/ole/bundles`):
   created on first use and seeded with the seed bundles shipped inside the package
   (`ole/seeds/*.yaml`); the registry registers them as version 1 on first open.

So a `pip install openloopevolve` works from any directory, and a project that wants its own
registry makes a `bundles/` folder with a seed in it (or passes `--root`).
"""
from __future__ import annotations

import os
import shutil
import tempfile
from importlib import resources
from pathlib import Path

from ole.errors import NotFound, StorageError

ROOT_ENV = "OLE_ROOT"
PROJECT_DIR = "bundles"
"""Folder name of a project's registry root."""
REGISTRY_DIR = ".registry"
USER_SUBDIR = Path("ole") / "bundles"
"""The per-user root below the XDG data home."""


def packaged_seeds() -> list[Path]:
    """The seed bundles shipped inside the package (`ole/seeds/*.yaml`), sorted by name."""
    folder = resources.files("ole").joinpath("seeds")
    return sorted((Path(str(f)) for f in folder.iterdir() if f.name.endswith(".yaml")), key=lambda p: p.name)


def project_root(start: Path | None = None) -> Path | None:
    """The nearest `bundles/` at or above `start` (default: the current directory) that holds
    seeds or a registry; None outside any project."""
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        candidate = folder / PROJECT_DIR
        if candidate.is_dir() and ((candidate / REGISTRY_DIR).is_dir() or any(candidate.glob("*.yaml"))):
            return candidate
    return None


def user_root() -> Path:
    """`$XDG_DATA_HOME/ole/bundles`, else `~/.local/share/ole/bundles` (not created here)."""
    base = os.environ.get("XDG_DATA_HOME") or ""
    home = Path(base) if os.path.isabs(base) else Path.home() / ".local" / "share"
    return home / USER_SUBDIR


def seed_user_root(root: Path) -> Path:
    """Create the per-user root with the packaged seeds, once; an existing root is left as it is.

    The seeds are copied into a temporary sibling that is renamed into place, so two first
    commands racing each other leave one complete root, never a half-copied one.
    """
    if root.is_dir():
        return root
    try:
        root.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=".seeding-", dir=root.parent))
        for seed in packaged_seeds():
            shutil.copyfile(seed, staging / seed.name)
        try:
            staging.rename(root)
        except OSError:  # another process created it first: theirs is complete, ours goes
            shutil.rmtree(staging, ignore_errors=True)
            if not root.is_dir():
                raise
    except OSError as exc:
        raise StorageError(f"cannot create the per-user registry at {root}: {exc}",
                           hint=f"pass --root DIR or set {ROOT_ENV} to a writable folder") from None
    return root


def resolve(explicit: str | Path | None = None) -> Path:
    """The registry root (see the module docstring for the order)."""
    given = explicit if explicit is not None else os.environ.get(ROOT_ENV) or None
    if given is not None and str(given).strip() == "":  # `--root ""`: given, and names nothing
        raise NotFound("registry root is empty (from --root)", hint="pass --root DIR, or leave --root out")
    if given:
        root = Path(given)
        if not root.is_dir():
            source = "--root" if explicit is not None else ROOT_ENV
            raise NotFound(f"registry root {root} (from {source}) is not a directory",
                           hint="create it, or pass another --root DIR / OLE_ROOT")
        return root
    return project_root() or seed_user_root(user_root())
