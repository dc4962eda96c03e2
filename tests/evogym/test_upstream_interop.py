"""Agents written for EvoPolicyGym main run unchanged against `evogym serve --session` (issue 31).

- `test_upstream_e2e_agent_verbatim`: upstream's own end-to-end test agent
  (`test_public_contract.py::test_agent_edits_submits_reads_public_feedback_and_finishes`),
  its text taken from upstream's file and run as it is, completes a run against our host
  with every one of its assertions holding. Twice: through upstream's own session client
  (its `evopolicygym.run._session.cli`, Python >= 3.12) and through ours (a three-line
  module of that name that calls `evogym.session_client`).
- `test_ported_e2e_agent`: the same run by an agent of ours doing the same steps with
  `evopolicygym-session`; it always runs (CI's clone has no upstream source).
- `test_upstream_session_tests_through_the_adapter`: upstream's `test_submission_session.py`,
  run by upstream's unittest under Python >= 3.12, with `SubmissionSession` replaced by an
  adapter (`upstream/session_adapter.py`) that forwards every call to a real `evogym serve
  --session`; the outcome of each test is compared with `SESSION_EXPECTED`.

The benchmark of upstream's test is its `RecordingBenchmark`; ours is the Gymnasium env
`upstream/recording_env.py` with the same facts and its own feedback.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "upstream"))
from locate import REPO, e2e_sources, python312, upstream_root  # noqa: E402 - found through the line above

from conftest import conformance_absent  # noqa: E402

RECORDING = "gymnasium/recording_env:EvogymRecording-v0"
NO_UPSTREAM = "EvoPolicyGym main's source (shared/reference/evopolicygym-main) is not beside this checkout"
NO_312 = "EvoPolicyGym main needs Python >= 3.12 (its modules use `type X = ...`); none on this machine"

INITIAL = "class InvalidPolicy:\n    def act(self, observation):\n        return 99\n\n\ndef make_policy(context):\n    return InvalidPolicy()\n"
IMPROVED = ("class CounterPolicy:\n    def __init__(self):\n        self.calls = 0\n\n    def act(self, observation):\n"
            "        self.calls += 1\n        return self.calls\n\n\ndef make_policy(context):\n    return CounterPolicy()\n")
UNSUBMITTED = "def make_policy(context):\n    raise RuntimeError('an edit never submitted')\n"

# our own agent, the same steps as upstream's end-to-end agent, through `evopolicygym-session`
PORTED_AGENT = f"""
import json, os, subprocess, sys
from pathlib import Path

workspace = Path(os.environ["EVOPOLICYGYM_WORKSPACE"])

def session(*args, check=True):
    done = subprocess.run([sys.executable, "-m", "evogym.session_client", *args], capture_output=True, text=True)
    if check:
        assert done.returncode == 0, done.stderr
    return done

def latest():
    pointer = json.loads((workspace / "feedback" / "latest.json").read_text())
    return json.loads((workspace / "feedback" / pointer["feedback"]).read_text())

first = json.loads(session("submit", "program", "--episodes", "0").stdout)["result"]
doc = latest()
assert first["submission_id"] == "submission-000001" and first["episodes_remaining"] == 1
assert doc["schema"] == "evopolicygym/feedback/v2" and doc["episode_indices"] == [0]
assert doc["episodes"][0]["failure"] == "invalid_action" and doc["content"] == {{"status": "complete", "completed": 0}}
early = session("finish", first["submission_id"], check=False)
assert early.returncode == 1 and not early.stdout
assert json.loads(early.stderr)["error"]["code"] == "budget_remaining"
assert "1 Episode budget unit remains" in early.stderr
(workspace / "program" / "policy.py").write_text({IMPROVED!r})
second = json.loads(session("submit", "program", "--episodes", "0").stdout)["result"]
doc = latest()
assert doc["score"] == 1.0 and doc["content"] == {{"status": "complete", "completed": 1}}
artifact = workspace / "feedback" / "submissions" / second["submission_id"] / doc["artifacts"][0]["path"]
assert artifact.read_text() == "completed=1\\n"
(workspace / "program" / "policy.py").write_text({UNSUBMITTED!r})
assert not (workspace.parent / "validation").exists() and not (workspace.parent / "assessment").exists()
done = json.loads(session("finish", first["submission_id"], second["submission_id"]).stdout)["result"]
assert done == {{"candidate_submission_ids": [first["submission_id"], second["submission_id"]],
                 "agent_authority_closed": True}}
