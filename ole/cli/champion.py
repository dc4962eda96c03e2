"""`ole champion show|history|activate`, and the top-level `ole release` / `ole rollback`.

A channel holds a general champion plus scope champions (see docs/registry.md). Release and
rollback are recorded at once and take effect at the next task boundary, when a runner calls
`Registry.select` (or `activate_pending`); `ole champion activate` does the same by hand.
`ole release` acts on the bundle's applicability narrowed to what its last gate decision's
pairs covered (hosts, env ids, budget band; a version never gated keeps its own applicability
and `champion show` says so); `ole rollback --scope S` on one scope only.

    ole champion show --channel default --env gym/acrobot --host builtin --budget 32
"""
from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from ole.bundle import GENERAL_SCOPE, HOSTS, parse_scope
from ole.cli.common import Output, inline, leaf, noun, open_registry, parse_time, table
from ole.errors import NotFound, OleError, ValidationError
from ole.registry import DEFAULT_CHANNEL

if TYPE_CHECKING:
    from ole.registry.records import Tenure


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add `ole champion ...`, `ole release` and `ole rollback`."""
    verbs = noun(subparsers, "champion", "the active bundles of each channel and scope, and their history")
    p = leaf(verbs, "show", show, "a channel's champions and pending releases, or (--env) which bundle a task gets")
    _channel(p)
    p.add_argument("--env", metavar="ENV", help="show which bundle a task on this env would get, and why")
    p.add_argument("--host", default="builtin", choices=HOSTS,
                   help="host agent of that task (default %(default)s)")
    p.add_argument("--budget", type=int, metavar="N", help="episode budget of that task (default: the profile's)")
    p.add_argument("--profile", default="quick", help="host profile whose budget is used without --budget")
    p.add_argument("--model", metavar="M", help="model string of that task's LLM agent")
    p = leaf(verbs, "history", history, "who was champion of a scope when, and why")
    _channel(p)
    _scope(p)
    p.add_argument("--at", metavar="TIME", help="only the champion at this ISO time (UTC if no zone)")
    p = leaf(verbs, "activate", activate,
             "apply the pending releases of every scope now (what a runner does at a task boundary)")
    _channel(p)
    p = leaf(subparsers, "release", release,
             "release a version on a channel, in its applicability's scope bounded by its gate evidence "
             "(active from the next task)")
    p.add_argument("ref", metavar="NAME@VERSION")
    p.add_argument("--reason", required=True, help="why (recorded)")
    _channel(p)
    p.add_argument("--force", action="store_true", help="release even though the gate rejected it")
    p.add_argument("--exposure", type=float, default=None, metavar="P",
                   help="stage it: from the next task boundary it runs as a canary on share P of its scope's "
                        "online-stream tasks, monitored against the control, until promoted or rolled back "
                        "(default: active on every task at once)")
    p = leaf(subparsers, "rollback", rollback,
             "roll one scope of a channel back to what served it before (or end its canary)")
    target = p.add_mutually_exclusive_group()
    target.add_argument("--to", metavar="NAME@VERSION",
                        help="target version (default: what served the scope before the current champion's release)")
    target.add_argument("--to-parent", action="store_true",
                        help="roll back to the active version's lineage parent instead")
    p.add_argument("--force", action="store_true",
                   help="allow a target that was never released nor passed a gate (an unvetted version)")
    p.add_argument("--reason", required=True, help="why (recorded)")
    _channel(p)
    _scope(p)
    p = leaf(verbs, "promote", promote,
             "end the canary running in a scope by promoting it: it becomes the scope's champion now")
    p.add_argument("--reason", required=True, help="why (recorded)")
    _channel(p)
    _scope(p)


def _channel(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--channel", default=DEFAULT_CHANNEL, help="release channel (default: %(default)s)")


def _scope(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--scope", default=GENERAL_SCOPE, type=_scope_key, metavar="SCOPE",
                        help="scope key, e.g. `families=minigrid` (default: %(default)s; see `ole champion show`)")


def _scope_key(text: str) -> str:
    try:
        return parse_scope(text).scope_key
    except OleError as exc:  # argparse prints it as one line, exit 2
        raise argparse.ArgumentTypeError(str(exc)) from None


def show(args: argparse.Namespace) -> Output:
    """The active champions (general and per scope) and pending changes; with --env, which bundle
    a task with those facts would get at the next task boundary and why (nothing is activated)."""
    if not args.env:
        for flag in ("budget", "model"):
            if getattr(args, flag) is not None:
                raise ValidationError(f"--{flag} describes a task and needs --env",
                                      hint="e.g. ole champion show --env gym/acrobot --budget 32")
        return _show_channel(args)
    from ole.registry.scopes import context_for
    from ole.trace import RunCondition, TaskSpec
    ctx = context_for(TaskSpec(env=args.env, profile=args.profile, budget=args.budget),
                      RunCondition(host=args.host, model=args.model))
    with open_registry(args) as registry:
        chosen = registry.select(args.channel, ctx, activate=False)
        champions = registry.scope_champions(args.channel)
        evidence = next((c.evidence for c in champions if c.scope == chosen.scope), None)
        stages = [f"{c.scope}: {c.stage}" for c in champions if c.canary and parse_scope(c.scope).matches_task(ctx)]
    data = {"channel": args.channel, "task": ctx.model_dump(mode="json"), "ref": chosen.ref, "scope": chosen.scope,
            "reason": chosen.reason, "matched": list(chosen.matched), "in_scope": chosen.in_scope,
            "evidence": evidence, "canaries": stages}
    return Output(data, f"{ctx.env} on channel {args.channel}: {chosen.ref} (scope {chosen.scope})\n"
                        f"why: {inline(chosen.reason)}" + (f"\nevidence: {evidence}" if evidence else "")
                  + "".join(f"\nstaged: {line} (an online stream may hand this task to the canary)" for line in stages))


def _show_channel(args: argparse.Namespace) -> Output:
    with open_registry(args) as registry:
        registry.require_channel(args.channel)
        champions = registry.scope_champions(args.channel)
        state = registry.state()
        if not champions:  # an empty registry: nothing is registered, so nothing is champion
            raise NotFound(f"no bundle is registered in {registry.root}, so channel `{args.channel}` has no champion",
                           hint="register one with `ole bundle register FILE` or `ole bundle import FILE`")
    general = champions[0]
    scoped = champions[1:]
    data = {"channel": args.channel, "active": general.active, "pending": general.pending,
            "canary": general.canary, "stage": general.stage, "scopes": [c.model_dump(mode="json") for c in scoped]}
    text = f"channel {args.channel}: active {general.active}"
    if general.stage:
        text += f"\nstage: {general.stage}"
    if general.pending:
        event = state.target_event(args.channel)
        assert event is not None, "a pending change has its release or rollback event"
        staged = event.kind == "release" and event.payload.get("exposure") is not None
        text += f"\npending {general.pending} ({event.kind} #{event.seq}: {inline(event.payload.get('reason', ''))}); " \
            + (f"staged: from the next task boundary it runs as a canary on {float(event.payload['exposure']):.0%} "
               f"of the scope's online-stream tasks, each rerun by {general.active} as control, until the monitor "
               "promotes or rolls it back (`ole champion promote` / `ole rollback` end it by hand)" if staged else
               "it becomes active at the next task boundary (or `ole champion activate`), watched by the monitor "
               "against what served before on its first online-stream tasks")
    if scoped:
        rows = [["scope (most specific first)", "champion", "pending"]]
        rows += [[c.scope, (c.active or "(none)") + (" (inherited from default)" if c.inherited else ""),
                  "removal" if c.pending_removal else (c.pending or "-")] for c in scoped]
        text += "\n" + table(rows)
        text += "".join(f"\n  {c.scope}: {c.evidence}" for c in scoped if c.evidence)
        text += "".join(f"\n  {c.scope} stage: {c.stage}" for c in scoped if c.stage)
    else:
        text += "\nno scope champions: every task gets the general champion"
    return Output(data, text)


def history(args: argparse.Namespace) -> Output:
    """Champion tenures of a channel, plus every release/rollback/activation recorded on it."""
    from ole.registry.lineage import Lineage  # networkx: only this verb needs the graph
    with open_registry(args) as registry:
        registry.require_channel(args.channel)
        lineage = Lineage.from_registry(registry)
        events = [e for e in registry.events(channel=args.channel) if e.scope == args.scope]
    where = args.channel + ("" if args.scope == GENERAL_SCOPE else f" scope {args.scope}")
    if args.at:
        tenure = lineage.champion_at(parse_time(args.at), args.channel, args.scope)
        data = tenure.model_dump(mode="json") if tenure else None
        empty = (f"nothing was registered yet at {args.at}" if args.scope == GENERAL_SCOPE
                 else f"scope {args.scope} had no champion on {args.channel} at {args.at}")
        text = f"{tenure.ref} was active on {where} at {args.at}: {_why(tenure)}" if tenure else empty
        return Output(data, text)
    tenures = lineage.champion_history(args.channel, args.scope)
    rows = [["since (UTC)", "until (UTC)", "champion", "why"]]
    rows += [[f"{t.since:%Y-%m-%d %H:%M:%S}", f"{t.until:%Y-%m-%d %H:%M:%S}" if t.until else "now", t.ref, _why(t)]
             for t in tenures]
    log = [f"  #{e.seq} {e.ts:%Y-%m-%d %H:%M:%S} {e.kind} "
           + (f"removes {e.ref}" if e.payload.get("clear") else
              e.ref + (f" from {e.payload['from']}" if e.payload.get("from") else ""))
           + (f": {inline(e.payload['reason'])}" if e.payload.get("reason") else "") for e in events]
    data = {"channel": args.channel, "scope": args.scope, "tenures": [t.model_dump(mode="json") for t in tenures],
            "events": [e.model_dump(mode="json") for e in events]}
    others = [s for s in lineage.scopes(args.channel) if s != args.scope]
    more = f"\nother scopes: {', '.join(others)} (see --scope)" if others else ""
    return Output(data, f"{where}\n" + table(rows) + "\nevents:\n" + ("\n".join(log) or "  (none)") + more)


def _why(tenure: Tenure) -> str:
    if tenure.cause in ("default", "inherited"):
        return "first registered seed (default champion)" if tenure.cause == "default" else "inherited from default"
    return f"{tenure.cause} #{tenure.cause_seq}: {inline(tenure.reason)}"


def activate(args: argparse.Namespace) -> Output:
    """Task boundary by hand: activate the pending release or rollback of every scope, if any (recorded)."""
    with open_registry(args) as registry:
        registry.require_channel(args.channel)
        before = {c.scope: c.active for c in registry.scope_champions(args.channel)}
        active = registry.activate_pending(args.channel)
        after = {c.scope: c.active for c in registry.scope_champions(args.channel)}
    changes = {s: [before.get(s), after.get(s)] for s in sorted({*before, *after}) if before.get(s) != after.get(s)}
    lines = [f"channel {args.channel}{'' if s == GENERAL_SCOPE else ' scope ' + s}: {a or '(none)'} -> {b or '(none)'}"
             for s, (a, b) in changes.items()]
    text = "\n".join(lines) or f"channel {args.channel}: nothing pending; {before.get(GENERAL_SCOPE)} stays active"
    return Output({"channel": args.channel, "active": active.ref if active else None, "changed": bool(changes),
                   "changes": changes}, text)


def release(args: argparse.Namespace) -> Output:
    """Record a release in the bundle's scope; the version becomes active there at the next task boundary."""
    with open_registry(args) as registry:
        entry = registry.release(args.ref, channel=args.channel, reason=args.reason, force=args.force,
                                 exposure=args.exposure)
        event = registry.events(kind="release", channel=args.channel)[-1]
    from ole.coverage import evidence_line
    scope = event.payload["scope"]
    where = args.channel + ("" if scope == GENERAL_SCOPE else f" scope {scope}")
    evidence = evidence_line(event)
    return Output({"released": entry.ref, "channel": args.channel, "scope": scope, "seq": event.seq,
                   "evidence": event.payload.get("evidence")},
                  f"released {entry.ref} on {where} (event #{event.seq}); "
                  + ("active from the next task boundary, watched by the monitor on its first online-stream tasks "
                     "(rolled back to what served before if harm shows)" if args.exposure is None else
                     f"staged: a canary on {args.exposure:.0%} of its scope's online-stream tasks from the next "
                     "task boundary, until the monitor promotes or rolls it back")
                  + (f"\nevidence: {evidence}" if evidence else ""))


