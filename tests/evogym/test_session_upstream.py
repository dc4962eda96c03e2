"""agent-session/v3 as EvoPolicyGym main runs it (issue 31): upstream's submission ids and
feedback documents beside ours, its rules for program_invalid, failed candidates, the
starting program and refusal order, its finish messages and events, and the run-record/v8
beside run.json. Each rule here is ported from upstream's behaviour as a test of our own
(tests/evogym/test_upstream_interop.py runs upstream's own tests where its source is present).
Real sockets, a real host, tiny simulators."""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from conftest import ZERO_POLICY
from evogym import baseline_policy, envs, spaces
from evogym.errors import ConfigError
from evogym.host import Host, make_config
from evogym.program import baseline_source
from evogym.session import Gateway
from evogym.session_wire import PROTOCOL

HERE = Path(__file__).resolve().parent
RECORDING = "gymnasium/recording_env:EvogymRecording-v0"
BENIGN = ("class Policy:\n    def __init__(self, o, a, m): pass\n    def reset(self, i): pass\n"
          "    def act(self, obs): return 2 if obs[5] > 0 else 0\n")
INVALID = "class InvalidPolicy:\n    def act(self, o):\n        return 99\n\ndef make_policy(context):\n    return InvalidPolicy()\n"
COUNTER = ("class CounterPolicy:\n    def __init__(self):\n        self.calls = 0\n    def act(self, o):\n"
           "        self.calls += 1\n        return self.calls\n\ndef make_policy(context):\n    return CounterPolicy()\n")


@pytest.fixture
def session(tmp_path, monkeypatch):
    """Factory: session(env="gym/acrobot", profile="quick", budget=4, **config) -> (Host, Session)."""
    monkeypatch.syspath_prepend(str(HERE / "upstream"))  # recording_env for RECORDING
    made = []

    def factory(env: str = "gym/acrobot", profile: str = "quick", program: Path | None = None, **kw):
        kw.setdefault("budget", 4)
        host = Host(tmp_path / f"run{len(made)}", make_config(env, profile, isolation="none", **kw), prestart=False,
                    auto_finalize=False, program=program)
        gateway = Gateway(host)  # the handler only: requests go straight to it (test_session.py covers the socket)
        made.append(host)
        return host, gateway.session

    yield factory
    for host in made:
        host.close()
        if host.judge.closed:
            host.done.wait(300)


def submit(session, *ids: int) -> dict:
    return session.handle({"protocol": PROTOCOL, "method": "submit", "episode_indices": list(ids)})


def finish(session, *names: str) -> dict:
    return session.handle({"protocol": PROTOCOL, "method": "finish", "submission_ids": list(names)})


def code(answer: dict) -> str:
    assert answer["ok"] is False, answer
    return answer["error"]["code"]


def journal(host) -> list[dict]:
    path = host.run.root / "record" / "events.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_a_session_starts_from_the_baseline_program(session):
    host, s = session()
    assert (host.run.system / "policy.py").read_bytes() == baseline_source()
    assert (host.run.root / "record" / "initial" / "program" / "policy.py").read_bytes() == baseline_source()
    receipt = submit(s, 0, 1)["result"]
    assert receipt["status"] == "ok" and receipt["submission_id"] == "submission-000001"
    doc = json.loads((host.run.workspace / receipt["feedback"]).read_text())
    assert [e["status"] for e in doc["episodes"]] == ["completed", "completed"]


def test_program_seeds_the_workspace_instead(session, tmp_path):
    given = tmp_path / "start"
    given.mkdir()
    (given / "policy.py").write_text(COUNTER)
    (given / "notes.txt").write_text("kept")
    host, _ = session(program=given)
    assert (host.run.system / "policy.py").read_text() == COUNTER and (host.run.system / "notes.txt").exists()
    assert (host.run.root / "record" / "initial" / "program" / "policy.py").read_text() == COUNTER


@pytest.mark.parametrize("env", ["gym/acrobot", "gym/continuouscar", "gymnasium/Blackjack-v1",
                                 "gymnasium/FrozenLake-v1"])
def test_the_baseline_action_is_valid_in_every_space(env):
    spec = envs.resolve(env)
    env_obj = envs.make_env(spec)
    try:
        _, schema = envs.spaces_of(spec)
        action = baseline_policy.constant_action(schema)
        _, invalid = spaces.action_coercer(env_obj.action_space)(action, False)
    finally:
        env_obj.close()
    assert invalid is False, (env, action)


