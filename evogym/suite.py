"""`evogym suite`: many runs across environments (filled in by the suite runner)."""
from __future__ import annotations


def register(sub) -> None:
    """Add the `suite` subcommands to the evogym parser."""
