"""The command agent contained (issue 31): a hostile command agent cannot read another run's token,
see other processes' environments, reach another run's host or the network, or write the registry
that runs it; its legitimate work (reading its workspace, calling its own run's API over HTTP or
agent-session/v3, writing system/policy.py) still succeeds. Real `evogym serve` hosts, real
bubblewrap, the real `ole run` entry point; the same agent without a sandbox is the control that
shows every probe can succeed.
"""
from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from ole.agents.client import credential_for, session_url
from ole.agents.command import CommandAgent
from ole.agents.sandbox import AgentSandbox, agent_environment, bwrap_path
from ole.loop_policy import LoopPolicy
from ole.registry import Registry
from tests.ole.agent_host import serve

REPO = Path(__file__).resolve().parents[2]
HOSTILE = str(Path(__file__).with_name("hostile_agent.py"))

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")


@pytest.fixture
def world(tmp_path):
    """A registry, another run's live host (its token file on disk), a stand-in model provider on
    loopback, and the targets file naming them for the hostile agent."""
    root = tmp_path / "reg"
    root.mkdir()
    shutil.copy(REPO / "bundles" / "coder.yaml", root)
    with Registry(root):
        pass  # the journal exists before the agent runs
    other = serve(tmp_path / "other", budget=2)
    provider = socket.socket()
    provider.bind(("127.0.0.1", 0))
    provider.listen(8)
    token_file = credential_for(other.url).token_file
    targets = tmp_path / "targets.json"
    host, port = other.url.removeprefix("http://").split(":")
    targets.write_text(json.dumps({"other_token_file": token_file, "other_api": [host, int(port)],
                                   "registry": str(root), "provider": list(provider.getsockname()),
                                   "confine": os.path.realpath(tmp_path)}))
    yield {"root": root, "other": other, "targets": targets, "token": Path(token_file).read_text().strip()}
    provider.close()
    other.close(score=False)


def _events(root: Path) -> list[tuple[str, str]]:
    with Registry(root) as reg:
        return [(e.kind, e.name) for e in reg.events()]


def _report(stdout: Path) -> dict:
    lines = [json.loads(line) for line in stdout.read_text().splitlines() if line.startswith('{"report"')]
    assert lines, stdout.read_text()[-2000:]
    return lines[-1]["report"]


def _assert_contained(report: dict, world: dict, root: Path, before: list, workspace: Path) -> None:
    assert report["other_token_file"][0] is False and world["token"] not in json.dumps(report)
    assert report["other_control_dir"][0] is False
    assert report["foreign_tokens"] == 0 and report["roots_in_cmdlines"] == []
    assert report["visible_pids"] <= 4, report["visible_pids"]  # its own pid namespace: bwrap's init, itself
    assert report["registry_listing"][0] is False
    assert all(ok is False for ok, _ in report["registry_write"] + report["registry_register"]), report
    added = [e for e in _events(root) if e not in before]
    assert not (root / "pwned.txt").exists() and not [e for e in added if e[0] in ("registration", "release")], added
    assert report["other_api"][0] is False and report["provider"][0] is False
    assert report["feedback_write"][0] is False and not (workspace / "feedback" / "forged.json").exists()
    assert not (workspace.parent / "escaped.txt").exists()  # at most into the sandbox's own scratch /tmp
    assert report["uid"] == 1000


@pytest.mark.heavy
def test_a_hostile_command_agent_under_ole_run_takes_nothing_and_works_its_run(tmp_path, world):
    """Through `ole run` (its parent's command line holds `--root`, as in the issue)."""
    root, before = world["root"], _events(world["root"])
    out = subprocess.run([sys.executable, "-m", "ole.cli", "--root", str(root), "run", "--env", "gym/acrobot",
                          "--agent", "command", "--budget", "4", "--isolation", "none",
                          "--runs-dir", str(tmp_path / "runs"), "--traces-dir", str(tmp_path / "traces"),
                          "--", sys.executable, HOSTILE, str(world["targets"])],
                         capture_output=True, text=True, timeout=600, cwd=REPO)
    assert out.returncode == 0, out.stdout + out.stderr
    (run,) = (tmp_path / "runs").iterdir()
    report = _report(run / "agent" / "command.stdout.txt")
    _assert_contained(report, world, root, before, run / "host" / "workspace")
    ok, work = report["work"]
    assert ok and work["info"] == 200 and work["submits"] == ["ok", "ok"], work
    assert "policy.py" in os.listdir(run / "host" / "workspace" / "system")
    assert "completed" in out.stdout and list((tmp_path / "traces").glob("*.json"))


