"""Static code metrics of a policy checkpoint.

A run stores them in two places: `checkpoints/submit_NNN/metrics.json` holds exactly the
reference's fields (`reference_view`), and `code_metrics/submit_NNN.json` our additions
(`structure_view`), so the reference artifact checker finds nothing it does not know.

The reference fields reproduce EvoPolicyGym v0.1.0 exactly, quirks included, so the
reference artifact checker, which recomputes `metrics.json` and demands an exact match,
agrees on any checkpoint our snapshot produces:

- every regular file counts except those under a `__pycache__`, `.pytest_cache`,
  `.mypy_cache` or `.ruff_cache` directory and files named `.keep`, `_meta.json` or
  `metrics.json` (hidden files and `.git/` do count); files sort by relative POSIX path;
- `.py` files are decoded as UTF-8 with replacement and universal newlines; `lines`
  counts `str.splitlines()`, `source_lines` the stripped lines that are non-empty and do
  not start with `#`;
- cyclomatic complexity is scored per (async) function over its whole subtree, so a
  nested function also adds to every enclosing one; a file without functions but with
  text is scored as one block; handlers of a `try` count twice (once per handler, once
  via the `try`), `except*` handlers once;
- `imports` is the sorted set of top-level names of `import a.b` and absolute
  `from a.b import c`; `import_count` is its length.

Deliberate differences from the reference, none of which a checkpoint made by our
snapshot can show: symlinks and special files are never followed or counted (the
reference follows symlinked files); a source with NUL bytes is a parse error (Python
3.12 behaviour, where the reference runs); past `MAX_FILES` files or a `.py` file over
`MAX_FILE_BYTES` the result is marked `truncated` and differs from the reference in the
documented way (see the field docs).

Our additions describe the structure the EvoPolicyGym paper analyses (branches, loops,
AST depth, persistent state) and split edits into structural synthesis and parametric
tuning via `topology_hash`: the ASTs of all `.py` files with every numeric literal,
signed or not, replaced by one placeholder. The AST shape follows the running Python's
grammar, so compare topology hashes only between metrics made by the same minor version.
"""
from __future__ import annotations

import ast
import hashlib
import os
import stat
import warnings
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict

from evogym import pyast
from evogym.errors import ConfigError, DataError

SCHEMA_VERSION: Final = "0.1"
SKIP_DIRS = frozenset({"__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache"})
SKIP_FILES = frozenset({".keep", "_meta.json", "metrics.json"})
MAX_FILES = 2000
"""Files read and hashed, in path order; later files are only counted (names, sizes)."""
MAX_FILE_BYTES = 4 << 20
"""A larger `.py` file is hashed but not parsed, so one huge file cannot stall a submit."""
_CHUNK = 1 << 20

EditKind = Literal["synthesis", "tuning", "none"]
_Chain = tuple[int, ...]
"""Indexes of the functions enclosing a node, outermost first."""


class CodeMetrics(BaseModel):
    """The `metrics.json` record: reference v0.1.0 fields first, then our additions."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    schema_version: Literal["0.1"] = SCHEMA_VERSION
    """Reference metrics schema version."""
    files: int
    """Counted regular files (see module docs for the exclusions), all of them, even past the cap."""
    python_files: int
    """Counted files whose name ends in `.py`."""
    bytes: int
    """Sum of the sizes of all counted files."""
    policy_bytes: int
    """Size of the top-level `policy.py`; 0 when it is absent or not a regular file."""
    lines: int
    """Lines over analysed `.py` files (`str.splitlines` of the decoded text)."""
    source_lines: int
    """Analysed lines that, stripped, are non-empty and do not start with `#`."""
    classes: int
    """Class definitions, nested ones included."""
    functions: int
    """Function and async function definitions, nested ones and methods included."""
    imports: list[str]
    """Sorted distinct top-level module names imported absolutely."""
    import_count: int
    """Length of `imports`."""
    cyclomatic_total: int
    """Sum of per-function (or per-block) cyclomatic complexities, reference rules."""
    cyclomatic_max: int
    """Largest per-function (or per-block) cyclomatic complexity; 0 without code."""
    parse_errors: list[str]
    """Relative paths of `.py` files that failed to parse, in path order."""
    test_files: int
    """Counted `.py` files whose name starts with `test_`."""
    tree_hash: str
    """`sha256:` over path, NUL, bytes, NUL of each hashed file in path order."""
    branches: int
    """`if`/`elif` statements, conditional expressions, match cases, and one per extra
    operand of each boolean operation; every node counted once."""
    loops: int
    """`for`, `async for` and `while` statements plus one per comprehension `for` clause."""
    max_ast_depth: int
    """Longest root-to-leaf path in any parsed file's AST, `Module` = 1; context and
    operator tags (`Load`, `Add`, ...) are not counted as levels."""
    self_state: list[str]
    """Sorted distinct attribute names stored as `self.<name>` inside class bodies."""
    topology_hash: str
    """`sha256:` over the numeric-literal-free ASTs of the analysed `.py` files; files
    that cannot be parsed contribute their raw bytes' hash instead."""
    truncated: bool
    """True when `MAX_FILES` or `MAX_FILE_BYTES` cut the analysis; then `tree_hash`
    covers only the first `MAX_FILES` files and an oversized `.py` file adds nothing to
    the line, structure or complexity counts."""