print("fake-agent-finished")
"""


def serve(tmp_path: Path, program: str, *flags: str) -> tuple[subprocess.Popen, dict]:
    """`evogym serve --session` on the recording env, upstream's test configuration (budget 2,
    2 submissions, the whole budget to spend, 2 candidates), started from `program`."""
    start = tmp_path / "initial"
    start.mkdir()
    (start / "policy.py").write_text(program)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE / "upstream"), str(REPO)])}
    proc = subprocess.Popen([sys.executable, "-m", "evogym.cli", "serve", "--env", RECORDING, "--run-dir",
                             str(tmp_path / "run"), "--budget", "2", "--max-submissions", "2", "--no-early-finish",
                             "--max-candidates", "2", "--episode-pool-size", "2", "--session", "--isolation", "none",
                             "--program", str(start), *flags], stdout=subprocess.PIPE,
                            stderr=open(tmp_path / "host.log", "wb"), env=env, text=True, cwd=REPO)
    line = proc.stdout.readline() if proc.stdout else ""
    assert line, (tmp_path / "host.log").read_text()
    return proc, json.loads(line)


def run_agent(tmp_path: Path, ready: dict, python: str, script: str, pythonpath: list[str]) -> subprocess.CompletedProcess:
    """The agent as upstream's runner starts it: in the workspace, with the session's two
    variables, PATH and PYTHONPATH only."""
    agent = tmp_path / "fake_agent.py"
    agent.write_text(script)
    workspace = Path(ready["workspace"])
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": os.pathsep.join(pythonpath),
           "EVOPOLICYGYM_SESSION_SOCKET": os.path.relpath(ready["session_socket"], workspace),
           "EVOPOLICYGYM_WORKSPACE": str(workspace)}
    return subprocess.run([python, str(agent)], cwd=workspace, env=env, capture_output=True, text=True, timeout=600)


def our_cli_shim(tmp_path: Path) -> Path:
    """A module named as upstream's session CLI that runs ours (what `-m evopolicygym.run._session.cli` finds)."""
    shim = tmp_path / "shim"
    package = shim / "evopolicygym" / "run" / "_session"
    package.mkdir(parents=True)
    for folder in (shim / "evopolicygym", shim / "evopolicygym" / "run", package):
        (folder / "__init__.py").write_text("")
    (package / "cli.py").write_text("from evogym.session_client import main\n\nraise SystemExit(main())\n")
    return shim


def check_run(tmp_path: Path, proc: subprocess.Popen, agent: subprocess.CompletedProcess, initial: str,
              improved: str) -> None:
    """The agent finished; the host then finalized the run as upstream's test expects of its own
    host, where ours does the same (docs/protocol-deviations.md lists where it does not)."""
    assert agent.returncode == 0 and "fake-agent-finished" in agent.stdout, agent.stdout + agent.stderr
    assert proc.wait(timeout=600) == 0, (tmp_path / "host.log").read_text()
    root = tmp_path / "run"
    run = json.loads((root / "run.json").read_text())
    record = json.loads((root / "record" / "run.json").read_text())
    assert run["outcome"]["status"] == "completed" and run["final_submission_id"] == "submit_001"
    assert record["schema"] == "evopolicygym/run-record/v8" and record["terminal_reason"] == "finished"
    assert record["final_submission_id"] == "submission-000002"
    assert record["candidate_submission_ids"] == ["submission-000001", "submission-000002"]
    assert record["config"]["episode_pool_size"] == 2
    assert record["config"]["finish_budget_policy"] == "require_budget_exhaustion"
    assert [s["episode_indices"] for s in record["submissions"]] == [[0], [0]]
    assert (root / "checkpoints" / "submit_000" / "policy.py").read_text() == initial
    assert (root / "checkpoints" / "submit_001" / "policy.py").read_text() == improved
    assert (root / record["initial_program"]["record"] / "policy.py").read_text() == initial
    events = [json.loads(line)["event"] for line in (root / record["events"]).read_text().splitlines()]
    assert (events.count("submission_published"), events.count("finish_rejected"),
            events.count("episode_completed")) == (2, 1, 2)
    validation = json.loads((root / record["validation"]["report"]).read_text())
    assert validation["selected_submission_id"] == "submission-000002"
    assert [c["score"] for c in validation["candidates"]] == [0.0, 1.0]
    assessment = json.loads((root / record["assessment"]["report"]).read_text())
    assert assessment["submission_id"] == "submission-000002" and assessment["score"] == 1.0
    assert not (root / "workspace" / "assessment").exists()


