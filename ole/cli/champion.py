"""`ole champion show|history|activate`, and the top-level `ole release` / `ole rollback`.

Release and rollback are recorded at once and take effect at the next task boundary,
when a runner calls `Registry.activate_pending`; `ole champion activate` does the same
by hand.
"""
from __future__ import annotations

import argparse
import difflib

from ole.cli.common import Output, leaf, noun, open_registry, parse_time, table
from ole.errors import NotFound
from ole.lineage import Lineage
from ole.registry import DEFAULT_CHANNEL


def register(subparsers) -> None:
    """Add `ole champion ...`, `ole release` and `ole rollback`."""
    verbs = noun(subparsers, "champion", "the active bundle of each channel and its history")
    p = leaf(verbs, "show", show, "the active bundle of a channel and any pending release")
    _channel(p)
    p = leaf(verbs, "history", history, "who was champion when, and why")
    _channel(p)
    p.add_argument("--at", metavar="TIME", help="only the champion at this ISO time (UTC if no zone)")
    p = leaf(verbs, "activate", activate, "apply the pending release now (what a runner does at a task boundary)")
    _channel(p)
    p = leaf(subparsers, "release", release, "release a version on a channel (active from the next task)")
    p.add_argument("ref", metavar="NAME@VERSION")
    p.add_argument("--reason", required=True, help="why (recorded)")
    _channel(p)
    p.add_argument("--force", action="store_true", help="release even though the gate rejected it")
    p = leaf(subparsers, "rollback", rollback, "roll a channel back (to the active version's parent by default)")
    p.add_argument("--to", metavar="NAME@VERSION", help="target version (default: parent of the active one)")
    p.add_argument("--reason", required=True, help="why (recorded)")
    _channel(p)


def _channel(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--channel", default=DEFAULT_CHANNEL, help="release channel (default: %(default)s)")


def _known_channel(state, channel: str) -> None:
    """Reading a channel nothing was ever released on is a typo, not an inherited champion."""
    known = state.channels()
    if channel not in known:
        close = difflib.get_close_matches(channel, known, n=2)
        raise NotFound(f"no channel `{channel}`; channels: {', '.join(known)}", suggestions=close,
                       hint="" if close else "a channel starts with `ole release REF --channel NAME`")


def show(args: argparse.Namespace) -> Output:
    """The active champion and, if different, the version that activates at the next task."""
    with open_registry(args) as registry:
        state = registry.state()
        _known_channel(state, args.channel)
        active = registry.champion(args.channel)
        target = state.target(args.channel)
        pending = registry.get(f"{target[0]}@{target[1]}") if target and target != (active.name, active.version) \
            else None
    data = {"channel": args.channel, "active": active.ref, "pending": pending.ref if pending else None}
    text = f"channel {args.channel}: active {active.ref}"
    if pending:
        event = state.target_event(args.channel)
        text += f"\npending {pending.ref} ({event.kind} #{event.seq}: {event.payload.get('reason', '')}); " \
                "it becomes active at the next task boundary (or `ole champion activate`)"
    return Output(data, text)


def history(args: argparse.Namespace) -> Output:
    """Champion tenures of a channel, plus every release/rollback/activation recorded on it."""
    with open_registry(args) as registry:
        _known_channel(registry.state(), args.channel)
        lineage = Lineage.from_registry(registry)
        events = [e for e in registry.events(channel=args.channel)]
    if args.at:
        tenure = lineage.champion_at(parse_time(args.at), args.channel)
        data = tenure.model_dump(mode="json") if tenure else None
        text = (f"{tenure.ref} was active on {args.channel} at {args.at}: {_why(tenure)}" if tenure
                else f"nothing was registered yet at {args.at}")
        return Output(data, text)
    tenures = lineage.champion_history(args.channel)
    rows = [["since (UTC)", "until (UTC)", "champion", "why"]]
    rows += [[f"{t.since:%Y-%m-%d %H:%M:%S}", f"{t.until:%Y-%m-%d %H:%M:%S}" if t.until else "now", t.ref, _why(t)]
             for t in tenures]
    log = [f"  #{e.seq} {e.ts:%Y-%m-%d %H:%M:%S} {e.kind} {e.ref}"
           f"{' from ' + e.payload['from'] if e.payload.get('from') else ''}"
           f"{': ' + e.payload['reason'] if e.payload.get('reason') else ''}" for e in events]
    data = {"channel": args.channel, "tenures": [t.model_dump(mode="json") for t in tenures],
            "events": [e.model_dump(mode="json") for e in events]}
    return Output(data, table(rows) + "\nevents:\n" + ("\n".join(log) or "  (none)"))


def _why(tenure) -> str:
    if tenure.cause in ("default", "inherited"):
        return "first registered seed (default champion)" if tenure.cause == "default" else "inherited from default"
    return f"{tenure.cause} #{tenure.cause_seq}: {tenure.reason}"


def activate(args: argparse.Namespace) -> Output:
    """Task boundary by hand: activate the pending release or rollback, if any (recorded)."""
    with open_registry(args) as registry:
        _known_channel(registry.state(), args.channel)
        before = registry.champion(args.channel).ref
        active = registry.activate_pending(args.channel)
    changed = active is not None and active.ref != before
    text = f"channel {args.channel}: {before} -> {active.ref}" if changed else \
        f"channel {args.channel}: nothing pending; {before} stays active"
    return Output({"channel": args.channel, "active": active.ref if active else None, "changed": changed}, text)


def release(args: argparse.Namespace) -> Output:
    """Record a release; the version becomes active at the next task boundary."""
    with open_registry(args) as registry:
        entry = registry.release(args.ref, channel=args.channel, reason=args.reason, force=args.force)
        seq = registry.events(kind="release", channel=args.channel)[-1].seq
    return Output({"released": entry.ref, "channel": args.channel, "seq": seq},
                  f"released {entry.ref} on {args.channel} (event #{seq}); active from the next task boundary")


def rollback(args: argparse.Namespace) -> Output:
    """Record a rollback; the target becomes active at the next task boundary."""
    with open_registry(args) as registry:
        entry = registry.rollback(args.channel, to=args.to, reason=args.reason)
        event = registry.events(kind="rollback", channel=args.channel)[-1]
    return Output({"to": entry.ref, "from": event.payload["from"], "channel": args.channel, "seq": event.seq},
                  f"rolled {args.channel} back from {event.payload['from']} to {entry.ref} (event #{event.seq}); "
                  "active from the next task boundary")
