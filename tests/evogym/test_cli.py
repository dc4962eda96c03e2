"""The `evogym` CLI end to end in real subprocesses: run with a scripted agent, serve, crash recovery (C5)."""
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest


EVOGYM = [sys.executable, "-m", "evogym.cli"]
AGENT = r'''
import json, os, urllib.request, urllib.error
api = os.environ["EVOPOLICYGYM_API"]
auth = {"Authorization": "Bearer " + os.environ["EVOPOLICYGYM_TOKEN"]}
open(os.path.join(os.environ["EVOPOLICYGYM_SYSTEM"], "policy.py"), "w").write(
    "class Policy:\n"
    "    def __init__(self, o, a, m): pass\n"
    "    def reset(self, i): pass\n"
    "    def act(self, obs): return 0 if obs[4] > 0 else 2\n")
def post(path, body):
    req = urllib.request.Request(api + path, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json", **auth})
    try:
        return json.load(urllib.request.urlopen(req))
    except urllib.error.HTTPError as e:
        return json.load(e)
info = json.load(urllib.request.urlopen(urllib.request.Request(os.environ["EVOPOLICYGYM_INFO_URL"], headers=auth)))
while info["state"]["remaining_budget"] > 0:
    post("/submit", {"env_instances": [0, 1]})
    info = json.load(urllib.request.urlopen(urllib.request.Request(os.environ["EVOPOLICYGYM_INFO_URL"], headers=auth)))
print("agent done")
'''


