"""Smoke test of experiments/core16_builtin.py with a tiny budget on one env."""
from __future__ import annotations

import importlib.util
import json
import pytest
import shutil
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def load_script():
    spec = importlib.util.spec_from_file_location("core16_builtin", REPO / "experiments" / "core16_builtin.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.heavy
def test_core16_script_runs_one_env_and_renders(tmp_path):
    root = tmp_path / "bundles"
    root.mkdir()
    shutil.copy(REPO / "bundles" / "coder.yaml", root / "coder.yaml")
    out = tmp_path / "res" / "core16"
    load_script().main(["--profile", "quick", "--budget", "4", "--envs", "gym/acrobot", "--isolation", "none",
                        "--root", str(root), "--runs-dir", str(tmp_path / "runs"),
                        "--traces-dir", str(tmp_path / "traces"), "--out", str(out)])
    results = json.loads(out.with_suffix(".json").read_text())
    assert results["gym/acrobot"]["status"] == "completed" and results["gym/acrobot"]["curve"]
    table = out.with_suffix(".md").read_text()
    assert "| gym/acrobot |" in table and "Envs measured: 1/16" in table
    assert out.with_suffix(".png").stat().st_size > 0
    # another bundle's sweep as a column beside ours (rendering only)
    base = tmp_path / "base.json"
    base.write_text(json.dumps({"gym/acrobot": {**results["gym/acrobot"], "final_score": -123.0}}))
    load_script().main(["--render-only", "--out", str(out), "--baseline", str(base), "--bundle", "coder@7"])
    table = out.with_suffix(".md").read_text()
    assert "bundle `coder@7`" in table and "| baseline |" in table and "| -123 |" in table


def test_generality_script_runs_one_task_and_compares_with_random(tmp_path):
    spec = importlib.util.spec_from_file_location("generality_builtin", REPO / "experiments" / "generality_builtin.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    root = tmp_path / "bundles"
    root.mkdir()
    shutil.copy(REPO / "bundles" / "coder.yaml", root / "coder.yaml")
    out = tmp_path / "res" / "gen"
    module.main(["--profile", "quick", "--budget", "4", "--envs", "gymnasium/CartPole-v1", "--isolation", "none",
                 "--root", str(root), "--runs-dir", str(tmp_path / "runs"), "--traces-dir", str(tmp_path / "traces"),
                 "--out", str(out)])
    row = json.loads(out.with_suffix(".json").read_text())["gymnasium/CartPole-v1"]
    assert row["status"] == "completed" and row["random_n"] == 16 and 5 < row["random"] < 60
    assert "| gymnasium/CartPole-v1 |" in out.with_suffix(".md").read_text()
