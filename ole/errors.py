"""The OLE error tree.

Every error is a caller mistake or a host fault; each carries a `.hint` naming the
next step, so the CLI prints `message (hint: ...)` on one line without a traceback.
A failing agent run is a recorded result (a trace), never one of these.
"""
from __future__ import annotations

from collections.abc import Sequence

from evogym.errors import HintedError, UnknownName


class OleError(HintedError):
    """Base of all OLE errors; `hint` says what to do next."""

    exit_code = 2
    """CLI exit status: 2 = the caller can fix it (bad input, wrong name, conflict)."""


class ValidationError(OleError):
    """An input (a bundle, a YAML document, a flag value) breaks its schema or grammar.

    `details` lists every error found (the message names the first and counts the rest).
    """

    def __init__(self, message: str, *, hint: str = "", details: Sequence[str] = ()) -> None:
        super().__init__(message, hint=hint)
        self.details = tuple(details)


class NotFound(UnknownName, OleError):
    """A name or version did not resolve; `suggestions` holds close known ones."""


class Conflict(OleError):
    """The request contradicts recorded state (an immutable version, a rejected release)."""


class OutOfScope(Conflict):
    """An explicitly named bundle's applicability does not admit the task (run it with --force)."""


class IntegrityError(OleError):
    """Stored registry state is damaged (hash mismatch, missing blob); run `ole fsck`."""

    exit_code = 1


class StorageError(OleError):
    """The disk or database refused a write (full disk, permissions); nothing was changed."""

    exit_code = 1
