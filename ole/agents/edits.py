"""Program edits proposed by a language model: parse, apply, check, classify.

Everything here is pure (text in, text or a verdict out) so an agent can refuse a bad
edit before it spends episodes on it. A model answer is accepted in either form -- a
full file in a ```python block or a unified diff in a ```diff block -- and the loop
policy's edit granularity is enforced on the *result* by comparing syntax trees, so a
model that sends a whole file when asked for a constant tweak is still held to it.
"""
from __future__ import annotations

import ast
import re
import sys
from dataclasses import dataclass
from typing import Literal

Granularity = Literal["parameters", "function", "file"]
EditKind = Literal["synthesis", "tuning", "none"]

ALLOWED_THIRD_PARTY = ("numpy", "scipy")
"""Packages a policy may import besides the standard library (the host sandbox has these)."""
DENIED_STDLIB = ("subprocess", "socket", "multiprocessing", "pkgutil", "ctypes", "http", "urllib",
                 "asyncio", "ssl", "ftplib", "smtplib")
"""Standard-library modules a policy must not import: no processes, network or import machinery."""
MAX_PROGRAM_CHARS = 200_000
"""A larger program is refused: a model that emits this much is looping, not coding."""
_FENCE = re.compile(r"```([A-Za-z0-9_+-]*)[ \t]*\n(.*?)(?:\n```|\Z)", re.S)
_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
_MECHANISM = re.compile(r"^[ \t]*(?:\*\*)?mechanism(?:\*\*)?[ \t]*:[ \t]*(\S.*?)[ \t]*$", re.I | re.M)
"""One line `mechanism: ...`; horizontal space only (`\\s*` at a line start also ran over newlines, so
40,000 blank lines in an answer took 17 s to search: quadratic)."""


class EditRejected(ValueError):
    """The answer holds no usable program; `reason` is shown to the model in the repair prompt."""


@dataclass(frozen=True)
class ParsedAnswer:
    """A program extracted from a model answer."""

    source: str
    form: Literal["file", "diff"]
    mechanism: str | None


def parse_answer(text: str, current: str | None, *, truncated: bool = False) -> ParsedAnswer:
    """Extract the proposed policy.py from a model answer, applying a diff to `current`.

    Raises EditRejected for refusals, prose without code, truncated blocks and diffs
    that do not apply. A truncated answer is never used, even if it happens to parse.
    """
    if truncated:
        raise EditRejected("the answer was cut off (max tokens reached); send a shorter, complete answer")
    blocks = [(m.group(1).lower(), m.group(2), m.group(0).rstrip().endswith("```")) for m in _FENCE.finditer(text)]
    if not blocks:
        raise EditRejected("no fenced code block found; answer with one ```python block (or a ```diff block)")
    lang, body, closed = _pick_block(blocks)
    if not closed:
        raise EditRejected("the code block is not closed with ```; send the complete block")
    mechanism = _mechanism(text)
    if lang == "diff" or (lang in ("", "patch", "udiff") and _looks_like_diff(body)):
        if current is None:
            raise EditRejected("there is no program yet to apply a diff to; send the full file in a ```python block")
        return ParsedAnswer(apply_diff(current, body), "diff", mechanism)
    if len(body) > MAX_PROGRAM_CHARS:
        raise EditRejected(f"the program has {len(body)} characters; the limit is {MAX_PROGRAM_CHARS}")
    return ParsedAnswer(body.rstrip() + "\n", "file", mechanism)


def _pick_block(blocks: list[tuple[str, str, bool]]) -> tuple[str, str, bool]:
    """The last diff block, else the last python block defining Policy, else the last block."""
    for lang, body, closed in reversed(blocks):
        if lang == "diff":
            return lang, body, closed
    for lang, body, closed in reversed(blocks):
        if lang in ("python", "py", "") and "class Policy" in body:
            return lang, body, closed
    return blocks[-1]


def _looks_like_diff(body: str) -> bool:
    return any(line.startswith("@@ ") for line in body.splitlines())


def _mechanism(text: str) -> str | None:
    outside = _FENCE.sub("", text)
    m = _MECHANISM.search(outside)
    return m.group(1)[:80] if m else None


def apply_diff(current: str, diff: str) -> str:
    """Apply a unified diff for one file; hunks are located by their context, not trusted line numbers."""
    lines = current.splitlines()
    hunks = _hunks(diff)
    if not hunks:
        raise EditRejected("the diff has no @@ hunks; send a unified diff with @@ -a,b +c,d @@ headers")
    offset = 0
    for n, (start, old, new) in enumerate(hunks, 1):
        at = _locate(lines, old, start - 1 + offset)
        if at is None:
            raise EditRejected(f"hunk {n} does not match the current program (context lines differ); "
                               "copy context lines exactly or send the full file")
        lines[at:at + len(old)] = new
        offset = at - (start - 1) + len(new) - len(old)
    return "\n".join(lines) + "\n"