def rollback(args: argparse.Namespace) -> Output:
    """Record a rollback of one scope (or end its canary); it takes effect at the next task boundary."""
    with open_registry(args) as registry:
        canary = registry.canaries(args.channel).get(args.scope)
        entry = registry.rollback(args.channel, scope=args.scope, to=args.to, to_parent=args.to_parent,
                                  force=args.force, reason=args.reason)
        events = [e for e in registry.events(channel=args.channel) if e.kind in ("rollback", "stage")]
        event = events[-1]
    where = args.channel + ("" if args.scope == GENERAL_SCOPE else f" scope {args.scope}")
    if event.kind == "stage":
        control = canary.payload.get("control") if canary is not None else None
        return Output({"ended": entry.ref, "channel": args.channel, "scope": args.scope, "stage": "rolled_back",
                       "seq": event.seq},
                      f"ended the canary {entry.ref} of {where} (event #{event.seq}): its tasks go back to "
                      + (f"{control}" if control else "the scope's champion") + ", which never stopped serving")
    removal = bool(event.payload.get("clear"))
    data = {"to": None if removal else entry.ref, "from": event.payload["from"], "channel": args.channel,
            "scope": args.scope, "removed": removal, "seq": event.seq, "forced": bool(event.payload.get("forced"))}
    if removal:
        text = (f"removes {event.payload['from']} as champion of {where} (event #{event.seq}); from the next task "
                "boundary its tasks fall back to the next matching champion")
    else:
        text = (f"rolled {where} back from {event.payload['from']} to {entry.ref} (event #{event.seq}); "
                "active from the next task boundary")
    return Output(data, text)


def promote(args: argparse.Namespace) -> Output:
    """End a scope's running canary by promoting it (recorded; it serves every task of the scope now)."""
    with open_registry(args) as registry:
        canary = registry.canaries(args.channel).get(args.scope)
        if canary is None:
            from ole.errors import NotFound
            running = sorted(registry.canaries(args.channel))
            raise NotFound(f"no canary runs in scope `{args.scope}` of channel `{args.channel}`",
                           hint=("canaries run in: " + ", ".join(f"`{s}`" for s in running)) if running
                           else "a canary starts at the task boundary after `ole release REF --exposure P`")
        event = registry.stage(args.channel, args.scope, "promoted", reason=args.reason)
    where = args.channel + ("" if args.scope == GENERAL_SCOPE else f" scope {args.scope}")
    return Output({"promoted": canary.ref, "channel": args.channel, "scope": args.scope, "seq": event.seq},
                  f"promoted the canary {canary.ref} to champion of {where} (event #{event.seq})")
