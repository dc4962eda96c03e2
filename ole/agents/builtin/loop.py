"""The built-in coding agent: synthesis -> tuning -> confirmation under a Loop Policy.

It writes real policy programs into `workspace/system/policy.py`, submits them through
the protocol, reads the feedback tree, and improves the program within the budget.
What a Loop Policy field decides is decided by `ole.agents.decisions` (shared with the
LLM agent); this module carries the decisions out with the built-in means: mechanisms
from the library for synthesis, CMA-ES rounds for tuning. Every submit is recorded as
an `Iteration` with its role, the submit it was derived from and its search round.
"""
from __future__ import annotations

import difflib
import time

import numpy as np

from ole.agents import decisions
from ole.agents.base import AgentContext, AgentResult
from ole.agents.builtin import layout, library, reach
from ole.agents.builtin.checks import static_problems, topology_hash
from ole.agents.builtin.feedback import Digest, read_submit
from ole.agents.builtin.mechanism import Mechanism, Program, render
from ole.agents.builtin.search import Search
from ole.agents.client import HostError
from ole.agents.decisions import ProgramResults
from ole.lessons import Lesson, LessonStore, signature
from ole.trace import Iteration

SATURATION_SHRINK = 0.7
"""Step multiplier after the worst episodes show saturated actuators (smaller moves)."""
STALL_WIDEN = 1.5
"""Step multiplier after the worst episodes show a stalled observation (escape the stall)."""
WIDEN = 2.0
"""Step multiplier of the `widen_search` plateau response."""
LAYOUT_STEPS = 2000
"""Inspected trajectory steps kept for the layout inference (more add little, and cost time)."""


class Stop(Exception):
    """Internal: the run must end now (budget, wall time, finish decision, closed run)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class Round:
    """What one round of candidates came to."""

    def __init__(self) -> None:
        self.values: list[float] = []
        """Each candidate's first score (-inf when it failed)."""
        self.fitness: list[float] = []
        """Search fitness per candidate (only the order matters)."""
        self.improved = False
        self.best_submit: int | None = None
        self.best_value = -np.inf
        self.void = False
        """The round ended early and its generation must not be told (restructure, plateau)."""
        self.go_on = True
        """When void: whether the tuning phase goes on."""

    def judge(self, worker: "Worker", prog: Program, value: float | None, phase: str) -> None:
        """Verification of one candidate, and the counters it moves."""
        if value is not None and value > self.best_value:
            self.best_value, self.best_submit = value, worker.first_submit(prog.source)
        improved = worker.consider(prog, value, phase)
        self.improved = self.improved or improved
        worker.note(improved)


