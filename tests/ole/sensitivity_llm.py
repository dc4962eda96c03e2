"""The LLM agent's side of the field-by-field test (`test_loop_policy_sensitivity.py`).

One scripted scenario (a failing mechanism, garbage output, an improvement, a regression,
plateaus) runs against a real host under a baseline policy and under one variant per
field; the run's signature -- every prompt sent, every submit's phase, edit kind, indices
and verdict, and the stop reason -- must differ from the baseline's. Hosts are killed
after the agent returns (scoring is covered in test_llm_agent.py).
"""
from __future__ import annotations

import json

from ole.agents.llm import CALL_LOG, LLMAgent
from ole.lessons import Lesson, LessonStore
from ole.llm import read_store
from ole.loop_policy import LoopPolicy
from tests.ole.agent_host import refusing, serve
from tests.ole.test_llm_agent import as_file, gain_diff, program

NOT_READ = {("action", "population")}
"""Fields the LLM agent does not read (CMA-ES population of the built-in agent; see docs/llm-agents.md)."""

def loud(gain: float) -> str:
    """The test program, printing one diagnostic line per episode (read_stdout has something to read)."""
    return program(gain).replace("        pass\n", "        print('episode', episode_index)\n")


CRASH = loud(1.0).replace("self.gain = 1.0", "self.gain = 1.0\n        raise ValueError('bad init')")
SCRIPT = [
    as_file(loud(-1.0), "flip"),                # -500
    as_file(CRASH, "crash"),                     # init_error
    "Sorry, I cannot do that.",                  # garbage
    gain_diff(-1.0, 1.0),                        # improvement
    gain_diff(1.0, -1.0),                        # regression
    gain_diff(1.0, 2.0),                         # plateau
    gain_diff(1.0, 3.0),
    as_file(loud(4.0), "pump"),
    gain_diff(1.0, 5.0),
    gain_diff(1.0, 6.0),
    gain_diff(1.0, 7.0),
]
BASE = {
    "planning": {"max_mechanisms": 3, "plateau_submits": 2},
    "action": {"episodes_per_submit": 1},
    "verification": {"retest_episodes": 1},
    "stopping": {"mode": "finish_early", "patience_submits": 4, "reserve_episodes": 1},
    "budget": {"confirmation_fraction": 0.2},
}
VARIANTS = {
    ("observation", "summary_fields"): ["status", "mean_return"],
    ("observation", "worst_k_episodes"): 0,
    ("observation", "trajectory_window"): 3,
    ("observation", "read_stdout"): False,
    ("observation", "max_context_chars"): 600,
    ("planning", "phases"): ["tuning"],
    ("planning", "max_mechanisms"): 1,
    ("planning", "plateau_submits"): 1,
    ("planning", "on_plateau"): "widen_search",
    ("memory", "top_k_programs"): 1,
    ("memory", "edit_log_size"): 0,
    ("memory", "carry_lessons"): False,
    ("action", "episodes_per_submit"): 2,
    ("action", "index_selection"): "fresh",
    ("action", "step_size"): 1.0,
    ("action", "screen_episodes"): 1,  # runs in its own scenario (OWN_SCENARIO): needs 2-episode submits
    ("action", "edit_granularity"): "file",
    ("verification", "static_checks"): False,
    ("verification", "retest_episodes"): 0,
    ("verification", "margin"): 0.9,
    ("verification", "matched_comparison"): False,
    ("verification", "stderr_multiple"): 2.0,  # runs in its own scenario (OWN_SCENARIO)
    ("recovery", "on_error_verdict"): "retry",
    ("recovery", "on_regression"): "keep",
    ("recovery", "max_retries"): 0,
    ("recovery", "max_rejects"): 1,  # against a host that refuses the first REFUSED submits
    ("stopping", "mode"): "spend_all",
    ("stopping", "patience_submits"): 1,
    ("stopping", "reserve_episodes"): 4,
    ("stopping", "best_last"): False,
    ("budget", "synthesis_fraction"): 0.0,
    ("budget", "confirmation_fraction"): 0.6,
    ("budget", "max_llm_calls"): 2,
    ("budget", "max_tokens"): 60,
    ("budget", "max_usd"): 0.025,
    ("budget", "wall_time_s"): 0.001,
    ("budget", "reference_episodes"): 4,  # counts stated for 4 episodes read x3 at budget 12
}