def test_run_with_scripted_agent_ends_scored(tmp_path):
    agent = tmp_path / "agent.py"
    agent.write_text(AGENT)
    run_dir = tmp_path / "run"
    out = subprocess.run(EVOGYM + ["run", "--env", "gym/acrobot", "--run-dir", str(run_dir), "--budget", "4",
                                   "--", sys.executable, str(agent)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    summary = json.loads(out.stdout.strip().splitlines()[-1])
    assert summary["status"] == "completed" and summary["final_score"] > -300
    doc = json.loads((run_dir / "run.json").read_text())
    assert doc["outcome"]["auxiliary"]["episodes_used"] == 4
    rep = subprocess.run(EVOGYM + ["report", str(run_dir)], capture_output=True, text=True)
    assert rep.returncode == 0 and "status   completed" in rep.stdout


STUCK_AGENT = AGENT.split("info = json.load")[0] + r'''
import subprocess, sys, time
post("/submit", {"env_instances": [0, 1]})
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])  # in the agent's group
run_dir = os.path.dirname(os.environ["EVOPOLICYGYM_WORKSPACE"])
open(os.path.join(run_dir, "child.pid"), "w").write(str(child.pid))
open(os.path.join(run_dir, "agent.ready"), "w").write("1")
time.sleep(3600)
'''


@pytest.mark.heavy
@pytest.mark.parametrize("how", ["sigterm", "timeout"])
def test_run_stops_a_stuck_agent_and_its_group_and_finalizes_what_it_submitted(tmp_path, how):
    """SIGTERM to `evogym run` once ended it at once: no run.json, no message. Now the agent (and
    what it started: its own session's group) is stopped and the run finalized; the agent
    timeout does the same."""
    agent = tmp_path / "agent.py"
    agent.write_text(STUCK_AGENT)
    run_dir = tmp_path / "run"
    extra = ["--agent-timeout", "8"] if how == "timeout" else []
    proc = subprocess.Popen(EVOGYM + ["run", "--env", "gym/acrobot", "--run-dir", str(run_dir), "--budget", "8",
                                      *extra, "--", sys.executable, str(agent)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not (run_dir / "agent.ready").exists():
            time.sleep(0.1)
        assert (run_dir / "agent.ready").exists(), "the agent never got going"
        if how == "sigterm":
            proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    summary = json.loads(out.strip().splitlines()[-1])
    assert summary["status"] == "completed" and summary["final_score"] is not None, (out, err)
    doc = json.loads((run_dir / "run.json").read_text())
    assert doc["outcome"]["auxiliary"]["episodes_used"] == 2  # its one submit counts
    child = int((run_dir / "child.pid").read_text())
    assert not Path(f"/proc/{child}").exists() or "zombie" in Path(f"/proc/{child}/status").read_text().lower()
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    assert [e.get("stopped") for e in events if e["event"] == "agent.exit"] == [how]
    assert [e["reason"] for e in events if e["event"] == "run.close.start"] == ["sigterm" if how == "sigterm"
                                                                                else "agent_exit"]


@pytest.mark.heavy
def test_errors_are_one_line(tmp_path):
    out = subprocess.run(EVOGYM + ["serve", "--env", "gym/acrobat", "--run-dir", str(tmp_path / "r")],
                         capture_output=True, text=True)
    assert out.returncode == 2 and "did you mean" in out.stderr and "Traceback" not in out.stderr
    out = subprocess.run(EVOGYM + ["serve", "--env", "gym/acrobot", "--profile", "nope", "--run-dir",
                                   str(tmp_path / "r")], capture_output=True, text=True)
    assert out.returncode == 2 and "profile" in out.stderr and len(out.stderr.strip().splitlines()) == 1


def _serve(run_dir: Path):
    proc = subprocess.Popen(EVOGYM + ["serve", "--env", "gym/acrobot", "--run-dir", str(run_dir), "--budget", "8"],
                            stdout=subprocess.PIPE, text=True)
    return proc, json.loads(proc.stdout.readline())


def _wait_or_dump(proc: subprocess.Popen, timeout: float) -> None:
    """Wait for a host to exit; one that does not is made to write every thread's stack to its
    stderr (`kill -USR1`, shown in the test's captured output), then killed: a hang fails with
    where it hung."""
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGUSR1)
        time.sleep(2)
        proc.kill()
        proc.wait()
        pytest.fail(f"the host did not exit within {timeout} s of SIGTERM; its thread stacks are in the stderr above")


@pytest.mark.heavy
def test_sigterm_twice_during_a_submit_still_finalizes_the_run(tmp_path):
    """The first SIGTERM's finalize waits for the running submit (it holds the judge's lock); a
    second SIGTERM then (a harness's `timeout`, a process-group kill) once re-entered the
    finalize from the signal handler, on the same thread, and the host hung on its own lock."""
    run_dir = tmp_path / "twice"
    proc, ready = _serve(run_dir)
    try:
        (Path(ready["workspace"]) / "system" / "policy.py").write_text(
            "import time\nclass Policy:\n    def __init__(self, o, a, m): self.n = 0\n    def reset(self, i): pass\n"
            "    def act(self, obs):\n        self.n += 1\n        if self.n < 400:\n            time.sleep(0.004)\n"
            "        return 0\n")  # slow for the submit's first 1.6 s of steps (and each hidden sandbox's)
        req = urllib.request.Request(ready["url"] + "/submit", data=b'{"env_instances": [0]}',
                                     headers={"Content-Type": "application/json", **_auth(ready)})
        answers: list[int] = []
        submit = threading.Thread(target=lambda: answers.append(urllib.request.urlopen(req, timeout=120).status))
        submit.start()
        events = run_dir / "events.jsonl"
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not (events.is_file() and "submit.snapshot" in events.read_text()):
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        time.sleep(0.3)
        proc.send_signal(signal.SIGTERM)
        submit.join(timeout=120)
        _wait_or_dump(proc, 120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert answers == [200]  # the submit that was running completed, charged and answered
    doc = json.loads((run_dir / "run.json").read_text())
    assert doc["outcome"]["status"] != "error" and doc["outcome"]["final_score"] is not None, doc["outcome"]
    closes = [json.loads(line) for line in events.read_text().splitlines() if '"run.close.start"' in line]
    assert len(closes) == 1 and closes[0]["reason"] == "sigterm"


def test_a_host_writes_its_thread_stacks_on_sigusr1_and_keeps_serving(tmp_path):
    run_dir = tmp_path / "stacks"
    proc = subprocess.Popen(EVOGYM + ["serve", "--env", "gym/acrobot", "--run-dir", str(run_dir), "--budget", "8"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        ready = json.loads(proc.stdout.readline())
        proc.send_signal(signal.SIGUSR1)
        info = json.load(urllib.request.urlopen(urllib.request.Request(ready["url"] + "/info", headers=_auth(ready))))
        assert info["state"]["remaining_budget"] == 8  # still serving after the dump
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode in (0, 1), err  # finalized on SIGTERM (1: no valid submission), not killed
    assert "Thread 0x" in err and "cmd_serve" in err, err  # every thread, the main one waiting in cmd_serve
    assert json.loads((run_dir / "run.json").read_text())["outcome"]["status"]


def _auth(ready: dict) -> dict:
    """The credential header of a served run (its token file is named in the ready line)."""
    return {"Authorization": "Bearer " + Path(ready["token_file"]).read_text().strip()}


def _sandboxes_alive(marker: str) -> list[int]:
    pids = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if marker in (proc / "cmdline").read_bytes().decode(errors="replace"):
                    pids.append(int(proc.name))
            except OSError:
                pass
    return pids


@pytest.mark.heavy
def test_server_sigkill_leaves_no_sandbox_and_restart_refunds(tmp_path):
    run_dir = tmp_path / "crashrun"
    proc, ready = _serve(run_dir)
    (Path(ready["workspace"]) / "system" / "policy.py").write_text(
        "import time\nclass Policy:\n    def __init__(self, o, a, m): pass\n    def reset(self, i): pass\n"
        "    def act(self, obs):\n        time.sleep(3600)\n")
    req = urllib.request.Request(ready["url"] + "/submit", data=b'{"env_instances": [0, 1, 2]}',
                                 headers={"Content-Type": "application/json", **_auth(ready)})
    def doomed_submit():
        try:
            urllib.request.urlopen(req, timeout=60)
        except OSError:
            pass  # the server is killed mid-request: no answer is the expected outcome
    threading.Thread(target=doomed_submit, daemon=True).start()
    marker = str(run_dir / "checkpoints")  # the submit's sandbox and the spare started for the next one
    events = run_dir / "events.jsonl"
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and not (events.is_file() and "submit.snapshot" in events.read_text()):
        time.sleep(0.1)
    time.sleep(1.0)  # start() and the first act(), which sleeps
    assert _sandboxes_alive(marker), "sandbox never started"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    deadline = time.monotonic() + 10
    while _sandboxes_alive(marker) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _sandboxes_alive(marker) == []
    left = {p.name for p in (run_dir / "checkpoints").iterdir() if p.name.startswith(".spare-")}
    assert left, "the killed host's spares left their staging dirs (the restart must sweep them)"
    proc2, ready2 = _serve(run_dir)
    try:
        info = json.load(urllib.request.urlopen(urllib.request.Request(ready2["url"] + "/info", headers=_auth(ready2))))
        assert info["state"]["remaining_budget"] == 8 and info["state"]["n_submits"] == 1
        summary = json.loads((run_dir / "workspace/feedback/submit_000/summary.json").read_text())
        assert summary["status"] == "host_interrupted" and summary["n_episodes"] == 0
        staged = {p.name for p in (run_dir / "checkpoints").iterdir() if p.name.startswith(".spare-")}
        assert not staged & left and len(staged) <= 2, (staged, left)  # only the new host's spares
    finally:
        proc2.send_signal(signal.SIGTERM)
        _wait_or_dump(proc2, 120)
