"""The console scripts `ole` and `evogym`: the name-conflict check first, then the CLI.

`ole`'s modules import `evogym` when they load, so an `evogym` overwritten by the unrelated
Evolution Gym would fail as an ImportError deep inside them; `ole.distribution` finds it
without importing either package, and the scripts refuse with its one line before any CLI
module is imported.
"""
from __future__ import annotations

import sys

from ole.distribution import evogym_conflict


def _refuse_conflict(command: str) -> None:
    problem = evogym_conflict()
    if problem is not None:
        print(f"{command}: error: {problem}", file=sys.stderr)
        sys.exit(1)


def ole_main() -> None:
    """The `ole` console script: refuse a name conflict in one line, else run `ole.cli.main`."""
    _refuse_conflict("ole")
    from ole.cli import main
    sys.exit(main())


def evogym_main() -> None:
    """The `evogym` console script: refuse a name conflict in one line, else run `evogym.cli.main`."""
    _refuse_conflict("evogym")
    from evogym.cli import main
    sys.exit(main())


def session_main() -> None:
    """The `evopolicygym-session` console script (upstream's agent client): the same check first."""
    _refuse_conflict("evopolicygym-session")
    from evogym.session_client import main
    sys.exit(main())
