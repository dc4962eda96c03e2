"""The `ole` command: noun then verb (`ole bundle register FILE`), --json everywhere.

Each noun lives in its own module under `ole/cli/` exposing `register(subparsers)`; adding a
noun is one row in `COMMANDS`. Errors print one line without a traceback (`--debug` shows it):
exit 2 for a caller mistake, 1 for a host or storage fault.

**Only the chosen command's module is imported.** `ole --version` and `ole --help` import
none of them (the top-level help lists each command from `COMMANDS`); `ole bundle list`
imports `ole.cli.bundle` and what its verb needs, never the engine, scipy or networkx. Before
this, every call paid for the whole engine: +0.88 s over `python -c pass` on a quiet machine
for `ole --version` (experiments/results/cli_latency.md has the measurement after).
"""
from __future__ import annotations

import argparse
import importlib
import json
import signal
import sys
import traceback
from collections.abc import Callable
from types import FrameType

from evogym.cliparser import Parser
from ole.cli.common import add_global_options, emit
from ole.errors import OleError

COMMANDS: dict[str, tuple[str, str]] = {
    "bundle": ("bundle", "validate, register and inspect bundles"),
    "lineage": ("lineage", "the version graph of bundles"),
    "champion": ("champion", "the active bundles of each channel and scope, and their history"),
    "release": ("champion", "release a version on a channel, in its applicability's scope bounded by its gate "
                            "evidence (active from the next task)"),
    "rollback": ("champion", "roll one scope of a channel back to what served it before (or end its canary)"),
    "fsck": ("registry", "check hashes, lineage and pointers; sweep orphans"),
    "events": ("registry", "the append-only event record, oldest first"),
    "run": ("run", "work a task (or a suite) with a host agent; prints the trace id"),
    "trace": ("trace", "verified run traces (task, bundle, history, outcome)"),
    "gate": ("gate", "pair a registered version with a champion on unseen tasks and record the gate's decision"),
    "evolve": ("evolve", "evolve the champion offline (archive search) or online (task stream); `evolve ls` lists "
                         "past evolves"),
    "report": ("report", "write a static HTML report: lineage, gate decisions, runs"),
    "agent": ("agent", "run a host agent inside an external harness's workspace"),
    "storage": ("storage", "move the registry and evaluation stores between SQLite and PostgreSQL"),
}
"""Command -> (module under `ole.cli` that registers it, its one-line help), in help order. A
module registering several commands (`champion`: champion, release, rollback) lists them in the
order it adds them; `tests/ole/test_cli_latency.py` checks this table against the modules."""


LIGHT_VERBS = {("evolve", "ls"): "register_ls"}
"""(command, verb) -> the function of the command's module that registers that verb alone: `ole evolve
ls` reads workdirs and needs none of the engine that `ole evolve`'s own flags and defaults import."""


def _chosen(argv: list[str]) -> tuple[str | None, str | None]:
    """The command `argv` names (the first known command word; `--root`'s value is skipped) and the
    word after it."""
    i = 0
    while i < len(argv):
        word = argv[i]
        if word == "--":
            break
        if word in ("--root", "--storage"):
            i += 1
        elif word in COMMANDS:
            return word, argv[i + 1] if i + 1 < len(argv) else None
        i += 1
    return None, None


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The `ole` parser. With `argv`, only the module of the command it names is imported; every
    other command is a help-only entry. Without, every command's module is loaded (the full parser)."""
    from ole.distribution import version
    chosen, verb = _chosen(argv) if argv is not None else (None, None)
    load = {m for m, _ in COMMANDS.values()} if argv is None else ({COMMANDS[chosen][0]} if chosen else set())
    light = LIGHT_VERBS.get((chosen, verb)) if chosen and verb else None
    parser = Parser(prog="ole", description=__doc__.split("\n\n")[0])
    parser.add_argument("--version", action="version", version=f"ole (openloopevolve) {version()}")
    add_global_options(parser)
    parser.set_defaults(handler=None, help_parser=parser)
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    registered: set[str] = set()
    for name, (module, help) in COMMANDS.items():
        if module in registered:
            continue
        if module in load:
            loaded = importlib.import_module(f"ole.cli.{module}")
            getattr(loaded, light or "register")(subparsers)
            registered.add(module)
        else:  # listed in the help; never parsed (a command named on the line has its module loaded)
            subparsers.add_parser(name, help=help, add_help=False)
    return parser


def _terminate_as_interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    """Entry point of `ole`; returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        args = build_parser(argv).parse_args(argv)
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
    exported: list[Callable[[], None]] = []
    try:
        exported.append(_export_storage(args))
        output = args.handler(args)
    except OleError as exc:
        return _fail(args, str(exc), exc.exit_code, type(exc).__name__)
    except KeyboardInterrupt:
        return _fail(args, "interrupted", 130, "KeyboardInterrupt")
    except Exception as exc:  # noqa: BLE001 - a bug or host fault: still one line unless --debug
        return _fail(args, f"internal error: {type(exc).__name__}: {exc} (rerun with --debug)", 1,
                     type(exc).__name__)
    finally:
        for restore in exported:
            restore()
    emit(args, output)
    return output.exit_code


def _export_storage(args: argparse.Namespace) -> Callable[[], None]:
    """Put `--storage` into `$OLE_STORAGE` for the command and every process it starts (a Ray worker, an
    agent, a harness), so all of them open one storage; returns how to restore the variable afterwards
    (`main` is also called in-process, by tests and by `ole.api`)."""
    import os

    from ole.storage import STORAGE_ENV, storage_url
    given = getattr(args, "storage", None)
    if not given:
        return lambda: None
    storage_url(given)  # an unknown scheme is refused here, before any work
    before = os.environ.get(STORAGE_ENV)
    os.environ[STORAGE_ENV] = given

    def restore() -> None:
        if before is None:
            os.environ.pop(STORAGE_ENV, None)
        else:
            os.environ[STORAGE_ENV] = before
    return restore


def _fail(args: argparse.Namespace, message: str, code: int, kind: str) -> int:
    if args.debug:
        traceback.print_exc()
    if args.json:
        print(json.dumps({"error": message, "kind": kind, "exit_code": code}))
    print(f"ole: error: {message}", file=sys.stderr)
    return code
