"""The command agent with a small scripted agent process against a real evogym host."""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from ole.agents.command import CommandAgent, iterations_from_workspace, render_instructions
from ole.agents.sandbox import AgentSandbox
from ole.loop_policy import LoopPolicy
from tests.ole.agent_host import serve

AGENT = str(Path(__file__).with_name("scripted_agent.py"))


def run(tmp_path, mode: str, *, budget: int = 5, wall: float = 120.0, cap: int = 1 << 20, isolation: str = "bwrap"):
    pol = LoopPolicy.model_validate({"budget": {"wall_time_s": wall}})
    served = serve(tmp_path / "run", budget=budget)
    log = Path("log")  # relative, as `ole run` passes it: the command must still find its brief
    try:
        result = CommandAgent([sys.executable, AGENT, mode], output_cap_bytes=cap, kill_grace_s=1.0,
                              sandbox=AgentSandbox(isolation=isolation)).work(served.context(pol, log, host="command"))
        doc = served.close()
    finally:
        if served.proc.poll() is None:
            served.proc.kill()
    return result, served.history, doc, log


@pytest.mark.heavy
def test_scripted_agent_spends_the_budget_and_the_run_is_scored(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result, hist, doc, log = run(tmp_path, "normal")
    assert result.finish_reason == "budget_spent"
    assert [(h.submit_id, h.verdict, h.submitted_indices) for h in hist] == [(0, "ok", (0, 1)), (1, "ok", (2, 3, 4))]
    assert [h.edit_kind for h in hist] == ["synthesis", "tuning"] and hist[1].diff_lines == 2
    assert len(hist[0].returns) == 2 and -100 < hist[0].mean_return < -60
    assert doc["outcome"]["status"] == "completed"
    out = (log / "command.stdout.txt").read_text()
    assert "budget 5 protocol protocol/v2.0-draft" in out and "submit 1 ok" in out
    assert (log / "command.stderr.txt").read_text().strip() == "brief ok"
    assert json.loads((log / "command.exit.json").read_text())["exit_code"] == 0
    assert set(result.extras) == {"stdout", "stderr", "instructions", "exit"}


@pytest.mark.heavy
def test_wall_clock_cap_kills_the_process_group(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result, hist, doc, log = run(tmp_path, "sleep", wall=3.0)
    assert result.finish_reason == "wall_time" and len(hist) == 1
    assert json.loads((log / "command.exit.json").read_text())["timed_out"] is True
    assert doc["outcome"]["status"] == "completed"  # the runner's /finish still scores the run


@pytest.mark.heavy
def test_output_is_capped(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result, hist, doc, log = run(tmp_path, "spam", cap=4096)
    text = (log / "command.stdout.txt").read_text()
    assert len(text) < 4096 + 200 and "bytes dropped at the 4096-byte cap" in text
    assert result.finish_reason == "budget_spent"


def test_a_crash_is_an_error_not_an_exception(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result, hist, doc, _ = run(tmp_path, "crash")
    assert result.finish_reason == "error" and hist == []
    assert doc["outcome"]["status"] in ("no_ok_submit", "completed")


def test_instructions_render_every_component():
    pol = LoopPolicy.model_validate({"stopping": {"mode": "finish_early", "patience_submits": 3},
                                     "action": {"index_selection": "fresh"}})
    info = {"episode_budget": 32, "max_episodes_per_submit": 8, "env_meta": {"n_env_instances": 1024}}
    text = render_instructions(pol, "http://127.0.0.1:9", Path("ws"), info)
    for section in ("Observation", "Planning", "Memory", "Action", "Verification", "Recovery", "Stopping", "Budget",
                    "Protocol contract"):
        assert f"## {section}" in text
    assert "POST http://127.0.0.1:9/finish once 3 submits" in text and "never call /finalize" in text
    assert "ids never submitted before" in text
    assert "keep submitting until" in render_instructions(LoopPolicy(), "u", Path("ws"), info)
    # run-length counts stated for 32 episodes read as the same share of a 128-episode run
    rel = pol.model_copy(update={"budget": pol.budget.model_copy(update={"reference_episodes": 32})})
    assert "once 3 submits" in render_instructions(rel, "u", Path("ws"), info)
    assert "once 12 submits" in render_instructions(rel, "u", Path("ws"), {**info, "episode_budget": 128})


def test_the_brief_states_best_last_and_max_rejects():
    """The two behaviours the agents once decided each for themselves are loop-policy rules in the brief too."""
    info = {"episode_budget": 32, "max_episodes_per_submit": 8, "env_meta": {"n_env_instances": 1024}}
    default = render_instructions(LoopPolicy(), "u", Path("ws"), info)
    assert "After 3 submits in a row refused as malformed" in default
    assert "re-submit your best program if it was not your last submit" in default
    other = render_instructions(LoopPolicy.model_validate({"stopping": {"best_last": False},
                                                           "recovery": {"max_rejects": 5}}), "u", Path("ws"), info)
    assert "After 5 submits in a row refused" in other and "do not re-submit the best one" in other
    assert "re-submit your best program if" not in other


def test_iterations_need_only_workspace_files(tmp_path):
    sub = tmp_path / "feedback" / "submit_000"
    sub.mkdir(parents=True)
    (sub / "summary.json").write_text(json.dumps({"submit_index": 0, "status": "import_error", "n_episodes": 2,
                                                  "env_instances": [3, 4], "returns": None, "mean_return": None}))
    (it,) = iterations_from_workspace(tmp_path)
    assert (it.verdict, it.episodes_charged, it.submitted_indices, it.edit_kind) == ("import_error", 2, (3, 4), "none")


def test_summaries_that_block_or_lead_outside_are_skipped(tmp_path):
    """A FIFO as a summary blocked ole's reconstruction for good (issue 31); a summary that is a link
    to a file outside the workspace (another run's, a secret) was read and parsed."""
    import threading
    outside = tmp_path / "outside.json"
    outside.write_text(json.dumps({"submit_index": 1, "status": "ok", "n_episodes": 1, "env_instances": [0]}))
    for n in range(3):
        (tmp_path / "ws" / "feedback" / f"submit_{n:03d}").mkdir(parents=True)
    os.mkfifo(tmp_path / "ws" / "feedback" / "submit_000" / "summary.json")
    (tmp_path / "ws" / "feedback" / "submit_001" / "summary.json").symlink_to(outside)
    (tmp_path / "ws" / "feedback" / "submit_002" / "summary.json").write_text(json.dumps(
        {"submit_index": 2, "status": "ok", "n_episodes": 2, "env_instances": [1, 2]}))
    found: list = []
    worker = threading.Thread(target=lambda: found.extend(iterations_from_workspace(tmp_path / "ws")), daemon=True)
    worker.start()
    worker.join(timeout=20)
    if worker.is_alive():  # unblock the old reader before failing
        with open(tmp_path / "ws" / "feedback" / "submit_000" / "summary.json", "w"):
            pass
    assert not worker.is_alive(), "reading the workspace blocked on a FIFO"
    assert [it.submit_id for it in found] == [2]


@pytest.mark.parametrize("link", ["file", "folder"])
def test_the_watcher_never_follows_a_link_out_of_the_workspace(tmp_path, link):
    """A `system/policy.py` (or `system/`) the agent turned into a link to another run's files was
    read and kept as the agent's program."""
    import time

    from ole.agents.command import _Watcher
    elsewhere = tmp_path / "other-run"
    elsewhere.mkdir()
    (elsewhere / "policy.py").write_text("SECRET = 'another run'\n")
    (tmp_path / "ws").mkdir()
    if link == "folder":
        (tmp_path / "ws" / "system").symlink_to(elsewhere)
    else:
        (tmp_path / "ws" / "system").mkdir()
        (tmp_path / "ws" / "system" / "policy.py").symlink_to(elsewhere / "policy.py")
    watcher = _Watcher(tmp_path / "ws" / "system" / "policy.py")
    watcher.start()
    time.sleep(0.5)
    watcher.stop()
    assert watcher.snapshots == []


def test_a_shell_string_is_split_and_an_empty_command_refused():
    assert CommandAgent("python3 agent.py --fast").command == ["python3", "agent.py", "--fast"]
    with pytest.raises(ValueError, match="needs a command"):
        CommandAgent([])


@pytest.mark.heavy
def test_ole_run_command_agent_after_double_dash(tmp_path):
    """`ole run --agent command -- CMD ...` through the real entry point: scored run + trace."""
    import subprocess
    import sys
    from pathlib import Path
    import shutil
    agent = Path(__file__).with_name("scripted_agent.py")
    (tmp_path / "reg").mkdir()
    shutil.copy(Path(__file__).parents[2] / "bundles" / "coder.yaml", tmp_path / "reg")
    out = subprocess.run([sys.executable, "-m", "ole.cli", "--root", str(tmp_path / "reg"), "run",
                          "--env", "gym/acrobot", "--agent", "command", "--budget", "4", "--isolation", "none",
                          "--runs-dir", str(tmp_path / "runs"), "--traces-dir", str(tmp_path / "traces"),
                          "--", sys.executable, str(agent)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "completed" in out.stdout and list((tmp_path / "traces").glob("*.json"))


def _tagged(tag: str) -> list[int]:
    """Live (non-zombie) processes whose command line carries `tag`."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and tag.encode() in (entry / "cmdline").read_bytes() \
                    and "\nState:\tZ" not in (entry / "status").read_text():
                found.append(int(entry.name))
        except OSError:
            pass
    return found


@pytest.mark.heavy
@pytest.mark.parametrize("mode, wall, isolation", [("leave", 120.0, "bwrap"), ("leave_hang", 4.0, "bwrap"),
                                                   ("leave", 120.0, "none"), ("leave_hang", 4.0, "none")])
def test_nothing_the_agent_started_outlives_it(tmp_path, monkeypatch, mode, wall, isolation):
    """A child ignoring SIGTERM survived the wall-clock kill (the leader had gone at SIGTERM), a
    child and a setsid daemon survived a normal exit, and the child holding stdout added 20 s of
    pipe waits to the recorded wall time."""
    monkeypatch.chdir(tmp_path)
    result, hist, doc, log = run(tmp_path, mode, wall=wall, isolation=isolation)
    left = json.loads((tmp_path / "run" / "workspace" / "left.json").read_text())
    survivors = _tagged(left["tag"])
    for pid in survivors:
        os.kill(pid, 9)
    assert not survivors, left
    exit_doc = json.loads((log / "command.exit.json").read_text())
    assert exit_doc["timed_out"] is (mode == "leave_hang") and exit_doc["wall_s"] < wall + 3.0
    assert len(hist) == 1 and doc["outcome"]["status"] == "completed"


@pytest.mark.heavy
def test_a_broken_workspace_costs_only_its_own_entries(tmp_path, monkeypatch):
    """A summary that is a JSON list crashed ole (AttributeError); a bad field dropped the whole
    history; a FIFO at system/policy.py blocked the watcher until its 5 s join gave up. (Without a
    sandbox: in one, feedback/ is read-only to the agent.)"""
    monkeypatch.chdir(tmp_path)
    result, hist, doc, log = run(tmp_path, "tamper", isolation="none")
    assert [h.submit_id for h in hist] == [1]  # submit_000's summary is a list, submit_009's field breaks
    assert json.loads((log / "command.exit.json").read_text())["wall_s"] < 10.0