STRUCTURE_FIELDS: tuple[str, ...] = ("branches", "loops", "max_ast_depth", "self_state", "topology_hash",
                                     "truncated")
"""Our fields beyond the reference's, in record order."""

REFERENCE_FIELDS: tuple[str, ...] = (
    "schema_version", "files", "python_files", "bytes", "policy_bytes", "lines",
    "source_lines", "classes", "functions", "imports", "import_count", "cyclomatic_total",
    "cyclomatic_max", "parse_errors", "test_files", "tree_hash",
)


def code_metrics(code_dir: Path) -> dict:
    """Measure the checkpoint at `code_dir`; returns the `metrics.json` object.

    Deterministic for a given tree and Python minor version; reads only regular files
    and never follows a symlink. Raises `ConfigError` if `code_dir` is not a directory
    and `DataError` if a file cannot be read.
    """
    root = Path(code_dir)
    if not root.is_dir():
        raise ConfigError(
            f"code metrics need a checkpoint directory; got {str(root)!r}, which is not one",
            hint="pass the checkpoint folder (checkpoints/submit_NNN) after the snapshot copy",
        )
    entries = _walk(root)
    tally = _Tally()
    tree_digest = hashlib.sha256()
    topology_digest = hashlib.sha256()
    for entry in entries[:MAX_FILES]:
        _measure_file(entry, tally, tree_digest, topology_digest)
    tally.truncated |= len(entries) > MAX_FILES
    return _record(entries, tally, tree_digest, topology_digest).model_dump()


def reference_view(metrics: dict) -> dict:
    """The reference v0.1.0 subset of `metrics`: exactly what `checkpoints/submit_NNN/metrics.json`
    holds, because the reference checker recomputes that file and demands equality."""
    return {name: metrics[name] for name in REFERENCE_FIELDS}


def structure_view(metrics: dict) -> dict:
    """Our additions (plus `tree_hash`, to tie them to a tree): what `code_metrics/submit_NNN.json`
    of a run holds and `run.json` reports as `code_structure_by_submit`."""
    return {name: metrics[name] for name in ("tree_hash", *STRUCTURE_FIELDS)}


def edit_kind(prev: dict | None, cur: dict) -> EditKind:
    """Classify the edit from checkpoint metrics `prev` to `cur` (full records or
    `structure_view`s: both carry `tree_hash` and `topology_hash`).

    `none`: identical trees; `tuning`: same topology (only numeric literals or non-Python
    files changed); `synthesis`: anything else, including the first checkpoint.
    """
    for label, metrics in (("cur", cur), ("prev", prev)):
        if metrics is not None:
            _require_hashes(label, metrics)
    if prev is None:
        return "synthesis"
    if prev["tree_hash"] == cur["tree_hash"]:
        return "none"
    if prev["topology_hash"] == cur["topology_hash"]:
        return "tuning"
    return "synthesis"


def _require_hashes(label: str, metrics: dict) -> None:
    missing = [k for k in ("tree_hash", "topology_hash") if k not in metrics]
    if missing:
        raise DataError(
            f"{label} metrics lack {missing}; expected the output of code_metrics, "
            f"got keys {sorted(metrics)}",
            hint="recompute the checkpoint's metrics with evogym.code_metrics.code_metrics",
        )


@dataclass(frozen=True)
class _Entry:
    rel: str
    path: str
    size: int


