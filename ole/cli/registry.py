"""Top-level `ole fsck` and `ole events`: the registry's health and its raw record."""
from __future__ import annotations

import argparse

from pathlib import Path

from ole.cli.common import Output, inline, leaf, open_registry
from ole.errors import ValidationError
from ole.registry.records import EVENT_KINDS

DEFAULT_TRACES = "traces"
"""The trace archive `ole run` and `ole evolve` write by default (relative to the current directory)."""


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add `ole fsck` and `ole events`."""
    p = leaf(subparsers, "fsck", fsck, "check hashes, lineage and pointers; sweep orphans")
    p.add_argument("--no-repair", action="store_true", help="report only: sweep and quarantine nothing")
    p.add_argument("--restore", action="append", default=[], metavar="FILE",
                   help="put back a damaged version's blob from a byte-exact backup copy (repeatable)")
    p.add_argument("--traces-dir", action="append", default=None, metavar="DIR",
                   help="trace archive(s) to check too (repeatable): damaged trace files are moved to DIR/quarantine/ "
                        "(with PostgreSQL storage: the database's archive that DIR's name gives, damaged rows to trace_quarantine), "
                        "and every trace id a gate decision, evaluation or monitor pair names must be in one of them "
                        "(default: none, so the verdict never depends on the working directory; "
                        f"`ole run` and `ole evolve` write to ./{DEFAULT_TRACES})")
    p = leaf(subparsers, "events", events, "the append-only event record, oldest first")
    p.add_argument("--name", help="only events of this bundle name")
    p.add_argument("--kind", choices=EVENT_KINDS)
    p.add_argument("--channel", help="only events of this channel")


def fsck(args: argparse.Namespace) -> Output:
    """Exit 0 when clean, 1 when problems remain."""
    from ole.registry.fsck import with_traces
    from ole.storage.traces import open_archive
    from ole.trace import TraceArchive
    dirs = [Path(d) for d in args.traces_dir or ()]  # only those named: ./traces made the verdict depend on cwd
    archives = [open_archive(d) for d in dirs]  # files, or the database --storage names (`ole.storage.traces`)
    try:
        for d, archive in zip(dirs, archives):
            if not archive.exists():
                raise ValidationError(f"--traces-dir {d} is not a directory" if isinstance(archive, TraceArchive)
                                      else f"--traces-dir {d}: no trace archive {archive.where}",
                                      hint="pass the trace archive to check")
        with open_registry(args, show_warnings=False) as registry:  # fsck lists them as problems
            restored = [f"restored: {registry.restore_blob(f)} from {f}" for f in args.restore]
            report = registry.fsck(repair=not args.no_repair, traces=archives)
        for archive in archives:
            report = with_traces(report, archive, repair=not args.no_repair)
    finally:
        for archive in archives:
            archive.close()
    verb = "would sweep" if args.no_repair else "swept"
    lines = restored + [f"{'clean' if report.ok else 'PROBLEMS'}: {report.bundles} versions, {report.events} events, "
             + (f"{report.traces} traces, " if dirs else "") +
             f"champions {', '.join(f'{c}={r}' for c, r in report.channels.items()) or '-'}"]
    lines += [f"  {c} scope {s}: {r}" for c, scoped in report.scopes.items() for s, r in scoped.items()]
    lines += [f"problem: {p}" for p in report.problems]
    lines += [f"{verb}: {s}" for s in report.swept] + [f"quarantined: {q}" for q in report.quarantined]
    if not dirs and Path(DEFAULT_TRACES).is_dir():
        lines.append(f"note: ./{DEFAULT_TRACES} was not checked; add `--traces-dir {DEFAULT_TRACES}` to check it")
    return Output(report.model_dump(mode="json"), "\n".join(lines), 0 if report.ok else 1)


def events(args: argparse.Namespace) -> Output:
    """Every recorded event (filtered), with its payload's reason or note."""
    with open_registry(args) as registry:
        found = registry.events(name=args.name, kind=args.kind, channel=args.channel)
    lines = [f"#{e.seq} {e.ts:%Y-%m-%d %H:%M:%S} {e.kind:<13} {e.ref}{' on ' + e.channel if e.channel else ''}"
             f"{'  ' + inline(e.payload.get('reason') or e.payload.get('note') or '') if e.payload else ''}".rstrip()
             for e in found]
    return Output([e.model_dump(mode="json") for e in found], "\n".join(lines))
