"""How OLE's agents reach an evogym host (issue 18): the run's credential found without
being passed around (registered by the runner, or the harness's EVOPOLICYGYM_TOKEN, and
never sent to another run's URL), and agent-session/v3 behind the same `HostClient`, so
`ole agent work` works under a harness that gives only a session socket.
"""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ole.agents.client import (Credential, HostClient, HostError, credential_for, forget_credential,
                               remember_credential, session_url)
from ole.agents.command import protocol_env

REPO = Path(__file__).parents[2]
POLICY = """
class Policy:
    def __init__(self, obs_space, action_space, env_meta):
        self.gain = 1
    def reset(self, episode_index):
        pass
    def act(self, obs):
        return 2 if obs[5] > 0 else 0
"""


@pytest.fixture
def host(tmp_path):
    """A Host with HTTP (its credential registered nowhere) and an agent-session/v3 gateway."""
    from evogym.host import Host, make_config
    from evogym.server import Server
    from evogym.session import Gateway
    h = Host(tmp_path / "run", make_config("gym/acrobot", "quick", budget=6, isolation="none"), prestart=False,
             auto_finalize=False)
    server, gateway = Server(h).start(), Gateway(h).start()
    (h.run.system / "policy.py").write_text(POLICY)
    yield h, server, gateway
    gateway.stop()
    server.stop()
    h.close()
    if h.judge.closed:
        h.done.wait(300)


def test_the_credential_comes_from_the_launcher_or_this_process_environment(host, monkeypatch):
    h, server, _ = host
    monkeypatch.delenv("EVOPOLICYGYM_API", raising=False)
    monkeypatch.delenv("EVOPOLICYGYM_TOKEN", raising=False)
    with pytest.raises(HostError, match="401, this process has no credential"):
        HostClient(server.url).info()
    monkeypatch.setenv("EVOPOLICYGYM_API", server.url)
    monkeypatch.setenv("EVOPOLICYGYM_TOKEN_FILE", str(server.credential.token_file))
    assert HostClient(server.url).info()["episode_budget"] == 6  # the harness's token file
    assert credential_for("http://127.0.0.1:1") is None  # never sent to another run
    monkeypatch.delenv("EVOPOLICYGYM_API")
    remember_credential(server.url, Credential.from_file(server.credential.token_file))
    try:
        client = HostClient(server.url + "/")
        assert client.info()["state"]["remaining_budget"] == 6
        assert client.credential.env()["EVOPOLICYGYM_TOKEN"] == server.credential.token
    finally:
        forget_credential(server.url)


def test_host_client_speaks_agent_session_v3(host, monkeypatch):
    h, server, gateway = host
    monkeypatch.setenv("EVOPOLICYGYM_WORKSPACE", str(h.run.workspace))
    client = HostClient(session_url(gateway.path))
    info = client.info()
    http_info = h.info()
    assert info["env_meta"] == http_info["env_meta"] and info["episode_budget"] == 6
    assert (info["min_episodes_per_submit"], info["max_episodes_per_submit"]) == (1, 6)
    assert info["state"]["remaining_budget"] == 6 and info["state"]["is_finalized"] is False
    assert "## Agent Session (agent-session/v3)" in client.task()
    refused = client.submit([0] * 7)  # one id, sent once: the duplicates collapse as v3 requires
    assert refused.status == "ok" and refused.charged == 1 and refused.submit_id == 0
    assert client.submit(list(range(9))).status == "episode_limit"
    answer = client.submit("1-2")
    assert answer.status == "ok" and answer.submit_id == 1 and len(answer.summary["returns"]) == 2
    assert client.info()["state"] == {"is_finalized": False, "n_submits": 2, "remaining_budget": 3,
                                      "finalization": "pending", "early_finish_allowed": True}
    assert client.finish() == 200 and client.info()["state"]["is_finalized"] is True
    assert HostClient(session_url(gateway.path)).finish() == 200  # already finished: the same outcome
    with pytest.raises(HostError, match="session_closed"):
        client.submit([3])
    assert h.done.wait(300)
    doc = json.loads(h.run.run_json.read_text())
    best_first = sorted((0, 1), key=lambda i: -json.loads(
        (h.run.feedback / f"submit_{i:03d}" / "summary.json").read_text())["mean_return"])
    assert doc["candidate_submission_ids"] == [f"submit_{i:03d}" for i in best_first]


def test_a_session_socket_deeper_than_af_unix_allows(tmp_path, monkeypatch):
    """Run directories can be deep; AF_UNIX paths cannot (108 bytes): both ends go through a
    descriptor of the socket's directory."""
    from evogym.host import Host, make_config
    from evogym.session import Gateway
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    h = Host(deep / "run", make_config("gym/acrobot", "quick", budget=2, isolation="none"), prestart=False,
             auto_finalize=False)
    gateway = Gateway(h).start()
    try:
        assert len(str(gateway.path)) > 108
        monkeypatch.setenv("EVOPOLICYGYM_WORKSPACE", str(h.run.workspace))
        client = HostClient(session_url(gateway.path))
        answer = client.submit([0])  # answered and charged, whatever program the workspace starts with
        assert answer.charged == 1 and answer.submit_id == 0, answer
    finally:
        gateway.stop()
        h.close()


def test_command_agents_get_the_session_variables(tmp_path):
    env = protocol_env(session_url(tmp_path / "control" / "session.sock"), tmp_path / "workspace")
    assert env["EVOPOLICYGYM_SESSION_SOCKET"] == "../control/session.sock"
    assert env["EVOPOLICYGYM_WORKSPACE"] == str((tmp_path / "workspace").resolve())
    assert "EVOPOLICYGYM_API" not in env


@pytest.mark.heavy
def test_ole_agent_work_speaks_v3_under_a_session_harness(tmp_path):
    root = tmp_path / "reg"
    root.mkdir()
    shutil.copy(REPO / "bundles" / "coder.yaml", root)
    agent = f"{sys.executable} -m ole.cli --root {root} agent work --log-dir {tmp_path / 'logs'}"
    run_dir = tmp_path / "run"
    out = subprocess.run([sys.executable, "-m", "evogym.cli", "run", "--env", "gym/acrobot", "--run-dir", str(run_dir),
                          "--budget", "8", "--isolation", "none", "--session", "--", *agent.split()],
                         capture_output=True, text=True, timeout=900, cwd=REPO)
    assert out.returncode == 0, out.stdout + out.stderr
    assert json.loads(out.stdout.strip().splitlines()[-1])["status"] == "completed"
    doc = json.loads((run_dir / "run.json").read_text())
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    closing = next(e for e in events if e["event"] == "run.close.start")
    # the agent finished over the session, naming its candidates (HTTP would have left them to the host)
    assert closing["reason"] == "finish" and closing["candidates"], closing
    assert doc["candidate_submission_ids"] == [f"submit_{i:03d}" for i in closing["candidates"]]
    rows = (tmp_path / "logs" / "iterations.jsonl").read_text().splitlines()
    assert rows and json.loads(rows[0])["verdict"] == "ok"