def _walk(root: Path) -> list[_Entry]:
    """Counted regular files under `root`, sorted by relative POSIX path."""
    found: list[_Entry] = []
    pending = [(str(root), "")]
    while pending:
        directory, prefix = pending.pop()
        try:
            with os.scandir(directory) as listing:
                for item in listing:
                    rel = prefix + item.name
                    if item.is_dir(follow_symlinks=False):
                        if item.name not in SKIP_DIRS:
                            pending.append((item.path, rel + "/"))
                    elif item.is_file(follow_symlinks=False) and item.name not in SKIP_FILES:
                        size = item.stat(follow_symlinks=False).st_size
                        found.append(_Entry(rel, item.path, size))
        except OSError as exc:
            raise _unreadable(directory, exc) from exc
    found.sort(key=lambda entry: entry.rel)
    return found


def _is_python(rel: str) -> bool:
    """`PurePath.suffix == ".py"`, as the reference tests it: a file named `.py` is not one."""
    return PurePosixPath(rel).suffix == ".py"


def _unreadable(path: str, exc: OSError) -> DataError:
    return DataError(
        f"cannot read checkpoint path {path!r}: expected a readable file or folder, "
        f"got {exc.strerror or exc}",
        hint="checkpoints are host-made copies; check the run directory's permissions",
    )


@dataclass
class _Tally:
    """Running sums over analysed `.py` files."""

    lines: int = 0
    source_lines: int = 0
    classes: int = 0
    functions: int = 0
    imports: set[str] = field(default_factory=set)
    complexities: list[int] = field(default_factory=list)
    parse_errors: list[str] = field(default_factory=list)
    branches: int = 0
    loops: int = 0
    max_depth: int = 0
    self_state: set[str] = field(default_factory=set)
    truncated: bool = False


def _measure_file(entry: _Entry, tally: _Tally, tree_digest, topology_digest) -> None:
    rel = os.fsencode(entry.rel)
    is_py = _is_python(entry.rel)
    tree_digest.update(rel + b"\0")
    data, raw_hash = _stream(entry, tree_digest, keep=is_py and entry.size <= MAX_FILE_BYTES)
    tree_digest.update(b"\0")
    if not is_py:
        return
    scan = None if data is None else _analyse(entry.rel, data, tally)
    tally.truncated |= data is None
    shape = b"raw\0" + raw_hash if scan is None else b"ast\0" + scan.shape()
    topology_digest.update(rel + b"\0" + shape + b"\0")


def _stream(entry: _Entry, tree_digest, *, keep: bool) -> tuple[bytes | None, bytes]:
    """Feed the file into `tree_digest`; return (its bytes if `keep` and small, its sha256).

    Opened with O_NOFOLLOW and checked with fstat, so a file swapped for a symlink or a
    FIFO after the walk is refused instead of followed or blocked on.
    """
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(entry.path, flags)
    except OSError as exc:
        raise _unreadable(entry.path, exc) from exc
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise DataError(
                f"checkpoint file {entry.rel!r} stopped being a regular file while measured",
                hint="measure a checkpoint only after its snapshot copy has finished",
            )
        return _drain(fd, tree_digest, keep)
    finally:
        os.close(fd)


def _drain(fd: int, tree_digest, keep: bool) -> tuple[bytes | None, bytes]:
    own = hashlib.sha256()
    kept: list[bytes] | None = [] if keep else None
    total = 0
    while chunk := os.read(fd, _CHUNK):
        tree_digest.update(chunk)
        own.update(chunk)
        total += len(chunk)
        if kept is not None and total <= MAX_FILE_BYTES:
            kept.append(chunk)
        else:
            kept = None
    return (b"".join(kept) if kept is not None else None), own.digest()


def _analyse(rel: str, data: bytes, tally: _Tally) -> _Scan | None:
    """Add one source file to `tally`; return its scan, or None if it does not parse."""
    text = data.decode("utf-8", errors="replace").replace("\r\n", "\n").replace("\r", "\n")
    lines = text.splitlines()
    tally.lines += len(lines)
    tally.source_lines += sum(1 for line in lines if _is_source(line))
    tree = _parse(text, rel)
    if tree is None:
        tally.parse_errors.append(rel)
        return None
    scan = _Scan(tree)
    tally.classes += scan.classes
    tally.functions += len(scan.complexities)
    tally.imports |= scan.imports
    if scan.complexities:
        tally.complexities.extend(scan.complexities)
    elif text.strip():
        tally.complexities.append(1 + scan.module_weight)
    tally.branches += scan.branches
    tally.loops += scan.loops
    tally.max_depth = max(tally.max_depth, scan.max_depth)
    tally.self_state |= scan.self_state
    return scan


