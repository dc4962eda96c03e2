"""`ole storage migrate`: move a registry and its workspaces' stores between SQLite files and PostgreSQL."""
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


def migrate(args: argparse.Namespace) -> Output:
    """Copy every event (seq kept), key, index row and blob; nothing is written to SRC. Exit 0 when the
    copy reads back identical (same digest, dense seq, every blob hashing to its name)."""
    from ole.storage.migrate import migrate as run
    from ole.storage import redact
    done = run(args.src, args.dst, args.workdir)
    lines = [f"copied {done.events} events (seq 1–{done.last_seq}, dense), {done.bundles} versions, "
             f"{done.blobs} blobs from {redact(args.src)} to {redact(args.dst)}",
             f"verified: digest {done.digest[:16]} on both sides"]
    lines += [f"store of {w}: {n} rows copied and compared" for w, n in done.stores.items()]
    return Output(asdict(done), "\n".join(lines))
