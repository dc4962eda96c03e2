"""Host parses are serialized: CPython 3.11's AST constructor is not safe across threads.

The race (python/cpython#106905) needs a thread switch inside another thread's AST
construction; a garbage collection that runs finalizers gives one reliably. On 3.11.7
plain `ast.parse` fails here within a few hundred parses; through `evogym.pyast.parse`
none may fail.
"""
from __future__ import annotations

import ast
import gc
import re
import sys
import threading
from pathlib import Path

import pytest

import evogym
from evogym import pyast

SOURCE = (Path(__file__).resolve().parents[2] / "ole/agents/builtin/programs/grid_bfs.py").read_text()


class _Finalized:
    def __del__(self):
        sum(range(50))  # bytecode in a finalizer: a point where another thread can take over


def _hammer(parse, threads: int = 6, rounds: int = 120) -> list[str]:
    errors: list[str] = []

    def work():
        for _ in range(rounds):
            junk = [_Finalized() for _ in range(20)]
            for item in junk:
                item.cycle = item  # only the cyclic collector frees these, mid-allocation
            del junk
            try:
                parse(SOURCE)
            except SystemError as exc:
                errors.append(str(exc))

    interval, thresholds = sys.getswitchinterval(), gc.get_threshold()
    sys.setswitchinterval(1e-6)
    gc.set_threshold(50, 5, 5)
    try:
        workers = [threading.Thread(target=work) for _ in range(threads)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
    finally:
        sys.setswitchinterval(interval)
        gc.set_threshold(*thresholds)
    return errors


@pytest.mark.heavy
def test_parses_from_many_threads_never_raise_the_recursion_depth_error():
    assert _hammer(pyast.parse) == []


@pytest.mark.heavy
@pytest.mark.skipif(sys.version_info[:2] != (3, 11), reason="the race is CPython 3.11's")
def test_the_same_load_breaks_plain_ast_parse_so_the_test_above_means_something():
    errors = _hammer(ast.parse)
    assert errors and all("recursion depth mismatch" in e for e in errors)


def test_no_host_module_parses_without_the_lock():
    root = Path(evogym.__file__).parent
    offenders = [str(p.relative_to(root)) for p in root.rglob("*.py")
                 if p.name != "pyast.py" and re.search(r"\bast\.parse\(", p.read_text())]
    assert offenders == []