@pytest.mark.heavy
@pytest.mark.parametrize("client", ["upstream", "ours"])
def test_upstream_e2e_agent_verbatim(tmp_path, client):
    root = upstream_root()
    if root is None:
        conformance_absent(NO_UPSTREAM)
    python = python312() if client == "upstream" else sys.executable
    if python is None:
        conformance_absent(NO_312)
    sources = e2e_sources(root)
    proc, ready = serve(tmp_path, sources["initial_source"])
    try:
        path = [str(root / "src")] if client == "upstream" else [str(our_cli_shim(tmp_path)), str(REPO)]
        agent = run_agent(tmp_path, ready, python, sources["agent_source"], path)
        check_run(tmp_path, proc, agent, sources["initial_source"], sources["improved_source"])
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.heavy
def test_ported_e2e_agent(tmp_path):
    proc, ready = serve(tmp_path, INITIAL)
    try:
        agent = run_agent(tmp_path, ready, sys.executable, PORTED_AGENT, [str(REPO)])
        check_run(tmp_path, proc, agent, INITIAL, IMPROVED)
    finally:
        proc.kill()
        proc.wait()


SESSION_EXPECTED = {
    "test_agent_can_allocate_the_entire_budget_to_one_submission": "pass",
    "test_optional_submission_cap_rejects_only_oversized_requests": "pass",
    "test_invalid_program_does_not_consume_episode_budget": "pass",
    "test_finish_can_require_the_entire_episode_budget": "pass",
    "test_required_budget_rejects_an_allocation_that_would_dead_end": "pass",
    "test_required_budget_rejects_an_impossible_session_capacity": "pass",
    "test_finish_rejects_unknown_submission_without_closing": "pass",
    "test_finish_rejections_are_atomic_and_a_valid_retry_closes_authority": "pass",
    "test_finish_without_validation_accepts_only_one_candidate": "pass",
    "test_arbitrary_indices_select_the_exact_fixed_pool_entries": "pass",
    "test_invalid_index_sets_do_not_capture_or_consume_budget": "pass",
    # the fixture program's make_policy returns object(), which has no act(): the real host reports its
    # episodes policy_failed; the test's evaluator double reports them completed
    "test_published_submission_can_be_selected_as_final": "fail",
    # doubles with no counterpart in a real host: an evaluator that raises, an evaluator that answers for
    # another environment, a publisher that raises. evogym refunds a host fault and stays open
    # (docs/protocol-deviations.md); the submit here runs and is published
    "test_evaluation_failure_consumes_reserved_budget_and_closes": "fail",
    "test_mismatched_environment_identity_is_not_published": "fail",
    "test_publication_failure_is_terminal_and_not_admitted": "fail",
}


@pytest.mark.heavy
def test_upstream_session_tests_through_the_adapter():
    root, python = upstream_root(), python312()
    if root is None:
        conformance_absent(NO_UPSTREAM)
    if python is None:
        conformance_absent(NO_312)
    env = {**os.environ, "EVOGYM_PYTHON": sys.executable, "EVOGYM_REPO": str(REPO),
           "EVOGYM_FIXTURES": str(HERE / "upstream"),
           "PYTHONPATH": os.pathsep.join([str(root / "src"), str(root / "tests"), str(HERE / "upstream")])}
    out = subprocess.run([python, str(HERE / "upstream" / "session_adapter.py")], env=env, capture_output=True,
                         text=True, timeout=900)
    assert out.returncode == 0, out.stderr[-3000:]
    rows = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    outcomes = {row["test"]: row["outcome"] for row in rows}
    assert outcomes == SESSION_EXPECTED, {row["test"]: row["detail"] for row in rows
                                          if SESSION_EXPECTED.get(row["test"]) != row["outcome"]}