def _hunks(diff: str) -> list[tuple[int, list[str], list[str]]]:
    out: list[tuple[int, list[str], list[str]]] = []
    old: list[str] | None = None
    new: list[str] = []
    start = 0
    for raw in diff.splitlines():
        m = _HUNK.match(raw)
        if m:
            if old is not None:
                out.append((start, old, new))
            start, old, new = int(m.group(1)), [], []
            continue
        if old is None or raw.startswith(("--- ", "+++ ", "\\")):
            continue
        tag, body = (raw[:1], raw[1:]) if raw else (" ", "")
        if tag in (" ", "-"):
            old.append(body)
        if tag in (" ", "+"):
            new.append(body)
    if old is not None:
        out.append((start, old, new))
    return out


def _locate(lines: list[str], old: list[str], guess: int) -> int | None:
    """Index where `old` occurs, nearest to `guess`; trailing whitespace is ignored."""
    if not old:
        return max(0, min(guess, len(lines)))
    want = [s.rstrip() for s in old]
    hits = [i for i in range(len(lines) - len(old) + 1)
            if [s.rstrip() for s in lines[i:i + len(old)]] == want]
    return min(hits, key=lambda i: abs(i - guess)) if hits else None


def static_problems(source: str) -> list[str]:
    """Syntax, a literal top-level `class Policy` with `act`, and imports limited to stdlib/numpy/scipy."""
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        return [f"SyntaxError line {exc.lineno}: {exc.msg}"]
    problems = []
    policy = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Policy"]
    if not policy:
        problems.append("no top-level `class Policy` (re-exports and assignments do not count)")
    elif not any(isinstance(f, ast.FunctionDef) and f.name == "act" for f in policy[0].body):
        problems.append("class Policy has no `act(self, obs)` method")
    for name in sorted(_imports(tree)):
        if not _import_allowed(name):
            problems.append(f"import of `{name}` is not allowed (stdlib, numpy and scipy only; "
                            f"no {', '.join(DENIED_STDLIB[:4])}, ...)")
    return problems


def _imports(tree: ast.AST) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def _import_allowed(top: str) -> bool:
    if top in DENIED_STDLIB:
        return False
    return top in ALLOWED_THIRD_PARTY or top in sys.stdlib_module_names or top == "__future__"


class _EraseConstants(ast.NodeTransformer):
    def visit_Constant(self, node: ast.Constant) -> ast.AST:
        if isinstance(node.value, (int, float, complex)) and not isinstance(node.value, bool):
            return ast.copy_location(ast.Constant(value=0), node)
        return node

    def visit_UnaryOp(self, node: ast.UnaryOp) -> ast.AST:
        if isinstance(node.op, ast.USub) and isinstance(node.operand, ast.Constant):
            return self.visit_Constant(node.operand)
        return self.generic_visit(node)


def skeleton(source: str) -> str:
    """The program's syntax tree with numeric constants erased: equal skeletons = a tuning edit."""
    return ast.dump(_EraseConstants().visit(ast.parse(source)), annotate_fields=False)


def _units(source: str) -> dict[str, str]:
    """Top-level statements and class members, keyed by a stable name, as tree dumps."""
    units: dict[str, str] = {}
    for i, node in enumerate(ast.parse(source).body):
        if isinstance(node, ast.ClassDef):
            for j, member in enumerate(node.body):
                key = f"{node.name}.{getattr(member, 'name', j)}"
                units[key] = ast.dump(member, annotate_fields=False)
            head = (node.name, [ast.dump(b) for b in node.bases], [ast.dump(d) for d in node.decorator_list])
            units[f"class {node.name}"] = repr(head)
        else:
            units[getattr(node, "name", f"stmt{i}")] = ast.dump(node, annotate_fields=False)
    return units


def scope_problem(old: str, new: str, granularity: Granularity) -> str | None:
    """Why `new` exceeds the allowed edit unit relative to `old`, or None when it stays inside it."""
    if granularity == "file":
        return None
    if granularity == "parameters":
        if skeleton(old) != skeleton(new):
            return "edit_granularity=parameters: change numeric constants only, keep every statement as is"
        return None
    a, b = _units(old), _units(new)
    changed = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
    functions = [k for k in changed if not k.startswith("class ") and not k.startswith("stmt")]
    if len(changed) > 1 or (changed and not functions):
        return (f"edit_granularity=function: change one function only; this edit changes {len(changed)} "
                f"units: {', '.join(changed[:5])}")
    return None


def edit_kind(old: str | None, new: str) -> EditKind:
    """synthesis = the structure changed, tuning = only constants changed, none = same program."""
    if old is None:
        return "synthesis"
    if old == new:
        return "none"
    try:
        return "tuning" if skeleton(old) == skeleton(new) else "synthesis"
    except SyntaxError:
        return "synthesis"


def diff_lines(old: str | None, new: str) -> int:
    """Changed lines (added + removed) between two programs."""
    import difflib
    a = (old or "").splitlines()
    return sum(1 for line in difflib.unified_diff(a, new.splitlines(), lineterm="", n=0)
               if line[:1] in "+-" and not line.startswith(("+++", "---")))
