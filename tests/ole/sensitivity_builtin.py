"""The built-in agent's side of the field-by-field test (`test_loop_policy_sensitivity.py`).

"Acting" is what the host sees: the submitted index lists, the program text of each
submit, the submits refused by the agent's own checks, and whether/when it calls
/finish. The fast variant runs the agent loop against `SimHost`, an in-process
stand-in for the protocol that runs the submitted `system/policy.py` on a real
Gymnasium env outside Core16 (Pendulum, short episodes) and writes the same feedback
tree as the host; the slow variant (in the test module) repeats a few fields against a
real `evogym serve`.
"""
from __future__ import annotations

import contextlib
import hashlib
import io
import itertools
import json
import types
from pathlib import Path

import gymnasium as gym
import numpy as np

from evogym.spaces import coerce_action, space_schema, to_jsonable
from ole.agents.base import AgentContext
from ole.agents.builtin import control
from ole.agents.builtin.loop import Worker
from ole.agents.builtin.mechanism import Mechanism, Param
from ole.agents.client import SubmitAnswer
from ole.bundle import Bundle
from ole.lessons import Lesson, LessonStore, signature
from ole.loop_policy import LoopPolicy
from ole.trace import RunCondition, TaskSpec

ENV_ID = "Pendulum-v1"
EPISODE_STEPS = 50
BUDGET = 80
BRIEF = "# Pendulum\nSwing the pendulum up and keep it upright; build momentum first."

BROKEN = Mechanism("broken", '''
class Policy:
    def __init__(self, obs_space, action_space, env_meta):
        raise RuntimeError("broken on purpose")

    def reset(self, episode_index):
        pass

    def act(self, obs):
        return [0.0]
''', (Param("k", (0.0,), 1.0),), "a program that fails at init (exercises checks and recovery)")

NOISY = Mechanism("noisy_push", '''
class Policy:
    """Strong push along the velocity; prints a warning every episode."""

    def __init__(self, obs_space, action_space, env_meta):
        pass

    def reset(self, episode_index):
        print("RuntimeWarning: overflow encountered (synthetic)")

    def act(self, obs):
        v = num(obs[-1])
        return [float(np.clip(P["g"][0] * v, -2.0, 2.0))]
''', (Param("g", (100.0,), 10.0),), "strong velocity feedback that warns on stdout")


class SimHost:
    """In-process protocol stand-in: same answers and feedback files as the host, no sandbox."""

    def __init__(self, workspace: Path, budget: int = BUDGET, refuse: int = 0) -> None:
        self.ws = workspace
        self.refuse = refuse
        """Refuse the first `refuse` submits as the host refuses a malformed one: HTTP 400, nothing charged."""
        self.env = gym.make(ENV_ID)
        self.remaining = budget
        self.budget = budget
        self.n_submits = 0
        self.used = 0
        self.log: list[tuple] = []
        self.finished = False
        self.obs_space = space_schema(self.env.observation_space)
        self.act_space = space_schema(self.env.action_space)

    def info(self) -> dict:
        return {"episode_budget": self.budget, "min_episodes_per_submit": 1, "max_episodes_per_submit": 16,
                "env_meta": {"obs_space": self.obs_space, "action_space": self.act_space, "n_env_instances": 256,
                             "max_episode_steps": EPISODE_STEPS, "env": "gymnasium/Pendulum-v1"},
                "state": {"remaining_budget": self.remaining, "n_submits": self.n_submits,
                          "is_finalized": self.finished or self.remaining == 0}}

    def task(self) -> str:
        return BRIEF

    def finish(self) -> int:
        self.finished = True
        self.log.append(("finish", self.remaining))
        return 200

    def wait_finalized(self) -> dict:
        return self.info()

    def submit(self, indices: list[int]) -> SubmitAnswer:
        source = (self.ws / "system" / "policy.py").read_text()
        self.log.append((tuple(indices), hashlib.sha256(source.encode()).hexdigest()[:12]))
        if self.refuse > 0:
            self.refuse -= 1
            self.log.append(("refused",))
            return SubmitAnswer(400, None, "budget_invalid", {"status": "budget_invalid", "n_episodes": 0})
        sid, first = self.n_submits, self.used
        self.n_submits += 1
        self.remaining -= len(indices)
        self.used += len(indices)
        folder = self.ws / "feedback" / f"submit_{sid:03d}"
        folder.mkdir(parents=True)
        status, returns, lengths = self._run(source, indices, folder, first)
        summary = {"status": status, "n_episodes": len(indices), "first_global_episode": first,
                   "remaining_budget": self.remaining, "returns": returns, "episode_lengths": lengths,
                   "mean_return": float(np.mean(returns)) if status == "ok" else None,
                   "errors": [], "env_instances": list(indices)}
        (folder / "summary.json").write_text(json.dumps(summary))
        return SubmitAnswer(200, sid, status, summary)

    def _run(self, source, indices, folder, first):
        out = io.StringIO()
        module = types.ModuleType("sim_policy")
        try:
            with contextlib.redirect_stdout(out):
                exec(compile(source, "policy.py", "exec"), module.__dict__)
                policy = module.Policy(self.obs_space, self.act_space, {})
        except Exception:  # noqa: BLE001 - any failure at import or init is the program's init_error, as on the host
            return "init_error", None, None
        returns, lengths = [], []
        for local, case in enumerate(indices):
            ep = folder / "episodes" / f"ep_{first + local:03d}"
            ep.mkdir(parents=True)
            obs, _ = self.env.reset(seed=int(case))
            lines, total = [], 0.0
            with contextlib.redirect_stdout(out):
                policy.reset(local)
                for t in range(EPISODE_STEPS):
                    raw = policy.act(to_jsonable(obs))
                    action, _ = coerce_action(self.env.action_space, raw)
                    nxt, r, term, trunc, _ = self.env.step(action)
                    lines.append(json.dumps({"t": t, "obs": to_jsonable(obs), "action": raw, "reward": float(r)}))
                    total += float(r)
                    obs = nxt
                    if term or trunc:
                        break
            (ep / "trajectory.jsonl").write_text("\n".join(lines) + "\n")
            (ep / "stdout.txt").write_text(out.getvalue())
            (ep / "stderr.txt").write_text("")
            out = io.StringIO()
            returns.append(total)
            lengths.append(len(lines))
        return "ok", returns, lengths


