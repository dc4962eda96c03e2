"""Warm hosts (`evogym.warm`): the same run.json as a cold host, a fresh process per run, workers bound to their host.

The cold host without an evaluation cache is the code path before warm hosts existed (a fresh
`evogym serve` interpreter, a forkserver pool for validation): its outcome, recorded in the same
test, is what every faster path must reproduce byte for byte.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from conftest import ZERO_POLICY
from evogym.warm import HostLauncher

pytestmark = pytest.mark.sandbox

SWING = """
class Policy:
    def __init__(self, o, a, m): pass
    def reset(self, i): pass
    def act(self, obs):
        return 0 if obs[4] > 0 else 2
"""
SLOW_WHEN_HIDDEN = """
import time
class Policy:
    def __init__(self, o, a, m):
        self.hidden = m["remaining_budget_after"] == 0
    def reset(self, i): pass
    def act(self, obs):
        if self.hidden:
            time.sleep(0.05)
        return 1
"""
TIMING = ("mean_submit_wall_time",)
"""The one outcome field that is a wall-clock measurement (it differs between any two runs)."""


@pytest.fixture
def launcher():
    made = HostLauncher()
    yield made
    made.close()


def _post(ready: dict, path: str, body: dict) -> dict:
    """POST with the run's credential, read from the 0600 token file its ready line names."""
    token = Path(ready["token_file"]).read_text().strip()
    req = urllib.request.Request(ready["url"] + path, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json", "Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(req, timeout=300) as resp:
        return json.loads(resp.read())


def _serve(how: str, run_dir: Path, launcher: HostLauncher, extra=(), budget: int = 3):
    argv = ["serve", "--env", "gym/acrobot", "--run-dir", str(run_dir), "--budget", str(budget),
            "--pool-seed", "5", *extra]
    err = open(run_dir.parent / f"{run_dir.name}.stderr", "wb")
    if how == "cold":
        proc = subprocess.Popen([sys.executable, "-m", "evogym.cli", *argv], stdout=subprocess.PIPE, stderr=err,
                                text=True, start_new_session=True)
    else:
        proc = launcher.spawn(argv, err, env_id="gym/acrobot")
    err.close()
    return proc, json.loads(proc.stdout.readline())


def _work(ready: dict, policies) -> None:
    system = Path(ready["workspace"]) / "system"
    for i, source in enumerate(policies):
        (system / "policy.py").write_text(source)
        assert _post(ready, "/submit", {"env_instances": [i]})["status"] == "ok"


def _outcome(run_dir: Path) -> str:
    out = json.loads((run_dir / "run.json").read_text())["outcome"]
    for key in TIMING:
        out["auxiliary"].pop(key)
    return json.dumps(out, sort_keys=True)


def _cache_events(run_dir: Path) -> list:
    rows = [json.loads(x) for x in (run_dir / "events.jsonl").read_text().splitlines()]
    return [r.get("cache") for r in rows if r["event"] == "eval.run"]


@pytest.mark.heavy
def test_warm_and_cached_hosts_write_the_cold_hosts_outcome(tmp_path, launcher):
    cache = tmp_path / "cache"
    runs = [("cold", ()), ("warm", ()), ("warm", ("--eval-cache", str(cache))), ("warm", ("--eval-cache", str(cache))),
            ("cold", ("--eval-cache", str(cache)))]
    outcomes = []
    for k, (how, extra) in enumerate(runs):
        run_dir = tmp_path / f"run{k}"
        proc, ready = _serve(how, run_dir, launcher, extra)
        if how == "warm":
            assert os.getsid(proc.pid) == proc.pid  # its own session: the runner stops it with killpg
        _work(ready, [ZERO_POLICY, SWING, ZERO_POLICY])  # spends the budget: the host finalizes and exits
        assert proc.wait(300) == 0
        outcomes.append(_outcome(run_dir))
    assert all(o == outcomes[0] for o in outcomes), "a faster path changed the run's outcome"
    out = json.loads(outcomes[0])
    assert out["status"] == "completed" and out["best_submit_index"] == 1 and len(out["val_scores"]) == 3
    assert _cache_events(tmp_path / "run1") == [None, None]
    assert _cache_events(tmp_path / "run2") == ["stored", "stored", "stored"]  # two programs, then held-out
    assert _cache_events(tmp_path / "run3") == ["hit", "hit", "hit"]
    assert _cache_events(tmp_path / "run4") == ["hit", "hit", "hit"]
    fds = [os.readlink(p) for p in Path(f"/proc/{launcher._proc.pid}/fd").iterdir()]
    assert not [fd for fd in fds if str(tmp_path) in fd], "the template holds a file of a run"


def _children(pid: int) -> list[int]:
    out = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                    out.append(int(proc.name))
            except (OSError, ValueError):
                pass
    return out


def _running(marker: str) -> list[int]:
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
def test_a_killed_hosts_workers_and_sandboxes_die_with_it(tmp_path, launcher):
    run_dir = tmp_path / "run"
    proc, ready = _serve("warm", run_dir, launcher, budget=3)
    _work(ready, [ZERO_POLICY, SLOW_WHEN_HIDDEN, SWING])  # validation of three programs on warm workers
    template = launcher._proc.pid
    deadline = time.monotonic() + 120
    while len(workers := [p for p in _children(template) if p != proc.pid]) < 2:
        assert time.monotonic() < deadline, "the host never asked for its evaluation workers"
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(30)
    deadline = time.monotonic() + 30
    while [p for p in workers if Path(f"/proc/{p}").exists() and "zombie" not in _state(p)] or _running(str(run_dir)):
        assert time.monotonic() < deadline, "a worker or sandbox outlived its host"
        time.sleep(0.1)
    second = tmp_path / "again"  # the template serves on
    proc2, ready2 = _serve("warm", second, launcher, budget=1)
    _work(ready2, [SWING])
    assert proc2.wait(300) == 0 and json.loads((second / "run.json").read_text())["outcome"]["status"] == "completed"


def _state(pid: int) -> str:
    try:
        return next(line for line in Path(f"/proc/{pid}/status").read_text().splitlines()
                    if line.startswith("State:")).lower()
    except (OSError, StopIteration):
        return "zombie"


def test_the_template_refuses_a_malformed_request_and_serves_on(tmp_path, launcher):
    launcher._ctrl.send(b"not a spawn request")  # no descriptors
    with open(tmp_path / "err", "wb") as err:
        proc = launcher.spawn(["--version"], err)
    assert proc.stdout.readline().startswith("evogym ") and proc.wait(60) == 0
    assert launcher._proc.poll() is None
