"""Mechanisms: program families with named, scaled parameters, and program rendering.

A mechanism is a policy-program template (a module of `ole.agents.builtin.programs`
that reads its constants from a `P` table) plus the list of its parameters with generic
defaults and scales. Structural synthesis picks mechanisms; parametric tuning moves only
the parameter values, so a tuning edit leaves the program's AST topology hash unchanged
and a synthesis edit changes it (the trace classifies edits that way).
"""
from __future__ import annotations

import ast
import functools
import pprint
import re
import sys
from dataclasses import dataclass, field
from importlib import resources

import numpy as np

PARAM_DIGITS = 6
"""Significant digits kept for a parameter value in the program text."""
TEMPLATES = "ole.agents.builtin.programs"
"""Package holding the program templates."""
INLINE_MARK = "# inline"
"""Trailing comment of an import whose module is copied into the rendered program."""
PARAMS_MARK = "# params"
"""Trailing comment of the placeholder line that the rendered program's `PARAMS` table replaces."""


@dataclass(frozen=True)
class Param:
    """One named parameter (scalar or vector) of a mechanism."""

    name: str
    default: tuple[float, ...]
    scale: float
    """Search unit: a step of 1.0 in normalized coordinates moves the value by `scale`."""
    low: float = -1e9
    high: float = 1e9
    group: str = "act"
    """Function of the program the parameter belongs to (the unit of a `function` edit)."""

    @property
    def size(self) -> int:
        return len(self.default)


@dataclass(frozen=True)
class Mechanism:
    """A program family: name, template module and its parameters."""

    name: str
    template: str
    """Module name under `ole.agents.builtin.programs`, or (for a caller's own mechanism) the
    source text of a `Policy` class that reads `P`, when it contains a newline."""
    params: tuple[Param, ...]
    note: str = ""
    """Why the library proposed it (schema and brief features that matched)."""
    fixed: tuple[tuple[str, tuple[float, ...]], ...] = ()
    """Constants the program reads from `P` that tuning never moves (e.g. which observation
    entries hold an angle); part of the structure the library chose."""

    @property
    def dim(self) -> int:
        return sum(p.size for p in self.params)

    @property
    def body(self) -> str:
        """The program text without the parameter table (helpers inlined)."""
        return assemble(self.template)

    def groups(self) -> tuple[str, ...]:
        seen: list[str] = []
        for p in self.params:
            if p.group not in seen:
                seen.append(p.group)
        return tuple(seen)

    def group_mask(self, group: str) -> np.ndarray:
        return np.concatenate([np.full(p.size, p.group == group) for p in self.params])

    def defaults(self) -> np.ndarray:
        return np.zeros(self.dim)

    def values(self, x: np.ndarray) -> dict[str, list[float]]:
        """Normalized coordinates x (0 = defaults) -> clipped parameter values."""
        out: dict[str, list[float]] = {name: [float(v) for v in value] for name, value in self.fixed}
        i = 0
        for p in self.params:
            raw = np.asarray(p.default) + p.scale * np.asarray(x[i:i + p.size])
            out[p.name] = [float(f"{v:.{PARAM_DIGITS}g}") for v in np.clip(raw, p.low, p.high)]
            i += p.size
        return out


@dataclass(frozen=True)
class Program:
    """A rendered program: what goes into `system/policy.py`."""

    mechanism: str
    x: tuple[float, ...]
    source: str
    values: dict[str, list[float]] = field(default_factory=dict)


def template_text(module: str) -> str:
    """The source of one template module, read through `importlib.resources`."""
    return resources.files(TEMPLATES).joinpath(f"{module}.py").read_text(encoding="utf-8")


