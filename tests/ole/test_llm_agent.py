"""The LLM coding agent against a real evogym host (Acrobot, tiny budgets), with scripted and replayed models."""
from __future__ import annotations

import json

import pytest

from ole.agents.edits import (EditRejected, apply_diff, edit_kind, parse_answer, scope_problem,
                              static_problems)
from ole.agents.llm import CALL_LOG, LLMAgent
from ole.agents.llm import BASELINE_POLICY
from ole.llm import read_store
from ole.loop_policy import LoopPolicy
from tests.ole.agent_host import serve


def program(gain: float, extra: str = "") -> str:
    """Acrobot policy: gain 1 swings up (about -75 on ids 0-3), gain -1 never does (-500)."""
    return ("class Policy:\n"
            "    def __init__(self, obs_space, action_space, env_meta):\n"
            f"        self.gain = {gain}\n"
            "\n"
            "    def reset(self, episode_index):\n"
            "        pass\n"
            "\n"
            "    def act(self, obs):\n"
            f"        {extra}return 0 if self.gain * obs[4] > 0 else 2\n")


def as_file(src: str, mechanism: str | None = None) -> str:
    head = f"Mechanism: {mechanism}\n" if mechanism else "Here is the program.\n"
    return f"{head}```python\n{src}```\n"


def gain_diff(old: float, new: float) -> str:
    return ("```diff\n@@ -2,3 +2,3 @@\n     def __init__(self, obs_space, action_space, env_meta):\n"
            f"-        self.gain = {old}\n+        self.gain = {new}\n \n```\n")


def policy(**components) -> LoopPolicy:
    base = {"planning": {"phases": ["synthesis", "tuning"], "max_mechanisms": 1},
            "action": {"episodes_per_submit": 2}, "verification": {"retest_episodes": 0}}
    for key, value in components.items():
        base[key] = {**base.get(key, {}), **value}
    return LoopPolicy.model_validate_json(json.dumps(base))


def run_agent(tmp_path, pol: LoopPolicy, model: str, *, budget: int, name: str = "a"):
    served = serve(tmp_path / f"run-{name}", budget=budget)
    try:
        result = LLMAgent(model).work(served.context(pol, tmp_path / f"log-{name}"))
        doc = served.close()
    finally:
        if served.proc.poll() is None:
            served.proc.kill()
    return result, served.history, doc, read_store(tmp_path / f"log-{name}" / CALL_LOG)


def write_script(tmp_path, answers) -> str:
    path = tmp_path / "script.json"
    path.write_text(json.dumps(answers))
    return f"scripted:{path}"


MAIN_SCRIPT = [
    as_file(program(-1.0), "flip"),                       # 0: -500, first incumbent
    gain_diff(-1.0, 1.0),                                  # 1: improvement (tuning)
    "I'm sorry, I can't help with that.",                 # garbage ...
    {"text": "```python\nclass Policy:\n    def act(self", "finish_reason": "length"},  # ... truncated ...
    as_file(program(1.0, "import socket\n        ")),      # ... denied import: 3 tries -> resubmit best
    gain_diff(1.0, -1.0),                                  # 3: regression -> revert
    gain_diff(1.0, 2.0),                                   # 4: same behaviour, no improvement
]


