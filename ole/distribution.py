"""The installed distribution: its version, and the `evogym` name it shares with another project.

An unrelated PyPI project, `evogym` (Evolution Gym, a soft-robot benchmark), installs a
top-level package also named `evogym`. Installed into one environment, the two overwrite
each other's files, and the failure would surface later as an ImportError deep inside
either. `evogym_conflict()` finds it first, from the installed metadata and the source of
the package that `import evogym` would load (nothing is imported), so both `ole` and the
`evogym` command refuse with one line that says what happened and what to do. Both console
scripts enter through `ole.entry`, which asks here before importing either CLI: `ole`'s own
modules import `evogym` when they load, so this module imports nothing of either package.
"""
from __future__ import annotations

import importlib.metadata
import importlib.util
from pathlib import Path

DISTRIBUTION = "openloopevolve"
"""The name `pip install` knows this project by."""
OTHER_EVOGYM = "evogym"
"""Distribution name of Evolution Gym on PyPI, whose import package is also `evogym`."""
OUR_MARK = "EvoPolicyGym"
"""Words the first line of our `evogym/__init__.py` carries (its docstring names the protocol)."""


def version() -> str:
    """The installed version of openloopevolve, or the source tree's when it is not installed."""
    try:
        return importlib.metadata.version(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        from ole import __version__
        return f"{__version__} (source tree, not installed)"


def _evogym_origin() -> Path | None:
    try:
        spec = importlib.util.find_spec("evogym")
    except (ImportError, ValueError):
        return None
    return Path(spec.origin) if spec is not None and spec.origin else None


def evogym_conflict() -> str | None:
    """One line saying why the `evogym` package here is not (only) ours, or None when it is."""
    try:
        other = importlib.metadata.distribution(OTHER_EVOGYM)
    except importlib.metadata.PackageNotFoundError:
        other = None
    origin = _evogym_origin()
    try:
        ours = origin is not None and OUR_MARK in origin.read_text(encoding="utf-8", errors="replace")[:400]
    except OSError:
        ours = False
    if other is None and ours:
        return None
    where = f"the `evogym` package at {origin.parent}" if origin else "no `evogym` package"
    if other is not None:
        return (f"{where} is shared with the distribution `{other.metadata['Name']}` {other.version}, an unrelated "
                "project (Evolution Gym) that installs a package of the same name as this EvoPolicyGym host "
                f"(hint: use separate virtual environments, or `pip uninstall {OTHER_EVOGYM}` and reinstall "
                f"{DISTRIBUTION} from its source tree or wheel: pip install --force-reinstall PATH)")
    return (f"{where} is not this project's EvoPolicyGym host: it was overwritten or removed "
            f"(hint: reinstall {DISTRIBUTION} from its source tree or wheel: pip install --force-reinstall PATH)")
