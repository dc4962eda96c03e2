"""Tests for evogym.code_metrics: reference §4.3 fields with hand-computed values, quirks
included, plus our structural additions and the synthesis/tuning split."""
from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path

import pytest

from evogym import code_metrics as metrics
from evogym.errors import ConfigError, DataError
from evogym.code_metrics import REFERENCE_FIELDS, code_metrics, edit_kind, reference_view

POLICY = """\
import math
from helpers.tools import clamp
from . import local


class Policy:
    def __init__(self, obs_space, action_space, env_meta):
        self.gain = 0.5
        self.count, self.last = 0, None

    def reset(self, episode_index):
        self.count = 0

    def act(self, obs):
        # proportional control
        if obs[0] > 0 and obs[1] > 0:
            return clamp(self.gain * obs[0])
        return [math.tanh(v) for v in obs if v]
"""
TOOLS = """\
def clamp(v, lo=-1.0, hi=1.0):
    return max(lo, min(hi, v))
"""
TEST_FILE = """\
from policy import Policy


def test_make():
    assert Policy(None, None, {}) is not None
"""
BROKEN = "# broken on purpose\n\ndef oops(:\n    pass\n"
README = "notes\n"

COUNTED = {
    "README.md": README,
    "broken.py": BROKEN,
    "helpers/tools.py": TOOLS,
    "policy.py": POLICY,
    "test_policy.py": TEST_FILE,
}


def write_tree(root: Path, files: dict[str, str | bytes]) -> Path:
    for rel, content in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, str):
            content = content.encode("utf-8")
        path.write_bytes(content)
    return root


def tree_hash_by_definition(files: dict[str, str | bytes]) -> str:
    digest = hashlib.sha256()
    for rel in sorted(files):
        content = files[rel]
        data = content.encode("utf-8") if isinstance(content, str) else content
        digest.update(rel.encode("utf-8") + b"\0" + data + b"\0")
    return "sha256:" + digest.hexdigest()


@pytest.fixture
def checkpoint(tmp_path: Path) -> Path:
    root = write_tree(tmp_path / "submit_000", COUNTED)
    write_tree(root, {
        "__pycache__/policy.cpython-311.pyc": b"\x00\x01junk",
        "helpers/__pycache__/hidden.py": "def f():\n    return 1\n",
        ".mypy_cache/x.py": "x = 1\n",
        ".keep": "",
        "metrics.json": "{}",
        "helpers/_meta.json": "{}",
    })
    (root / "link.py").symlink_to(root / "policy.py")
    (root / "linkdir").symlink_to(root / "helpers", target_is_directory=True)
    os.mkfifo(root / "pipe.py")
    return root


def test_small_tree_matches_hand_computed_reference_fields(checkpoint: Path):
    got = code_metrics(checkpoint)
    sizes = {rel: len(text.encode()) for rel, text in COUNTED.items()}
    assert reference_view(got) == {
        "schema_version": "0.1",
        "files": 5,
        "python_files": 4,
        "bytes": sum(sizes.values()),
        "policy_bytes": sizes["policy.py"],
        "lines": 18 + 2 + 5 + 4,
        "source_lines": 13 + 2 + 3 + 2,
        "classes": 1,
        "functions": 3 + 1 + 1,
        "imports": ["helpers", "math", "policy"],
        "import_count": 3,
        "cyclomatic_total": (1 + 1 + 4) + 1 + 1,
        "cyclomatic_max": 4,
        "parse_errors": ["broken.py"],
        "test_files": 1,
        "tree_hash": tree_hash_by_definition(COUNTED),
    }


