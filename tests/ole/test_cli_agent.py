"""`ole agent work` inside an external harness (`evogym run`): the run ends scored."""
import json
import pytest
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).parents[2]


@pytest.mark.heavy
def test_builtin_agent_as_a_harness_command(tmp_path):
    root = tmp_path / "reg"
    root.mkdir()
    shutil.copy(REPO / "bundles" / "coder.yaml", root)
    agent = f"{sys.executable} -m ole.cli --root {root} agent work --log-dir {tmp_path / 'logs'}"
    out = subprocess.run([sys.executable, "-m", "evogym.cli", "run", "--env", "gym/acrobot", "--run-dir",
                          str(tmp_path / "run"), "--budget", "8", "--isolation", "none", "--",
                          *agent.split()], capture_output=True, text=True, timeout=600, cwd=REPO)
    assert out.returncode == 0, out.stdout + out.stderr
    summary = json.loads(out.stdout.strip().splitlines()[-1])
    assert summary["status"] == "completed" and summary["final_score"] > -499
    rows = (tmp_path / "logs" / "iterations.jsonl").read_text().splitlines()
    assert rows and json.loads(rows[0])["verdict"] is not None


def test_outside_a_harness_is_a_clear_error(tmp_path):
    out = subprocess.run([sys.executable, "-m", "ole.cli", "agent", "work"], capture_output=True, text=True,
                         env={"PATH": "/usr/bin:/bin"}, cwd=REPO)
    assert out.returncode == 2 and "EVOPOLICYGYM_API" in out.stderr and "Traceback" not in out.stderr


def test_bad_harness_variables_are_clear_errors(tmp_path):
    """EVOPOLICYGYM_API=notaurl and a missing EVOPOLICYGYM_TOKEN_FILE were internal errors."""
    for env, needle in (({"EVOPOLICYGYM_API": "notaurl"}, "is not an http(s) URL"),
                        ({"EVOPOLICYGYM_API": "http://127.0.0.1:99999"}, "is not an http(s) URL"),
                        ({"EVOPOLICYGYM_API": "http://127.0.0.1:1", "EVOPOLICYGYM_TOKEN_FILE": str(tmp_path / "no")},
                         "is not a readable file")):
        out = subprocess.run([sys.executable, "-m", "ole.cli", "agent", "work"], capture_output=True, text=True,
                             env={"PATH": "/usr/bin:/bin", "EVOPOLICYGYM_WORKSPACE": str(tmp_path), **env}, cwd=REPO)
        assert out.returncode == 2 and needle in out.stderr and "internal error" not in out.stderr, out.stderr
