"""The Python API (`ole.api`, re-exported by the package face `ole/__init__.py`) and its page.

The docs/python.md example runs here as written, on the real host (tiny: one env, budgets 4 and
8, one pool; about 10 s on a quiet machine). The other tests read the same records the CLI prints
with --json and check that both say the same.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import ole
import ole.jobs as jobs
from ole.cli import main
from ole.errors import ValidationError
from ole.registry import Registry
from synthetic import fake_evaluate

PROJECT = Path(__file__).resolve().parents[2]
PAGE = PROJECT / "docs" / "python.md"


def example() -> str:
    """The code block the page marks as its runnable example."""
    found = re.search(r"<!-- python-example -->\n```python\n(.*?)```", PAGE.read_text(), re.S)
    assert found, "docs/python.md lost its marked example"
    return found.group(1)


@pytest.fixture
def project(tmp_path) -> Path:
    (tmp_path / "bundles").mkdir()
    shutil.copy(PROJECT / "bundles" / "coder.yaml", tmp_path / "bundles" / "coder.yaml")
    return tmp_path


def test_the_face_exports_exactly_its_table_and_each_name_resolves():
    assert set(ole.__all__) == {"__version__", *ole._FACE}
    for name in ole._FACE:
        value = getattr(ole, name)
        assert value is not None and (value.__doc__ or "").strip(), name
    assert set(ole._FACE) <= set(dir(ole))
    with pytest.raises(AttributeError, match="no attribute 'nothing_here'"):
        ole.nothing_here  # noqa: B018
    # a submodule imported later never shadows a function of the face (their names differ)
    import importlib
    importlib.import_module("ole.gate")
    assert callable(ole.judge) and not isinstance(ole.judge, type(ole))


@pytest.mark.heavy
@pytest.mark.sandbox
def test_the_python_page_example_runs_as_written(project):
    code = example()
    assert len(code.strip().splitlines()) <= 15
    done = subprocess.run([sys.executable, "-c", code], cwd=project, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONPATH": str(PROJECT)})
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.strip().splitlines()
    assert lines[0].startswith("evolve released:") and lines[1].split(" | ")[0] in ("release", "reject", "indecisive")
    with Registry(project / "bundles") as reg:
        decided = [d for d in ole.decisions(registry=reg) if d.champion == "coder@1"]
        mine = decided[-1].challenger
        assert reg.get(mine).bundle.loop_policy.action.step_size == 0.1  # the hand-written version was gated
        assert reg.get(mine).bundle.provenance.parents == (1,)
    assert (project / "runs" / "evolve-offline" / "evolve.yaml").is_file()  # the evolve is named and replayable


def test_the_records_are_the_ones_the_cli_prints(project, capsys, monkeypatch):
    monkeypatch.setattr(jobs, "run_job", fake_evaluate)
    monkeypatch.chdir(project)
    mine = project / "mine.yaml"
    mine.write_text((PROJECT / "bundles" / "coder.yaml").read_text().replace("retest_episodes: 4", "retest_episodes: 6"))
    root = str(project / "bundles")
    assert main(["--root", root, "bundle", "register", str(mine), "--parent", "1"]) == 0
    decision = ole.judge("coder@2", envs=["gym/acrobot", "gym/pusher5"], budgets=[32], pools=[201, 202, 203],
                         registry=root, progress=lambda line: None)
    capsys.readouterr()
    assert main(["--root", root, "gate", "coder@2", "--envs", "gym/acrobot,gym/pusher5", "--budgets", "32",
                 "--pools", "201,202,203", "--json"]) == 0  # the stored decision, printed
    assert json.loads(capsys.readouterr().out) == decision.model_dump(mode="json")
    assert [d.model_dump(mode="json") for d in ole.decisions("coder@2", registry=root)] == \
        [decision.model_dump(mode="json")]
    assert main(["--root", root, "champion", "show", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    general = ole.champions(registry=root)[0]
    assert (general.scope, general.active) == ("general", shown["active"])
    assert main(["--root", root, "lineage", "show", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == json.loads(ole.lineage(root).render("json"))


def test_settings_are_the_flags_by_name_and_a_wrong_one_is_refused():
    from ole.api import settings_of
    s = settings_of(envs=["gym/acrobot"], gate_pools=[201, 202], mode="offline")
    assert s.envs == ("gym/acrobot",) and s.gate_pools == (201, 202)
    with pytest.raises(ValidationError, match="bad evolve setting gate_pool"):
        settings_of(gate_pool=[201])
    with pytest.raises(ValidationError, match="names no env"):
        ole.evolve_offline(envs=[], registry=None)


def test_stream_asks_and_tells_from_the_callers_loop(project, monkeypatch):
    """`ole.stream`: the caller's loop fixes each task's bundle at its boundary and tells the trace back;
    every `every_k` tasks a challenger is gated (the runs here are fake_evaluate's, through the engine)."""
    from ole.evolve.online import engine_worker
    monkeypatch.setattr(jobs, "run_job", fake_evaluate)
    monkeypatch.chdir(project)
    lines: list[str] = []
    with ole.stream(envs=["gym/acrobot", "gym/pusher5"], tasks=3, every_k=3, gate_on="pools", workers=1,
                    registry="bundles", progress=lines.append) as evo:
        work = engine_worker(evo.e)
        for _ in range(3):
            a = evo.ask()
            evo.tell(work(a))
        assert evo.index == 3 and len(evo.events.decisions) == 1
    assert (project / "runs" / "evolve-online" / "evolve.yaml").is_file()
    assert [d.challenger for d in ole.decisions(registry="bundles")] == [evo.events.decisions[0].challenger]
