"""Static checks of a policy snapshot, before anything of it runs (host side).

`validate_snapshot` parses every `*.py` of the snapshot without executing a byte of it: a
file that does not parse, a source file too large to parse, or a `policy.py` without a
literal top-level `class Policy` (v0.1.0's ABI) or `def make_policy` (EvoPolicyGym main's
`make_policy(context)`) is refused here, as a `CallResult`, before a sandbox starts.
"""
from __future__ import annotations

import ast
import os
from pathlib import Path

from evogym import pyast
from evogym.sandbox.replies import CallResult, failure

MAX_SOURCE_BYTES = 8 << 20
"""Largest `*.py` file the static validation parses (host side, before any execution)."""


def validate_snapshot(code_dir: Path) -> CallResult | None:
    """Static checks of a snapshot, executing nothing; None when it may be started.

    `policy.py` must exist as a regular file and contain a literal top-level
    `class Policy` or `def make_policy`; every `*.py` below `code_dir` must parse (symlinks are not followed).
    """
    code_dir = Path(code_dir)
    entry = code_dir / "policy.py"
    if entry.is_symlink() or not entry.is_file():
        return failure("missing_policy", f"no regular file policy.py in the snapshot {code_dir.name}; "
                        "write system/policy.py defining class Policy")
    trees = {}
    for root, dirs, files in os.walk(code_dir):
        dirs[:] = sorted(d for d in dirs if not os.path.islink(os.path.join(root, d)))
        for name in sorted(f for f in files if f.endswith(".py")):
            path = Path(root, name)
            if path.is_symlink():
                continue
            rel = path.relative_to(code_dir).as_posix()
            tree_or_error = _parse(path, rel)
            if isinstance(tree_or_error, CallResult):
                return tree_or_error
            trees[rel] = tree_or_error
    if not any(isinstance(n, ast.ClassDef) and n.name == "Policy" or isinstance(n, ast.FunctionDef)
               and n.name == "make_policy" for n in trees["policy.py"].body):
        return failure("missing_policy", "policy.py has no top-level `class Policy` or `def make_policy` statement "
                        "(an import or assignment does not count); define one of them in policy.py")
    return None


def _parse(path: Path, rel: str) -> ast.Module | CallResult:
    if path.stat().st_size > MAX_SOURCE_BYTES:
        return failure("import_error", f"{rel}: {path.stat().st_size} bytes exceeds the "
                        f"{MAX_SOURCE_BYTES}-byte source limit; move data out of .py files")
    try:
        return pyast.parse(path.read_bytes(), filename=rel)
    except SyntaxError as exc:
        return failure("import_error", f"{rel}:{exc.lineno}: SyntaxError: {exc.msg}")
    except (ValueError, RecursionError, MemoryError) as exc:
        return failure("import_error", f"{rel}: cannot be parsed: {type(exc).__name__}: {exc}")