def make_policy(change: tuple[str, str] | None = None, value=None, base: dict = BASE) -> LoopPolicy:
    data = json.loads(json.dumps(base))
    if change is not None:
        data.setdefault(change[0], {})[change[1]] = value
    return LoopPolicy.model_validate_json(json.dumps(data))


def threshold(th: float) -> str:
    """The swing-up program with a switching threshold: a close rival whose edge varies by episode."""
    return as_file(loud(1.0).replace("> 0 else", f"> {th} else"), "threshold")


NOISY_SCRIPT = [threshold(-0.15), threshold(-0.2), threshold(0.05), threshold(0.1)]
"""Returns on the four matched ids: threshold -0.15 -> (-94, -85, -113, -95), -0.2 -> (-95, -76, -93, -95):
the second is better by 7.0 with a paired standard error of 4.9, so it becomes the incumbent (and the
next prompt edits it) when the policy asks for one standard error, but not for two."""
NOISY_BASE = {"planning": {"phases": ["synthesis", "tuning"], "max_mechanisms": 1},
              "action": {"episodes_per_submit": 4, "edit_granularity": "file"}, "verification": {"retest_episodes": 0}}
OWN_SCENARIO = {("verification", "stderr_multiple"): (NOISY_SCRIPT, NOISY_BASE, 2.0),
                ("action", "screen_episodes"): (SCRIPT, {**BASE, "action": {"episodes_per_submit": 2}}, 1)}
"""Fields whose effect needs close, noisy rivals: (script, base policy, variant value) of their own scenario."""


REFUSED = 2
"""Submits the host refuses first (HTTP 400, nothing charged) in the `recovery.max_rejects` case."""


def signature(tmp_path, pol: LoopPolicy, name: str, script_answers=SCRIPT, budget: int = 12,
              refuse: int = 0) -> tuple:
    script = tmp_path / "script.json"
    script.write_text(json.dumps([{"text": t, "usd": 0.01} if isinstance(t, str) else t for t in script_answers]))
    lessons = tmp_path / "lessons.jsonl"
    if not lessons.exists():
        LessonStore(lessons).add(Lesson(signature="obs=Box[6]|act=Discrete(3)", mechanism="pump",
                                        env="gym/acrobot", score=-80.0))
    served = serve(tmp_path / f"run-{name}", budget=budget)
    try:
        with refusing(served, refuse) as front:
            ctx = front.context(pol, tmp_path / f"log-{name}", lessons=lessons)
            result = LLMAgent(f"scripted:{script}").work(ctx)
    finally:
        served.close(score=False)
    calls = read_store(tmp_path / f"log-{name}" / CALL_LOG) if (tmp_path / f"log-{name}" / CALL_LOG).exists() else []
    prompts = tuple(json.dumps(c["request"]["messages"]) for c in calls)
    actions = tuple((h.phase, h.edit_kind, h.submitted_indices, h.verdict) for h in served.history)
    return prompts, actions, result.finish_reason


DEFAULT_TIER = {("observation", "worst_k_episodes"), ("action", "index_selection"), ("recovery", "on_regression"),
                ("recovery", "max_rejects"),
                ("budget", "max_llm_calls")}
"""A few fields run by default (about 4 s each); the full sweep (every field) runs with -m slow."""


def baseline_signature(tmp_path_factory) -> tuple:
    """The scenario's signature under the base policy, checked to repeat exactly."""
    first = signature(tmp_path_factory.mktemp("base"), make_policy(), "base")
    again = signature(tmp_path_factory.mktemp("again"), make_policy(), "base")
    assert first == again, "the scenario is not deterministic: a difference would prove nothing"
    return first


def pair(tmp_path, field: tuple[str, str], baseline: tuple) -> tuple[tuple, tuple]:
    """The signature under the base policy and under it with `field` changed (its own scenario when
    the field needs close, noisy rivals)."""
    if field in OWN_SCENARIO:
        answers, base, value = OWN_SCENARIO[field]
        return (signature(tmp_path, make_policy(base=base), "own", answers, budget=12),
                signature(tmp_path, make_policy(field, value, base), "ownv", answers, budget=12))
    if field == ("recovery", "max_rejects"):
        return (signature(tmp_path, make_policy(), "refused", refuse=REFUSED),
                signature(tmp_path, make_policy(field, VARIANTS[field]), "refusedv", refuse=REFUSED))
    return baseline, signature(tmp_path, make_policy(field, VARIANTS[field]), "v")