def _agent(tmp_path, world, sandbox: AgentSandbox, *, url: str | None = None, workspace: Path | None = None,
           budget: int = 3) -> dict:
    """The hostile agent through `CommandAgent` against its own fresh host (HTTP unless `url`)."""
    served = serve(tmp_path / "run", budget=budget) if url is None else None
    try:
        ctx = served.context(LoopPolicy.model_validate({"budget": {"wall_time_s": 300}}), tmp_path / "log",
                             host="command") if served else None
        if ctx is None:
            from ole.agents.base import AgentContext
            from ole.bundle import Bundle
            from ole.trace import RunCondition, TaskSpec
            ctx = AgentContext(url=url, workspace=workspace, bundle=Bundle(name="t", loop_policy=LoopPolicy()),
                               task=TaskSpec(env="gym/acrobot"), condition=RunCondition(host="command"),
                               log_dir=tmp_path / "log", record=lambda it: None)
        CommandAgent([sys.executable, HOSTILE, str(world["targets"])], sandbox=sandbox).work(ctx)
    finally:
        if served is not None:
            served.close(score=False)
    return _report(tmp_path / "log" / "command.stdout.txt")


@pytest.mark.heavy
def test_without_a_sandbox_the_same_agent_takes_everything(tmp_path, world):
    """The control: every probe of the hostile agent works on an uncontained agent (so the
    assertions above can fail), and the environment allowlist still holds there."""
    report = _agent(tmp_path, world, AgentSandbox(isolation="none"))
    assert report["other_token_file"][0] and report["other_token_file"][1].strip() == world["token"]
    assert report["registry_listing"][0] and all(ok for ok, _ in report["registry_write"]), report
    assert report["registry_register"][0][0], report["registry_register"]
    assert report["other_api"][0] and report["provider"][0] and report["feedback_write"][0]
    assert report["visible_pids"] > 4 and report["work"][0]
    assert ("registration", "pwned") in _events(world["root"])


@pytest.mark.heavy
def test_the_network_flag_opens_the_network_and_nothing_else(tmp_path, world):
    report = _agent(tmp_path, world, AgentSandbox(network=True))
    assert report["provider"][0] is True and report["other_api"][0] is True  # the machine's network, as asked
    assert report["other_token_file"][0] is False and report["foreign_tokens"] == 0
    assert report["registry_listing"][0] is False and not (world["root"] / "pwned.txt").exists()
    ok, work = report["work"]
    assert ok and work["submits"] == ["ok", "ok"], work


def test_a_contained_agent_works_an_agent_session_v3_run(tmp_path, world, monkeypatch):
    """The session socket (outside the workspace, beside the run's token) is bound in by itself."""
    from evogym.host import Host, make_config
    from evogym.session import Gateway
    before = _events(world["root"])
    h = Host(tmp_path / "v3run", make_config("gym/acrobot", "quick", budget=4, isolation="none"), prestart=False,
             auto_finalize=False)
    gateway = Gateway(h).start()
    monkeypatch.setenv("EVOPOLICYGYM_WORKSPACE", str(h.run.workspace))  # where OLE's own v3 client reads TASK.md
    try:
        report = _agent(tmp_path, world, AgentSandbox(), url=session_url(gateway.path), workspace=h.run.workspace)
    finally:
        gateway.stop()
        h.close()
    _assert_contained(report, world, world["root"], before, h.run.workspace)
    ok, work = report["work"]
    assert ok and work["submits"] == ["ok", "ok"], work
    assert "TASK.md" in work["read_workspace"]