_RUNS = itertools.count()
_SEEN: dict[tuple, tuple] = {}
"""Action sequences already computed in this session, by (policy, extra mechanisms, lessons used)."""


def act(tmp_path: Path, lp: LoopPolicy, *, extra=(), lessons: Path | None = None, tag: str = "",
        cache: bool = True, refuse: int = 0) -> tuple:
    """The agent's action sequence on the fixed task and seed under policy `lp` (the host refusing
    the first `refuse` submits)."""
    key = (lp.model_dump_json(), tuple(m.name for m in extra), lessons is not None, refuse)
    if cache and key in _SEEN:
        return _SEEN[key]
    _SEEN[key] = _act(tmp_path, lp, extra, lessons, tag, refuse)
    return _SEEN[key]


def _act(tmp_path: Path, lp: LoopPolicy, extra, lessons: Path | None, tag: str, refuse: int = 0) -> tuple:
    ws = tmp_path / f"ws{tag}{next(_RUNS)}"
    (ws / "system").mkdir(parents=True)
    host = SimHost(ws, refuse=refuse)
    history = []
    ctx = AgentContext(url="sim://", workspace=ws, bundle=Bundle(name="probe", loop_policy=lp),
                       task=TaskSpec(env="gymnasium/Pendulum-v1"), condition=RunCondition(host="builtin", seed=3),
                       log_dir=tmp_path, record=history.append, lessons_path=lessons)
    result = Worker(ctx, host, tuple(extra)).run()
    refused = tuple(i.index for i in history if i.submit_id is None)
    return tuple(host.log), refused, result.finish_reason


def with_field(lp: LoopPolicy, component: str, field: str, value) -> LoopPolicy:
    part = getattr(lp, component).model_copy(update={field: value})
    return lp.model_copy(update={component: part})


def base(**changes) -> LoopPolicy:
    lp = LoopPolicy()
    for dotted, value in changes.items():
        component, field = dotted.split("__")
        lp = with_field(lp, component, field, value)
    return lp


LESSON_FILE = "lessons.jsonl"
ENERGY_ONLY = {"planning__max_mechanisms": 1}
_PENDULUM = gym.make(ENV_ID)
PUMP = (control.energy_pump(space_schema(_PENDULUM.observation_space), space_schema(_PENDULUM.action_space))[0],)
"""The library's energy pump, tried first: it saturates the torque, so trajectory diagnoses have something to find."""
PUMP_FIRST = {"planning__max_mechanisms": 2}
"""The pump, then the swing-up: the second beats the first, so verification has an improvement to check."""
"""Tune the energy pump (saturating torques), so trajectory diagnoses have something to find."""

