"""Where the registry lives when no root is named: the project's `bundles/`, else the user's.

The first that applies:

1. `--root DIR`, else `$OLE_ROOT`: used as given. A named root that is missing is an error,
   never a fallback to another registry.
2. The project's `bundles/`: in the current directory or its nearest parent, a `bundles/`
   folder that holds a registry (`.registry/`) or an OLE seed bundle (a `*.yaml` file with a
   top-level `loop_policy:`). Any other `bundles/` (a Ruby project's, a folder of Kubernetes
   YAML) is not a registry and never gets a database written into it. A source checkout is
   such a project, so `make evolve` keeps using `<checkout>/bundles/`.
3. The per-user root, `$XDG_DATA_HOME/ole/bundles` (default `~/.local/share/ole/bundles`):
   created on first use and seeded with the seed bundles shipped inside the package
   (`ole/seeds/*.yaml`); the registry registers them as version 1 on first open.

So an installed `ole` works from any directory, and a project that wants its own registry
makes a `bundles/` folder with a seed in it (or passes `--root`). `choose` also says which
rule applied (`RootChoice.source`): a harness runs its agent inside the run's workspace, where
no project is found, and `ole agent work` there says that it fell back to the per-user root.
"""
from __future__ import annotations

import os
import re
import shutil
import tempfile
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Literal

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


SEED_MARK = re.compile(rb"^loop_policy[ \t]*:", re.MULTILINE)
"""A top-level `loop_policy:` key: what makes a `*.yaml` file an OLE bundle rather than any YAML."""
SEED_SNIFF_BYTES = 256 * 1024
"""How much of a candidate seed file is read to find `SEED_MARK` (bundles are a few KiB)."""


def is_seed_file(path: Path) -> bool:
    """True for a regular `*.yaml` file with a top-level `loop_policy:` key (only regular files are
    opened: a FIFO or a device named `*.yaml` is not a seed and never hangs the search)."""
    try:
        if not path.is_file():
            return False
        with open(path, "rb") as f:
            return SEED_MARK.search(f.read(SEED_SNIFF_BYTES)) is not None
    except OSError:  # unreadable: not a seed this search can vouch for
        return False


def is_project_dir(candidate: Path) -> bool:
    """A `bundles/` folder that holds a registry or at least one OLE seed bundle."""
    if not candidate.is_dir():
        return False
    return (candidate / REGISTRY_DIR).is_dir() or any(is_seed_file(p) for p in sorted(candidate.glob("*.yaml")))


def project_root(start: Path | None = None) -> Path | None:
    """The nearest `bundles/` at or above `start` (default: the current directory) that holds
    OLE seeds or a registry (`is_project_dir`); None outside any project."""
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        candidate = folder / PROJECT_DIR
        if is_project_dir(candidate):
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


RootSource = Literal["--root", "OLE_ROOT", "project", "user"]
"""Which rule of the module docstring chose the root."""


@dataclass(frozen=True)
class RootChoice:
    """The registry root and the rule that chose it."""

    path: Path
    """The root folder (it exists)."""
    source: RootSource
    """`--root` (or the API's `root=`), `OLE_ROOT`, `project` (a `bundles/` at or above the current
    directory) or `user` (the per-user root, no project found)."""

    def describe(self) -> str:
        """One line: the root and why it was chosen."""
        why = {"--root": "given with --root", "OLE_ROOT": f"from ${ROOT_ENV}",
               "project": "the project's bundles/ at or above the current directory",
               "user": f"the per-user root: no project bundles/ at or above {Path.cwd()}"}[self.source]
        return f"registry {self.path} ({why})"


def choose(explicit: str | Path | None = None) -> RootChoice:
    """The registry root and the rule that chose it (see the module docstring for the order)."""
    given = explicit if explicit is not None else os.environ.get(ROOT_ENV) or None
    source: RootSource = "--root" if explicit is not None else "OLE_ROOT"
    if given is not None and str(given).strip() == "":  # `--root ""`: given, and names nothing
        raise NotFound("registry root is empty (from --root)", hint="pass --root DIR, or leave --root out")
    if given:
        root = Path(given)
        if not root.is_dir():
            raise NotFound(f"registry root {root} (from {source}) is not a directory",
                           hint="create it, or pass another --root DIR / OLE_ROOT")
        return RootChoice(root, source)
    project = project_root()
    if project is not None:
        return RootChoice(project, "project")
    return RootChoice(seed_user_root(user_root()), "user")


def resolve(explicit: str | Path | None = None) -> Path:
    """The registry root (see the module docstring for the order)."""
    return choose(explicit).path
