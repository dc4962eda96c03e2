"""Widening a scope online, env by env, by watched canaries (issue "Releases that travel", item 3).

At a task boundary of the online driver, a task whose env no scope serves (it would get the
general champion) may lie in a region where a scoped champion's change showed a gain on envs held
out from its search (its gate decision's transfer evidence: a claimed or candidate region,
`ole.transfer`) and lost on none inside. Then the driver widens that champion by **one env** as a
*staged* release (`Registry.widen(kind="canary")`): from this boundary the version runs as the
canary of the one-env scope (the gate decision's host and budget band, that env id), each of its
tasks rerun by the control (what the task would get without it) and judged by the monitor
(`ole.monitor`) like any canary. `promote` makes the version that scope's champion — the scope is
widened by that env, recorded as a `stage` event of the widening release (visible in
`champion show`, the lineage and the report); `rollback` ends the canary, and the env is never
tried for that version again (the widening release names it). A rollback of a promoted widening
removes the one-env scope's pointer: the narrower reach comes back.

Several envs may be on trial at once, one canary per one-env scope: each is judged by its own
monitor on its own env's tasks, so a harmful widening harms only the tasks of its env, and a
user's second new env does not wait for the first one's verdict. A widening canary changes no
scope a proposal round reads (the general champion, the scopes the round's gate bounds), so it
holds no round (`round_holders`); while a canary of a round's own release runs, no env is widened
(what its control would be is about to change). A round's release into a scope where a widening
canary runs ends that canary first (`clear_for_release`): the gate's pairs outweigh a canary's.

Only on a stream whose tasks OLE can rerun: its own stream, or a harness (`ole agent work --online`)
whose recent tasks ran on a profile the host reproduces (`harness_rerunnable`); beside a harness whose
tasks cannot be rerun a canary could never be paired, so never promoted. Never on ties alone: a region is a candidate only where the transfer sample gained (`ole.transfer`).
An env the change lost on (any role) is excluded outright.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ole.bundle import GENERAL_SCOPE, Applicability, TaskContext, format_ref, parse_scope, validate_data

if TYPE_CHECKING:
    from ole.evolve.watching import StreamDriver


def canary_widening(evo: StreamDriver, ctx: TaskContext) -> str | None:
    """Stage a one-env canary widening for the task `ctx` when some scoped champion's transfer evidence
    supports trying its env (module docstring); returns `REF in SCOPE` of what it staged, or None."""
    from ole.coverage import decision_event
    from ole.registry.scopes import features_of, route
    from ole.registry.widening import transfer_regions
    if evo.external and not harness_rerunnable(evo):
        return None  # a harness whose tasks OLE cannot rerun: the canary could never be judged by pairs
    reg, channel = evo.e.registry, evo.e.channel
    state = reg.state()
    champions = state.champions(channel)
    running = reg.canaries(channel)
    if route(channel, ctx, champions).scope != GENERAL_SCOPE or set(running) != set(widening_canaries(evo)):
        return None  # a scope serves the task already, or a round's release is on canary
    found = features_of(ctx.env)
    if found is None:
        return None
    events = reg.events()
    for scope, key in sorted(champions.items()):
        if scope == GENERAL_SCOPE:
            continue
        decision = decision_event(events, key[0], key[1])
        if decision is None:
            continue
        transfer = decision.payload.get("transfer") or {}
        if ctx.env in (transfer.get("excluded") or ()):
            continue
        inside = [r for r in transfer_regions(decision, candidates=True)
                  if parse_scope(r["scope"]).region_admits(found.family, found.obs, found.act, found.action_dim,
                                                           found.horizon)]
        if not inside:
            continue
        target = one_env_scope(decision.payload.get("bound"), ctx.env)
        if target is None or not target.matches_task(ctx):
            continue
        ref = format_ref(*key)
        tried = [e for e in events if e.kind == "release" and e.key == key and e.scope == target.scope_key]
        if tried or target.scope_key in running:
            continue  # this version was tried in this env, or another one is on trial there
        analysis = evo.e.gate.analysis
        evo.e.widen(ref, target.scope_key, f"canary widening: {ctx.env} lies in the transfer region "
                                           f"`{inside[0]['scope']}` of gate decision #{decision.seq}",
                    stage="online", kind="canary", exposure=analysis.exposure, analysis=analysis.digest)
        evo.e.progress(f"{ctx.env}: no scope serves it; {ref} (scope {scope}) gained in its transfer region "
                       f"`{inside[0]['scope']}`: staged as the canary of `{target.scope_key}`")
        return f"{ref} in {target.scope_key}"
    return None


def is_widening(release: Any) -> bool:
    """Whether a release event is a canary widening (`Registry.widen(kind="canary")`)."""
    return release is not None and release.kind == "release" and release.payload.get("widening") == "canary"


def widening_canaries(evo: StreamDriver) -> dict[str, Any]:
    """Scope key -> `stage` event of each canary running on the channel that is a canary widening."""
    reg, channel = evo.e.registry, evo.e.channel
    running = reg.canaries(channel)
    if not running:
        return {}
    releases = {e.seq: e for e in reg.events(kind="release")}
    return {s: e for s, e in running.items() if is_widening(releases.get(int(e.payload.get("release_seq", -1))))}


def round_holders(evo: StreamDriver) -> str | None:
    """Why a proposal round must wait, or None: a release pending or a canary running, widenings
    excepted (module docstring)."""
    reg, channel = evo.e.registry, evo.e.channel
    state = reg.state()
    pending = [s for s in state.scopes(channel) if state.is_pending(channel, s)
               and not is_widening(state.pending.get((channel, s)))]
    if pending:
        return "a release is pending"
    widening = widening_canaries(evo)
    running = [e.ref for s, e in reg.canaries(channel).items() if s not in widening]
    return f"a canary runs ({', '.join(running)})" if running else None


def clear_for_release(evo: StreamDriver, ref: str) -> None:
    """Before a round's release of `ref`: end a widening canary running in the scope the release will
    take (`ole.coverage.bound_for_release`), so that scope has one canary, the gated one."""
    from ole.coverage import bound_for_release, decision_event
    from ole.registry.scopes import features_of
    reg = evo.e.registry
    got = reg.get(ref)
    scope = bound_for_release(got.bundle.applicability, decision_event(reg.events(name=got.name, version=got.version),
                                                                       got.name, got.version), features_of)[0].scope_key
    canary = widening_canaries(evo).get(scope)
    if canary is not None:
        reg.rollback(evo.e.channel, scope=scope, reason=f"widening canary {canary.ref} ended: the gated release "
                     f"{ref} takes scope `{scope}`", key=f"clear|{canary.seq}|{ref}")
        evo.e.progress(f"canary {canary.ref} ({scope}): ended, {ref} was released into its scope by a gate")


RERUN_WINDOW = 8
"""Recent stream tasks `harness_rerunnable` reads."""


def harness_rerunnable(evo: StreamDriver) -> bool:
    """Whether an external harness's stream is one OLE can rerun: at least half of its last `RERUN_WINDOW`
    tasks ran on a profile the host reproduces (the rule a round applies before gating on the stream,
    `ole.evolve.trial.stream_gate_ok`). `evogym suite run` on a host profile is; a harness with its own
    per-submit caps is not. A widening canary's tasks are then paired with the control's reruns; any of
    its tasks that cannot be rerun is judged unpaired (`ole.evolve.watching.canary_look_unpaired`)."""
    from ole.evolve.trial import stream_gate_ok
    return stream_gate_ok([p for _, p in evo.e.store.tasks()][-RERUN_WINDOW:])


def one_env_scope(bound: str | None, env: str) -> Applicability | None:
    """The gate decision's bound (hosts, budget band, models) with its env selector replaced by `env`."""
    if not bound:
        return None
    data: dict[str, Any] = parse_scope(bound).model_dump(mode="json")
    data.update(env_ids=[env], env_families=[], obs_kinds=[], action_kinds=[], min_action_dim=None,
                max_action_dim=None, min_horizon=None, max_horizon=None)
    return validate_data(Applicability, data, source="one-env widening scope")