# field -> (alternative value, base-policy changes that make the field matter, extra mechanisms)
CASES = {
    ("observation", "summary_fields"): (("status", "mean_return", "episode_lengths", "errors"), {}, ()),
    ("observation", "worst_k_episodes"): (0, ENERGY_ONLY, PUMP),
    ("observation", "trajectory_window"): (0, ENERGY_ONLY, PUMP),
    ("observation", "read_stdout"): (False, {}, (NOISY,)),
    ("observation", "max_context_chars"): (500, ENERGY_ONLY, PUMP),
    ("planning", "phases"): (("synthesis", "confirmation"), {}, ()),
    ("planning", "max_mechanisms"): (1, {}, ()),
    ("planning", "plateau_submits"): (2, {}, ()),
    ("planning", "on_plateau"): ("widen_search", {"planning__plateau_submits": 2}, ()),
    ("memory", "top_k_programs"): (1, {}, ()),
    ("memory", "edit_log_size"): (0, {"planning__plateau_submits": 64}, ()),
    ("memory", "carry_lessons"): (False, {}, ()),
    ("action", "episodes_per_submit"): (2, {}, ()),
    ("action", "index_selection"): ("fresh", {}, ()),
    ("action", "step_size"): (1.0, {}, ()),
    ("action", "population"): (3, {}, ()),
    ("action", "screen_episodes"): (1, {}, ()),
    ("action", "edit_granularity"): ("file", {}, ()),
    ("verification", "static_checks"): (False, {}, (BROKEN,)),
    ("verification", "retest_episodes"): (0, PUMP_FIRST, PUMP),
    ("verification", "margin"): (0.9, PUMP_FIRST, PUMP),
    ("verification", "matched_comparison"): (False, PUMP_FIRST, PUMP),
    ("verification", "stderr_multiple"): (0.0, {}, ()),
    ("recovery", "on_error_verdict"): ("retry", {"verification__static_checks": False}, (BROKEN,)),
    ("recovery", "on_regression"): ("keep", {**ENERGY_ONLY, "planning__plateau_submits": 64}, PUMP),
    ("recovery", "max_retries"): (0, {"verification__static_checks": False, "recovery__on_error_verdict": "retry"},
                                  (BROKEN,)),
    # the host refuses the first two submits (REFUSED): one refusal in a row is enough to stop at 1, not at 3
    ("recovery", "max_rejects"): (1, {}, ()),
    ("stopping", "mode"): ("finish_early", {"stopping__patience_submits": 3}, ()),
    ("stopping", "patience_submits"): (2, {"stopping__mode": "finish_early"}, ()),
    ("stopping", "reserve_episodes"): (12, {"stopping__mode": "finish_early", "stopping__patience_submits": 64}, ()),
    # finishing after two stale candidates: the last submit is not the best program
    ("stopping", "best_last"): (False, {"stopping__mode": "finish_early", "stopping__patience_submits": 2}, ()),
    ("budget", "synthesis_fraction"): (0.0, {}, ()),
    ("budget", "confirmation_fraction"): (0.5, {}, ()),
    ("budget", "wall_time_s"): (1e-6, {}, ()),
    # counts stated for 20 episodes read x4 at this budget of 80: a plateau of 2 becomes 8
    ("budget", "reference_episodes"): (20, {"planning__plateau_submits": 2}, ()),
}

NOT_READ = {("budget", "max_llm_calls"), ("budget", "max_tokens"), ("budget", "max_usd")}
"""Caps on model calls, tokens and dollars: the built-in agent calls no model, so only LLM agents read them."""


def pair(tmp_path: Path, key: tuple[str, str]) -> tuple[tuple, tuple]:
    """The agent's actions under the case's base policy and under it with field `key` changed."""
    component, field = key
    alt, changes, extra = CASES[key]
    lp = base(**changes)
    lessons = None
    if key == ("memory", "carry_lessons"):  # a lesson that prefers another mechanism than the library's first
        lessons = tmp_path / LESSON_FILE
        env = gym.make(ENV_ID)
        sig = signature(space_schema(env.observation_space), space_schema(env.action_space))
        LessonStore(lessons).add(Lesson(sig, "affine", "gymnasium/Pendulum-v1", 0.0))
    changed = with_field(lp, component, field, alt)
    assert getattr(changed, component).model_dump() != getattr(lp, component).model_dump()
    refuse = REFUSED if key == ("recovery", "max_rejects") else 0
    return (act(tmp_path, lp, extra=extra, lessons=lessons, tag="a", refuse=refuse),
            act(tmp_path, changed, extra=extra, lessons=lessons, tag="b", refuse=refuse))


REFUSED = 2
"""Submits the host refuses first in the `recovery.max_rejects` case."""
