"""A chosen version: the one carrier of "this bundle, under this ref, chosen this way".

A version is chosen at a task boundary (`Registry.select`, an explicit `--bundle`, a canary's
share of a scope), by an evolution driver (the champion, a candidate, an ablation variant), or
by a proposer's caller (a parent). From there the same value travels on: into the evaluation
job (`ole.jobs.EvalJob`), to the worker that runs it (`ole.runner`), into the agent's context
and finally into the trace, which records its ref, hash and selection. Nobody along the way
looks the ref up again: the bundle it carries is the bundle that runs (one route per datum).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import ConfigDict
from pydantic.dataclasses import dataclass

from ole.bundle import Bundle, parse_ref
from ole.errors import ValidationError
from ole.trace import SelectionRecord

if TYPE_CHECKING:
    from ole.registry.records import Selection


@dataclass(frozen=True, config=ConfigDict(extra="forbid"))
class ChosenVersion:
    """A registered bundle and its ref, with how it was chosen when a task boundary chose it.

    Picklable and frozen, so it travels to worker processes (and Ray) inside a job.
    """

    ref: str
    """`NAME@VERSION` of the registered bundle."""
    bundle: Bundle
    """The bundle itself (as stored in the registry): what runs, never looked up again."""
    selection: SelectionRecord | None = None
    """How a task boundary chose it (routing, an explicit name, a canary's share); None where a
    driver picked it (a candidate, a champion paired against it, a proposer's parent)."""

    @property
    def name(self) -> str:
        """The bundle name of the ref."""
        return parse_ref(self.ref)[0]

    @property
    def version(self) -> int:
        """The version number of the ref (a registered ref always has one)."""
        number = parse_ref(self.ref)[1]
        if number is None:
            raise ValidationError(f"ref {self.ref!r} has no version", hint="use NAME@VERSION")
        return number

    @property
    def content_hash(self) -> str:
        """Content hash of the carried bundle (what a store keys its runs by)."""
        return self.bundle.content_hash


def chosen_by(selection: Selection) -> ChosenVersion:
    """The version a task boundary's `Selection` chose (`Registry.select`, an explicit bundle), with
    the selection's record."""
    return ChosenVersion(ref=selection.ref, bundle=selection.bundle.bundle, selection=selection.record())
