"""The `ole` command: noun then verb (`ole bundle register FILE`), --json everywhere.

Each noun lives in its own module under `ole/cli/` exposing `register(subparsers)`;
adding a noun is one line in `NOUNS`. Errors print one line without a traceback
(`--debug` shows it): exit 2 for a caller mistake, 1 for a host or storage fault.
"""
from __future__ import annotations

import argparse
import json
import signal
import sys
import traceback

from evogym.cliparser import Parser
from ole.cli import agent, bundle, champion, evolve, lineage, registry, report, run, trace
from ole.cli.common import add_global_options, emit
from ole.errors import OleError

NOUNS = [bundle, lineage, champion, registry, run, trace, evolve, report, agent]
"""Modules whose `register(subparsers)` adds their commands, in help order."""


def build_parser() -> argparse.ArgumentParser:
    """The full `ole` parser."""
    from ole.distribution import version
    parser = Parser(prog="ole", description=__doc__.split("\n\n")[0])
    parser.add_argument("--version", action="version", version=f"ole (openloopevolve) {version()}")
    add_global_options(parser)
    parser.set_defaults(handler=None, help_parser=parser)
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module in NOUNS:
        module.register(subparsers)
    return parser


def _terminate_as_interrupt(signum, frame) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    """Entry point of `ole`; returns the exit status."""
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exc:  # argparse already printed its one line (or --help); callers get the status
        return int(exc.code or 0)
    if args.handler is None:  # a bare `ole` or `ole NOUN`: show what can follow
        args.help_parser.print_help()
        return 0
    from ole.distribution import evogym_conflict
    conflict = evogym_conflict()  # before any command imports `evogym` (ole.distribution says why)
    if conflict is not None:
        return _fail(args, conflict, 1, "EvogymConflict")
    # SIGTERM takes the Ctrl-C path, so hosts, pools and workers are cleaned up the same way
    signal.signal(signal.SIGTERM, _terminate_as_interrupt)
    try:
        output = args.handler(args)
    except OleError as exc:
        return _fail(args, str(exc), exc.exit_code, type(exc).__name__)
    except KeyboardInterrupt:
        return _fail(args, "interrupted", 130, "KeyboardInterrupt")
    except Exception as exc:  # noqa: BLE001 - a bug or host fault: still one line unless --debug
        return _fail(args, f"internal error: {type(exc).__name__}: {exc} (rerun with --debug)", 1,
                     type(exc).__name__)
    emit(args, output)
    return output.exit_code


def _fail(args: argparse.Namespace, message: str, code: int, kind: str) -> int:
    if args.debug:
        traceback.print_exc()
    if args.json:
        print(json.dumps({"error": message, "kind": kind, "exit_code": code}))
    print(f"ole: error: {message}", file=sys.stderr)
    return code