def test_a_missing_policy_is_a_free_program_invalid(session):
    host, s = session(budget=4)
    (host.run.system / "policy.py").unlink()
    answer = submit(s, 0, 1)
    assert code(answer) == "program_invalid" and "policy.py" in answer["error"]["message"]
    assert host.judge.state.used == 0 and host.judge.state.n_submits == 0 and not list(host.run.feedback.iterdir())
    shutil.rmtree(host.run.system)
    os.symlink(host.run.root / "elsewhere", host.run.system)  # a link is no program either
    assert code(submit(s, 0)) == "program_invalid"
    os.unlink(host.run.system)
    host.run.system.mkdir()
    (host.run.system / "policy.py").write_text(ZERO_POLICY)
    assert submit(s, 0)["result"]["submission_id"] == "submission-000001"  # the refusals used no ordinal
    assert [e["reason"] for e in journal(host) if e["event"] == "submission_rejected"] == ["program_invalid"] * 2


@pytest.mark.heavy
def test_refusals_come_in_upstream_s_order(session):
    host, s = session(budget=4, max_submissions=1)
    (host.run.system / "policy.py").unlink()
    assert code(submit(s, 0, 1, 2, 3, 4)) == "episode_limit"  # the budget rules come before the program's
    assert code(submit(s, *range(2049))) == "invalid_request"  # ids outside the pool before the 2048-id limit
    (host.run.system / "policy.py").write_text(ZERO_POLICY)
    assert submit(s, 0)["ok"]
    assert code(submit(s, 0, 1, 2, 3, 4)) == "submission_limit"  # before the size of the request
    host.start_finalize("test")
    closed = s.handle({"protocol": "agent-session/v2", "method": "submit", "episode_indices": [0]})
    assert code(closed) == "session_closed"  # a closed session answers that to anything


def test_finish_names_any_published_submission_and_validates_it(session):
    host, s = session(budget=4)
    (host.run.system / "policy.py").write_text("POLICY = None\n")  # no entrypoint: charged, fails to start
    failed = submit(s, 0, 1)["result"]
    assert failed["status"] == "missing_policy" and failed["score"] is None
    doc = json.loads((host.run.workspace / failed["feedback"]).read_text())
    assert [(e["status"], e["failure"], e["reward"]) for e in doc["episodes"]] == [("policy_failed", "exception",
                                                                                   None)] * 2
    (host.run.system / "policy.py").write_text(BENIGN)
    good = submit(s, 2, 3)["result"]
    answer = finish(s, failed["submission_id"], good["submission_id"])
    assert answer["ok"] and answer["result"]["candidate_submission_ids"] == ["submission-000001", "submission-000002"]
    assert host.done.wait(300)
    run = json.loads(host.run.run_json.read_text())
    outcome = run["outcome"]
    assert set(outcome["val_scores"]) == {"0", "1"}  # the failed one was scored (played out), not dropped
    assert outcome["val_failures"]["0"] == host.config.valid_size and outcome["val_failures"]["1"] == 0
    assert run["final_submission_id"] == "submit_001" and run["candidate_submission_ids"] == ["submit_000",
                                                                                             "submit_001"]


def test_unknown_names_are_unknown_not_duplicates(session):
    _, s = session()
    assert code(finish(s, "submission-999999", "submission-999998")) == "unknown_submission"
    assert code(finish(s, "submit_000")) == "unknown_submission"


def test_the_episode_pool_is_a_setting(session):
    host, s = session(budget=5, pool_size=5)
    assert code(submit(s, 5)) == "invalid_request" and submit(s, 0, 4)["ok"]
    with pytest.raises(ConfigError, match="episode pool size"):
        make_config("gym/acrobot", "quick", pool_size=1025)


def test_the_candidate_limit_is_a_setting(session):
    host, s = session(budget=4, max_candidates=1)
    assert submit(s, 0)["ok"] and submit(s, 1)["ok"]
    assert code(finish(s, "submission-000001", "submission-000002")) == "candidate_limit"
    with pytest.raises(ConfigError, match="max candidates"):
        make_config("gym/acrobot", "quick", budget=4, max_submissions=2, max_candidates=3)


def test_budget_remaining_says_what_upstream_says(session):
    host, s = session(budget=3, allow_early_finish=False)
    first = submit(s, 0)["result"]
    answer = finish(s, first["submission_id"])
    assert code(answer) == "budget_remaining"
    assert answer["error"]["message"] == ("finish is not available: 2 Episode budget units remain. Continue "
                                          "evaluating or confirming candidate Programs, then retry finish.")
    assert submit(s, 1)["ok"]
    assert "1 Episode budget unit remains." in finish(s, first["submission_id"])["error"]["message"]
    rejected = [e for e in journal(host) if e["event"] == "finish_rejected"]
    assert [(e["reason"], e["candidate_count"], e["episodes_remaining"]) for e in rejected] == [
        ("budget_remaining", 1, 2), ("budget_remaining", 1, 1)]


@pytest.mark.parametrize("flags, ok", [
    (dict(budget=40, max_submissions=1, allow_early_finish=False), False),  # 1 x 32 cannot spend 40
    (dict(budget=40, max_submissions=2, allow_early_finish=False), True),
    (dict(budget=40, max_submissions=1), True),  # may finish early: nothing is impossible
])
def test_a_run_that_could_never_finish_is_refused_up_front(flags, ok):
    if ok:
        make_config("gym/acrobot", "quick", **flags)
        return
    with pytest.raises(ConfigError, match="can be exhausted within max_submissions"):
        make_config("gym/acrobot", "quick", **flags)


