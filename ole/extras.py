"""Optional dependencies: the one place a missing one becomes "install the `X` extra".

Each extra of `pyproject.toml` is named after the feature that needs it; `EXTRAS` maps it to
the module that feature imports. `require` imports that module or raises `MissingExtra` (a
caller mistake, exit 2) naming the extra to install; `check` answers the same question
without importing (litellm's import alone takes 6-7 s), so a command can refuse before it
starts work that would need the module later.
"""
from __future__ import annotations

import importlib
import importlib.util
from types import ModuleType

from ole.distribution import DISTRIBUTION
from ole.errors import OleError

EXTRAS: dict[str, str] = {
    "llm": "litellm",          # ole.llm: the LLM coding agent and the LLM proposer (live models)
    "ray": "ray",              # ole.executors: --executor ray
    "baselines": "optuna",     # ole.proposers.baselines: the TPE proposer
    "mlflow": "mlflow",        # ole.tracking: ole evolve --track mlflow
    "postgres": "psycopg",     # ole.storage.postgres: --storage postgresql://… (registry, stores, leases)
}
"""Extra name -> the top-level module it installs."""


class MissingExtra(OleError):
    """A feature was asked for whose optional dependency is not installed."""


def requirement(extra: str) -> str:
    """The extra's requirement as the installed metadata states it (e.g. `litellm<2,>=1.50`), else
    its module name (a source tree that was never installed has no metadata)."""
    import importlib.metadata
    try:
        declared = importlib.metadata.requires(DISTRIBUTION) or []
    except importlib.metadata.PackageNotFoundError:
        declared = []
    marker = f'extra == "{extra}"'
    found = [r.split(";")[0].strip() for r in declared if marker in r and not r.startswith(DISTRIBUTION)]
    return found[0] if len(found) == 1 else EXTRAS[extra]


def install_hint(extra: str) -> str:
    """How to install an extra with a command that works today: `openloopevolve` is not on any package
    index yet, so `pip install 'openloopevolve[llm]'` fails; the extra's own package installs from
    anywhere, and `pip install '.[llm]'` from the source tree."""
    return (f"install the `{extra}` extra: pip install '{requirement(extra)}' (in the source tree: "
            f"pip install '.[{extra}]')")


def _error(extra: str, feature: str) -> MissingExtra:
    return MissingExtra(f"{feature} needs the `{EXTRAS[extra]}` package, which is not installed",
                        hint=install_hint(extra))


def check(extra: str, feature: str) -> None:
    """Raise `MissingExtra` unless the extra's module can be imported (it is not imported here)."""
    try:
        found = importlib.util.find_spec(EXTRAS[extra]) is not None
    except (ImportError, ValueError):  # a broken half-install counts as missing
        found = False
    if not found:
        raise _error(extra, feature)


def require(extra: str, feature: str) -> ModuleType:
    """Import and return the extra's module, or raise `MissingExtra` naming the extra to install."""
    try:
        return importlib.import_module(EXTRAS[extra])
    except ImportError:
        raise _error(extra, feature) from None
