"""Shared plumbing for CLI noun modules: leaf parsers, registry opening, output.

A verb handler takes the parsed args and returns an `Output`: `data` (JSON-able, printed
with --json) and `text` (printed otherwise). Handlers never print or exit themselves, so
every command gets --json, and errors are rendered in one place (`ole.cli.main`).
"""
from __future__ import annotations

import argparse
import json
import re
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from evogym import cliparser
from ole.errors import ValidationError
from ole.preflight import (check_could_write, check_llm_file, check_model, check_proposer,  # noqa: F401 - re-exported
                           check_task_names, check_writable)

if TYPE_CHECKING:
    from ole.gate import GateDecision
    from ole.registry import Registry


@dataclass(frozen=True)
class Output:
    """What a command produced: machine data, human text, exit status."""

    data: object
    text: str
    exit_code: int = 0


ROOT_HELP = ("registry root (default: $OLE_ROOT, else the nearest bundles/ at or above the current directory "
             "holding seed bundles or a .registry/, else the per-user root ~/.local/share/ole/bundles)")
"""The one help text of --root: the root search of `ole.roots`, in order."""
STORAGE_HELP = ("where the registry, evaluation stores, trace archives and leases live: postgresql://… (shared by "
                "every machine that reaches it), or `sqlite` (files under --root, the default); default: $OLE_STORAGE")
"""The one help text of --storage (`ole.storage`); --root still names the seed files (with PostgreSQL, a trace folder
only names its archive: `ole.storage.traces`)."""


def _common() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--root", default=argparse.SUPPRESS, help=ROOT_HELP)
    common.add_argument("--storage", default=argparse.SUPPRESS, metavar="URL", help=STORAGE_HELP)
    common.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="print JSON")
    common.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                        help="show the traceback of an error")
    return common


COMMON = _common()


def add_global_options(parser: argparse.ArgumentParser) -> None:
    """--root/--json/--debug before the noun; the same flags after the verb override them."""
    parser.add_argument("--root", default=None, help=ROOT_HELP)
    parser.add_argument("--storage", default=None, metavar="URL", help=STORAGE_HELP)
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.add_argument("--debug", action="store_true", help="show the traceback of an error")


def leaf(subparsers: argparse._SubParsersAction, name: str, handler: Callable[[argparse.Namespace], Output], help: str,
         description: str | None = None) -> argparse.ArgumentParser:
    """Add one verb: a parser with the common options whose handler is `handler`."""
    parser = subparsers.add_parser(name, help=help, description=description or handler.__doc__ or help,
                                   parents=[COMMON], formatter_class=argparse.RawDescriptionHelpFormatter,
                                   allow_abbrev=False)
    parser.set_defaults(handler=handler)
    return parser


def noun(subparsers: argparse._SubParsersAction, name: str, help: str) -> argparse._SubParsersAction:
    """Add a noun (`ole bundle ...`) and return the sub-parsers for its verbs; the noun alone
    (`ole bundle`) prints its help (`evogym.cliparser.noun`)."""
    return cliparser.noun(subparsers, name, help, dest="verb", handler=None)


def seed_int(text: str) -> int:
    """An argparse type for seeds: an integer >= 0 (random generators refuse negative seeds, so
    `--seed -1` would otherwise fail inside the run, after a host was started)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"`{text}` is not an integer") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"a seed must be >= 0, got {value}")
    return value


class ListArg(argparse.Action):
    """The one convention for list flags: `--envs a b`, `--envs a,b` and `--envs a --envs b` all give
    `(a, b)` (the three spellings older commands used stay accepted). `item` converts each value
    (`int` for pool seeds and budgets); a bad one is a one-line error naming the flag."""

    def __init__(self, option_strings: Sequence[str], dest: str, item: Callable[[str], object] = str,
                 **kwargs: Any) -> None:
        kwargs.setdefault("nargs", "+")
        super().__init__(option_strings, dest, **kwargs)
        self.item = item

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: str | Sequence[str] | None, option_string: str | None = None) -> None:
        seen = f"_{self.dest}_given"
        items = list(getattr(namespace, self.dest) or ()) if getattr(namespace, seen, False) else []
        for value in [values] if isinstance(values, str) else values or ():
            for part in (p.strip() for p in value.split(",")):
                if part:
                    items.append(self._convert(part, option_string))
        setattr(namespace, seen, True)
        setattr(namespace, self.dest, tuple(items))

    def _convert(self, part: str, flag: str | None) -> object:
        try:
            return self.item(part)
        except argparse.ArgumentTypeError as exc:
            raise argparse.ArgumentError(self, str(exc)) from None
        except ValueError:
            kind = "an integer" if self.item is int else "valid"
            raise argparse.ArgumentError(self, f"`{part}` is not {kind} (a list is `{flag} 1 2`, `{flag} 1,2` "
                                               f"or `{flag} 1 {flag} 2`)") from None


HARNESS_WORKSPACE = "EVOPOLICYGYM_WORKSPACE"
"""Set by a harness (`evogym run`, `evogym suite run`) for the agent it starts in a run's workspace."""


