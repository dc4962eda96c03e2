"""Scoped champions: which released bundle a task gets at its boundary, and why.

A bundle's applicability is its scope (`ole.bundle.Applicability`, named by its
`scope_key`). One channel holds a general champion plus any number of scope champions
(`ole.registry.state`). At a task boundary the runner asks `Registry.select(channel,
ctx)`: the **most specific** scope champion whose scope matches the task wins
(`Applicability.specificity`), else the channel's general champion. This module is the
pure part of that decision (ranking, the reason sentence, the out-of-scope refusal of
an explicit bundle, the specialisation check) plus the one place a `TaskContext` is built
from a task; it never reads or writes the registry itself.
"""
from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ole.bundle import GENERAL_SCOPE, Bundle, TaskContext, format_ref, parse_scope
from ole.coverage import evidence_line
from ole.errors import NotFound, OutOfScope, ValidationError
from ole.registry.records import Event, Key, RegisteredBundle, ScopeChampion, Selection
from ole.registry.state import State

if TYPE_CHECKING:
    from evogym.features import EnvFeatures
    from ole.trace import RunCondition, TaskSpec

MAX_LISTED = 3
"""Scopes named one by one in a reason sentence before the rest are counted."""


# ----- ranking and routing ---------------------------------------------------------------

def rank(scopes: Iterable[str]) -> list[str]:
    """Scope keys, most specific first (the total order of `Applicability.specificity`)."""
    return sorted(scopes, key=lambda s: parse_scope(s).specificity())


def _listing(items: list[str]) -> str:
    shown = ", ".join(items[:MAX_LISTED])
    return shown + (f" and {len(items) - MAX_LISTED} more" if len(items) > MAX_LISTED else "")


@dataclass(frozen=True)
class Route:
    """The pure outcome of routing: which scope's champion, the matches, the reason."""

    scope: str
    """Scope key whose champion the task gets (`general` when no scope champion matched)."""
    key: Key
    """That champion's (name, version)."""
    matched: tuple[str, ...]
    """Scope keys whose champion matched the task, most specific first (`general` last)."""
    reason: str
    """The reason sentence (`Selection.reason` before notes on pending changes)."""


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


def selection(channel: str, ctx: TaskContext, found: Route, bundle: RegisteredBundle, *,
              pending_event: Event | None = None) -> Selection:
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


def explicit(bundle: RegisteredBundle, ctx: TaskContext, *, force: bool = False) -> Selection:
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


# ----- the champions of a channel's scopes ------------------------------------------------

def scope_champion(state: State, channel: str, scope: str, stages: Sequence[Event],
                   evaluations: Sequence[Event]) -> ScopeChampion | None:
    """One scope of `channel` as `ole champion show` lists it, or None when it has no champion, no
    pending change and no canary. `stages` are the channel's `stage` events; `evaluations` those of
    the scope's running canary (their monitor looks), empty when none runs."""
    active = state.champion(channel, scope)
    pending = state.is_pending(channel, scope)
    target = state.target(channel, scope) if pending else None
    if active is None and not pending and state.canary(channel, scope) is None:
        return None
    return ScopeChampion(channel=channel, scope=scope, active=format_ref(*active) if active else None,
                         inherited=channel != state.default_channel and (channel, scope) not in state.pointers,
                         pending=format_ref(*target) if target else None,
                         pending_removal=pending and target is None,
                         evidence=evidence_line(state.target_event(channel, scope)),
                         **_stage_of(state.canary(channel, scope), [e for e in stages if e.payload.get("scope") == scope],
                                     evaluations))


def _stage_of(canary: Event | None, steps: list[Event], evaluations: Sequence[Event]) -> dict[str, str | None]:
    """`canary` and `stage` of a ScopeChampion: the running canary and the monitor's last look,
    else how the scope's last stage ended."""
    if canary is not None:
        looks = [e for e in evaluations
                 if e.payload.get("stage") == "monitor-look" and e.payload.get("canary") == canary.seq]
        last = looks[-1].payload if looks else None
        control = canary.payload.get("control") or "the task's champion without it"
        text = (f"canary since #{canary.seq}: takes {canary.payload.get('exposure', 1):.0%} of this scope's task "
                f"boundaries, each rerun by {control}; "
                + (f"{last['n']} monitored pair(s), last look: {last['decision']} ({last['reason']})" if last
                   else "no monitored pair yet"))
        return {"canary": canary.ref, "stage": text}
    ended = [e for e in steps if e.payload.get("stage") in ("promoted", "rolled_back")]
    if ended:
        e = ended[-1]
        return {"canary": None, "stage": f"{e.ref} {e.payload['stage'].replace('_', ' ')} (#{e.seq}): "
                                          f"{e.payload.get('reason', '')}"}
    return {}


# ----- specialisations -------------------------------------------------------------------

def check_specialization(child: Bundle, parent: Bundle) -> None:
    """Raise `ValidationError` unless `child`'s scope is strictly narrower than `parent`'s."""
    c, p = child.applicability, parent.applicability
    if not c.within(p, features_of=features_of):
        raise ValidationError(f"a specialization must stay inside its parent's scope: `{c.scope_key}` is not "
                              f"within `{p.scope_key}`", hint="narrow the parent's applicability, never widen it")
    if p.within(c, features_of=features_of):
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


def features_of(env: str) -> "EnvFeatures | None":
    """The features of an env slug (`evogym.features`: family, space kinds, action dimension,
    horizon), None when the slug is unknown here."""
    from evogym.errors import EnvNotFound
    from evogym.features import features_of as lookup
    try:
        return lookup(env)
    except EnvNotFound:
        return None


def task_context(env: str, host: str, budget: int, model: str | None = None,
                 features: "EnvFeatures | None" = None) -> TaskContext:
    """The `TaskContext` of a task on `env`, with its features (`evogym.features`; given, e.g. read
    from the host's `/info`, or looked up); an unknown env is a `NotFound` with close names."""
    from evogym.errors import EnvNotFound
    from evogym.features import features_of as lookup
    try:
        found = features or lookup(env)
    except EnvNotFound as exc:
        raise NotFound(exc.message, suggestions=exc.suggestions,
                       hint="" if exc.suggestions else exc.hint) from None
    from ole.bundle import validate_data
    return validate_data(TaskContext, {"host": host, "env": env, "family": found.family, "budget": budget,
                                       "model": model, "obs": found.obs, "act": found.act,
                                       "action_dim": found.action_dim, "horizon": found.horizon}, source="task")


def context_for(task: "TaskSpec", condition: "RunCondition") -> TaskContext:
    """The `TaskContext` of a runner task: its budget is the override, else the profile's."""
    from evogym.pools import profile
    from evogym.errors import ConfigError
    try:
        budget = task.budget if task.budget is not None else profile(task.profile).budget
    except ConfigError as exc:
        raise ValidationError(exc.message, hint=exc.hint) from None
    return task_context(task.env, condition.host, budget, condition.model)