def _is_source(line: str) -> bool:
    stripped = line.strip()
    return bool(stripped) and not stripped.startswith("#")


def _parse(text: str, rel: str) -> ast.Module | None:
    """Parse quietly; any failure of the compiler front end is a parse error.

    ValueError is what 3.11 raises for NUL bytes (3.12 raises SyntaxError); deeply
    nested sources can exhaust the recursion limit or memory in the parser.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return pyast.parse(text, filename=rel)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            return None


class _Scan:
    """One pre-order pass over a module's AST: every structural count and the topology.

    Cyclomatic complexity of a function is 1 plus the decision weight of every node in
    its subtree; carrying the chain of enclosing functions down the walk gives each
    function its sum in one pass (the reference walks each function separately).
    Iterative, so a long `a + b + ...` chain cannot hit the recursion limit. It runs on
    every submit, hence one pass and dispatch by exact node type: a dense 500-line
    policy (5,600 nodes) scans in about 4 ms, about as long as `ast.parse` takes on it.
    """

    def __init__(self, tree: ast.Module) -> None:
        self.classes = 0
        self.complexities: list[int] = []
        self.module_weight = 0
        self.imports: set[str] = set()
        self.branches = 0
        self.loops = 0
        self.max_depth = 0
        self.self_state: set[str] = set()
        self._tokens: list[str] = []
        self._walk(tree)

    def _walk(self, tree: ast.Module) -> None:
        # nodes typed Any: they are dispatched on their exact type (`kind`), which mypy does not narrow on
        stack: list[tuple[Any, int, _Chain, bool]] = [(tree, 1, (), False)]
        while stack:
            node, depth, chain, in_class = stack.pop()
            if depth > self.max_depth:
                self.max_depth = depth
            kind = type(node)
            if kind is ast.Name:  # a third of all nodes: same token as _header, faster
                self._tokens.append("Name\1" + repr(node.id))
                continue
            if _is_number(node, kind):
                self._tokens.append(_NUMBER_TOKEN)
                self.max_depth = max(self.max_depth, depth + (kind is ast.UnaryOp))
                continue
            if kind in _FUNCTIONS:
                self.complexities.append(1)
                chain = chain + (len(self.complexities) - 1,)
            elif kind is ast.ClassDef:
                self.classes += 1
                in_class = True
            elif kind in _HANDLERS:
                _HANDLERS[kind](self, node, chain, in_class)
            children = self._header(node, kind)
            stack.extend((child, depth + 1, chain, in_class) for child in reversed(children))

    def _header(self, node: ast.AST, kind: type) -> list[ast.AST]:
        """Append the node's topology token; return its child nodes in field order.

        The token holds the type name and every field that is not a child node (names,
        strings, operators, list lengths, None markers). Since each node type has a
        fixed field list, the pre-order token sequence decodes to exactly one tree.
        `Load`/`Store` tags are implied by syntax and left out, as are positions.
        """
        parts = [kind.__name__]
        children: list[ast.AST] = []
        for name in node._fields:
            value = getattr(node, name, None)
            if type(value) is list:
                parts.append(f"[{len(value)}")
                for item in value:
                    _describe(item, parts, children)
            elif type(value) not in _CONTEXTS:
                _describe(value, parts, children)
        self._tokens.append("\1".join(parts))
        return children

    def shape(self) -> bytes:
        """The numeric-literal-free serialization of the scanned tree (topology input)."""
        return "\0".join(self._tokens).encode("utf-8", errors="surrogatepass")

    def _weigh(self, weight: int, chain: _Chain) -> None:
        """Add a reference cyclomatic increment to the module and every enclosing function."""
        self.module_weight += weight
        for index in chain:
            self.complexities[index] += weight

    def _conditional(self, node: Any, chain: _Chain, in_class: bool) -> None:
        self._weigh(1, chain)
        self.branches += 1

    def _loop(self, node: Any, chain: _Chain, in_class: bool) -> None:
        self._weigh(1, chain)
        self.loops += 1

    def _handler(self, node: Any, chain: _Chain, in_class: bool) -> None:
        self._weigh(1, chain)

    def _bool_op(self, node: Any, chain: _Chain, in_class: bool) -> None:
        self._weigh(len(node.values) - 1, chain)
        self.branches += len(node.values) - 1

    def _try(self, node: Any, chain: _Chain, in_class: bool) -> None:
        self._weigh(len(node.handlers), chain)

    def _comprehension(self, node: Any, chain: _Chain, in_class: bool) -> None:
        self._weigh(len(node.ifs), chain)
        self.loops += 1

    def _match(self, node: Any, chain: _Chain, in_class: bool) -> None:
        self._weigh(len(node.cases), chain)
        self.branches += len(node.cases)

    def _import(self, node: Any, chain: _Chain, in_class: bool) -> None:
        self.imports.update(alias.name.split(".", 1)[0] for alias in node.names)

    def _import_from(self, node: Any, chain: _Chain, in_class: bool) -> None:
        if node.module and node.level == 0:
            self.imports.add(node.module.split(".", 1)[0])

    def _attribute(self, node: Any, chain: _Chain, in_class: bool) -> None:
        if in_class and _is_self_store(node):
            self.self_state.add(node.attr)


_FUNCTIONS = frozenset({ast.FunctionDef, ast.AsyncFunctionDef})
_HANDLERS = {
    ast.If: _Scan._conditional,
    ast.IfExp: _Scan._conditional,
    ast.For: _Scan._loop,
    ast.AsyncFor: _Scan._loop,
    ast.While: _Scan._loop,
    ast.ExceptHandler: _Scan._handler,
    ast.BoolOp: _Scan._bool_op,
    ast.Try: _Scan._try,
    ast.comprehension: _Scan._comprehension,
    ast.Match: _Scan._match,
    ast.Import: _Scan._import,
    ast.ImportFrom: _Scan._import_from,
    ast.Attribute: _Scan._attribute,
}
"""Node types that matter to a count; `ast.TryStar` is absent on purpose: the reference
checks `isinstance(node, ast.Try)`, so `except*` handlers count once, not twice."""

_OPERATORS = frozenset(
    leaf for base in (ast.boolop, ast.operator, ast.unaryop, ast.cmpop) for leaf in base.__subclasses__()
)
"""Operator tags: part of their node's token, not levels of structure."""
_CONTEXTS = frozenset(ast.expr_context.__subclasses__())
"""`Load`/`Store`/`Del`: implied by syntax, left out entirely."""