def test_small_tree_additions(checkpoint: Path):
    got = code_metrics(checkpoint)
    assert got["branches"] == 2          # one if + one extra `and` operand
    assert got["loops"] == 1             # the comprehension
    assert got["max_ast_depth"] == 9     # Module>Class>def>If>Return>Call>BinOp>Subscript>Constant
    assert got["self_state"] == ["count", "gain", "last"]
    assert got["truncated"] is False
    assert got["topology_hash"].startswith("sha256:") and len(got["topology_hash"]) == 71
    assert list(got)[: len(REFERENCE_FIELDS)] == list(REFERENCE_FIELDS)


def test_result_is_independent_of_location_and_repeatable(checkpoint: Path, tmp_path: Path):
    copy = write_tree(tmp_path / "elsewhere" / "submit_007", COUNTED)
    assert code_metrics(checkpoint) == code_metrics(copy) == code_metrics(copy)


@pytest.mark.parametrize(
    ("source", "total", "maximum"),
    [
        ("def f(x):\n    return x\n", 1, 1),
        ("def f(x):\n    if x:\n        return 1\n    elif x > 2:\n        return 2\n    return 3\n", 3, 3),
        ("def f(a, b, c):\n    return a and b and c or a\n", 4, 4),
        # handlers count once each and once more via their `try`
        ("def f():\n    try:\n        pass\n    except A:\n        pass\n    except B:\n        pass\n", 5, 5),
        # `except*` is ast.TryStar, not ast.Try: handlers count once
        ("def f():\n    try:\n        pass\n    except* A:\n        pass\n    except* B:\n        pass\n", 3, 3),
        # comprehension `for` clauses add nothing, their `if` clauses do
        ("def f(xs):\n    return [x for x in xs for y in x if x if y]\n", 3, 3),
        ("def f(x):\n    match x:\n        case 1:\n            return 1\n        case _:\n            return 2\n", 3, 3),
        ("async def f(xs):\n    async for x in xs:\n        y = 1 if x else 2\n", 3, 3),
        ("def f(x=1 if a else 2):\n    return x\n", 2, 2),
        # the nested function's if also counts in outer: inner 2, outer 1 + if + while
        ("def outer(x):\n    def inner(y):\n        if y:\n            return 1\n        return 0\n"
         "    while x:\n        x -= 1\n    return inner\n", 5, 3),
        # module-level decisions are lost once the file has any function
        ("if a:\n    pass\ndef f():\n    return 1\n", 1, 1),
        # no function: the whole file is one block
        ("x = 1 if y else 2\nfor i in r:\n    pass\n", 3, 3),
        ("class A:\n    x = 1 if y else 2\n", 2, 2),
        ("f = lambda x: x if x else 0\n", 2, 2),
        ("# only a comment\n", 1, 1),
        ("\n  \n", 0, 0),
    ],
)
def test_cyclomatic_rules(tmp_path: Path, source: str, total: int, maximum: int):
    got = code_metrics(write_tree(tmp_path, {"m.py": source}))
    assert (got["cyclomatic_total"], got["cyclomatic_max"]) == (total, maximum)


def test_counting_quirks(tmp_path: Path):
    files = {
        "crlf.py": "x = 1\r\n\r\n  # c\r\ny = 2\r",
        "bom.py": "\ufeffx = 1\n",
        ".py": "x = 1\n",
        "pkg/test_a.py": "import a.b.c\nimport d as e, f.g\nfrom .h import i\nfrom j.k import l\n",
        ".git/HEAD": "ref\n",
    }
    got = code_metrics(write_tree(tmp_path, files))
    assert got["files"] == 5
    assert got["python_files"] == 3                     # `.py` alone has no suffix
    assert got["lines"] == 4 + 1 + 4
    assert got["source_lines"] == 2 + 1 + 4
    assert got["parse_errors"] == ["bom.py"]            # decoded as utf-8, BOM kept
    assert got["imports"] == ["a", "d", "f", "j"]
    assert got["test_files"] == 1
    assert got["policy_bytes"] == 0
    assert got["tree_hash"] == tree_hash_by_definition(files)


