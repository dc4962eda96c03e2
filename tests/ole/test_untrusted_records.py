"""Records written by someone else are read without crashing or being believed (issue 31):
agent-written feedback in `evogym report --html`, a gate decision recorded through the public
API without `condition.host` in `ole report`, and `ole bundle import` of a folder or of an export
naming its own hash as a parent. Each through the real command line.
"""
from __future__ import annotations

import json
import pytest
import os
import shutil
import subprocess
import sys
from pathlib import Path

from ole.registry import Registry

REPO = Path(__file__).resolve().parents[2]


def cli(*args: str, module: str = "ole.cli", timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", module, *args], capture_output=True, text=True, cwd=REPO,
                          timeout=timeout)


def registry(tmp_path: Path) -> Path:
    root = tmp_path / "reg"
    root.mkdir()
    shutil.copy(REPO / "bundles" / "coder.yaml", root)
    return root


def test_agent_written_feedback_does_not_crash_the_run_report(tmp_path):
    """`n_episodes: "four"` in a summary the agent rewrote crashed `evogym report --html`; a FIFO
    there would have blocked it."""
    run = tmp_path / "run"
    feedback = run / "workspace" / "feedback"
    for n, summary in enumerate(({"submit_index": 0, "status": "ok", "n_episodes": 2, "mean_return": -90.0},
                                 {"submit_index": 1, "status": ["ok"], "n_episodes": "four", "mean_return": "high"},
                                 {"submit_index": 2, "status": "ok", "n_episodes": True, "mean_return": float("nan")})):
        (feedback / f"submit_{n:03d}").mkdir(parents=True)
        (feedback / f"submit_{n:03d}" / "summary.json").write_text(json.dumps(summary))
    (feedback / "submit_003").mkdir()
    os.mkfifo(feedback / "submit_003" / "summary.json")
    (run / "run.json").write_text(json.dumps({"env": "gym/acrobot", "profile": "quick", "outcome": {
        "status": "completed", "final_score": -90.0, "heldout_returns": [-90.0], "best_submit_index": 0,
        "val_scores": {"0": -91.0}, "auxiliary": {"episodes_used": 2}}}))
    out = cli("report", str(run), "--html", module="evogym.cli", timeout=120)
    assert out.returncode == 0, out.stderr
    page = (run / "report.html").read_text()
    assert 'data-submit="1"' in page and "four" not in page and "high" not in page


def _child(root: Path) -> str:
    """Register a child of coder@1 (bigger steps); its ref."""
    from ole.bundle import bundle_from_data
    from ole.yamlio import read_yaml_file
    with Registry(root) as reg:
        data = read_yaml_file(root / "coder.yaml")
        data["loop_policy"]["action"]["step_size"] = 0.5
        data["provenance"] = {"generation": 1, "proposer": "builtin", "note": "bigger steps"}
        return reg.register(bundle_from_data(data, source="test"), parents=[1], edge="offline_mutation").ref


@pytest.mark.heavy
def test_a_gate_record_without_hosts_in_its_pairs_is_reported(tmp_path):
    """Pairs recorded through `Registry.record_gate_decision` without `condition.host` crashed
    `ole report` (a pydantic error building the coverage)."""
    root = registry(tmp_path)
    child = _child(root)
    with Registry(root) as reg:
        pairs = [{"task": {"env": "gym/acrobot", "budget": 8, "pool_seed": 201 + i}, "condition": {"seed": 0},
                  "family": "curated", "r": 0.1} for i in range(3)]
        reg.record_gate_decision(child, {"verdict": "reject", "champion": "coder@1", "pairs": pairs,
                                             "stats": {"mean_r": 0.1, "n_pairs": 3}})
    (tmp_path / "work").mkdir()
    out = cli("--root", str(root), "report", "--workdir", str(tmp_path / "work"), "--out", str(tmp_path / "site"))
    assert out.returncode == 0, out.stderr
    assert "1 gate decisions" in out.stdout and (tmp_path / "site" / "index.html").is_file()


def test_an_export_naming_itself_as_parent_or_a_folder_is_refused(tmp_path):
    root, other = registry(tmp_path), tmp_path / "other"
    other.mkdir()
    child = _child(root)
    export = tmp_path / "coder.export.yaml"
    out = cli("--root", str(root), "bundle", "export", child, "-o", str(export))
    assert out.returncode == 0, out.stderr
    import yaml
    doc = yaml.safe_load(export.read_text())
    doc["bundle"]["provenance"]["external_parents"] = [doc["content_hash"]]  # provenance is outside the hash
    (tmp_path / "honest.yaml").write_text(export.read_text())
    forged = tmp_path / "forged.yaml"
    forged.write_text(yaml.safe_dump(doc))
    out = cli("--root", str(other), "bundle", "import", str(forged))
    assert out.returncode == 2 and "its own content hash" in out.stderr, out.stdout + out.stderr
    with Registry(other) as reg:
        assert reg.names() == []
    assert cli("--root", str(other), "bundle", "import", str(tmp_path / "honest.yaml")).returncode == 0  # the control
    out = cli("--root", str(other), "bundle", "import", str(tmp_path))
    assert out.returncode == 2 and "is a folder" in out.stderr and "internal error" not in out.stderr, out.stderr