@pytest.mark.heavy
def test_scripted_run_recovers_and_is_scored_then_replays_identically(tmp_path):
    pol = policy()
    result, hist, doc, calls = run_agent(tmp_path, pol, write_script(tmp_path, MAIN_SCRIPT), budget=10)
    assert result.finish_reason == "budget_spent" and result.usage.llm_calls == 7
    assert [h.verdict for h in hist] == ["ok"] * 5
    assert [h.edit_kind for h in hist] == ["synthesis", "tuning", "revert", "tuning", "tuning"]
    assert [h.mean_return for h in hist][:2] == [-500.0, pytest.approx(-75.0, abs=10)]
    assert hist[2].note.startswith("model output unusable after 3 tries")
    assert len({h.submitted_indices for h in hist}) == 1 and len(hist[0].submitted_indices) == 2  # matched ids
    assert [h.role for h in hist] == ["candidate"] * 5
    assert [h.base_submit for h in hist] == [None, 0, 1, 1, 1] and [h.search_round for h in hist] == [None, 0, None, 1, 2]
    assert doc["outcome"]["status"] == "completed" and doc["outcome"]["final_score"] > -200
    user = [c["request"]["messages"][-1]["content"] for c in calls]
    assert "Phase: synthesis" in user[0] and "Phase: tuning" in user[1] and "Phase: tuning" in user[2]
    assert "no fenced code block" in user[3] and "cut off" in user[4]
    shown = [u.split("## Current program")[1].split("## Feedback")[0] for u in user[5:]]
    assert "self.gain = 1.0" in shown[1]           # after the regression the prompt edits the best program again
    assert "self.gain = -1.0" not in shown[1] and "flip" in user[6]
    # replay the recorded calls on a fresh host: same trace, no network, no script
    result2, hist2, doc2, _ = run_agent(tmp_path, pol, f"replay:{tmp_path / 'log-a' / CALL_LOG}", budget=10, name="b")
    strip = [h.model_copy(update={"wall_s": 0.0}) for h in hist]
    assert [h.model_copy(update={"wall_s": 0.0}) for h in hist2] == strip
    assert result2.finish_reason == result.finish_reason
    assert doc2["outcome"]["final_score"] == doc["outcome"]["final_score"]


@pytest.mark.heavy
def test_host_error_verdict_is_retried_with_the_error_shown(tmp_path):
    broken = program(1.0).replace("def act(self, obs):", "def act(self, obs)")
    script = [as_file(program(-1.0), "flip"), as_file(broken), as_file(program(1.0))]
    pol = policy(verification={"static_checks": False}, recovery={"on_error_verdict": "retry"},
                 action={"edit_granularity": "file"})
    result, hist, doc, calls = run_agent(tmp_path, pol, write_script(tmp_path, script), budget=6)
    assert [h.verdict for h in hist] == ["ok", "import_error", "ok"]
    assert hist[1].phase == "tuning" and hist[2].phase == "recovery"
    recovery_prompt = calls[2]["request"]["messages"][-1]["content"]
    assert "Phase: recovery" in recovery_prompt and "SyntaxError" in recovery_prompt
    assert "def act(self, obs)\n" in recovery_prompt  # retry edits the failing program
    assert doc["outcome"]["status"] == "completed"


@pytest.mark.heavy
def test_llm_cap_stops_cleanly_and_the_run_is_still_scored(tmp_path):
    script = ["no code here"] * 10
    pol = policy(budget={"max_llm_calls": 3}, recovery={"max_retries": 2})
    result, hist, doc, calls = run_agent(tmp_path, pol, write_script(tmp_path, script), budget=6)
    assert result.finish_reason == "llm_cap" and result.usage.llm_calls == 3 and len(calls) == 3
    assert len(hist) == 1 and hist[0].verdict == "ok" and "schema baseline" in hist[0].note
    assert doc["outcome"]["status"] == "completed"
    assert (doc["outcome"]["final_score"] == -500.0)


def test_finish_early_calls_finish_and_keeps_the_reserve(tmp_path):
    """A stale candidate ends the run; under `stopping.best_last` (the default) the best program is
    submitted once more so the run ends on it, without it the run ends on the stale candidate."""
    script = [as_file(program(1.0), "flip"), gain_diff(1.0, 2.0), gain_diff(2.0, 3.0)]
    pol = policy(stopping={"mode": "finish_early", "patience_submits": 1, "reserve_episodes": 1})
    result, hist, doc, _ = run_agent(tmp_path, pol, write_script(tmp_path, script), budget=10)
    assert result.finish_reason == "finished_early" and len(hist) == 3
    assert hist[-1].note == "best program last" and hist[-1].base_submit == hist[0].submit_id
    assert doc["outcome"]["status"] == "completed"
    keep = policy(stopping={"mode": "finish_early", "patience_submits": 1, "reserve_episodes": 1, "best_last": False})
    result, hist, doc, _ = run_agent(tmp_path, keep, write_script(tmp_path, script), budget=10, name="keep")
    assert result.finish_reason == "finished_early" and len(hist) == 2 and hist[-1].role == "candidate"
    assert doc["outcome"]["status"] == "completed"