def test_nul_bytes_and_undecodable_bytes_are_parse_errors(tmp_path: Path):
    files = {"nul.py": b"x = '\x00'\n", "latin.py": b"\xff\xfe = 2\n\n"}
    got = code_metrics(write_tree(tmp_path, files))
    assert got["parse_errors"] == ["latin.py", "nul.py"]
    assert got["lines"] == 1 + 2
    assert got["tree_hash"] == tree_hash_by_definition(files)


def test_nesting_too_deep_to_parse_is_a_parse_error(tmp_path: Path):
    source = "x = " + "+".join(["a"] * 5000) + "\n"
    got = code_metrics(write_tree(tmp_path, {"deep.py": source}))
    assert got["parse_errors"] == ["deep.py"]


@pytest.mark.parametrize(
    ("source", "branches", "loops", "depth"),
    [
        ("x = 1\n", 0, 0, 3),
        ("x = -1\n", 0, 0, 4),
        ("x = a < b <= c\n", 0, 0, 4),               # operators are tags, not levels
        ("x = not a + b\n", 0, 0, 5),
        ("if a:\n    pass\nelif b or c or d:\n    pass\n", 1 + 1 + 2, 0, 5),
        ("y = [a for a in b for c in a]\nwhile y:\n    y = 0 if y else 1\n", 1, 3, 5),
        ("match p:\n    case 1:\n        pass\n    case 2 | 3:\n        pass\n", 2, 0, 6),
    ],
)
def test_branches_loops_depth(tmp_path: Path, source: str, branches: int, loops: int, depth: int):
    got = code_metrics(write_tree(tmp_path, {"m.py": source}))
    assert (got["branches"], got["loops"], got["max_ast_depth"]) == (branches, loops, depth)


def test_self_state_only_counts_stores_inside_classes(tmp_path: Path):
    source = (
        "class A:\n"
        "    def step(self, x):\n"
        "        self.pos += x\n"
        "        self.vel: float = 0.0\n"
        "        for self.i in range(3):\n"
        "            self.buf.append(self.read)\n"
        "        (self.a, [self.b]) = x\n"
        "        other.z = 1\n"
        "def free(self):\n"
        "    self.outside = 1\n"
    )
    got = code_metrics(write_tree(tmp_path, {"m.py": source}))
    assert got["self_state"] == ["a", "b", "i", "pos", "vel"]


def topology(tmp_path: Path, name: str, files: dict[str, str]) -> dict:
    return code_metrics(write_tree(tmp_path / name, files))


@pytest.mark.parametrize(
    ("before", "after"),
    [
        ("k = 0.5\n", "k = 0.75\n"),
        ("k = 0.5\n", "k = -3\n"),
        ("k = [1, 2j]\n", "k = [+1e9, -2]\n"),
        ("x = a * 0.1  # gain\n", "x = a*0.2\n"),
    ],
)
def test_numeric_and_formatting_edits_keep_the_topology(tmp_path: Path, before: str, after: str):
    prev = topology(tmp_path, "a", {"policy.py": before})
    cur = topology(tmp_path, "b", {"policy.py": after})
    assert prev["tree_hash"] != cur["tree_hash"]
    assert prev["topology_hash"] == cur["topology_hash"]
    assert edit_kind(prev, cur) == "tuning"


@pytest.mark.parametrize(
    ("before", "after"),
    [
        ("x = a and b\n", "x = a or b\n"),
        ("x = a\n", "x = a if c else 0\n"),
        ("mode = 'left'\n", "mode = 'right'\n"),
        ("flag = True\n", "flag = False\n"),
        ("k = 1\n", "k = 1 - 1\n"),
        ("k = 1\n", "k = -a\n"),
        ("def f(x):\n    return x\n", "def g(x):\n    return x\n"),
    ],
)
def test_structural_edits_change_the_topology(tmp_path: Path, before: str, after: str):
    prev = topology(tmp_path, "a", {"policy.py": before})
    cur = topology(tmp_path, "b", {"policy.py": after})
    assert prev["topology_hash"] != cur["topology_hash"]
    assert edit_kind(prev, cur) == "synthesis"


