"""`ast.parse` for a threaded host: one parse at a time, process-wide.

CPython 3.11 counts the AST constructor's recursion depth in per-interpreter state. When
a thread switch lands inside one thread's construction (a garbage collection that runs a
finalizer is enough), another thread's parse moves the same counter, and one of them
fails with `SystemError: AST constructor recursion depth mismatch` (python/cpython#106905;
reproduced here on 3.11.7: about 50 of 1,200 parses from 6 threads). The host parses
policy sources from several threads at once (submit handlers, sandboxes started ahead,
code metrics), and one such SystemError ended a FetchPickAndPlace run after 24 of its
128 episodes. Every host parse goes through `parse`, which holds a lock for the parse.
"""
from __future__ import annotations

import ast
import threading

_LOCK = threading.Lock()


def parse(source: str | bytes, filename: str = "<unknown>") -> ast.Module:
    """`ast.parse(source, filename)` with no other parse running in this process."""
    with _LOCK:
        return ast.parse(source, filename=filename)


__all__ = ["parse"]