def test_feedback_v2_documents_beside_ours(session):
    host, s = session(budget=4)
    (host.run.system / "policy.py").write_text(BENIGN)
    receipt = submit(s, 1, 3)["result"]
    latest = json.loads((host.run.feedback / "latest.json").read_text())
    assert latest == {"schema": "evopolicygym/feedback/v2", "submission_id": "submission-000001",
                      "program_digest": receipt["program_digest"], "score": receipt["score"],
                      "feedback": "submissions/submission-000001/feedback.json"}
    doc = json.loads((host.run.feedback / latest["feedback"]).read_text())
    summary = json.loads((host.run.workspace / receipt["summary"]).read_text())
    assert doc["episode_indices"] == [1, 3] and doc["episodes_used"] == 2 and doc["episodes_remaining"] == 2
    assert doc["score"] == summary["mean_return"] == receipt["score"]
    assert [e["reward"] for e in doc["episodes"]] == summary["returns"]
    assert [e["steps"] for e in doc["episodes"]] == summary["episode_lengths"]
    assert [e["episode_index"] for e in doc["episodes"]] == [1, 3]
    assert doc["content"]["episodes"] == 2 and doc["content"]["details"] == "submit_000/" and doc["artifacts"] == []
    assert json.loads((host.run.feedback / "submissions" / "submission-000001" / "availability.json").read_text())[
        "bulk_status"] == "available"


def test_an_env_writes_its_own_feedback(session):
    host, s = session(RECORDING, budget=2, max_submissions=2, allow_early_finish=False)
    (host.run.system / "policy.py").write_text(INVALID)
    first = submit(s, 0)["result"]
    doc = json.loads((host.run.workspace / first["feedback"]).read_text())
    assert doc["content"] == {"status": "complete", "completed": 0} and first["score"] == 0.0
    assert doc["episodes"] == [{"episode_index": 0, "status": "policy_failed", "reward": None, "steps": 1,
                                "failure": "invalid_action"}]
    (host.run.system / "policy.py").write_text(COUNTER)
    second = submit(s, 0)["result"]
    doc = json.loads((host.run.workspace / second["feedback"]).read_text())
    assert doc["score"] == second["score"] == 1.0 and doc["content"] == {"status": "complete", "completed": 1}
    artifact = host.run.feedback / "submissions" / second["submission_id"] / doc["artifacts"][0]["path"]
    assert artifact.read_text() == "completed=1\n"
    events = [e["event"] for e in journal(host)]
    assert events.count("submission_published") == 2 and events.count("episode_completed") == 2


def test_the_run_record_v8_beside_run_json(session):
    host, s = session(budget=4)
    (host.run.system / "policy.py").write_text(BENIGN)
    first, second = submit(s, 0, 1)["result"], submit(s, 2)["result"]
    assert finish(s, second["submission_id"], first["submission_id"])["ok"]
    assert host.done.wait(300)
    root = host.run.root
    record = json.loads((root / "record" / "run.json").read_text())
    run = json.loads(host.run.run_json.read_text())
    assert record["schema"] == "evopolicygym/run-record/v8" and record["terminal_reason"] == "finished"
    assert record["config"] == run["config"] and record["benchmark"]["id"] == "gym/acrobot"
    assert record["candidate_submission_ids"] == ["submission-000002", "submission-000001"]
    assert record["final_submission_id"] == {"submit_000": "submission-000001",
                                             "submit_001": "submission-000002"}[run["final_submission_id"]]
    assert [(x["submission_id"], x["episode_indices"], x["episodes_remaining"], x["record"])
            for x in record["submissions"]] == [("submission-000001", [0, 1], 2, "checkpoints/submit_000"),
                                                ("submission-000002", [2], 1, "checkpoints/submit_001")]
    assert (root / record["initial_program"]["record"] / "policy.py").read_bytes() == baseline_source()
    validation = json.loads((root / record["validation"]["report"]).read_text())
    assert validation["schema"] == "evopolicygym/validation-report/v2"
    assert [c["submission_id"] for c in validation["candidates"]] == ["submission-000002", "submission-000001"]
    assert {c["submission_id"]: c["score"] for c in validation["candidates"]} == {
        "submission-000001": run["outcome"]["val_scores"]["0"], "submission-000002": run["outcome"]["val_scores"]["1"]}
    assessment = json.loads((root / record["assessment"]["report"]).read_text())
    assert assessment["score"] == run["outcome"]["final_score"] and assessment["episodes"] == host.config.heldout_size
    assert assessment["submission_id"] == record["final_submission_id"]
    assert not (root / "validation").exists() and not (root / "assessment").exists()  # upstream's agents check
