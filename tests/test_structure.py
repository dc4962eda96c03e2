"""The shape of the source tree: no module over the size limit, no circle in the import graph.

The graph is read from the source (every `import` and `from ... import`, wherever it stands:
inside a function or under `TYPE_CHECKING` as well), so a circle cannot be hidden by moving an
import into a function. A package's `__init__` is a module like any other: a submodule that
imports names from its own package while that package's `__init__` imports the submodule is a
circle too.
"""
from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx
import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("ole", "evogym")
MAX_LINES = 600


def _modules() -> dict[str, Path]:
    out = {}
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = path
    return out


def _imported(node: ast.AST, package: str) -> list[str]:
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if isinstance(node, ast.ImportFrom):
        base = node.module or ""
        if node.level:
            parent = package.split(".")[: len(package.split(".")) - node.level + 1]
            base = ".".join(parent + ([base] if base else []))
        return [base, *(f"{base}.{alias.name}" for alias in node.names)]
    return []


def _targets(names: list[str], known) -> set[str]:
    """Modules the names reach; `from pkg import submodule` reaches the submodule, not `pkg`."""
    found = {known(n) for n in names} - {None}
    if len(names) > 1 and names[0] in found and all(known(n) == n for n in names[1:]):
        found.discard(names[0])
    return found


def import_graph() -> nx.DiGraph:
    """Module -> module it imports (the longest known module prefix of each imported name)."""
    modules = _modules()

    def known(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph = nx.DiGraph()
    for name, path in modules.items():
        graph.add_node(name)
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            for target in _targets(_imported(node, package), known):
                if target != name:
                    graph.add_edge(name, target)
    return graph


def test_the_graph_sees_imports_inside_functions(tmp_path: Path) -> None:
    tree = ast.parse("def f():\n    from ole.registry import Registry\n")
    names = [n for node in ast.walk(tree) for n in _imported(node, "ole.evolve")]
    assert "ole.registry.Registry" in names
    tree = ast.parse("from ..gate import decide\n")
    assert [n for node in ast.walk(tree) for n in _imported(node, "ole.evolve")][0] == "ole.gate"


def test_no_import_circle() -> None:
    cycles = sorted((" -> ".join(c) for c in nx.simple_cycles(import_graph())), key=len)
    assert not cycles, "import circles:\n" + "\n".join(cycles[:20])


@pytest.mark.parametrize("package", PACKAGES)
def test_no_module_over_the_size_limit(package: str) -> None:
    sizes = {str(p.relative_to(ROOT)): len(p.read_text().splitlines()) for p in (ROOT / package).rglob("*.py")}
    over = {path: n for path, n in sizes.items() if n > MAX_LINES}
    assert not over, f"modules over {MAX_LINES} lines: {over}"