def _describe(value: object, parts: list[str], children: list[ast.AST]) -> None:
    """Add one field value to a node token: operators by name, child nodes as `@`."""
    kind = type(value)
    if kind in _OPERATORS:
        parts.append(kind.__name__)
    elif isinstance(value, ast.AST):
        children.append(value)
        parts.append("@")
    else:
        parts.append(repr(value))


_NUMBERS = frozenset({int, float, complex})
_NUMBER_TOKEN = "#number"


def _is_number(node: Any, kind: type) -> bool:
    """A numeric literal, optionally signed: `3`, `-0.5`, `+2j` (never a bool).

    Signs are folded in so that flipping a gain's sign is tuning, not synthesis.
    """
    if kind is ast.Constant:
        return type(node.value) in _NUMBERS
    if kind is ast.UnaryOp and type(node.op) in (ast.USub, ast.UAdd):
        operand = node.operand
        return type(operand) is ast.Constant and type(operand.value) in _NUMBERS
    return False


def _is_self_store(node: ast.Attribute) -> bool:
    target = node.value
    return isinstance(node.ctx, ast.Store) and isinstance(target, ast.Name) and target.id == "self"


def _record(entries: list[_Entry], tally: _Tally, tree_digest, topology_digest) -> CodeMetrics:
    python = [entry for entry in entries if _is_python(entry.rel)]
    imports = sorted(tally.imports)
    return CodeMetrics(
        files=len(entries),
        python_files=len(python),
        bytes=sum(entry.size for entry in entries),
        policy_bytes=next((entry.size for entry in entries if entry.rel == "policy.py"), 0),
        lines=tally.lines,
        source_lines=tally.source_lines,
        classes=tally.classes,
        functions=tally.functions,
        imports=imports,
        import_count=len(imports),
        cyclomatic_total=sum(tally.complexities),
        cyclomatic_max=max(tally.complexities, default=0),
        parse_errors=tally.parse_errors,
        test_files=sum(1 for entry in python if entry.rel.rsplit("/", 1)[-1].startswith("test_")),
        tree_hash="sha256:" + tree_digest.hexdigest(),
        branches=tally.branches,
        loops=tally.loops,
        max_ast_depth=tally.max_depth,
        self_state=sorted(tally.self_state),
        topology_hash="sha256:" + topology_digest.hexdigest(),
        truncated=tally.truncated,
    )
