"""`evopolicygym-session`, our own client of the agent-session/v3 socket (issue 31): the
command line EvoPolicyGym main's agents call, its selector grammar, where answers go and its
exit status. A real host, a real socket, the command as a subprocess."""
from __future__ import annotations

import argparse
import importlib
import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from evogym.host import Host, make_config
from evogym.session import Gateway
from evogym.session_client import parse_selector

REPO = Path(__file__).resolve().parents[2]
CLIENT = [sys.executable, "-m", "evogym.session_client"]


@pytest.mark.parametrize("text, ids", [
    ("0", [0]), ("0:3", [0, 1, 2]), ("0:2,4:6,9", [0, 1, 4, 5, 9]), ("7,8", [7, 8]),
    ("18446744073709551615", [2**64 - 1]),
])
def test_selectors(text, ids):
    assert parse_selector(text) == ids


@pytest.mark.parametrize("text, needle", [
    ("", "non-empty"), ("0, 1", "whitespace"), ("0,,1", "empty item"), ("1:1", "non-empty and increasing"),
    ("3:1", "non-empty and increasing"), ("2,1", "strictly increasing"), ("0:3,2", "strictly increasing"),
    ("1:2:3", "START:END"), ("-1", "unsigned decimal"), ("0x10", "unsigned decimal"), ("٣", "unsigned decimal"),
    ("18446744073709551616", "64-bit"), ("0:2049", "at most 2048"),
])
def test_bad_selectors(text, needle):
    with pytest.raises(argparse.ArgumentTypeError, match=needle):
        parse_selector(text)


def test_the_console_script_is_declared():
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    module, _, function = scripts["evopolicygym-session"].partition(":")
    assert callable(getattr(importlib.import_module(module), function))


@pytest.fixture
def live(tmp_path):
    host = Host(tmp_path / "run", make_config("gym/acrobot", "quick", budget=3, isolation="none"), prestart=False,
                auto_finalize=False)
    gateway = Gateway(host).start()
    yield host, {**os.environ, **gateway.agent_env()}
    gateway.stop()
    host.close()
    if host.judge.closed:
        host.done.wait(300)


def run(host, env, *args):
    return subprocess.run([*CLIENT, *args], cwd=host.run.workspace, env=env, capture_output=True, text=True,
                          timeout=300)


@pytest.mark.heavy
def test_answers_go_to_stdout_refusals_to_stderr(live):
    host, env = live
    ok = run(host, env, "submit", "program", "--episodes", "0:2")
    assert ok.returncode == 0 and not ok.stderr and ok.stdout.count("\n") == 1
    answer = json.loads(ok.stdout)
    assert answer["ok"] and answer["result"]["submission_id"] == "submission-000001"
    assert ok.stdout.strip() == json.dumps(answer, separators=(",", ":"), sort_keys=True, ensure_ascii=False)
    refused = run(host, env, "submit", "program", "--episodes", "0:2")
    assert refused.returncode == 1 and not refused.stdout
    assert json.loads(refused.stderr)["error"]["code"] == "budget_exhausted"
    done = run(host, env, "finish", "submission-000001")
    assert done.returncode == 0 and json.loads(done.stdout)["result"]["agent_authority_closed"] is True


def test_client_errors_exit_2_with_client_error(live, tmp_path):
    host, env = live
    other = tmp_path / "other"
    other.mkdir()
    for case_env, args, needle in [
        ({k: v for k, v in env.items() if k != "EVOPOLICYGYM_SESSION_SOCKET"}, ("finish", "submission-000001"),
         "EVOPOLICYGYM_SESSION_SOCKET is not set"),
        (env, ("submit", str(other), "--episodes", "0"), "must be $EVOPOLICYGYM_WORKSPACE/program"),
        ({**env, "EVOPOLICYGYM_SESSION_SOCKET": "no/such.sock"}, ("finish", "submission-000001"), "session socket"),
    ]:
        out = run(host, case_env, *args)
        assert out.returncode == 2 and not out.stdout, out
        error = json.loads(out.stderr)
        assert error == {"ok": False, "error": {"code": "client_error", "message": error["error"]["message"]}}
        assert needle in error["error"]["message"]
    usage = run(host, env, "submit", "program", "--episodes", "2,1")
    assert usage.returncode == 2 and "strictly increasing" in usage.stderr
    assert host.judge.state.n_submits == 0  # nothing reached the host
