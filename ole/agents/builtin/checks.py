"""Checks the agent runs on its own program before spending budget on it.

`static_problems` parses the program, checks its imports against what the sandbox
allows, requires a literal top-level `class Policy`, and dry-runs one
`Policy(...)`, `reset(0)` and `act(obs)` on an observation built from the schema,
validating the action against the action schema. `topology_hash` is the AST hash
with numeric constants blanked, which classifies an edit as tuning (same hash) or
synthesis (different hash).
"""
from __future__ import annotations

import ast
import functools
import hashlib
import sys
import types
from typing import Any

import numpy as np

ALLOWED_THIRD_PARTY = ("numpy", "scipy")
"""Non-stdlib top-level packages the sandbox can import."""


@functools.lru_cache(maxsize=256)
def topology_hash(source: str) -> str:
    """sha256 of the AST dump with every numeric constant replaced by 0."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return "sha256:" + hashlib.sha256(source.encode()).hexdigest()
    tree = _Blank().visit(tree)
    return "sha256:" + hashlib.sha256(ast.dump(tree).encode()).hexdigest()


class _Blank(ast.NodeTransformer):
    """Numeric literals (with their sign) become 0."""

    def visit_UnaryOp(self, node: ast.UnaryOp) -> ast.AST:
        if isinstance(node.op, (ast.USub, ast.UAdd)) and _numeric(node.operand):
            return ast.Constant(0)
        return self.generic_visit(node)

    def visit_Constant(self, node: ast.Constant) -> ast.AST:
        return ast.Constant(0) if _numeric(node) else node


def _numeric(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, (int, float, complex)) \
        and not isinstance(node.value, bool)


def sample_obs(schema: dict) -> Any:
    """A valid observation for a compact schema (zeros moved inside the bounds)."""
    kind = schema.get("type")
    if kind == "Dict":
        return {k: sample_obs(v) for k, v in sorted(schema.get("spaces", {}).items())}
    if kind == "Discrete":
        return int(schema.get("start", 0))
    if kind in ("Box", "Image"):
        shape = schema.get("shape") or [1]
        return np.zeros(shape, dtype=int if kind == "Image" else float).tolist()
    return ""


def _action_problem(schema: dict, action: Any) -> str | None:
    kind = schema.get("type")
    if kind == "Discrete":
        start, n = int(schema.get("start", 0)), int(schema["n"])
        ok = isinstance(action, (int, np.integer)) and start <= int(action) < start + n
        return None if ok else f"action {action!r} is not an int in [{start}, {start + n})"
    if kind == "Box":
        size = int(np.prod(schema.get("shape") or [1]))
        try:
            arr = np.asarray(action, dtype=float).reshape(-1)
        except (TypeError, ValueError):
            return f"action {action!r} is not numeric"
        if arr.size != size or not np.all(np.isfinite(arr)):
            return f"action has {arr.size} finite values, expected {size}"
    return None


def static_problems(source: str, obs_space: dict, action_space: dict) -> list[str]:
    """Reasons not to submit this program (empty when it passes)."""
    try:
        tree = ast.parse(source)
    except SyntaxError as err:
        return [f"syntax error line {err.lineno}: {err.msg}"]
    problems = []
    for node in ast.walk(tree):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
            [node.module] if isinstance(node, ast.ImportFrom) and node.module and node.level == 0 else []
        for name in names:
            top = name.split(".")[0]
            if top not in sys.stdlib_module_names and top not in ALLOWED_THIRD_PARTY:
                problems.append(f"import of {top!r} (the sandbox has only the stdlib, numpy, scipy)")
    if not any(isinstance(n, ast.ClassDef) and n.name == "Policy" for n in tree.body):
        problems.append("no top-level `class Policy`")
    if problems:
        return problems
    return _dry_run(source, obs_space, action_space)


def _dry_run(source: str, obs_space: dict, action_space: dict) -> list[str]:
    module = types.ModuleType("ole_dry_run_policy")
    try:
        exec(compile(source, "policy.py", "exec"), module.__dict__)
        policy = module.Policy(obs_space, action_space, {"max_episode_steps": 1})
        policy.reset(0)
        action = policy.act(sample_obs(obs_space))
    except Exception as err:  # noqa: BLE001 - the program is the agent's own; any failure is a finding
        return [f"dry run failed: {type(err).__name__}: {err}"]
    problem = _action_problem(action_space, action)
    return [f"dry run: {problem}"] if problem else []
