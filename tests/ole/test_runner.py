"""`ole.runner.run_task` and `ole run` / `ole trace` against a real `evogym serve` subprocess.

The host runs with `--isolation none` and the quick profile with a tiny budget, so a
run including finalization takes seconds.
"""
from __future__ import annotations

import json
import re
import pickle
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from ole import runner
from ole.agents.base import AgentResult, HostAgent
from ole.cli import main as ole_main
from ole.errors import NotFound
from ole.registry import Registry
from ole.registry.scopes import task_context
from ole.trace import RunCondition, TaskSpec, TraceArchive

REPO = Path(__file__).resolve().parents[2]
ACROBOT_RANDOM = -499.2
"""Uniform-random held-out mean on Acrobot (reference §6.2)."""


@pytest.fixture
def registry_root(tmp_path):
    root = tmp_path / "bundles"
    root.mkdir()
    shutil.copy(REPO / "bundles" / "coder.yaml", root / "coder.yaml")
    return root


@pytest.mark.heavy
def test_builtin_run_is_scored_archived_and_beats_random(tmp_path, registry_root):
    task = TaskSpec(env="gym/acrobot", profile="quick", budget=12)
    lines: list[str] = []
    trace = runner.run_task(task, None, "builtin", RunCondition(host="builtin", seed=0), root=registry_root,
                            runs_dir=tmp_path / "runs", traces_dir=tmp_path / "traces", isolation="none",
                            lessons_path=tmp_path / "lessons.jsonl", progress=lines.append)
    assert trace.verified and trace.outcome.status == "completed"
    assert TraceArchive(tmp_path / "traces").get(trace.trace_id) == trace
    assert trace.outcome.final_score > ACROBOT_RANDOM + 150
    assert (trace.bundle_name, trace.bundle_version) == ("coder", 1)
    assert trace.contract.resource_budget["episodes"] == 12.0
    assert sum(i.episodes_charged for i in trace.history) == trace.outcome.episodes_used == 12
    assert {i.edit_kind for i in trace.history} >= {"synthesis"}
    assert all(i.observation_digest.startswith("sha256:") for i in trace.history)
    assert any(line.startswith("[synthesis] submit 0") for line in lines)
    _check_progress_lines(lines)
    run_json = Path(trace.run_dir) / "run.json"
    assert trace.run_json_sha256.startswith("sha256:")
    assert json.loads(run_json.read_text())["outcome"]["final_score"] == trace.outcome.final_score
    assert (tmp_path / "lessons.jsonl").read_text().count("\n") == 1


def _check_progress_lines(lines: list[str]) -> None:
    """The score is labelled, `best` moves with it, and numbers are rounded (issue 13)."""
    pairs = [re.search(r"score \(mean\) (\S+), best score so far (\S+);", line) for line in lines]
    pairs = [(m.group(1), float(m.group(2))) for m in pairs if m and m.group(2) != "-"]
    best = None
    for score, shown_best in pairs:
        if score != "-":
            best = float(score) if best is None else max(best, float(score))
        assert shown_best == best
    assert len({b for _, b in pairs}) >= 1
    outcome = [line for line in lines if line.startswith("outcome ")]
    assert outcome and re.fullmatch(r"outcome completed: held-out mean return -?[0-9.e+-]+, normalized score "
                                    r"[0-9.e+-]+", outcome[0]) and len(outcome[0]) < 90, outcome


class Idle(HostAgent):
    """Submits nothing."""

    def work(self, ctx):
        return AgentResult(finish_reason="finished_early")


class Interrupting(HostAgent):
    """The user presses Ctrl-C while the agent works."""

    def work(self, ctx):
        raise KeyboardInterrupt


class SpendsAllThenWaits(HostAgent):
    """Spends the whole budget in one submit of the starter policy, then returns only after
    the host has closed the run and exited on its own (the race the runner must survive)."""

    def work(self, ctx):
        from ole.agents.client import HostClient
        client = HostClient(ctx.url)
        budget = int(client.info()["episode_budget"])
        (ctx.workspace / "system" / "policy.py").write_text(
            "class Policy:\n    def __init__(self, obs_space, action_space, env_meta):\n        pass\n\n    def reset(self, seed=None):\n        pass\n\n    def act(self, obs):\n        return 0\n")
        assert client.submit(list(range(budget))).http_status == 200
        for _ in range(600):
            if not client.close_run():
                return AgentResult(finish_reason="budget_spent")
            time.sleep(0.05)
        raise AssertionError("the host never exited after its budget was spent")