# ---- parsing and checks without a host ----------------------------------------------------------
def test_parse_answer_accepts_file_or_diff_and_rejects_garbage():
    cur = program(1.0)
    assert parse_answer(as_file(cur, "pump"), None).mechanism == "pump"
    assert parse_answer(gain_diff(1.0, 3.0), cur).source == program(3.0)
    for bad, why in [("no code", "no fenced"), ("```python\nx = 1", "not closed"),
                     (gain_diff(7.0, 3.0), "does not match")]:
        with pytest.raises(EditRejected, match=why):
            parse_answer(bad, cur)
    with pytest.raises(EditRejected, match="cut off"):
        parse_answer(as_file(cur), None, truncated=True)


def test_static_checks_and_edit_scope():
    assert static_problems(program(1.0)) == [] and static_problems(BASELINE_POLICY) == []
    assert "SyntaxError" in static_problems("class Policy(:\n")[0]
    assert "no top-level `class Policy`" in static_problems("from x import Policy\n")[0]
    assert any("subprocess" in p for p in static_problems(program(1.0, "import subprocess\n        ")))
    assert static_problems(program(1.0, "import numpy as np\n        ")) == []
    old, tuned, restructured = program(1.0), program(2.5), program(1.0, "x = 1\n        ")
    assert scope_problem(old, tuned, "parameters") is None
    assert "constants only" in scope_problem(old, restructured, "parameters")
    assert scope_problem(old, restructured, "function") is None
    two = restructured.replace("pass", "self.t = 0")
    assert "one function" in scope_problem(old, two, "function")
    assert scope_problem(old, two, "file") is None
    assert [edit_kind(None, old), edit_kind(old, tuned), edit_kind(old, two), edit_kind(old, old)] == \
        ["synthesis", "tuning", "synthesis", "none"]
    patched = apply_diff(old, "@@ -1,1 +1,1 @@\n-class Policy:\n+class Policy(object):\n")
    assert patched.startswith("class Policy(object)")


@pytest.mark.heavy
@pytest.mark.llm
def test_live_path_through_litellm_to_a_stub_server_then_replay(tmp_path, monkeypatch):
    from tests.ole.llm_stub import StubServer
    monkeypatch.setenv("OPENAI_API_KEY", "x")
    answers = [("error", 500), ("ok", as_file(program(-1.0), "flip")), ("ok", gain_diff(-1.0, 1.0))]
    served = serve(tmp_path / "run", budget=4)
    with StubServer(answers) as stub:
        agent = LLMAgent("openai/stub", api_base=stub.api_base, timeout_s=10.0, retries=1)
        result = agent.work(served.context(policy(budget={"synthesis_fraction": 0.5}), tmp_path / "log"))
    doc = served.close()
    assert result.finish_reason == "budget_spent" and result.usage.llm_calls == 2 and len(stub.requests) == 3
    assert [h.mean_return for h in served.history][0] == -500.0 and doc["outcome"]["status"] == "completed"
    rows = read_store(tmp_path / "log" / CALL_LOG)
    assert [r["model"] for r in rows] == ["openai/stub"] * 2 and rows[0]["usage"]["prompt_tokens"] == 11
    _, hist2, _, _ = run_agent(tmp_path, policy(budget={"synthesis_fraction": 0.5}),
                               f"replay:{tmp_path / 'log' / CALL_LOG}", budget=4, name="r")
    assert [h.model_copy(update={"wall_s": 0.0}) for h in hist2] == \
        [h.model_copy(update={"wall_s": 0.0}) for h in served.history]