def test_file_level_edits(tmp_path: Path):
    base = {"policy.py": "k = 1\n", "gains.json": "[1]\n", "bad.py": "def (:\n"}
    prev = topology(tmp_path, "base", base)
    data_only = topology(tmp_path, "data", {**base, "gains.json": "[2]\n"})
    renamed = topology(tmp_path, "renamed", {"main.py": "k = 1\n", "gains.json": "[1]\n", "bad.py": "def (:\n"})
    broken_edit = topology(tmp_path, "broken", {**base, "bad.py": "def (:  \n"})
    same = topology(tmp_path, "same", dict(base))
    assert edit_kind(prev, data_only) == "tuning"
    assert edit_kind(prev, renamed) == "synthesis"
    assert edit_kind(prev, broken_edit) == "synthesis"
    assert edit_kind(prev, same) == "none"
    assert edit_kind(None, same) == "synthesis"


def test_edit_kind_rejects_foreign_metrics(tmp_path: Path):
    cur = topology(tmp_path, "a", {"policy.py": "k = 1\n"})
    with pytest.raises(DataError, match="topology_hash"):
        edit_kind(reference_view(cur), cur)


def test_file_count_cap_marks_truncated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    files = {"a.py": "x = 1\n", "b.py": "def f():\n    return 1\n", "c.py": "y = 2\n", "d.txt": "d"}
    monkeypatch.setattr(metrics, "MAX_FILES", 2)
    got = code_metrics(write_tree(tmp_path, files))
    assert got["truncated"] is True
    assert (got["files"], got["python_files"], got["bytes"]) == (4, 3, 6 + 22 + 6 + 1)
    assert (got["lines"], got["functions"]) == (1 + 2, 1)
    assert got["tree_hash"] == tree_hash_by_definition({k: files[k] for k in ("a.py", "b.py")})


def test_oversized_python_file_is_hashed_not_parsed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    small = {"policy.py": "k = 1\n", "table.py": "T = [" + "0, " * 40 + "]\n"}
    monkeypatch.setattr(metrics, "MAX_FILE_BYTES", 64)
    monkeypatch.setattr(metrics, "_CHUNK", 16)
    got = code_metrics(write_tree(tmp_path / "a", small))
    assert got["truncated"] is True
    assert got["lines"] == 1 and got["parse_errors"] == []
    assert got["tree_hash"] == tree_hash_by_definition(small)
    other = code_metrics(write_tree(tmp_path / "b", {**small, "table.py": small["table.py"].replace("0", "1")}))
    assert edit_kind(got, other) == "synthesis"


def test_missing_directory_is_a_config_error(tmp_path: Path):
    with pytest.raises(ConfigError, match="not one"):
        code_metrics(tmp_path / "nope")


def test_a_500_line_policy_takes_a_few_milliseconds(tmp_path: Path):
    body = "".join(
        f"    def rule_{i}(self, obs):\n"
        f"        if obs[{i % 7}] > {i * 0.1:.1f} and obs[0] < 2:\n"
        f"            self.s{i} = [o * {i} for o in obs if o]\n"
        f"        return -{i}\n"
        for i in range(124)
    )
    root = write_tree(tmp_path, {"policy.py": "class Policy:\n" + body})
    assert code_metrics(root)["lines"] == 1 + 4 * 124
    best = min(_cpu(code_metrics, root) for _ in range(3))
    assert best < 0.05, f"expected < 50 ms of CPU for a 500-line policy, took {best * 1000:.1f} ms"


def _cpu(fn, *args) -> float:
    """CPU seconds of this thread (not wall time: the tier runs beside other test workers, whose
    load would otherwise be measured; a quadratic walk still shows)."""
    start = time.thread_time()
    fn(*args)
    return time.thread_time() - start
