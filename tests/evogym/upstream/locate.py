"""Where EvoPolicyGym main's source and a Python that can run it are, for the interop tests.

The source is `shared/reference/evopolicygym-main` beside the checkout (or one level up: a
worktree), or `$EVOPOLICYGYM_MAIN`; CI's clone has neither, and the tests that need it skip
saying so. Upstream requires Python >= 3.12 (its modules use `type X = ...` statements):
`$EVOPOLICYGYM_MAIN_PYTHON`, python3.12/3.13 on PATH, or a pyenv one.
"""
from __future__ import annotations

import ast
import glob
import os
import shutil
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
E2E_TEST = "test_agent_edits_submits_reads_public_feedback_and_finishes"


def upstream_root() -> Path | None:
    given = os.environ.get("EVOPOLICYGYM_MAIN")
    found = [Path(given)] if given else [REPO.parent / "shared/reference/evopolicygym-main",
                                         REPO.parent.parent / "shared/reference/evopolicygym-main"]
    return next((p for p in found if (p / "src" / "evopolicygym").is_dir() and (p / "tests").is_dir()), None)


def python312() -> str | None:
    tries = [os.environ.get("EVOPOLICYGYM_MAIN_PYTHON"), shutil.which("python3.12"), shutil.which("python3.13"),
             *sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.1[2-9]*/bin/python")))]
    for python in tries:
        if not python:
            continue
        try:
            out = subprocess.run([python, "-c", "import sys; print(sys.version_info >= (3, 12))"],
                                 capture_output=True, text=True, timeout=60)
        except OSError:
            continue
        if out.stdout.strip() == "True":
            return python
    return None


def e2e_sources(root: Path) -> dict[str, str]:
    """The four source texts upstream's end-to-end test defines (`initial_source`,
    `improved_source`, `unsubmitted_source`, `agent_source`), evaluated from its file as they
    are there: the agent text is an f-string over the other three, so it is run, not rewritten."""
    tree = ast.parse((root / "tests" / "test_public_contract.py").read_text(encoding="utf-8"))
    test = next(node for node in ast.walk(tree) if isinstance(node, ast.FunctionDef) and node.name == E2E_TEST)
    names = ("initial_source", "improved_source", "unsubmitted_source", "agent_source")
    assigns = [node for node in test.body if isinstance(node, ast.Assign)
               and [getattr(t, "id", None) for t in node.targets][0] in names]
    namespace: dict[str, str] = {}
    exec(compile(ast.Module(body=assigns, type_ignores=[]), "test_public_contract.py", "exec"), namespace)
    return {name: namespace[name] for name in names}