def test_the_agent_environment_is_an_allowlist(monkeypatch):
    """`{**os.environ, ...}` gave an HTTP run's agent the parent's EVOPOLICYGYM_SESSION_SOCKET and
    TASK_FILE (and every secret of OLE's environment)."""
    for name, value in (("EVOPOLICYGYM_SESSION_SOCKET", "../other/session.sock"), ("EVOPOLICYGYM_TASK_FILE", "/x"),
                        ("OLE_ROOT", "/registry"), ("SOME_API_KEY", "sk-1"), ("LANG", "C.UTF-8")):
        monkeypatch.setenv(name, value)
    protocol = {"EVOPOLICYGYM_API": "http://127.0.0.1:9", "EVOPOLICYGYM_TOKEN": "t"}
    for isolation in ("bwrap", "none"):
        env = agent_environment(protocol, AgentSandbox(isolation=isolation))  # type: ignore[arg-type]
        assert not {"EVOPOLICYGYM_SESSION_SOCKET", "EVOPOLICYGYM_TASK_FILE", "OLE_ROOT", "SOME_API_KEY"} & set(env)
        assert env["LANG"] == "C.UTF-8" and env["EVOPOLICYGYM_TOKEN"] == "t"
    env = agent_environment(protocol, AgentSandbox(env=("SOME_API_KEY", "EVOPOLICYGYM_TOKEN")))
    assert env["SOME_API_KEY"] == "sk-1" and env["EVOPOLICYGYM_TOKEN"] == "t"  # the run's own always wins


@pytest.mark.heavy
def test_a_real_agent_gets_only_the_allowlist(tmp_path, world, monkeypatch):
    monkeypatch.setenv("EVOPOLICYGYM_SESSION_SOCKET", "../elsewhere/session.sock")
    monkeypatch.setenv("EVOPOLICYGYM_TASK_FILE", "/dev/null")
    monkeypatch.setenv("SOME_API_KEY", "sk-1")
    names = set(_agent(tmp_path, world, AgentSandbox(env=("SOME_API_KEY",)))["env_names"])
    assert not {"EVOPOLICYGYM_SESSION_SOCKET", "EVOPOLICYGYM_TASK_FILE"} & names
    assert {"SOME_API_KEY", "EVOPOLICYGYM_API", "EVOPOLICYGYM_TOKEN", "OLE_INSTRUCTIONS", "HOME"} <= names


def test_bwrap_is_found_or_refused_clearly():
    assert Path(bwrap_path()).name == "bwrap"
    with pytest.raises(ValueError, match="do not exist"):
        AgentSandbox(read_only=("/no/such/path",))
    with pytest.raises(ValueError, match="not environment variable names"):
        AgentSandbox(env=("A=B",))


@pytest.mark.heavy
def test_ole_agent_work_runs_a_contained_command_agent_under_a_harness(tmp_path, world):
    """`ole agent work --agent command` inside `evogym run`: the harness hands `ole agent work` its
    whole environment; the command agent under it gets the allowlist and the sandbox."""
    root, before = world["root"], _events(world["root"])
    agent = [sys.executable, "-m", "ole.cli", "--root", str(root), "agent", "work", "--agent", "command",
             "--log-dir", str(tmp_path / "logs"), "--", sys.executable, HOSTILE, str(world["targets"])]
    out = subprocess.run([sys.executable, "-m", "evogym.cli", "run", "--env", "gym/acrobot", "--run-dir",
                          str(tmp_path / "run"), "--budget", "4", "--isolation", "none", "--", *agent],
                         capture_output=True, text=True, timeout=600, cwd=REPO,
                         env={**os.environ, "EVOPOLICYGYM_TASK_FILE": "/dev/null", "SOME_API_KEY": "sk-1"})
    assert out.returncode == 0, out.stdout + out.stderr
    report = _report(tmp_path / "logs" / "command.stdout.txt")
    _assert_contained(report, world, root, before, tmp_path / "run" / "workspace")
    assert not {"EVOPOLICYGYM_TASK_FILE", "SOME_API_KEY", "OLE_ROOT"} & set(report["env_names"])
    ok, work = report["work"]
    assert ok and work["submits"] == ["ok", "ok"], work


def test_containment_flags_are_for_the_command_agent_only(tmp_path):
    (tmp_path / "system").mkdir()
    (tmp_path / "feedback").mkdir()
    out = subprocess.run([sys.executable, "-m", "ole.cli", "agent", "work", "--agent-network"],
                         capture_output=True, text=True, cwd=REPO, timeout=120,
                         env={"PATH": "/usr/bin:/bin", "EVOPOLICYGYM_API": "http://127.0.0.1:1",
                              "EVOPOLICYGYM_TOKEN": "t", "EVOPOLICYGYM_WORKSPACE": str(tmp_path)})
    assert out.returncode == 2 and "contain the command agent only" in out.stderr, out.stderr