def _split(text: str) -> tuple[list[str], list[str]]:
    """(modules it inlines, its code lines without docstring, future imports and marked lines)."""
    tree = ast.parse(text)
    skip: set[int] = set()
    first = tree.body[0] if tree.body else None
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
        skip.update(range(first.lineno, (first.end_lineno or first.lineno) + 1))
    deps: list[str] = []
    for node in tree.body:
        line = text.splitlines()[node.lineno - 1]
        if isinstance(node, ast.ImportFrom) and node.module == "__future__":
            skip.add(node.lineno)
        elif isinstance(node, ast.ImportFrom) and line.rstrip().endswith(INLINE_MARK):
            if not (node.module or "").startswith(TEMPLATES + "."):
                raise ValueError(f"an inlined import must name a module of {TEMPLATES}: {line.strip()}")
            deps.append((node.module or "").rsplit(".", 1)[1])
            skip.update(range(node.lineno, (node.end_lineno or node.lineno) + 1))
        elif line.rstrip().endswith(PARAMS_MARK):
            skip.update(range(node.lineno, (node.end_lineno or node.lineno) + 1))
    lines = [ln for i, ln in enumerate(text.splitlines(), 1) if i not in skip]
    return deps, lines


@functools.lru_cache(maxsize=64)
def assemble(template: str) -> str:
    """The template with every inlined helper module before it (each once), imports deduplicated."""
    if "\n" in template:  # a caller's own mechanism: source text that uses the prelude
        template_lines = ["from ole.agents.builtin.programs.prelude import *  # inline", "", template]
        texts = {"<own>": "\n".join(template_lines)}
        order = _order("<own>", texts)
    else:
        texts = {}
        order = _order(template, texts)
    seen_imports: set[str] = set()
    chunks: list[str] = []
    for module in order:
        _, lines = _split(texts[module])
        kept = []
        for ln in lines:
            if re.match(r"^(import \S|from \S+ import )", ln):
                if ln in seen_imports:
                    continue
                seen_imports.add(ln)
            kept.append(ln)
        chunks.append("\n".join(kept).strip("\n"))
    return "\n\n\n".join(c for c in chunks if c) + "\n"


def _order(module: str, texts: dict[str, str], stack: tuple[str, ...] = ()) -> list[str]:
    """Depth-first: a module's inlined dependencies before the module, each once."""
    if module in stack:
        raise ValueError(f"templates inline each other in a cycle: {' -> '.join(stack + (module,))}")
    if module not in texts:
        texts[module] = template_text(module)
    out: list[str] = []
    for dep in _split(texts[module])[0]:
        for m in _order(dep, texts, stack + (module,)):
            if m not in out:
                out.append(m)
    out.append(module)
    return out


def render(mech: Mechanism, x: np.ndarray, *, inline: bool = False) -> Program:
    """Write the program text for a mechanism at normalized parameters x.

    `inline=False` emits a `PARAMS` table (a tuning edit touches only that table);
    `inline=True` writes each value where it is used (a whole-file edit).
    """
    values = mech.values(np.asarray(x, dtype=float))
    body = mech.body
    table = "PARAMS = {\n" + "".join(f"    {k!r}: {_literal(v, 8)},\n" for k, v in values.items()) + "}\n"
    if inline:
        table = "PARAMS = {}\n"
        for name, v in values.items():
            text = repr(v) if len(repr(v)) <= 16 else "\n            " + _literal(v, 12)
            body = re.sub(rf'P\["{name}"\]', lambda _m: f"np.array({text})", body)  # runs within re.sub
    head = f'"""Policy program written by the OLE built-in agent (mechanism: {mech.name})."""\n'
    imports, rest = _hoist_imports(body)
    source = head + imports + "\n\n" + table + "P = PARAMS\n\n\n" + rest.strip("\n") + "\n"
    return Program(mech.name, tuple(float(v) for v in x), source, values)


def _hoist_imports(body: str) -> tuple[str, str]:
    """Top-level import lines of the assembled body (stdlib, then third party), and everything else."""
    imports: list[str] = []
    rest: list[str] = []
    for ln in body.splitlines():
        (imports if re.match(r"^(import \S|from \S+ import )", ln) else rest).append(ln)
    std = sorted(ln for ln in imports if _top_module(ln) in sys.stdlib_module_names)
    third = sorted(ln for ln in imports if _top_module(ln) not in sys.stdlib_module_names)
    return "\n\n".join("\n".join(g) for g in (std, third) if g) + "\n", "\n".join(rest)


def _top_module(import_line: str) -> str:
    return import_line.split()[1].split(".")[0]


def _literal(values: list[float], indent: int) -> str:
    """A list literal wrapped to keep program lines under 100 characters."""
    text = pprint.pformat(values, width=96 - indent, compact=True)
    return text.replace("\n", "\n" + " " * indent)