@pytest.mark.heavy
def test_a_host_that_exited_after_the_last_submit_still_gives_a_scored_trace(tmp_path, registry_root, monkeypatch):
    monkeypatch.setattr(runner, "get_agent", lambda name, **kw: SpendsAllThenWaits())
    trace = runner.run_task(TaskSpec(env="gym/acrobot", budget=2), "coder@1", "builtin", RunCondition(host="builtin"),
                            root=registry_root, runs_dir=tmp_path / "runs", traces_dir=tmp_path / "traces",
                            isolation="none")
    assert trace.outcome.status == "completed" and trace.outcome.final_score is not None


def test_unscored_run_is_not_archived(tmp_path, registry_root, monkeypatch):
    monkeypatch.setattr(runner, "get_agent", lambda name, **kw: Idle())
    trace = runner.run_task(TaskSpec(env="gym/acrobot", budget=4), "coder@1", "builtin", RunCondition(host="builtin"),
                            root=registry_root, runs_dir=tmp_path / "runs", traces_dir=tmp_path / "traces",
                            isolation="none")
    assert trace.outcome.status == "no_ok_submit" and not trace.verified
    assert TraceArchive(tmp_path / "traces").ids() == []


@pytest.mark.parametrize("how", runner.HOST_STARTS)
def test_host_is_stopped_on_keyboard_interrupt(tmp_path, registry_root, monkeypatch, how):
    started: list = []
    real = runner.start_host

    def start_host(cmd, stderr, env_id, _how):
        started.append(real(cmd, stderr, env_id, how))
        return started[-1]

    monkeypatch.setattr(runner, "start_host", start_host)
    monkeypatch.setattr(runner, "get_agent", lambda name, **kw: Interrupting())
    with pytest.raises(KeyboardInterrupt):
        runner.run_task(TaskSpec(env="gym/acrobot", budget=4), "coder", "builtin", RunCondition(host="builtin"),
                        root=registry_root, runs_dir=tmp_path / "runs", traces_dir=tmp_path / "traces",
                        isolation="none")
    assert started and started[0].poll() is not None
    assert isinstance(started[0], subprocess.Popen) == (how == "cold")
    assert _group_gone(started[0].pid)  # its whole process group is gone


def _group_gone(pgid: int, wait_s: float = 10.0) -> bool:
    """No live process is left in the group (a child the killed host never reaped may stay a
    zombie until init reaps it: it runs nothing, so it counts as gone)."""
    deadline = time.monotonic() + wait_s
    while True:
        live = []
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[2]) == pgid and fields[0] != "Z":
                live.append(stat.parent.name)
        if not live or time.monotonic() > deadline:
            return not live
        time.sleep(0.1)


def test_release_takes_effect_at_the_task_boundary(registry_root):
    ctx = task_context("gym/acrobot", "builtin", 32)
    with Registry(registry_root) as registry:
        assert runner.resolve_bundle(registry, None, "default", ctx).ref == "coder@1"
        assert runner.resolve_bundle(registry, "coder@1", "default", ctx).ref == "coder@1"


def test_arguments_survive_the_trip_to_a_worker_process():
    """What a pool or Ray worker receives is what was sent: every field of a fully set task and
    condition comes back equal, and the task function travels by reference (never a copy)."""
    task = TaskSpec(env="gym/halfcheetah5", profile="quick", budget=32, pool_seed=7)
    cond = RunCondition(host="command", seed=5, model="openai/x", command=("agent", "--fast"))
    back = pickle.loads(pickle.dumps((task, "coder@1", cond, runner.run_task)))
    assert back[0] == task and back[0].model_dump() == task.model_dump() and back[2] == cond
    assert back[1] == "coder@1" and back[3] is runner.run_task


