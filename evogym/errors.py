"""The evogym error tree.

Only host faults and caller mistakes raise; a failing policy is a recorded result
(`sandbox.CallResult`), never one of these. Every error carries a `.hint` naming the
next step, so the CLI can print `message` + `hint` without a traceback.
"""
from __future__ import annotations

from collections.abc import Sequence


def did_you_mean(suggestions: Sequence[str]) -> str:
    """The hint for a name that did not resolve: "did you mean `a`?" or "did you mean `a` or `b`?".

    The one wording of both command lines (`evogym`, `ole`) and of their not-found errors.
    """
    return "did you mean " + " or ".join(f"`{s}`" for s in suggestions) + "?"


class HintedError(Exception):
    """An error of either tree (`EvogymError`, `ole.errors.OleError`): a one-line `message` and a
    `hint` that says what to do next; `str()` is `message (hint: ...)`."""

    def __init__(self, message: str, *, hint: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        if self.hint:
            return f"{self.message} (hint: {self.hint})"
        return self.message


class UnknownName(HintedError):
    """A name that did not resolve; `suggestions` holds close known ones, and the hint names them
    unless the caller gave its own (mixed into each tree's not-found error)."""

    def __init__(self, message: str, *, suggestions: Sequence[str] = (), hint: str = "") -> None:
        self.suggestions = tuple(suggestions)
        if not hint and self.suggestions:
            hint = did_you_mean(self.suggestions)
        super().__init__(message, hint=hint)


class EvogymError(HintedError):
    """Base of all evogym errors; `hint` says what to do next."""


class ConfigError(EvogymError):
    """A setting, flag or file given by the caller is invalid or missing."""


class EnvNotFound(UnknownName, EvogymError):
    """An environment id did not resolve; `suggestions` holds close known ids."""


class DataError(EvogymError):
    """A case pool or data file is missing, corrupt, or does not match its hash."""


class SandboxUnavailable(EvogymError):
    """The requested isolation cannot be provided on this machine."""


class ProtocolError(EvogymError):
    """A request or frame violates the host protocol (a host-side contract breach)."""