def _feedback_dir(tmp_path):
    sub = tmp_path / "submit_003"
    summary = {"submit_index": 3, "status": "ok", "n_episodes": 3, "returns": [-10.0, -500.0, -80.0],
               "mean_return": -196.7, "episode_lengths": [10, 500, 80], "errors": [], "wall_time_seconds": 0.123,
               "submit_started_at": "2026-01-01T00:00:00.000Z"}
    sub.mkdir()
    (sub / "summary.json").write_text(json.dumps(summary))
    for n, ep in enumerate(("ep_007", "ep_008", "ep_009")):
        d = sub / "episodes" / ep
        d.mkdir(parents=True)
        rows = [{"t": t, "obs": [0.5 * t, 1.0], "action": n, "reward": -1.0, "terminated": False,
                 "truncated": False, "info": {}} for t in range(20)]
        (d / "trajectory.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
        (d / "stdout.txt").write_text(f"hello from episode {n}\n")
    (sub / "errors.txt").write_text(json.dumps({"category": "act_error", "message": "act_error: boom",
                                                "timestamp": "2026-01-01T00:00:00Z",
                                                "traceback": 'File "/tmp/x/checkpoints/submit_003/policy.py", '
                                                             'line 3\n'}) + "\n")
    return sub


def test_feedback_rendering_follows_the_observation_component(tmp_path):
    from ole.agents.prompts import render_feedback
    from ole.loop_policy import Observation
    sub = _feedback_dir(tmp_path)
    text = render_feedback(sub, Observation(worst_k_episodes=1, trajectory_window=3))
    assert "#### episode 1 (return -500)" in text and "episode 0" not in text and "episode 2" not in text
    assert "last 3 of 20 steps" in text and "t=19 [9.5,1] -> 1 r=-1" in text and "t=16" not in text
    assert "hello from episode 1" in text and "wall_time" not in text and "2026" not in text
    quiet = render_feedback(sub, Observation(summary_fields=("status", "mean_return"), read_stdout=False))
    assert "episode 0" in quiet and "hello" not in quiet and "returns" not in quiet   # no returns: first episodes
    assert len(render_feedback(sub, Observation(max_context_chars=500))) <= 500
    summary = json.loads((sub / "summary.json").read_text())
    (sub / "summary.json").write_text(json.dumps({**summary, "status": "rollout_timeout"}))
    errors = render_feedback(sub, Observation(worst_k_episodes=0))
    assert "act_error: boom" in errors and 'File "policy.py"' in errors and "/tmp/x" not in errors


def test_shipped_example_script_is_a_valid_program_and_valid_tuning_edits():
    from ole.llm import load_script
    from tests.ole.agent_host import REPO
    first, *edits = load_script(REPO / "docs" / "examples" / "llm-acrobot-script.json")
    base = parse_answer(first["text"], None)
    assert base.mechanism and static_problems(base.source) == []
    for item in edits:
        edited = parse_answer(item["text"], base.source).source
        assert static_problems(edited) == [] and scope_problem(base.source, edited, "parameters") is None


def test_the_mechanism_line_is_one_line():
    """`^\\s*` with re.M ran over newlines, so every blank line restarted a scan of all the blank
    lines after it: 40,000 of them outside the fences took 17 s (quadratic). The pattern now
    stays on one line; a label with nothing after it names no mechanism."""
    from ole.agents.edits import _MECHANISM
    assert parse_answer("\n" * 40000 + as_file(program(1.0), "late"), None).mechanism == "late"
    assert _MECHANISM.search("Mechanism:\nnext line") is None
    assert _MECHANISM.search("\n  **Mechanism**:  add damping  \n").group(1) == "add damping"
    assert "\\s" not in _MECHANISM.pattern


@pytest.mark.heavy
def test_why_the_model_stopped_the_run_is_in_its_log_folder(tmp_path, monkeypatch):
    """A 401 (or exhausted retries) ended the run with `finish_reason: error` and the cause only on
    stderr, which --quiet hides."""
    from ole.agents.llm import STOP_FILE
    from tests.ole.llm_stub import StubServer
    monkeypatch.setenv("OPENAI_API_KEY", "x")
    served = serve(tmp_path / "run", budget=4)
    with StubServer([("error", 401)]) as stub:
        agent = LLMAgent("openai/stub", api_base=stub.api_base, timeout_s=10.0, retries=1)
        result = agent.work(served.context(policy(), tmp_path / "log"))
    served.close()
    assert result.finish_reason == "error" and result.extras["stop"] == STOP_FILE
    stop = json.loads((tmp_path / "log" / STOP_FILE).read_text())
    assert stop["reason"] == "error" and "model unavailable" in stop["message"] and stop["failed_attempts"] == 1