def open_registry(args: argparse.Namespace, *, show_warnings: bool = True) -> Registry:
    """The registry at --root / $OLE_ROOT / the project's bundles/ / the per-user root (`ole.roots`;
    seeds are registered on first use).

    Root files that were skipped or ignored while seeding are printed to stderr, one
    `ole: warning:` line each; the command itself goes on. Under a harness (its workspace variable
    set), falling back to the per-user root is said too: the agent runs in the run's workspace, so
    the project it was launched from is not found, and it would otherwise be used silently.
    """
    from ole.registry import Registry
    from ole.roots import choose
    choice = choose(getattr(args, "root", None))
    if choice.source == "user" and os.environ.get(HARNESS_WORKSPACE):
        print(f"ole: warning: {choice.describe()}: a harness runs its agent in the run's workspace, where your "
              "project's bundles/ is not found (hint: pass --root DIR or set OLE_ROOT=DIR to use it)",
              file=sys.stderr, flush=True)
    registry = Registry(choice.path, storage=getattr(args, "storage", None))
    for line in registry.warnings if show_warnings else ():
        print(f"ole: warning: {line}", file=sys.stderr, flush=True)
    for line in registry.bounded_on_open:  # recorded as events: said once, always
        print(f"ole: {line}", file=sys.stderr, flush=True)
    return registry


def parse_time(text: str) -> datetime:
    """ISO date or time; without a zone it is read as UTC."""
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise ValidationError(f"bad time `{text}`", hint="use ISO 8601, e.g. 2026-11-30 or 2026-11-30T12:00Z") from None
    return when if when.utcoffset() is not None else when.replace(tzinfo=timezone.utc)


_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def inline(text: object) -> str:
    """A stored free text (a note, a reason, a name from an import) for one line of output: every
    control character, newlines included, shown escaped (`\\n`, `\\x1b`): a reason could otherwise
    print a forged event line or drive the terminal."""
    return re.sub(r"[\x00-\x1f\x7f-\x9f]", lambda m: repr(m.group())[1:-1], str(text))


def emit(args: argparse.Namespace, output: Output) -> None:
    """Print an output as JSON (--json) or text (control characters other than newlines and tabs
    escaped: no terminal escape sequence from stored text reaches the terminal)."""
    text = json.dumps(output.data, indent=2, default=str) if getattr(args, "json", False) \
        else _CONTROLS.sub(lambda m: repr(m.group())[1:-1], output.text)
    if not text:
        return
    try:
        print(text, flush=True)
    except BrokenPipeError:  # `ole ... | head`: the reader left; not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def table(rows: list[list[str]]) -> str:
    """Left-aligned columns separated by two spaces."""
    if not rows:
        return ""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows)


def agent_command(kind: str, trailing: list[str] | None, flag: str | None = None, *,
                  example: str) -> tuple[str, ...] | None:
    """The command agent's argv from a trailing `-- CMD ...` (or a quoted `--agent-command`).

    One parser for `ole run --agent command` and `ole evolve --host command`: the command
    runs in each run's workspace, so paths the user gave relative to their own directory
    (`.venv/bin/python`, `agent.py`) are made absolute here. Other kinds take no command.
    """
    import shlex
    from pathlib import Path
    argv = list(trailing or [])
    if argv[:1] == ["--"]:
        argv = argv[1:]
    if kind != "command":
        if argv or flag:
            raise ValidationError(f"a command line is only used by the command agent, not {kind!r}",
                                  hint="drop it, or pick the command agent")
        return None
    if argv and flag:
        raise ValidationError("give the command once: either -- CMD ... or --agent-command")
    argv = argv or (shlex.split(flag) if flag else [])
    if not argv:
        raise ValidationError("the command agent needs a command", hint=f"e.g. {example}")
    _check_program(argv[0])
    return tuple(str(Path(a).resolve()) if not a.startswith("-") and not Path(a).is_absolute() and Path(a).exists()
                 else a for a in argv)


def _check_program(program: str) -> None:
    """The command agent's program must exist and be executable before a host is started: otherwise
    every run fails inside the host with the reason only in the run's agent log."""
    import shutil
    if "/" not in program:
        if shutil.which(program) is None:
            raise ValidationError(f"the command agent's program `{program}` is not on PATH",
                                  hint="check the spelling, or give its path (e.g. ./my_agent.sh, .venv/bin/python)")
        return
    path = Path(program)
    if not path.is_file() or not os.access(path, os.X_OK):
        what = "does not exist" if not path.exists() else "is not an executable file"
        raise ValidationError(f"the command agent's program {program} {what}",
                              hint="give an executable file, or run a script through its interpreter: -- python x.py")


def next_command(args: argparse.Namespace, *words: str) -> str:
    """`ole WORDS...` as the user should type it next: with the `--root` this command was given, so a
    hint never sends them to another registry (the root search of a later command may find another)."""
    import shlex
    root = getattr(args, "root", None)
    return shlex.join(["ole", *(["--root", str(root)] if root else []), *words])


def decision_lines(d: GateDecision) -> list[str]:
    """A gate decision (`ole.gate.GateDecision`) for people: the verdict with its statistics, then
    each criterion (`ok` or what failed, measured vs required), what the pairs covered, the ablation."""
    from ole.gate import ci_text
    s = d.stats
    looks = f", {len(d.looks)} looks" if len(d.looks) > 1 else ""
    alpha = d.alpha_applied if d.alpha_applied is not None else d.config.alpha
    lines = [f"{d.verdict.upper()} (mean r {s.mean_r:+.3f}, {ci_text(s)}, win rate {s.win_rate:.2f}, "
             f"p={s.p_value:.4f} at alpha {alpha:.4g}, worst r {s.worst_r:+.3f}{looks})"]
    lines += [f"  {c.name:<8} {'ok' if c.passed else 'FAILED: ' + '; '.join(c.reasons)}" for c in d.criteria]
    lines.append(f"  covered: {d.evidence().describe()}")
    if d.ablation is not None and d.ablation.steps:
        lines.append(f"  {d.ablation.describe()}")
    return lines
