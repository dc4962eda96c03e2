"""The built-in coding agent: synthesis -> tuning -> confirmation under a Loop Policy.

It writes real policy programs into `workspace/system/policy.py`, submits them through
the protocol, reads the feedback tree, and improves the program within the budget.
Every decision that a Loop Policy field controls is made by a function in `plan.py`
or by a branch here that names the field, so a policy change shows up as a different
action sequence (submitted indices, programs, or the finish decision).
"""
from __future__ import annotations

import difflib
import time
from dataclasses import dataclass, field

import numpy as np

from ole.agents.base import AgentContext, AgentResult
from ole.agents.builtin import library, plan
from ole.agents.builtin.checks import static_problems, topology_hash
from ole.agents.builtin.feedback import Digest, read_submit
from ole.agents.builtin.mechanism import Mechanism, Program, render
from ole.agents.builtin.search import Search
from ole.agents.client import HostError
from ole.lessons import Lesson, LessonStore, signature
from ole.trace import Iteration

SATURATION_SHRINK = 0.7
"""Step multiplier after the worst episodes show saturated actuators (smaller moves)."""
STALL_WIDEN = 1.5
"""Step multiplier after the worst episodes show a stalled observation (escape the stall)."""
WIDEN = 2.0
"""Step multiplier of the `widen_search` plateau response."""


@dataclass(order=True)
class Scored:
    """A program with the agent's score of it."""

    score: float
    program: Program = field(compare=False)
    mech: Mechanism = field(compare=False)