class Worker:
    """One task worked by the built-in agent (all state of one run)."""

    def __init__(self, ctx: AgentContext, host, extra: tuple[Mechanism, ...] = ()) -> None:
        self.ctx, self.host = ctx, host
        self.info = host.info()
        self.lp = decisions.for_budget(ctx.bundle.loop_policy, int(self.info["episode_budget"]))
        self.brief = host.task()
        meta = self.info["env_meta"]
        self.obs_space, self.act_space = meta["obs_space"], meta["action_space"]
        self.remaining = int(self.info["state"]["remaining_budget"])
        self.lo = int(self.info.get("min_episodes_per_submit", 1))
        self.hi = int(self.info.get("max_episodes_per_submit", self.remaining))
        self.budget = decisions.phase_budget(self.lp, self.remaining)
        self.indices = decisions.IndexPlan(self.lp, int(meta.get("n_env_instances", 1)), ctx.condition.seed)
        self.sig = signature(self.obs_space, self.act_space)
        self.store = LessonStore(ctx.lessons_path) if ctx.lessons_path and self.lp.memory.carry_lessons else None
        preferred = self.store.ranking(self.sig) if self.store else []
        found = library.candidates(self.obs_space, self.act_space, self.brief, preferred=preferred, extra=extra)
        self.mechanisms = found[: self.lp.planning.max_mechanisms]
        self.by_name = {m.name: m for m in found}
        self.results: dict[str, ProgramResults] = {}
        self.programs: dict[str, Program] = {}
        self.incumbent: ProgramResults | None = None
        self.best_value: float | None = None  # progress only; the incumbent also needs the verification test
        self.progress = decisions.Progress()
        self.spent = {"synthesis": 0, "tuning": 0, "confirmation": 0}
        self.prev_source = ""
        self.last_digest = "sha256:" + "0" * 64
        self.last_submitted: str | None = None
        self.n_iter = 0
        self.t0 = time.monotonic()
        self.inline = self.lp.action.edit_granularity == "file"
        self.unhealthy = False
        self.tried: dict[str, float] = {}
        self.tuned: set[str] = set()
        self.search: Search | None = None
        self.mech: Mechanism | None = None
        self.center_submit: int | None = None
        self.rounds = 0
        self.restarts = 0
        self.cycles = 0
        """Searches started so far (the next restart point is the next kept program)."""
        self.samples: list = []
        """Trajectory windows read so far (for the layout inference), up to LAYOUT_STEPS steps."""
        self.grow: tuple[list, list] | None = None
        self.last_verdict: str | None = None
        self.last_submit_id: int | None = None

    # -- acting ---------------------------------------------------------------------------
    def size(self, want: int | None = None) -> int:
        k = decisions.submit_size(self.lp, self.remaining, self.lo, self.hi, want)
        if k == 0:
            raise Stop("budget_spent" if self.budget.reserve == 0 else "finished_early")
        return k

    def check_clock(self) -> None:
        if time.monotonic() - self.t0 > self.lp.budget.wall_time_s:
            raise Stop("wall_time")

    def submit(self, prog: Program, indices: list[int], phase: str, note: str, *, role: str,
               base: int | None = None, search_round: int | None = None) -> tuple[float | None, Digest | None]:
        """Write the program, submit it, read the feedback, record the iteration."""
        self.check_clock()
        start = time.monotonic()
        problems = static_problems(prog.source, self.obs_space, self.act_space) if self.lp.verification.static_checks else []
        if problems:
            self.record(phase, prog, None, None, None, start, f"static check refused: {problems[0]}",
                        role=role, base=base, search_round=search_round)
            self.last_verdict = None
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
        value = None
        if answer.status == "ok":
            rec = self.results.setdefault(prog.source, ProgramResults(prog.source, prog.mechanism))
            self.programs.setdefault(prog.source, prog)
            value = rec.add(self.lp, answer.summary, indices, answer.submit_id)
        self.unhealthy = digest is not None and digest.unhealthy_output
        if digest is not None and sum(len(x.obs) for x in self.samples) < LAYOUT_STEPS:
            self.samples.extend(digest.samples)
        self.record(phase, prog, answer, digest, value, start, note, indices, role=role, base=base,
                    search_round=search_round)
        self.last_submitted = prog.source
        self.last_verdict, self.last_submit_id = answer.status, answer.submit_id
        return value, digest

    def record(self, phase, prog, answer, digest, value, start, note, indices=(), *, role, base, search_round) -> None:
        topo_prev = topology_hash(self.prev_source) if self.prev_source else None
        kind = "none" if answer is None else ("synthesis" if topo_prev != topology_hash(prog.source) else "tuning")
        if answer is not None and self.incumbent is not None and prog.source == self.incumbent.source \
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
            wall_s=round(time.monotonic() - start, 3), note=note[:300], role=role, base_submit=base,
            search_round=search_round))
        self.n_iter += 1
        if answer is not None:
            self.prev_source = prog.source
            if digest is not None:
                self.last_digest = digest.text_sha256
            if value is not None:
                self.best_value = value if self.best_value is None else max(self.best_value, value)
            self.ctx.progress(f"[{phase}] submit {answer.submit_id} {prog.mechanism} {answer.status} "
                              f"mean return {_fmt(summary.get('mean_return'))}, score (mean) {_fmt(value)}, "
                              f"best score so far {_fmt(self.best_value)}; {self.remaining} episodes left")

    # -- verification ---------------------------------------------------------------------
    def first_submit(self, source: str | None) -> int | None:
        rec = self.results.get(source) if source is not None else None
        return rec.first_submit if rec else None

    def top(self) -> list[ProgramResults]:
        """The kept programs (`memory.top_k_programs`), best first."""
        return decisions.ranked(list(self.results.values()), self.lp.memory.top_k_programs)

    def consider(self, prog: Program, value: float | None, phase: str) -> bool:
        """Verification: does the candidate replace the incumbent? Retests when configured."""
        if value is None or self.unhealthy:
            return False  # output with warnings or tracebacks: fragile on unseen cases, never the incumbent
        cand = self.results[prog.source]
        if not decisions.beats(self.lp, cand, self.incumbent):
            return False
        if self.incumbent is not None and self.lp.verification.retest_episodes > 0:
            if not self.retest(prog, phase):
                return False
        self.incumbent = cand
        return True

    def retest(self, prog: Program, phase: str) -> bool:
        """Re-run an apparent improvement on fresh ids (and the incumbent on the same ids when
        matched); it stands only if it still beats the incumbent on all the evidence."""
        k = decisions.submit_size(self.lp, self.remaining, self.lo, self.hi, self.lp.verification.retest_episodes)
        if k == 0:
            return True  # nothing left to re-test with: the first result is all the evidence there is
        idx = self.indices.retest(k)
        again, _ = self.submit(prog, idx, phase, "retest of an apparent improvement", role="retest",
                               base=self.first_submit(prog.source))
        if again is None:
            return False
        inc = self.incumbent
        if self.lp.verification.matched_comparison and decisions.submit_size(self.lp, self.remaining, self.lo,
                                                                             self.hi, k) == k:
            self.submit(self.programs[inc.source], idx, phase, "incumbent on the retest indices", role="reference",
                        base=inc.first_submit)
        return decisions.beats(self.lp, self.results[prog.source], inc)

    # -- recovery ---------------------------------------------------------------------------
    def after_failure(self, value, prog, phase, indices, search_round=None):
        """`recovery.on_error_verdict` / `max_retries` after a charged failure; returns the final score.

        A program refused by the agent's own static checks was never charged: nothing to
        recover from (the next candidate comes anyway).
        """
        while value is None and self.last_verdict is not None:
            self.progress.failed()
            action = decisions.error_action(self.lp, self.progress.failures)
            if action == "retry" and decisions.submit_size(self.lp, self.remaining, self.lo, self.hi) > 0:
                failed = self.last_submit_id
                value, _ = self.submit(prog, indices[: self.size(len(indices))], phase, "retry after a failure verdict",
                                       role="retry", base=failed, search_round=search_round)
                continue
            if action == "restructure" and self.search is not None and self.switch_mechanism():
                return None
            self.revert()
            return None
        if value is not None:
            self.progress.ok()
        return value

    def revert(self) -> None:
        """Back to the best program of the mechanism being tuned (`decisions.revert_target`):
        the search is re-centred on it with the same step and shape."""
        if self.search is None:
            return
        target = decisions.revert_target(self.incumbent, list(self.results.values()), self.mech.name)
        if target is None:
            return
        prog = self.programs[target.source]
        mech = self.by_name.get(prog.mechanism)
        if mech is None or mech.dim == 0:
            return
        if mech.name != self.mech.name:
            self.start_search(mech, np.asarray(prog.x), target.first_submit)
            return
        self.search.recenter(np.asarray(prog.x), keep_shape=True)
        self.center_submit = target.first_submit

    def switch_mechanism(self) -> bool:
        """Restructure: go on tuning the best synthesized mechanism not yet tuned; False if none is left."""
        order = sorted(self.mechanisms, key=lambda m: -self.tried.get(m.name, -np.inf))
        current = self.mech.name if self.mech else None
        nxt = next((m for m in order if m.name != current and m.name not in self.tuned and m.dim > 0), None)
        if nxt is None:
            return False
        prog = render(nxt, nxt.defaults(), inline=self.inline)
        self.start_search(nxt, np.zeros(nxt.dim), self.first_submit(prog.source))
        return True

    def start_search(self, mech: Mechanism, center: np.ndarray, center_submit: int | None) -> None:
        self.mech = mech
        self.tuned.add(mech.name)
        self.restarts += 1
        self.center_submit = center_submit
        self.search = Search(mech, center, sigma=self.lp.action.step_size, population=self.lp.action.population,
                             granularity=self.lp.action.edit_granularity,
                             seed=self.ctx.condition.seed * 1000 + self.restarts)

    # -- phases -------------------------------------------------------------------------
    def synthesis(self) -> None:
        """Every mechanism (up to `planning.max_mechanisms`) at its defaults, as one round on shared ids.

        After each submit the layout inferred from the trajectories read so far may add
        data-informed mechanisms (`ole.agents.builtin.reach`); they take the round's next
        places, within `max_mechanisms`.
        """
        phase = "synthesis" if "synthesis" in self.lp.planning.phases else "tuning"
        progs = [render(mech, mech.defaults(), inline=self.inline) for mech in self.mechanisms]
        notes = [m.note for m in self.mechanisms]
        self.grow = (progs, notes) if "synthesis" in self.lp.planning.phases else None
        outcome = self.race(progs, phase, None, None, share="synthesis", notes=notes,
                            k=decisions.synthesis_size(self.lp, self.budget, self.remaining, self.lo, self.hi))
        self.grow = None
        late = [m for m in reach.informed(self.obs_space, self.act_space, layout.infer(self.samples), self.samples)
                if m.name not in {p.mechanism for p in progs}][: max(0, self.lp.planning.max_mechanisms - len(progs))]
        if late and self.grow is None and "synthesis" in self.lp.planning.phases:
            # found only once the synthesis share was spent: tried on what synthesis and tuning have left
            for mech in late:
                self.by_name.setdefault(mech.name, mech)
            late_progs = [render(m, m.defaults(), inline=self.inline) for m in late]
            late_out = self.race(late_progs, phase, None, None, share="tuning", notes=[m.note for m in late],
                                 k=decisions.synthesis_size(self.lp, self.budget, self.remaining, self.lo, self.hi))
            progs, outcome.values = progs + late_progs, outcome.values + late_out.values
        for prog, value in zip(progs, outcome.values):
            self.tried[prog.mechanism] = value
        self.progress.new_phase()

    def note(self, improved: bool) -> None:
        self.progress.candidate(improved)
        if decisions.should_finish(self.lp, self.progress, self.remaining):
            raise Stop("finished_early")

    def tuning(self) -> None:
        """CMA-ES rounds until the tuning share is spent or a plateau ends them.

        After a plateau and a confirmation round, tuning resumes the same search (its step
        and shape are what it has learned) while the incumbent's mechanism is the one it
        tunes; a new search starts at a restart point otherwise: the incumbent first, then
        the other kept programs of its mechanism in rank order (`memory.top_k_programs`).
        """
        resume = self.search is not None and self.incumbent is not None and self.mech is not None \
            and self.incumbent.mechanism == self.mech.name
        if not resume:
            start = self.restart_point()
            if start is None:
                return  # nothing to tune (only parameter-free programs)
            rec, prog, mech = start
            self.start_search(mech, np.asarray(prog.x), rec.first_submit)
        while decisions.fits(self.budget, "tuning", self.spent, self.size()):
            if not self.tuning_round():
                return

    def restart_point(self):
        """(results, program, mechanism) to start the next search from, or None."""
        points = [self.incumbent] if self.incumbent is not None else []
        points += [r for r in self.top() if r is not self.incumbent
                   and (self.incumbent is None or r.mechanism == self.incumbent.mechanism)]
        points = [r for r in points if (m := self.by_name.get(self.programs[r.source].mechanism)) and m.dim > 0]
        if not points:
            return None
        rec = points[self.cycles % len(points)]
        self.cycles += 1
        prog = self.programs[rec.source]
        return rec, prog, self.by_name[prog.mechanism]

    def tuning_round(self) -> bool:
        """One CMA-ES generation raced on shared ids, then tell; False when a plateau ends tuning."""
        search, mech, base = self.search, self.mech, self.center_submit
        round_id = self.rounds
        self.rounds += 1
        xs = search.ask()
        progs = [render(mech, x, inline=self.inline) for x in xs]
        outcome = self.race(progs, "tuning", base, round_id, share="tuning",
                            notes=[f"round {round_id} step {search.sigma:.3g}"] * len(progs))
        if outcome.void:
            return outcome.go_on
        if len(outcome.values) == len(xs):
            search.tell(outcome.fitness)
            search.scale_step(decisions.step_factor(self.lp, self.progress))
        self.after_round(outcome.improved, outcome.best_submit)
        return self.on_plateau()

    def race(self, progs: list[Program], phase: str, base: int | None, round_id: int | None, *, share: str,
             notes: list[str], k: int | None = None) -> "Round":
        """Evaluate one round of candidates on shared ids: screening, then the survivors' full evaluation.

        Without racing (`decisions.screen_size` = the full size) each candidate is judged as
        soon as it is scored, and a plateau or a restructure can end the round early.
        """
        k = self.size() if not k else k
        if k == 0:
            raise Stop("budget_spent" if self.budget.reserve == 0 else "finished_early")
        ks = decisions.screen_size(self.lp, k)
        ids = self.indices.pick(k)
        search = self.search
        out = Round()
        screen: list[float | None] = []
        j = 0
        while j < len(progs):
            prog, note = progs[j], notes[j]
            j += 1
            n = min(ks, self.size())
            if screen and not decisions.fits(self.budget, share, self.spent, n):
                break
            value, digest = self.submit(prog, ids[:n], phase, note, role="candidate", base=base,
                                        search_round=round_id)
            value = self.after_failure(value, prog, phase, ids[:n], round_id)
            screen.append(value)
            self.adapt(digest)
            self.inform(j)
            if ks == k:
                out.judge(self, prog, value, phase)
            if phase == "tuning" and self.search is not search:
                out.void, out.go_on = True, True  # restructured after a failure: the generation is void
                return out
            if ks == k and len(screen) < len(progs) and decisions.plateau_action(self.lp, self.progress):
                if phase == "tuning":
                    out.void, out.go_on = True, self.on_plateau()
                    return out
                if decisions.plateau_action(self.lp, self.progress) == "next_phase":
                    break
        full: dict[int, float | None] = {}
        if ks < k:
            inc = self.incumbent.mean(set(ids[:ks])) if self.incumbent is not None else None
            for j in decisions.survivors(screen, inc):
                m = min(k - ks, self.size())
                if not decisions.fits(self.budget, share, self.spent, m):
                    break
                full[j], _ = self.submit(progs[j], ids[ks:ks + m], phase, "full evaluation of a screened candidate",
                                         role="retest", base=self.first_submit(progs[j].source), search_round=round_id)
            for j, (prog, value) in enumerate(zip(progs, screen)):
                out.judge(self, prog, value if j in full and full[j] is not None else None, phase)
        out.values = [-np.inf if v is None else v for v in screen]
        out.fitness = self.rank_fitness(progs, screen, full, set(ids))
        return out

    def inform(self, done: int) -> None:
        """Put data-informed mechanisms the layout now supports into the synthesis round, after
        the `done` candidates already submitted, keeping the round within `max_mechanisms`."""
        if self.grow is None:
            return
        progs, notes = self.grow
        new = [m for m in reach.informed(self.obs_space, self.act_space, layout.infer(self.samples), self.samples)
               if m.name not in self.by_name]
        for mech in new:
            self.by_name[mech.name] = mech
            self.mechanisms.append(mech)
            progs.insert(done, render(mech, mech.defaults(), inline=self.inline))
            notes.insert(done, mech.note)
            done += 1
        del progs[self.lp.planning.max_mechanisms:], notes[self.lp.planning.max_mechanisms:]

    def rank_fitness(self, progs, screen, full, ids) -> list[float]:
        """Search fitness of a raced round: fully evaluated candidates by their full mean, above
        the screened-out ones by their screening mean; failures last (only the order matters)."""
        keyed = []
        for j, prog in enumerate(progs[: len(screen)]):
            rec = self.results.get(prog.source)
            if j in full and full[j] is not None and rec is not None:
                keyed.append((2, rec.mean(ids) or -np.inf, j))
            elif screen[j] is not None:
                keyed.append((1, screen[j], j))
            else:
                keyed.append((0, 0.0, j))
        order = sorted(keyed, key=lambda t: (t[0], t[1]))
        fitness = [0.0] * len(keyed)
        for rank, (_, _, j) in enumerate(order):
            fitness[j] = float(rank)
        return fitness

    def after_round(self, improved: bool, best_submit: int | None) -> None:
        """`recovery.on_regression`: where the next round starts."""
        action = decisions.regression_action(self.lp)
        if action == "revert" or improved and action == "restructure":
            self.revert()
        elif action == "restructure":
            if not self.switch_mechanism():
                self.revert()
        elif best_submit is not None:  # keep: CMA-ES goes on from its own update of the round
            self.center_submit = self.incumbent.first_submit if improved and self.incumbent else best_submit

    def adapt(self, digest: Digest | None) -> None:
        """Trajectory diagnoses of the worst episodes move the search step."""
        if digest is None or self.search is None:
            return
        if digest.saturation > 0.5:
            self.search.scale_step(SATURATION_SHRINK)
        if digest.stalled:
            self.search.scale_step(STALL_WIDEN)

    def on_plateau(self) -> bool:
        """`planning.on_plateau` in tuning; False to leave the tuning phase."""
        action = decisions.plateau_action(self.lp, self.progress)
        if action is None:
            return True
        self.progress.new_phase()
        if action == "next_phase":
            return False
        if action == "restructure":
            return self.switch_mechanism()
        sigma = self.search.sigma * WIDEN
        self.revert()
        self.search.recenter(self.search.center, sigma)
        return True

    def confirmation_round(self) -> None:
        """Re-test the kept programs (all but the best) on fresh ids, within the confirmation share."""
        for rec in self.top()[1:]:
            k = self.size()
            if not decisions.fits(self.budget, "confirmation", self.spent, k):
                return
            self.submit(self.programs[rec.source], self.indices.retest(k), "confirmation", "re-test a kept program",
                        role="confirm", base=rec.first_submit)

    def best(self) -> ProgramResults | None:
        return self.incumbent or (self.top()[0] if self.top() else None)

    def final(self) -> None:
        """Spend what is left on the best program, so the last submit is the best one."""
        best = self.best()
        if best is None:
            return
        while decisions.submit_size(self.lp, self.remaining, self.lo, self.hi) > 0:
            if self.lp.stopping.mode == "finish_early" and self.last_submitted == best.source:
                break
            self.submit(self.programs[best.source], self.indices.retest(self.size()), "confirmation",
                        "confirm the best program last", role="confirm", base=best.first_submit)

    # -- driver -------------------------------------------------------------------------
    def run(self) -> AgentResult:
        reason = "budget_spent"
        try:
            phases = self.lp.planning.phases
            if "synthesis" not in phases:
                self.mechanisms = self.mechanisms[:1]  # start from the library's first guess
            self.synthesis()
            while "tuning" in phases:
                before = self.spent["tuning"]
                self.tuning()
                if "confirmation" in phases:
                    self.confirmation_round()
                if not decisions.fits(self.budget, "tuning", self.spent, self.size()) or self.spent["tuning"] == before:
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
        best = self.best()
        if reason in ("finished_early", "wall_time") and best is not None and self.last_submitted != best.source:
            if self.remaining >= self.lo:
                try:
                    self.submit(self.programs[best.source], self.indices.pick(self.lo), "confirmation",
                                "best program last", role="confirm", base=best.first_submit)
                except Stop:
                    pass
        if self.remaining > 0:
            try:
                self.host.finish()
            except HostError:
                pass

    def write_lesson(self) -> None:
        best = self.best()
        if self.store is None or best is None:
            return
        self.store.add(Lesson(self.sig, best.mechanism, self.ctx.task.env, float(best.mean())))


def _fmt(v: float | None) -> str:
    return "-" if v is None else f"{v:.4g}"
