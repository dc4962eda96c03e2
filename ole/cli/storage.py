"""`ole storage migrate`: move a registry, its workspaces' stores and trace archives between files and PostgreSQL."""
from __future__ import annotations

import argparse
from dataclasses import asdict
from pathlib import Path

from ole.cli.common import Output, leaf, noun


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add `ole storage migrate`."""
    verbs = noun(subparsers, "storage", "move the registry and evaluation stores between SQLite and PostgreSQL")
    p = leaf(verbs, "migrate", migrate, "copy a registry (SQLite root folder or postgresql:// URL) into an empty one "
                                        "and verify it by content hashes and event sequence")
    p.add_argument("src", metavar="SRC", help="registry root folder (holding .registry/) or postgresql://… URL")
    p.add_argument("dst", metavar="DST", help="an empty destination: a new root folder or a new database's URL")
    p.add_argument("--workdir", action="append", default=[], metavar="DIR", type=Path,
                   help="an evolve workspace whose evaluation store moves too (repeatable; its folder name "
                        "names the store in PostgreSQL)")
    p.add_argument("--traces", action="append", default=[], metavar="DIR", type=Path,
                   help="a trace archive folder that moves too (repeatable; in PostgreSQL its folder's name and its "
                        "parent's name the archive, as --workdir names a store)")


def migrate(args: argparse.Namespace) -> Output:
    """Copy every event (seq kept), key, index row and blob; nothing is written to SRC. Exit 0 when the
    copy reads back identical (same digest, dense seq, every blob hashing to its name)."""
    from ole.storage.migrate import migrate as run
    from ole.storage import redact
    done = run(args.src, args.dst, args.workdir, args.traces)
    lines = [f"copied {done.events} events (seq 1–{done.last_seq}, dense), {done.bundles} versions, "
             f"{done.blobs} blobs from {redact(args.src)} to {redact(args.dst)}",
             f"verified: digest {done.digest[:16]} on both sides"]
    lines += [f"store of {w}: {n} rows copied and compared" for w, n in done.stores.items()]
    lines += [f"traces of {t}: {n} copied and compared by sha256" for t, n in done.traces.items()]
    return Output(asdict(done), "\n".join(lines))