@pytest.mark.heavy
def test_cli_run_then_trace_ls_and_show(tmp_path, registry_root, capsys):
    code = ole_main(["run", "--env", "gym/acrobot", "--budget", "4", "--isolation", "none", "--quiet",
                     "--root", str(registry_root), "--runs-dir", str(tmp_path / "runs"),
                     "--traces-dir", str(tmp_path / "traces"), "--lessons", str(tmp_path / "l.jsonl"), "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["archived"] and out["status"] == "completed"
    assert ole_main(["trace", "ls", "--traces-dir", str(tmp_path / "traces")]) == 0
    assert out["trace_id"] in capsys.readouterr().out
    assert ole_main(["trace", "show", out["trace_id"], "--traces-dir", str(tmp_path / "traces")]) == 0
    shown = capsys.readouterr().out
    assert "outcome completed" in shown and "synthesis" in shown
    assert ole_main(["trace", "show", out["trace_id"][:-1], "--traces-dir", str(tmp_path / "traces")]) == 2
    assert "did you mean" in capsys.readouterr().err


def test_host_start_failure_shows_the_hosts_message(tmp_path, registry_root):
    with pytest.raises(runner.RunnerError, match="unrecognized arguments: --no-such-flag"):
        runner.run_task(TaskSpec(env="gym/acrobot", budget=4), "coder", "builtin", RunCondition(host="builtin"),
                        root=registry_root, runs_dir=tmp_path / "runs", traces_dir=tmp_path / "traces",
                        isolation="none", serve_args=("--no-such-flag",))


def test_an_unknown_env_is_refused_before_any_host_starts(tmp_path, registry_root):
    with pytest.raises(NotFound, match="did you mean `gym/acrobot`"):
        runner.run_task(TaskSpec(env="gym/acrobt", budget=4), "coder", "builtin", RunCondition(host="builtin"),
                        root=registry_root, runs_dir=tmp_path / "runs", traces_dir=tmp_path / "traces",
                        isolation="none")
    assert not (tmp_path / "runs").exists()


@pytest.mark.heavy
@pytest.mark.sandbox
def test_warm_and_cached_runs_of_the_builtin_agent_score_as_the_cold_path(tmp_path, registry_root, monkeypatch):
    """The run.json outcome of the path before warm hosts (a cold `evogym serve`, no shared hidden
    evaluation: a job's `baseline` execution), recorded here, is the outcome of a warm host, of a
    warm host that stores its hidden batches and of one that reads them back (a job's `fast`
    execution, twice under one runs root): same seeds, same bundle, byte for byte."""
    from ole.chosen import ChosenVersion
    from ole.jobs import EVAL_CACHE_DIR, EvalJob, run_job
    champ = Registry(registry_root).champion()
    task = TaskSpec(env="gym/pusher5", profile="quick", budget=4, pool_seed=3)
    cond = RunCondition(host="builtin", seed=0)
    starts: list[str] = []
    real_start = runner.start_host

    def recording_start(cmd, stderr, env_id, how="warm"):
        starts.append(how)
        return real_start(cmd, stderr, env_id, how)
    monkeypatch.setattr(runner, "start_host", recording_start)
    outcomes, histories = [], []
    for how in ("baseline", "warm", "fast", "fast"):
        if how == "warm":  # a warm host that shares nothing
            trace = runner.run_bundle(task, champ.ref, champ.bundle, cond, runs_dir=tmp_path / how, host_start="warm")
        else:
            trace = run_job(EvalJob(chosen=ChosenVersion(ref=champ.ref, bundle=champ.bundle), task=task, condition=cond,
                                    runs_root=str(tmp_path / how), execution=how))
        out = json.loads((Path(trace.run_dir) / "run.json").read_text())["outcome"]
        out["auxiliary"].pop("mean_submit_wall_time")  # a wall-clock measurement
        outcomes.append(json.dumps(out, sort_keys=True))
        histories.append([(i.submit_id, i.mean_return, i.episodes_charged) for i in trace.history])
        events = [json.loads(x) for x in (Path(trace.run_dir) / "events.jsonl").read_text().splitlines()]
        sources = [e.get("cache") for e in events if e["event"] == "eval.run"]
        if how == "baseline":
            assert sources and set(sources) == {None} and not (tmp_path / how / EVAL_CACHE_DIR).exists()
    assert starts == ["cold", "warm", "warm", "warm"]
    assert outcomes[0] and all(o == outcomes[0] for o in outcomes) and all(h == histories[0] for h in histories)
    assert json.loads(outcomes[0])["status"] == "completed"
    assert sources and set(sources) == {"hit"}  # the last run read every hidden batch
