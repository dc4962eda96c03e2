"""The reference's own artifact checker on our run directories (issue 12): 0 issues for a
run with several submits, a multi-file `system/`, identical and tuned checkpoints, a
Phase-1 reject and a failed import; and the reference's metrics schema, encoded here so
the test fails if `metrics.json` gains or loses a key even where the reference is absent."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import conformance_absent
from evogym.code_metrics import STRUCTURE_FIELDS

REPO = Path(__file__).resolve().parents[2]
REFERENCE_METRICS = {
    "schema_version": str, "files": int, "python_files": int, "bytes": int, "policy_bytes": int, "lines": int,
    "source_lines": int, "classes": int, "functions": int, "imports": list, "import_count": int,
    "cyclomatic_total": int, "cyclomatic_max": int, "parse_errors": list, "test_files": int, "tree_hash": str,
}
"""EvoPolicyGym v0.1.0 `metric.measure`: these keys and nothing else (both hosts write them sorted)."""
REFERENCE_TREND = ("submits", "source_lines", "python_files", "functions", "classes", "cyclomatic_total",
                   "cyclomatic_max", "tree_hash")


def reference_src() -> Path | None:
    """The reference v0.1.0 source: $EVOPOLICYGYM_REFERENCE_SRC, else `shared/reference/...`
    beside the checkout or one level up (a worktree); None when absent (a user's clone)."""
    if os.environ.get("EVOPOLICYGYM_REFERENCE_SRC"):
        return Path(os.environ["EVOPOLICYGYM_REFERENCE_SRC"])
    for base in (REPO.parent, REPO.parent.parent):
        src = base / "shared" / "reference" / "evopolicygym-v0.1.0" / "src"
        if src.is_dir():
            return src
    return None


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    from evogym.host import Host, make_config
    root = tmp_path_factory.mktemp("refcheck") / "run"
    host = Host(root, make_config("gym/acrobot", "quick", budget=12, max_per_submit=4, finalize_jobs=1))
    system = host.run.system
    (system / "lib").mkdir()
    (system / "lib" / "__init__.py").write_text("")
    (system / "lib" / "gains.py").write_text("GAIN = 1.0\n\n\ndef pick(x):\n    return 2 if x > 0 else 0\n")
    (system / "notes.md").write_text("# notes\n")
    (system / "params.json").write_text('{"k": 1}')
    (system / "policy.py").write_text(textwrap.dedent("""
        from lib.gains import pick


        class Policy:
            def __init__(self, o, a, m):
                self.steps = 0

            def reset(self, i):
                self.steps = 0

            def act(self, obs):
                self.steps += 1
                return pick(obs[5])
        """))
    statuses = [host.judge.submit({"env_instances": [0, 1]})[1]["status"],
                host.judge.submit({"env_instances": "0-999"})[1]["status"],  # Phase-1 reject
                host.judge.submit({"env_instances": [2]})[1]["status"]]       # identical tree
    (system / "lib" / "gains.py").write_text("GAIN = 2.0\n\n\ndef pick(x):\n    return 2 if x > 0.1 else 0\n")
    statuses.append(host.judge.submit({"env_instances": [3, 4]})[1]["status"])  # tuned
    (system / "policy.py").write_text("import nonexistent_mod\nclass Policy: pass\n")
    statuses.append(host.judge.submit({"env_instances": [5]})[1]["status"])     # charged failure
    assert statuses == ["ok", "budget_invalid", "ok", "ok", "import_error"]
    host.start_finalize("finish")
    assert host.done.wait(300)
    return root


@pytest.mark.sandbox
def test_checkpoint_metrics_carry_exactly_the_reference_schema(run_dir):
    doc = json.loads((run_dir / "run.json").read_text())
    aux = doc["outcome"]["auxiliary"]
    checkpoints = sorted(run_dir.glob("checkpoints/submit_*"))
    assert [c.name for c in checkpoints] == ["submit_000", "submit_002", "submit_003", "submit_004"]
    for ckpt in checkpoints:
        metrics = json.loads((ckpt / "metrics.json").read_text())
        assert sorted(metrics) == sorted(REFERENCE_METRICS)
        assert all(type(metrics[k]) is t for k, t in REFERENCE_METRICS.items()), metrics
        assert aux["code_metrics_by_submit"][str(int(ckpt.name[7:]))] == metrics
        structure = json.loads((run_dir / "code_metrics" / f"{ckpt.name}.json").read_text())
        assert sorted(structure) == sorted(["tree_hash", *STRUCTURE_FIELDS]) and structure["tree_hash"] == metrics["tree_hash"]
    trend = aux["code_metrics_trend"]
    assert sorted(trend) == sorted(REFERENCE_TREND) and trend["submits"] == [0, 2, 3, 4]
    for key in REFERENCE_TREND[1:]:  # the trend is the checkpoints' values, in order
        assert trend[key] == [aux["code_metrics_by_submit"][str(i)][key] for i in trend["submits"]]
    assert aux["code_metrics_best"] == aux["code_metrics_by_submit"][str(doc["outcome"]["best_submit_index"])]
    assert aux["edit_kinds"] == {"0": "synthesis", "2": "none", "3": "tuning", "4": "synthesis"}


@pytest.mark.sandbox
def test_reference_checker_reports_no_issue(run_dir):
    src = reference_src()
    if src is None:
        conformance_absent("the reference v0.1.0 source is absent (set EVOPOLICYGYM_REFERENCE_SRC to its src/ folder)")
    script = ("import sys, json\nfrom evopolicygym.check.run import check\nr = check(sys.argv[1])\n"
              "print(json.dumps([f'{i.code}: {i.path}: {i.message}' for i in r.issues]))")
    out = subprocess.run([sys.executable, "-c", script, str(run_dir)], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(src)}, timeout=120)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []
