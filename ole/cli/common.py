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
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from evogym import cliparser
from ole.errors import ValidationError


@dataclass(frozen=True)
class Output:
    """What a command produced: machine data, human text, exit status."""

    data: object
    text: str
    exit_code: int = 0


def _common() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--root", default=argparse.SUPPRESS,
                        help="registry root (default: $OLE_ROOT, else the project's bundles/)")
    common.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="print JSON")
    common.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                        help="show the traceback of an error")
    return common


COMMON = _common()


def add_global_options(parser: argparse.ArgumentParser) -> None:
    """--root/--json/--debug before the noun; the same flags after the verb override them."""
    parser.add_argument("--root", default=None, help="registry root (default: $OLE_ROOT, else bundles/)")
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.add_argument("--debug", action="store_true", help="show the traceback of an error")


def leaf(subparsers, name: str, handler: Callable[[argparse.Namespace], Output], help: str,
         description: str | None = None) -> argparse.ArgumentParser:
    """Add one verb: a parser with the common options whose handler is `handler`."""
    parser = subparsers.add_parser(name, help=help, description=description or handler.__doc__ or help,
                                   parents=[COMMON], formatter_class=argparse.RawDescriptionHelpFormatter,
                                   allow_abbrev=False)
    parser.set_defaults(handler=handler)
    return parser


def noun(subparsers, name: str, help: str) -> argparse._SubParsersAction:
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

    def __init__(self, option_strings, dest, item=str, **kwargs) -> None:
        kwargs.setdefault("nargs", "+")
        super().__init__(option_strings, dest, **kwargs)
        self.item = item

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        seen = f"_{self.dest}_given"
        items = list(getattr(namespace, self.dest) or ()) if getattr(namespace, seen, False) else []
        for value in values:
            for part in (p.strip() for p in value.split(",")):
                if part:
                    items.append(self._convert(part, option_string))
        setattr(namespace, seen, True)
        setattr(namespace, self.dest, tuple(items))

    def _convert(self, part: str, flag: str | None):
        try:
            return self.item(part)
        except argparse.ArgumentTypeError as exc:
            raise argparse.ArgumentError(self, str(exc)) from None
        except ValueError:
            kind = "an integer" if self.item is int else "valid"
            raise argparse.ArgumentError(self, f"`{part}` is not {kind} (a list is `{flag} 1 2`, `{flag} 1,2` "
                                               f"or `{flag} 1 {flag} 2`)") from None


def check_task_names(envs, profile: str | None = None) -> None:
    """Resolve env slugs (and a host profile) before anything runs or is written.

    evogym's own errors carry the did-you-mean; they become `ValidationError`s (exit 2).
    """
    from evogym.pools import profile as lookup_profile
    from evogym.envs import resolve
    from evogym.errors import EvogymError
    try:
        for env in envs:
            resolve(env)
        if profile is not None:
            lookup_profile(profile)
    except EvogymError as exc:
        raise ValidationError(exc.message, hint=exc.hint or "see `evogym envs`") from None


def check_llm_file(flag: str, spec: str | None) -> None:
    """A `scripted:FILE` / `replay:FILE` model string must name an existing file."""
    for prefix in ("scripted:", "replay:"):
        if spec and spec.startswith(prefix) and not Path(spec[len(prefix):]).expanduser().is_file():
            raise ValidationError(f"{flag} {spec}: no file {spec[len(prefix):]}",
                                  hint=f"{prefix.rstrip(':')} mode reads an existing file")


BUILTIN_PROPOSERS = ("builtin", "random", "tpe")
"""Proposer names that are not LLM model strings (`ole evolve --proposer`)."""


def check_model(flag: str, spec: str | None) -> None:
    """An LLM model string is usable here: a `scripted:`/`replay:` file exists, or (a live litellm
    model) the `llm` extra is installed. Checked before any run starts, so a missing extra is a
    one-line error, not a task that runs without its agent and reports the starting policy's score."""
    if not spec:
        return
    check_llm_file(flag, spec)
    if not spec.startswith(("scripted:", "replay:")):
        from ole.extras import check
        check("llm", f"{flag} {spec} (a live LLM)")


def check_proposer(flag: str, spec: str) -> None:
    """`builtin`, `random`, `tpe` (the `baselines` extra), `scripted:FILE`, `replay:FILE` or a live
    litellm model written as PROVIDER/MODEL. Anything else is refused with the closest name: a typo
    such as `ranom` must not be sent to litellm as a model, fail every proposal, and look like a
    run that found nothing."""
    import difflib
    from evogym.errors import did_you_mean
    from ole.extras import check
    if spec in BUILTIN_PROPOSERS:
        if spec == "tpe":
            check("baselines", f"{flag} tpe")
        return
    if spec.startswith(("scripted:", "replay:")) or "/" in spec.strip("/"):
        check_model(flag, spec)
        return
    close = difflib.get_close_matches(spec, BUILTIN_PROPOSERS, n=1, cutoff=0.6)
    raise ValidationError(f"unknown {flag} `{spec}`",
                          hint=did_you_mean(close) if close else
                          f"one of {', '.join(BUILTIN_PROPOSERS)}, scripted:FILE, replay:FILE, or a live model "
                          "as PROVIDER/MODEL, e.g. openai/gpt-4o-mini")


def check_writable(flag: str, path: str | Path) -> Path:
    """Create `path` (a folder the command will write into) and prove a file can be written there,
    before any task runs: an unwritable --traces-dir must not be found after the task's work is done."""
    import tempfile
    folder = Path(path)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".ole-write-check-"):
            pass
    except OSError as exc:
        raise ValidationError(f"{flag} {folder} is not writable: {exc.strerror or exc}",
                              hint=f"choose a folder you can write, e.g. {flag} ./{folder.name or 'out'}") from None
    return folder


def check_could_write(flag: str, path: str | Path) -> None:
    """`check_writable` without writing anything (`--estimate-only`): the folder, or the nearest
    folder above it that exists, must be a writable folder."""
    folder = Path(path)
    probe = folder
    while not os.path.lexists(probe) and probe != probe.parent:
        probe = probe.parent
    if not probe.is_dir() or not os.access(probe, os.W_OK | os.X_OK):
        what = "is not a folder" if probe.exists() and not probe.is_dir() else "is not writable"
        raise ValidationError(f"{flag} {folder} is not writable: {probe} {what}",
                              hint=f"choose a folder you can write, e.g. {flag} ./{folder.name or 'out'}")


def open_registry(args: argparse.Namespace, *, show_warnings: bool = True):
    """The registry at --root / $OLE_ROOT / bundles/ (auto-registers seeds on first use).

    Root files that were skipped or ignored while seeding are printed to stderr, one
    `ole: warning:` line each; the command itself goes on.
    """
    from ole.registry import Registry
    registry = Registry(getattr(args, "root", None))
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
    return tuple(str(Path(a).resolve()) if not a.startswith("-") and not Path(a).is_absolute() and Path(a).exists()
                 else a for a in argv)
