"""The argument parser of both command lines (`evogym`, `ole`): one-line errors with a hint.

argparse's own errors become one line, `PROG: error: MESSAGE (hint: ...)`, exit status 2: an
unknown command or choice names the closest one (`unknown command `sevre` (hint: did you mean
`serve`?)`), an unknown option points at the help. Prefixes of long options are refused
(`allow_abbrev=False`): `--profil` is a typo, not `--profile`. Subparsers inherit the class, so
every level of a noun-then-verb command line behaves the same.
"""
from __future__ import annotations

import argparse
import difflib
import re
import sys
from typing import Any, NoReturn

from evogym.errors import did_you_mean

_INVALID_CHOICE = re.compile(r"argument ([^:]+): invalid choice: '([^']*)' \(choose from (.*)\)")


class Parser(argparse.ArgumentParser):
    """argparse with one-line errors, a did-you-mean, and no option prefixes."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        print(f"{self.prog}: error: {explain(message, self.prog)}", file=sys.stderr)
        sys.exit(2)


def explain(message: str, prog: str) -> str:
    """argparse's error `message` with the hint that fixes it (`prog`: the parser that refused)."""
    match = _INVALID_CHOICE.search(message)
    if match:
        where, given = match.group(1), match.group(2)
        choices = re.findall(r"'([^']*)'", match.group(3))
        close = difflib.get_close_matches(given, choices, n=1)
        what = "command" if where in ("COMMAND", "VERB") else where.split("/")[-1]
        return f"unknown {what} `{given}` (hint: {did_you_mean(close) if close else 'one of ' + ', '.join(choices)})"
    if "unrecognized arguments" in message:
        return f"{message} (hint: check the spelling; `{prog} COMMAND --help` lists the options)"
    if "required" in message or "expected" in message:
        return f"{message} (hint: see `{prog} --help`)"
    return message


def noun(subparsers: argparse._SubParsersAction, name: str, help: str, *, dest: str,
         **defaults: Any) -> argparse._SubParsersAction:
    """Add a noun (`evogym data`, `ole bundle`) and return the sub-parsers for its verbs.

    The noun alone prints its help: `help_parser` names the parser to show; `defaults` (the
    command line's "no handler" value) are set on it.
    """
    parser = subparsers.add_parser(name, help=help, description=help)
    parser.set_defaults(help_parser=parser, **defaults)
    return parser.add_subparsers(dest=dest, metavar="VERB")