class Stop(Exception):
    """Internal: the run must end now (budget, wall time, finish decision, closed run)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class Worker:
    """One task worked by the built-in agent (all state of one run)."""

    def __init__(self, ctx: AgentContext, host, extra: tuple[Mechanism, ...] = ()) -> None:
        self.ctx, self.host = ctx, host
        self.lp = ctx.bundle.loop_policy
        self.info = host.info()
        self.brief = host.task()
        meta = self.info["env_meta"]
        self.obs_space, self.act_space = meta["obs_space"], meta["action_space"]
        self.remaining = int(self.info["state"]["remaining_budget"])
        self.lo = int(self.info.get("min_episodes_per_submit", 1))
        self.hi = int(self.info.get("max_episodes_per_submit", self.remaining))
        self.budget = plan.phase_budget(self.lp, self.remaining)
        self.indices = plan.IndexPlan(self.lp, int(meta.get("n_env_instances", 1)), ctx.condition.seed)
        self.sig = signature(self.obs_space, self.act_space)
        self.store = LessonStore(ctx.lessons_path) if ctx.lessons_path and self.lp.memory.carry_lessons else None
        preferred = self.store.ranking(self.sig) if self.store else []
        found = library.candidates(self.obs_space, self.act_space, self.brief, preferred=preferred, extra=extra)
        self.mechanisms = found[: self.lp.planning.max_mechanisms]
        self.top: list[Scored] = []
        self.incumbent: Scored | None = None
        self.best_value: float | None = None  # progress only; the incumbent also needs the margin and a retest
        self.edit_log: list[bool] = []
        self.spent = {"synthesis": 0, "tuning": 0, "confirmation": 0}
        self.prev_source = ""
        self.last_digest = "sha256:" + "0" * 64
        self.last_submitted: Program | None = None
        self.n_iter = 0
        self.stale_total = 0
        self.failures = 0
        self.t0 = time.monotonic()
        self.inline = self.lp.action.edit_granularity == "file"
        self.unhealthy = False
        self.rounds = 0
        self.submitted: dict[str, int] = {}
        """Source -> submit id of its latest submit (what `Iteration.base_submit` points at)."""
        self.search_base: str | None = None
        """Source of the program the current search is centred on (the base of its candidates)."""
        self.search_round = -1

    # -- acting ---------------------------------------------------------------------------
    def size(self) -> int:
        usable = self.remaining - self.budget.reserve
        if usable < self.lo:
            raise Stop("budget_spent" if self.budget.reserve == 0 else "finished_early")
        return plan.submit_size(self.lp, usable, self.lo, self.hi)

    def check_clock(self) -> None:
        if time.monotonic() - self.t0 > self.lp.budget.wall_time_s:
            raise Stop("wall_time")

    def submit(self, prog: Program, indices: list[int], phase: str, note: str, *, role: str = "candidate",
               base: str | None = None, search_round: int | None = None) -> tuple[float | None, Digest | None]:
        """Write the program, submit it, read the feedback, record the iteration.

        `role` says why the submit is made, `base` is the source of the program this one was
        derived from (None: written from scratch) and `search_round` the tuning generation of
        a search candidate; all three go into the trace.
        """
        self.check_clock()
        start = time.monotonic()
        problems = static_problems(prog.source, self.obs_space, self.act_space) if self.lp.verification.static_checks else []
        if problems:
            self.record(phase, prog, None, None, None, start, f"static check refused: {problems[0]}",
                        role=role, base=base, search_round=search_round)
            return None, None
        system = self.ctx.workspace / "system"
        system.mkdir(parents=True, exist_ok=True)
        (system / "policy.py").write_text(prog.source)
        try:
            answer = self.host.submit(indices)
        except HostError as err:
            raise Stop("budget_spent" if "closed" in str(err) else "error") from err
        self.remaining = int(answer.summary.get("remaining_budget", self.remaining - answer.charged))
        self.spent[phase if phase in self.spent else "tuning"] += answer.charged
        digest = None
        if answer.submit_id is not None:
            folder = self.ctx.workspace / "feedback" / f"submit_{answer.submit_id:03d}"
            digest = read_submit(self.lp, folder, answer.summary)
        value = plan.score(self.lp, digest.summary if digest else answer.summary) if answer.status == "ok" else None
        self.unhealthy = digest is not None and digest.unhealthy_output
        self.record(phase, prog, answer, digest, value, start, note, indices, role=role, base=base,
                    search_round=search_round)
        if answer.submit_id is not None:
            self.submitted[prog.source] = answer.submit_id
        self.last_submitted = prog
        return value, digest

    def record(self, phase, prog, answer, digest, value, start, note, indices=(), *, role: str = "candidate",
               base: str | None = None, search_round: int | None = None) -> None:
        topo_prev = topology_hash(self.prev_source) if self.prev_source else None
        kind = "none" if answer is None else ("synthesis" if topo_prev != topology_hash(prog.source) else "tuning")
        if answer is not None and self.incumbent is not None and prog.source == self.incumbent.program.source \
                and prog.source != self.prev_source:
            kind = "revert"
        diff = sum(1 for line in difflib.unified_diff(self.prev_source.splitlines(), prog.source.splitlines(), lineterm="")
                   if line[:1] in "+-" and not line.startswith(("+++", "---")))
        summary = answer.summary if answer is not None else {}
        returns = summary.get("returns")
        self.ctx.record(Iteration(
            index=self.n_iter, phase=phase, observation_digest=self.last_digest, edit_kind=kind,
            diff_lines=diff if answer is not None else 0, mechanism=prog.mechanism,
            submitted_indices=tuple(indices), submit_id=None if answer is None else answer.submit_id,
            verdict=None if answer is None else answer.status,
            returns=tuple(float(r) for r in returns) if returns else None,
            mean_return=summary.get("mean_return"), episodes_charged=0 if answer is None else answer.charged,
            wall_s=round(time.monotonic() - start, 3), note=note[:300], role=role,
            base_submit=None if base is None else self.submitted.get(base),
            search_round=search_round))
        self.n_iter += 1
        if answer is not None:
            self.prev_source = prog.source
            if digest is not None:
                self.last_digest = digest.text_sha256
            if value is not None:
                self.best_value = value if self.best_value is None else max(self.best_value, value)
            label = "mean-stderr" if "returns" in self.lp.observation.summary_fields else "mean"
            self.ctx.progress(f"[{phase}] submit {answer.submit_id} {prog.mechanism} {answer.status} "
                              f"mean return {_fmt(summary.get('mean_return'))}, score ({label}) {_fmt(value)}, "
                              f"best score so far {_fmt(self.best_value)}; {self.remaining} episodes left")

    # -- memory -------------------------------------------------------------------------
    def remember(self, scored: Scored) -> None:
        self.top = sorted([s for s in self.top if s.program.source != scored.program.source] + [scored],
                          reverse=True)[: self.lp.memory.top_k_programs]

    def consider(self, prog: Program, mech: Mechanism, value: float | None, phase: str) -> bool:
        """Verification: does the candidate replace the incumbent? Retests when configured."""
        if value is None:
            return False
        if self.unhealthy:
            return False  # warnings or tracebacks in its output: fragile on unseen cases, never the incumbent
        self.remember(Scored(value, prog, mech))
        if not plan.beats(self.lp, value, self.incumbent.score if self.incumbent else None):
            return False
        if self.incumbent is not None and self.lp.verification.retest_episodes > 0:
            if not self.retest(prog, mech, value, phase):
                return False
        self.incumbent = Scored(value, prog, mech)
        return True

    def retest(self, prog: Program, mech: Mechanism, value: float, phase: str) -> bool:
        k = min(self.lp.verification.retest_episodes, self.hi, self.remaining - self.budget.reserve)
        if k < self.lo:
            return True
        idx = self.indices.retest(k)
        again, _ = self.submit(prog, idx, phase, "retest of an apparent improvement", role="retest",
                               base=prog.source)
        if again is None:
            return False
        reference = self.incumbent.score
        if self.lp.verification.matched_comparison and self.remaining - self.budget.reserve >= k:
            reference, _ = self.submit(self.incumbent.program, idx, phase, "incumbent on the retest indices",
                                       role="reference", base=self.incumbent.program.source)
            reference = -np.inf if reference is None else reference
        if plan.beats(self.lp, again, reference):
            return True
        self.regression(mech, prog)
        return False

    def regression(self, mech: Mechanism, prog: Program) -> None:
        """A confirmed regression: Recovery.on_regression decides where the search goes."""
        action = self.lp.recovery.on_regression
        if action == "keep" and self.search is not None:
            self.recenter(prog)
        elif action == "restructure":
            self.switch_mechanism()
        elif self.search is not None and self.incumbent is not None:
            self.recenter(self.incumbent.program)

    def recenter(self, prog: Program, sigma: float | None = None) -> None:
        """Centre the search on a program: its next candidates are derived from it."""
        self.search.recenter(np.asarray(prog.x), sigma)
        self.search_base = prog.source

    # -- phases -------------------------------------------------------------------------
    search: Search | None = None
    mech: Mechanism | None = None

    def synthesis(self) -> None:
        tried: dict[str, float] = {}
        stale = 0
        for mech in self.mechanisms:
            if tried and self.spent["synthesis"] + self.size() > self.budget.synthesis:
                break
            prog = render(mech, mech.defaults(), inline=self.inline)
            phase = "synthesis" if "synthesis" in self.lp.planning.phases else "tuning"
            value, digest = self.submit(prog, self.indices.pick(self.size()), phase, mech.note)
            value = self.after_failure(value, mech, prog, phase)
            tried[mech.name] = -np.inf if value is None else value
            improved = self.consider(prog, mech, value, "synthesis")
            stale = 0 if improved else stale + 1
            self.note_stale(improved)
            if plan.plateau_action(self.lp, stale) == "next_phase":
                break
        self.tried = tried

    def after_failure(self, value, mech, prog, phase):
        """Recovery.on_error_verdict for a failed submit; returns the (possibly retried) score."""
        if value is not None:
            self.failures = 0
            return value
        self.failures += 1
        action = plan.error_action(self.lp, self.failures)
        if action == "retry" and self.remaining - self.budget.reserve >= self.lo:
            value, _ = self.submit(prog, self.indices.pick(self.size()), phase, "retry after a failure verdict",
                                   role="retry", base=prog.source)
            return value
        if action == "restructure":
            self.switch_mechanism()
        elif self.search is not None and self.incumbent is not None:
            self.recenter(self.incumbent.program)
        return None

    def note_stale(self, improved: bool) -> None:
        self.edit_log.append(improved)
        self.stale_total = 0 if improved else self.stale_total + 1
        if plan.should_finish(self.lp, self.stale_total, self.remaining):
            raise Stop("finished_early")

    def switch_mechanism(self) -> None:
        """Restructure: continue tuning with the next mechanism not yet tuned."""
        order = sorted(self.mechanisms, key=lambda m: -getattr(self, "tried", {}).get(m.name, -np.inf))
        current = self.mech.name if self.mech else None
        nxt = next((m for m in order if m.name != current and m.name not in self.tuned), None)
        if nxt is None:
            return
        self.start_search(nxt, np.zeros(nxt.dim))

    def start_search(self, mech: Mechanism, center: np.ndarray) -> None:
        self.mech = mech
        self.tuned.add(mech.name)
        self.rounds += 1
        self.search = Search(mech, center, sigma=self.lp.action.step_size, population=self.lp.action.population,
                             granularity=self.lp.action.edit_granularity,
                             seed=self.ctx.condition.seed * 1000 + self.rounds)
        self.search_base = render(mech, center, inline=self.inline).source
        self.search_round = -1

    def tuning(self) -> None:
        if self.incumbent is None or self.incumbent.mech.dim == 0:
            return  # nothing to tune (the parameter-free fallback)
        allot = self.budget.synthesis + self.budget.tuning
        self.start_search(self.incumbent.mech, np.asarray(self.incumbent.program.x))
        stale = 0
        while self.spent["synthesis"] + self.spent["tuning"] + self.size() <= allot:
            xs, scores = self.search.ask(), []
            self.search_round += 1
            search, mech, base = self.search, self.mech, self.search_base
            for x in xs:
                if self.spent["synthesis"] + self.spent["tuning"] + self.size() > allot:
                    break
                prog = render(mech, x, inline=self.inline)
                value, digest = self.submit(prog, self.indices.pick(self.size()), "tuning", f"step {search.sigma:.3g}",
                                            base=base, search_round=self.search_round)
                value = self.after_failure(value, mech, prog, "tuning")
                scores.append(-np.inf if value is None else value)
                improved = self.consider(prog, mech, value, "tuning")
                stale = 0 if improved else stale + 1
                self.note_stale(improved)
                self.adapt(digest)
                if self.search is not search:
                    break
            if self.search is search and len(scores) == len(xs):
                search.tell(scores)
                search.scale_step(plan.step_factor(self.lp, self.edit_log))
            stale = self.on_plateau(stale)
            if stale < 0:
                return

    def adapt(self, digest: Digest | None) -> None:
        """Trajectory diagnoses of the worst episodes move the search step."""
        if digest is None or self.search is None:
            return
        if digest.saturation > 0.5:
            self.search.scale_step(SATURATION_SHRINK)
        if digest.stalled:
            self.search.scale_step(STALL_WIDEN)

    def on_plateau(self, stale: int) -> int:
        """Planning.on_plateau; returns the new stale count, or -1 to leave tuning."""
        action = plan.plateau_action(self.lp, stale)
        if action is None:
            return stale
        if action == "next_phase":
            return -1
        if action == "restructure":
            self.switch_mechanism()
        elif self.incumbent is not None:
            self.recenter(self.incumbent.program, self.search.sigma * WIDEN)
        return 0

    def confirmation_round(self) -> None:
        """Re-test the kept programs (all but the best) on fresh indices, within the confirmation share."""
        for s in sorted(self.top)[:-1]:
            if self.spent["confirmation"] + self.size() > self.budget.confirmation:
                return
            self.submit(s.program, self.indices.retest(self.size()), "confirmation", "re-test a kept program",
                        role="confirm", base=s.program.source)

    def final(self) -> None:
        """Spend what is left on the best program, so the last submit is the best one."""
        best = self.incumbent or (max(self.top) if self.top else None)
        if best is None:
            return
        while self.remaining - self.budget.reserve >= self.lo:
            if self.lp.stopping.mode == "finish_early" and self.last_submitted is best.program:
                break
            self.submit(best.program, self.indices.retest(self.size()), "confirmation", "confirm the best program last",
                        role="confirm", base=best.program.source)

    # -- driver -------------------------------------------------------------------------
    def run(self) -> AgentResult:
        self.tuned: set[str] = set()
        reason = "budget_spent"
        try:
            phases = self.lp.planning.phases
            if "synthesis" not in phases:
                self.mechanisms = self.mechanisms[:1]  # start from the library's first guess
            self.synthesis()
            allot = self.budget.synthesis + self.budget.tuning
            while "tuning" in phases:
                before = self.spent["tuning"]
                self.tuning()
                if "confirmation" in phases:
                    self.confirmation_round()
                used = self.spent["synthesis"] + self.spent["tuning"]
                if used + self.size() > allot or self.spent["tuning"] == before:
                    break
            if "confirmation" in phases and not self.spent["confirmation"]:
                self.confirmation_round()
            self.final()
        except Stop as stop:
            reason = stop.reason
        self.finish_best(reason)
        self.write_lesson()
        return AgentResult(finish_reason=reason)

    def finish_best(self, reason: str) -> None:
        """Keep the last submit good (re-submit the best when budget remains), then /finish."""
        best = self.incumbent
        if reason in ("finished_early", "wall_time") and best is not None and self.last_submitted is not best.program:
            if self.remaining >= self.lo:
                try:
                    self.submit(best.program, self.indices.pick(self.lo), "confirmation", "best program last",
                                role="confirm", base=best.program.source)
                except Stop:
                    pass
        if self.remaining > 0:
            try:
                self.host.finish()
            except HostError:
                pass

    def write_lesson(self) -> None:
        if self.store is None or self.incumbent is None:
            return
        self.store.add(Lesson(self.sig, self.incumbent.mech.name, self.ctx.task.env, float(self.incumbent.score)))


def _fmt(v: float | None) -> str:
    return "-" if v is None else f"{v:.4g}"
