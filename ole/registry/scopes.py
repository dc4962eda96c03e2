"""Scoped champions: which released bundle a task gets at its boundary, and why.

A bundle's applicability is its scope (`ole.bundle.Applicability`, named by its
`scope_key`). One channel holds a general champion plus any number of scope champions
(`ole.registry_state`). At a task boundary the runner asks `Registry.select(channel,
ctx)`: the **most specific** scope champion whose scope matches the task wins
(`Applicability.specificity`), else the channel's general champion. This module is the
pure part of that decision (ranking, the reason sentence, the out-of-scope refusal of
an explicit bundle, the specialisation check) plus the one place a `TaskContext` is built
from a task; it never reads or writes the registry itself.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict

from ole.bundle import GENERAL_SCOPE, Bundle, TaskContext, format_ref, parse_scope
from ole.errors import NotFound, OutOfScope, ValidationError
from ole.trace import SelectionRecord

if TYPE_CHECKING:
    from ole.registry import RegisteredBundle
    from ole.trace import RunCondition, TaskSpec

Key = tuple[str, int]
MAX_LISTED = 3
"""Scopes named one by one in a reason sentence before the rest are counted."""


@dataclass(frozen=True)
class Selection:
    """The bundle a task gets and why (what `Registry.select` returns)."""

    channel: str
    """Channel the choice was made on."""
    ref: str
    """`NAME@VERSION` of the chosen bundle."""
    scope: str
    """Scope key it was chosen for (`general` for the channel's general champion)."""
    reason: str
    """One sentence: why this bundle, which other champions matched, which did not."""
    bundle: "RegisteredBundle"
    """The chosen registered bundle (hash-checked)."""
    matched: tuple[str, ...] = ()
    """Scope keys whose champion matched the task, most specific first (`general` last)."""
    in_scope: bool = True
    """False only when the bundle's own applicability does not admit the task (a forced explicit
    bundle, or a general champion released before scopes existed with a narrow applicability)."""
    forced: bool = False
    """True when an explicit out-of-scope bundle was run anyway (`--force`)."""
    explicit: bool = False
    """True when the caller named the bundle instead of asking the registry."""

    def record(self) -> SelectionRecord:
        """The small frozen record kept with the trace."""
        return SelectionRecord(ref=self.ref, scope=self.scope, reason=self.reason, forced=self.forced,
                               channel=None if self.explicit else self.channel)


class ScopeChampion(BaseModel):
    """One scope of a channel: its active champion and any change waiting for the next task boundary."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    channel: str
    """Channel asked about."""
    scope: str
    """Scope key (`general` included)."""
    active: str | None
    """`NAME@VERSION` active in this scope now; null when the scope is empty (e.g. after a removal)."""
    inherited: bool
    """True when the channel has no pointer of its own in this scope and follows `default`'s."""
    pending: str | None
    """Version a recorded release/rollback makes active at the next task boundary; null if none."""
    pending_removal: bool
    """True when the next task boundary removes this scope's pointer (a rollback out of the scope)."""
    evidence: str | None = None
    """What bounds the scope's current release: the gate decision and what its pairs covered, or
    that it was released without gate evidence; null when nothing was released there (the seed)."""
    canary: str | None = None
    """`NAME@VERSION` of a staged release running as this scope's canary (null: none)."""
    stage: str | None = None
    """The canary's stage in words: its share of the scope's task boundaries, its control and the
    monitor's last look; or how the scope's last stage ended (promoted, rolled back)."""


# ----- ranking and routing ---------------------------------------------------------------

def rank(scopes) -> list[str]:
    """Scope keys, most specific first (the total order of `Applicability.specificity`)."""
    return sorted(scopes, key=lambda s: parse_scope(s).specificity())


def _listing(items: list[str]) -> str:
    shown = ", ".join(items[:MAX_LISTED])
    return shown + (f" and {len(items) - MAX_LISTED} more" if len(items) > MAX_LISTED else "")


@dataclass(frozen=True)
class Route:
    """The pure outcome of routing: which scope's champion, the matches, the reason."""

    scope: str
    key: Key
    matched: tuple[str, ...]
    reason: str


def route(channel: str, ctx: TaskContext, champions: dict[str, Key]) -> Route:
    """Pick the most specific champion in `champions` (scope key -> version) matching `ctx`.

    Falls back to the `general` entry; raises `NotFound` when there is none (an empty registry).
    """
    scoped = rank(s for s in champions if s != GENERAL_SCOPE)
    matched = [s for s in scoped if parse_scope(s).matches_task(ctx)]
    missed = [f"`{s}`: {parse_scope(s).mismatch(ctx)}" for s in scoped if s not in matched]
    general = champions.get(GENERAL_SCOPE)
    ref = lambda s: format_ref(*champions[s])  # noqa: E731
    not_matching = f"; not matching: {_listing(missed)}" if missed else ""
    if matched:
        win = matched[0]
        others = [f"`{s}` ({ref(s)})" for s in matched[1:]]
        if general is not None:
            others.append(f"the general champion {ref(GENERAL_SCOPE)}")
        reason = (f"{ref(win)} is the champion of scope `{win}` on channel `{channel}`, the most specific of "
                  f"{len(matched)} scope(s) matching {ctx.describe()}")
        reason += (f"; it ranks above {_listing(others)}" if others else "") + not_matching
        return Route(scope=win, key=champions[win], matched=tuple(matched) + ((GENERAL_SCOPE,) if general else ()),
                     reason=reason)
    if general is None:
        raise NotFound(f"channel `{channel}` has no champion for {ctx.describe()}",
                       hint="register a seed bundle (bundles/*.yaml) or release a general one")
    lead = (f"no scope champion on channel `{channel}` matches" if missed
            else f"channel `{channel}` has no scope champions for")
    reason = f"{lead} {ctx.describe()}, so it gets the general champion {ref(GENERAL_SCOPE)}{not_matching}"
    return Route(scope=GENERAL_SCOPE, key=general, matched=(GENERAL_SCOPE,), reason=reason)


def selection(channel: str, ctx: TaskContext, found: Route, bundle: "RegisteredBundle", *,
              pending_event=None) -> Selection:
    """A `Selection` for a routed choice; notes a not-yet-activated choice (`pending_event`, the
    release or rollback that the next task boundary applies) and a bundle whose own
    applicability disagrees with its scope pointer (a pre-scope general release)."""
    why_not = bundle.bundle.applicability.mismatch(ctx)
    reason = found.reason
    if pending_event is not None:
        reason += (f" (pending: {pending_event.kind} #{pending_event.seq} becomes active at the next task "
                   "boundary)")
    reason += f" (its own applicability does not admit the task: {why_not})" if why_not else ""
    return Selection(channel=channel, ref=bundle.ref, scope=found.scope, reason=reason, bundle=bundle,
                     matched=found.matched, in_scope=why_not is None)


def explicit(bundle: "RegisteredBundle", ctx: TaskContext, *, force: bool = False) -> Selection:
    """Selection of a bundle the caller named; refuses one whose scope does not admit the task.

    Raises `OutOfScope` (exit 2) unless `force`; with `force` the run goes ahead and the
    selection says so (`forced=True`), which the runner records with the trace.
    """
    applicability = bundle.bundle.applicability
    why_not = applicability.mismatch(ctx)
    scope = applicability.scope_key
    if why_not is None:
        reason = f"{bundle.ref} was named explicitly and its scope `{scope}` admits {ctx.describe()}"
        return Selection(channel="", ref=bundle.ref, scope=scope, reason=reason, bundle=bundle, explicit=True)
    if not force:
        raise OutOfScope(f"{bundle.ref} does not apply to {ctx.describe()}: {why_not}",
                         hint="drop --bundle to get the champion for this task, or pass --force to run it anyway")
    reason = f"{bundle.ref} was named explicitly and forced although its scope `{scope}` excludes the task: {why_not}"
    return Selection(channel="", ref=bundle.ref, scope=scope, reason=reason, bundle=bundle, in_scope=False,
                     forced=True, explicit=True)


# ----- specialisations -------------------------------------------------------------------

def check_specialization(child: Bundle, parent: Bundle) -> None:
    """Raise `ValidationError` unless `child`'s scope is strictly narrower than `parent`'s."""
    c, p = child.applicability, parent.applicability
    if not c.within(p, family_of=family_of):
        raise ValidationError(f"a specialization must stay inside its parent's scope: `{c.scope_key}` is not "
                              f"within `{p.scope_key}`", hint="narrow the parent's applicability, never widen it")
    if p.within(c, family_of=family_of):
        raise ValidationError(f"a specialization must be strictly narrower than its parent: `{c.scope_key}` "
                              f"admits the same tasks as `{p.scope_key}`",
                              hint="narrow hosts, env families/ids, budget range or model families, "
                                   "or register it with another edge")
    if c.specificity() >= p.specificity():  # routing must prefer the child wherever both match
        raise ValidationError(f"scope `{c.scope_key}` is narrower than `{p.scope_key}` but would not rank as "
                              "more specific (it lists more values than its parent)",
                              hint="list fewer env ids / model families, see docs/registry.md (specificity)")


# ----- task contexts ---------------------------------------------------------------------

@functools.cache
def family_of(env: str) -> str | None:
    """Env family of a slug as the host defines it (`evogym.envs`), None when the slug is unknown."""
    from evogym.envs import resolve
    from evogym.errors import EnvNotFound
    try:
        return resolve(env).family
    except EnvNotFound:
        return None


def task_context(env: str, host: str, budget: int, model: str | None = None) -> TaskContext:
    """The `TaskContext` of a task on `env`; an unknown env is a `NotFound` with close names."""
    from evogym.envs import resolve
    from evogym.errors import EnvNotFound
    try:
        family = resolve(env).family
    except EnvNotFound as exc:
        raise NotFound(exc.message, suggestions=exc.suggestions,
                       hint="" if exc.suggestions else exc.hint) from None
    from ole.bundle import validate_data
    return validate_data(TaskContext, {"host": host, "env": env, "family": family, "budget": budget,
                                       "model": model}, source="task")


def context_for(task: "TaskSpec", condition: "RunCondition") -> TaskContext:
    """The `TaskContext` of a runner task: its budget is the override, else the profile's."""
    from evogym.pools import profile
    from evogym.errors import ConfigError
    try:
        budget = task.budget if task.budget is not None else profile(task.profile).budget
    except ConfigError as exc:
        raise ValidationError(exc.message, hint=exc.hint) from None
    return task_context(task.env, condition.host, budget, condition.model)
