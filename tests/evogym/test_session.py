"""agent-session/v3 beside v0.1.0 HTTP (issue 18): EvoPolicyGym main's own session client
(`evopolicygym-session`) submits and finishes against our host; the wire format's refusals,
bad frames and slow clients; the strict profile; run.json's run-record/v8 fields.

The upstream client cannot run on this project's Python 3.11: its package uses `type X = ...`
statements (3.12 syntax) in modules every import of it loads (`evopolicygym/run/__init__.py`).
The conformance test runs it with a Python 3.12 when the machine has one, and the wire tests
below speak the documented format (4-byte big-endian length + JSON object) themselves.
"""
from __future__ import annotations

import glob
import json
import os
import shutil
import socket
import stat
import subprocess
import time
from pathlib import Path

import pytest

from conftest import ZERO_POLICY, conformance_absent
from evogym.host import Host, make_config
from evogym.session import FRAME_BYTES, PROTOCOL, Gateway, encode_frame

REPO = Path(__file__).resolve().parents[2]
BENIGN = """
class Policy:
    def __init__(self, obs_space, action_space, env_meta):
        pass
    def reset(self, episode_index):
        pass
    def act(self, obs):
        return 2 if obs[5] > 0 else 0
"""


def upstream_client() -> tuple[str, Path] | None:
    """(a Python >= 3.12, EvoPolicyGym main's `src`): $EVOPOLICYGYM_MAIN_PYTHON / _SRC, else
    python3.12 on PATH or under pyenv, and `shared/reference/evopolicygym-main/src` beside the
    checkout (or one level up: a worktree)."""
    src = os.environ.get("EVOPOLICYGYM_MAIN_SRC")
    if not src:
        found = [REPO.parent / "shared/reference/evopolicygym-main/src",
                 REPO.parent.parent / "shared/reference/evopolicygym-main/src"]
        src = next((str(p) for p in found if p.is_dir()), None)
    tries = [os.environ.get("EVOPOLICYGYM_MAIN_PYTHON"), shutil.which("python3.12"), shutil.which("python3.13"),
             *sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.1[2-9]*/bin/python")))]
    python = next((p for p in tries if p and _runs_312(p)), None)
    return (python, Path(src)) if python and src else None


def _runs_312(python: str) -> bool:
    try:
        out = subprocess.run([python, "-c", "import sys; print(sys.version_info >= (3, 12))"], capture_output=True,
                             text=True, timeout=60)
    except OSError:
        return False
    return out.stdout.strip() == "True"


@pytest.fixture
def session(tmp_path):
    """Factory: session(profile="quick", budget=4, **config) -> (Host, Gateway), both closed after."""
    made = []

    def factory(profile: str = "quick", **kw):
        kw.setdefault("budget", 4)
        host = Host(tmp_path / f"run{len(made)}", make_config("gym/acrobot", profile, isolation="none", **kw),
                    prestart=False, auto_finalize=False)
        gateway = Gateway(host).start()
        made.append((host, gateway))
        return host, gateway

    yield factory
    for host, gateway in made:
        gateway.stop()
        host.close()
        if host.judge.closed:
            host.done.wait(300)


def exchange(gateway: Gateway, data: bytes, *, shut: bool = True, timeout: float = 30.0) -> dict:
    """Raw bytes in, the decoded answer frame out."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.settimeout(timeout)
        conn.connect(str(gateway.path))
        conn.sendall(data)
        if shut:
            conn.shutdown(socket.SHUT_WR)
        head = conn.recv(4, socket.MSG_WAITALL)
        body = conn.recv(int.from_bytes(head, "big"), socket.MSG_WAITALL)
    return json.loads(body)


def call(gateway: Gateway, method: str, **fields) -> dict:
    return exchange(gateway, encode_frame({"protocol": PROTOCOL, "method": method, **fields}))


def code(answer: dict) -> str:
    assert answer["protocol"] == PROTOCOL and answer["ok"] is False, answer
    return answer["error"]["code"]


def untouched(host: Host) -> None:
    """Nothing ran, nothing was written, no index was used."""
    assert host.judge.state.used == 0 and host.judge.state.n_submits == 0
    assert not list(host.run.feedback.iterdir())


@pytest.mark.heavy
def test_upstream_session_client_submits_and_finishes(session):
    found = upstream_client()
    if found is None:
        conformance_absent("EvoPolicyGym main's session client needs Python >= 3.12 and its source "
                           "(shared/reference/evopolicygym-main/src); one is not on this machine")
    python, src = found
    host, gateway = session()
    (host.run.system / "policy.py").write_text(BENIGN)
    env = {**os.environ, **gateway.agent_env(), "PYTHONPATH": str(src)}

    def cli(*args):
        proc = subprocess.run([python, "-m", "evopolicygym.run._session.cli", *args], cwd=host.run.workspace,
                              env=env, capture_output=True, text=True, timeout=300)
        return proc.returncode, json.loads(proc.stdout or proc.stderr)

    rc, first = cli("submit", "program", "--episodes", "0:2")
    assert rc == 0 and first["ok"] and first["protocol"] == PROTOCOL, first
    receipt = first["result"]
    assert receipt["submission_id"] == "submission-000001" and receipt["episode_indices"] == [0, 1]
    assert receipt["episodes_used"] == 2 and receipt["episodes_remaining"] == 2 and receipt["status"] == "ok"
    assert receipt["program_digest"].startswith("sha256:") and -200 < receipt["score"] < -50
    assert json.loads((host.run.workspace / receipt["feedback"]).read_text())["score"] == receipt["score"]
    assert json.loads((host.run.workspace / receipt["summary"]).read_text())["mean_return"] == receipt["score"]
    rc, second = cli("submit", "program", "--episodes", "3,7")
    assert rc == 0 and second["result"]["episodes_remaining"] == 0
    rc, refused = cli("finish", "submission-000001", "submission-000001")
    assert rc == 1 and refused["error"]["code"] == "duplicate_submission"
    rc, done = cli("finish", "submission-000002", "submission-000001")
    assert rc == 0 and done["result"] == {"agent_authority_closed": True,
                                          "candidate_submission_ids": ["submission-000002", "submission-000001"]}
    rc, closed = cli("submit", "program", "--episodes", "4")
    assert rc == 1 and closed["error"]["code"] == "session_closed"
    assert host.done.wait(300)
    doc = json.loads(host.run.run_json.read_text())
    assert doc["outcome"]["status"] == "completed" and doc["candidate_submission_ids"] == ["submit_001", "submit_000"]
    assert doc["final_submission_id"] == "submit_001"  # identical programs tie: the one named first


@pytest.mark.parametrize("fields, expected", [
    ({"protocol": "agent-session/v2", "method": "submit", "episode_indices": [0]}, "protocol_mismatch"),
    ({"method": "submit", "episode_indices": [0]}, "protocol_mismatch"),
    ({"protocol": PROTOCOL, "method": "info"}, "invalid_request"),
    ({"protocol": PROTOCOL, "method": "submit", "episode_indices": [0], "seed": 1}, "invalid_request"),
    ({"protocol": PROTOCOL, "method": "submit"}, "invalid_request"),
    ({"protocol": PROTOCOL, "method": "submit", "episode_indices": []}, "invalid_request"),
    ({"protocol": PROTOCOL, "method": "submit", "episode_indices": "0:2"}, "invalid_request"),
    ({"protocol": PROTOCOL, "method": "submit", "episode_indices": [1, 0]}, "invalid_request"),
    ({"protocol": PROTOCOL, "method": "submit", "episode_indices": [0, 0]}, "invalid_request"),
    ({"protocol": PROTOCOL, "method": "submit", "episode_indices": [True]}, "invalid_request"),
    ({"protocol": PROTOCOL, "method": "submit", "episode_indices": [1.0]}, "invalid_request"),
    ({"protocol": PROTOCOL, "method": "submit", "episode_indices": [-1]}, "invalid_request"),
    ({"protocol": PROTOCOL, "method": "submit", "episode_indices": [1024]}, "invalid_request"),
    ({"protocol": PROTOCOL, "method": "submit", "episode_indices": [10 ** 30]}, "invalid_request"),
    # upstream's order: an id outside the pool (1024 here) is checked before the 2048-id limit
    ({"protocol": PROTOCOL, "method": "submit", "episode_indices": list(range(2049))}, "invalid_request"),
    ({"protocol": PROTOCOL, "method": "submit", "episode_indices": [0, 1, 2, 3, 4]}, "episode_limit"),
    ({"protocol": PROTOCOL, "method": "finish", "submission_ids": []}, "invalid_request"),
    ({"protocol": PROTOCOL, "method": "finish", "submission_ids": [0]}, "invalid_request"),
    ({"protocol": PROTOCOL, "method": "finish", "submission_ids": ["submit_000"]}, "unknown_submission"),
    ({"protocol": PROTOCOL, "method": "finish", "submission_ids": ["submission-000001"]}, "unknown_submission"),
    ({"protocol": PROTOCOL, "method": "finish"}, "invalid_request"),
])
def test_refusals_are_free_and_leave_no_trace(session, fields, expected):
    host, gateway = session()
    (host.run.system / "policy.py").write_text(ZERO_POLICY)
    assert code(exchange(gateway, encode_frame(fields))) == expected
    untouched(host)
    assert not host.judge.closed


@pytest.mark.parametrize("data, message", [
    ((0).to_bytes(4, "big"), "outside 1.."),
    ((FRAME_BYTES + 1).to_bytes(4, "big") + b"{}", "outside 1.."),
    ((10).to_bytes(4, "big") + b"{}", "ended early"),
    ((8).to_bytes(4, "big") + b"not json", "not a UTF-8 JSON object"),
    ((6).to_bytes(4, "big") + b"[1, 2]", "not a UTF-8 JSON object"),
    ((4).to_bytes(4, "big") + b"\xff\xfe{}", "not a UTF-8 JSON object"),
    ((2).to_bytes(4, "big"), "ended early"),
])
def test_bad_frames_are_answered_invalid_request(session, data, message):
    host, gateway = session()
    answer = exchange(gateway, data)
    assert code(answer) == "invalid_request" and message in answer["error"]["message"], answer
    untouched(host)


def test_a_slow_client_is_answered_after_the_read_timeout(session):
    host, gateway = session()
    t0 = time.monotonic()
    answer = exchange(gateway, (20).to_bytes(4, "big") + b'{"pro', shut=False)
    assert code(answer) == "invalid_request" and "within 1 s" in answer["error"]["message"]
    assert time.monotonic() - t0 < 5.0
    assert call(gateway, "submit", episode_indices=[9999])["error"]["code"] == "invalid_request"  # still serving


def test_submit_receipts_carry_run_state_and_charged_failures(session, tmp_path):
    host, gateway = session(budget=6)
    (host.run.system / "policy.py").write_text("POLICY = None\n")  # neither class Policy nor make_policy
    missing = call(gateway, "submit", episode_indices=[0, 5])  # a program that fails: charged, as over HTTP
    assert missing["ok"] and missing["result"]["status"] == "missing_policy" and missing["result"]["score"] is None
    assert missing["result"]["episodes_remaining"] == 4 and missing["result"]["program_digest"].startswith("sha256:")
    assert missing["result"]["submission_id"] == "submission-000001"
    (host.run.system / "policy.py").write_text(ZERO_POLICY)
    assert code(call(gateway, "submit", episode_indices=[0, 1, 2, 3, 4])) == "budget_exhausted"
    ok = call(gateway, "submit", episode_indices=[2, 3, 4, 5])["result"]
    assert ok["status"] == "ok" and ok["submission_id"] == "submission-000002" and ok["episodes_remaining"] == 0
    assert ok["submit_index"] == 1 and ok["summary"] == "feedback/submit_001/summary.json"
    assert not host.judge.closed  # v3: the run stays open until the agent finishes
    assert code(call(gateway, "finish", submission_ids=["submission-000003"])) == "unknown_submission"
    finished = call(gateway, "finish", submission_ids=["submit_001"])  # our name, answered as upstream's
    assert finished["ok"] and finished["result"]["candidate_submission_ids"] == ["submission-000002"]
    assert code(call(gateway, "finish", submission_ids=["submission-000002"])) == "session_closed"
    assert host.done.wait(300)
    assert json.loads(host.run.run_json.read_text())["candidate_submission_ids"] == ["submit_001"]


def test_the_socket_is_private_and_the_task_carries_the_spec(session):
    host, gateway = session()
    assert stat.S_IMODE(gateway.path.stat().st_mode) == 0o600 and stat.S_ISSOCK(gateway.path.stat().st_mode)
    assert stat.S_IMODE(gateway.path.parent.stat().st_mode) == 0o700
    env = gateway.agent_env()
    assert env["EVOPOLICYGYM_SESSION_SOCKET"] == "../control/session.sock"
    assert (host.run.workspace / "program").resolve() == host.run.system.resolve()
    text = (host.run.workspace / "TASK.md").read_text()
    spec = json.loads(text.rsplit("```json\n", 1)[1].split("\n```", 1)[0])
    assert spec["id"] == "gym/acrobot" and spec["action_space"] == {"n": 3, "type": "Discrete"}
    assert spec["metadata"]["episode_budget"] == 4 and spec["metadata"]["finish_budget_policy"] == "allow_early"
    assert spec["score_direction"] == "maximize" and "evopolicygym-session submit program" in text


def test_strict_profile(session):
    host, gateway = session("strict", budget=4, max_per_submit=2, max_submissions=2)
    (host.run.system / "policy.py").write_text(BENIGN)
    refused = call(gateway, "submit", episode_indices=[0])
    assert code(refused) == "budget_allocation" and "select at least 2" in refused["error"]["message"]
    assert code(call(gateway, "submit", episode_indices=[128])) == "invalid_request"  # the pool is 128
    untouched(host)
    assert call(gateway, "submit", episode_indices=[0, 1])["ok"]
    assert code(call(gateway, "finish", submission_ids=["submission-000001"])) == "budget_remaining"
    assert call(gateway, "submit", episode_indices=[2, 127])["ok"]
    assert code(call(gateway, "finish", submission_ids=["submission-000001", "submission-000002"])) == "candidate_limit"
    assert call(gateway, "finish", submission_ids=["submission-000001"])["ok"]
    assert host.done.wait(300)
    doc = json.loads(host.run.run_json.read_text())
    assert doc["outcome"]["status"] == "completed" and doc["final_submission_id"] == "submit_000"
    assert doc["candidate_submission_ids"] == ["submit_000"] and list(doc["outcome"]["val_scores"]) == ["0"]
    assert doc["config"] == {
        "split": "train", "seed": 0, "max_submissions": 2, "episode_budget": 4, "episode_pool_size": 128,
        "max_episodes_per_submission": 2, "finish_budget_policy": "require_budget_exhaustion",
        "bulk_feedback_retention_bytes": None, "episode_timeout_seconds": 600.0, "agent_timeout_seconds": None,
        "validation": {"split": "valid", "episodes_per_candidate": 1, "max_candidates": 1},
        "assessment": {"split": "heldout", "episodes": 64}}


def test_strict_profile_sizes_and_refusals_over_http(live_host):
    cfg = make_config("gymnasium/MiniGrid-FourRooms-v0", "strict")
    assert (cfg.budget, cfg.n_env_instances, cfg.max_submissions, cfg.max_per_submit) == (128, 128, 128, 32)
    assert (cfg.valid_size, cfg.heldout_size, cfg.max_candidates, cfg.allow_early_finish) == (1, 128, 1, False)
    assert make_config("gym/acrobot", "strict").heldout_size == 64
    live = live_host(profile="strict", budget=4, max_per_submit=2, max_submissions=2)
    live.write_policy(ZERO_POLICY)
    status, body = live.submit([0])
    assert status == 400 and body["status"] == "budget_invalid" and "select at least 2" in body["error"]["message"]
    assert live.request("POST", "/finish", {})[0] == 409


def test_submission_limit(session):
    host, gateway = session(budget=4, max_submissions=1)
    (host.run.system / "policy.py").write_text(ZERO_POLICY)
    assert call(gateway, "submit", episode_indices=[0])["ok"]
    assert code(call(gateway, "submit", episode_indices=[1])) == "submission_limit"


def test_v3_refusals_of_a_closed_run(session):
    host, gateway = session()
    host.start_finalize("test")
    assert code(call(gateway, "submit", episode_indices=[0])) == "session_closed"
    assert code(call(gateway, "finish", submission_ids=["submit_000"])) == "session_closed"


def test_a_finish_that_loses_the_race_to_another_close_is_refused(session, monkeypatch):
    """A v3 finish checks its candidates, then closes: an HTTP /finish (or SIGTERM) landing in
    between closed the run with the default candidates, and the v3 finish still answered ok with
    its own ids (which were not used). Now it answers session_closed."""
    host, gateway = session(budget=4)
    (host.run.system / "policy.py").write_text(ZERO_POLICY)
    assert call(gateway, "submit", episode_indices=[0])["ok"] and call(gateway, "submit", episode_indices=[1])["ok"]
    checked = host.candidate_refusal

    def then_another_close(candidates):
        answer = checked(candidates)
        assert host.finish() == (200, {"status": "finalizing", "remaining_budget": 2})  # what POST /finish does
        return answer

    monkeypatch.setattr(host, "candidate_refusal", then_another_close)
    answer = call(gateway, "finish", submission_ids=["submit_000"])
    assert code(answer) == "session_closed" and "not used" in answer["error"]["message"]
    assert host.done.wait(300)
    assert host.named_candidates is None
    assert host.finish()[1]["status"] == "finalized" and not host.closed_by(host.finish()[1])
