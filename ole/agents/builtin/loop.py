"""The built-in coding agent: synthesis -> tuning -> confirmation under a Loop Policy.

It writes real policy programs into `workspace/system/policy.py`, submits them through
the protocol, reads the feedback tree, and improves the program within the budget.
The bookkeeping around each edit -- submit, judge, recover, confirm, finish, lessons --
is the shared `ole.agents.session.AgentSession` (the LLM agent's too), deciding through
`ole.agents.decisions`; this module makes the edits with the built-in means: mechanisms
from the library for synthesis, CMA-ES rounds for tuning, the same program again as a
retry. Every submit is recorded with its role, the submit it was derived from and its
search round.
"""
from __future__ import annotations

import numpy as np

from ole.agents import decisions
from ole.agents.base import AgentContext
from ole.agents.builtin import layout, library, reach
from ole.agents.builtin.checks import static_problems, topology_hash
from ole.agents.builtin.feedback import Digest, Sample, read_submit
from ole.agents.builtin.mechanism import Mechanism, Program, render
from ole.agents.builtin.search import Search
from ole.agents.client import SubmitAnswer
from ole.agents.decisions import Phase, ProgramResults
from ole.agents.session import HostApi, Observed, AgentSession, Stop, StopReason
from ole.trace import EditKind, SubmitRole

SATURATION_SHRINK = 0.7
"""Step multiplier after the worst episodes show saturated actuators (smaller moves)."""
STALL_WIDEN = 1.5
"""Step multiplier after the worst episodes show a stalled observation (escape the stall)."""
WIDEN = 2.0
"""Step multiplier of the `widen_search` plateau response."""
LAYOUT_STEPS = 2000
"""Inspected trajectory steps kept for the layout inference (more add little, and cost time)."""


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
        improved = worker.judge(prog.source, value, phase)
        self.improved = self.improved or improved
        worker.candidate(improved)


class Worker(AgentSession):
    """One task worked by the built-in agent: the shared session plus the search state."""

    def __init__(self, ctx: AgentContext, host: HostApi, extra: tuple[Mechanism, ...] = ()) -> None:
        super().__init__(ctx, host)
        self.brief = host.task()
        found = library.candidates(self.obs_space, self.act_space, self.brief,
                                   preferred=self.preferred_mechanisms(), extra=extra)
        self.mechanisms = found[: self.lp.planning.max_mechanisms]
        self.by_name = {m.name: m for m in found}
        self.programs: dict[str, Program] = {}
        """The program (mechanism and parameters) behind each scored source."""
        self.inline = self.lp.action.edit_granularity == "file"
        self.tried: dict[str, float] = {}
        self.tuned: set[str] = set()
        self.search: Search | None = None
        self.mech: Mechanism | None = None
        self.center_submit: int | None = None
        self.rounds = 0
        self.restarts = 0
        self.cycles = 0
        """Searches started so far (the next restart point is the next kept program)."""
        self.samples: list[Sample] = []
        """Trajectory windows read so far (for the layout inference), up to LAYOUT_STEPS steps."""
        self.digest: Digest | None = None
        """The last submit's feedback as read (None when refused)."""
        self.grow: tuple[list[Program], list[str]] | None = None

    # -- the session's hooks ----------------------------------------------------------------
    def observe(self, answer: SubmitAnswer) -> Observed:
        """Digest the submit's feedback folder: trajectory diagnoses, samples, output health."""
        if answer.submit_id is None:
            return Observed(None)
        folder = self.ctx.workspace / "feedback" / f"submit_{answer.submit_id:03d}"
        self.digest = read_submit(self.lp, folder, answer.summary)
        if sum(len(x.obs) for x in self.samples) < LAYOUT_STEPS:
            self.samples.extend(self.digest.samples)
        return Observed(self.digest.text_sha256, healthy=not self.digest.unhealthy_output)

    def classify(self, source: str, role: SubmitRole) -> EditKind:
        """By AST topology against the previous submit; back to the incumbent is a revert."""
        if self.incumbent is not None and source == self.incumbent.source and source != self.prev_source:
            return "revert"
        topo_prev = topology_hash(self.prev_source) if self.prev_source else None
        return "synthesis" if topo_prev != topology_hash(source) else "tuning"

    def precheck(self, source: str) -> list[str]:
        return static_problems(source, self.obs_space, self.act_space)

    # -- acting ---------------------------------------------------------------------------
    def send(self, prog: Program, indices: list[int], phase: str, note: str, *, role: SubmitRole,
             base: int | None = None, search_round: int | None = None) -> tuple[float | None, Digest | None]:
        """Submit one program (`AgentSession.submit`); its score and the feedback as read."""
        self.digest = None
        done = self.submit(prog.source, prog.mechanism, indices, phase=phase, note=note, role=role, base=base,
                           search_round=search_round)
        if done.answer is not None and done.answer.status == "ok":
            self.programs.setdefault(prog.source, prog)
        return done.value, self.digest

    # -- recovery ---------------------------------------------------------------------------
    def after_failure(self, value: float | None, prog: Program, phase: str, indices: list[int],
                      search_round: int | None = None) -> float | None:
        """`recovery.on_error_verdict` / `max_retries` after a charged failure; returns the final score.

        A program refused by the agent's own static checks was never charged: nothing to
        recover from (the next candidate comes anyway).
        """
        while value is None and self.last_verdict is not None:
            action = self.failed()
            if action == "retry" and self.room() > 0:
                failed = self.last_submit_id
                value, _ = self.send(prog, indices[: self.size(len(indices))], phase, "retry after a failure verdict",
                                     role="retry", base=failed, search_round=search_round)
                continue
            if action == "restructure" and self.search is not None and self.switch_mechanism():
                return None
            self.revert()
            return None
        if value is not None:
            self.recovered()
        return value

    def revert(self) -> None:
        """Back to the best program of the mechanism being tuned (`decisions.revert_target`):
        the search is re-centred on it with the same step and shape."""
        search, tuned = self.search, self.mech
        if search is None or tuned is None:
            return
        target = self.revert_target(tuned.name)
        if target is None:
            return
        prog = self.programs[target.source]
        mech = self.by_name.get(prog.mechanism)
        if mech is None or mech.dim == 0:
            return
        if mech.name != tuned.name:
            self.start_search(mech, np.asarray(prog.x), target.first_submit)
            return
        search.recenter(np.asarray(prog.x), keep_shape=True)
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
        phase: Phase = "synthesis" if "synthesis" in self.lp.planning.phases else "tuning"
        self.enter(phase)  # late mechanisms are raced within what tuning left, still spending this share
        progs = [render(mech, mech.defaults(), inline=self.inline) for mech in self.mechanisms]
        notes = [m.note for m in self.mechanisms]
        self.grow = (progs, notes) if "synthesis" in self.lp.planning.phases else None
        outcome = self.race(progs, phase, None, None, share="synthesis", notes=notes,
                            k=decisions.synthesis_size(self.lp, self.shares, self.remaining, self.lo, self.hi))
        self.grow = None
        late = [m for m in reach.informed(self.obs_space, self.act_space, layout.infer(self.samples), self.samples)
                if m.name not in {p.mechanism for p in progs}][: max(0, self.lp.planning.max_mechanisms - len(progs))]
        if late and self.grow is None and "synthesis" in self.lp.planning.phases:
            # found only once the synthesis share was spent: tried on what synthesis and tuning have left
            for mech in late:
                self.by_name.setdefault(mech.name, mech)
            late_progs = [render(m, m.defaults(), inline=self.inline) for m in late]
            late_out = self.race(late_progs, phase, None, None, share="tuning", notes=[m.note for m in late],
                                 k=decisions.synthesis_size(self.lp, self.shares, self.remaining, self.lo, self.hi))
            progs, outcome.values = progs + late_progs, outcome.values + late_out.values
        for prog, value in zip(progs, outcome.values):
            self.tried[prog.mechanism] = value
        self.progress.new_phase()

    def tuning(self) -> None:
        """CMA-ES rounds until the tuning share is spent or a plateau ends them.

        After a plateau and a confirmation round, tuning resumes the same search (its step
        and shape are what it has learned) while the incumbent's mechanism is the one it
        tunes; a new search starts at a restart point otherwise: the incumbent first, then
        the other kept programs of its mechanism in rank order (`memory.top_k_programs`).
        """
        resume = self.search is not None and self.incumbent is not None and self.mech is not None \
            and self.incumbent.mechanism == self.mech.name
        self.enter("tuning")
        if not resume:
            start = self.restart_point()
            if start is None:
                return  # nothing to tune (only parameter-free programs)
            rec, prog, mech = start
            self.start_search(mech, np.asarray(prog.x), rec.first_submit)
        while self.fits("tuning", self.size()):
            if not self.tuning_round():
                return

    def restart_point(self) -> tuple[ProgramResults, Program, Mechanism] | None:
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
        assert search is not None and mech is not None  # tuning runs on a started search
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

    def race(self, progs: list[Program], phase: str, base: int | None, round_id: int | None, *, share: Phase,
             notes: list[str], k: int | None = None) -> "Round":
        """Evaluate one round of candidates on shared ids: screening, then the survivors' full evaluation.

        Without racing (`decisions.screen_size` = the full size) each candidate is judged as
        soon as it is scored, and a plateau or a restructure can end the round early.
        """
        k = self.size() if not k else k
        if k == 0:
            raise Stop("budget_spent" if self.shares.reserve == 0 else "finished_early")
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
            if screen and not self.fits(share, n):
                break
            value, digest = self.send(prog, ids[:n], phase, note, role="candidate", base=base,
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
                if not self.fits(share, m):
                    break
                full[j], _ = self.send(progs[j], ids[ks:ks + m], phase, "full evaluation of a screened candidate",
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

    def rank_fitness(self, progs: list[Program], screen: list[float | None], full: dict[int, float | None],
                     ids: set[int]) -> list[float]:
        """Search fitness of a raced round: fully evaluated candidates by their full mean, above
        the screened-out ones by their screening mean; failures last (only the order matters)."""
        keyed: list[tuple[int, float, int]] = []
        for j, prog in enumerate(progs[: len(screen)]):
            rec, first = self.results.get(prog.source), screen[j]
            if j in full and full[j] is not None and rec is not None:
                keyed.append((2, rec.mean(ids) or -np.inf, j))
            elif first is not None:
                keyed.append((1, first, j))
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
        assert self.search is not None  # plateaus are acted on in tuning
        sigma = self.search.sigma * WIDEN
        self.revert()  # may start a search on another mechanism: widen the one it leaves
        search = self.search
        assert search is not None
        search.recenter(search.center, sigma)
        return True

    # -- driver -------------------------------------------------------------------------
    def body(self) -> StopReason:
        """Synthesis, then tuning and confirmation rounds while the tuning share lasts, then the best last."""
        phases = self.lp.planning.phases
        if "synthesis" not in phases:
            self.mechanisms = self.mechanisms[:1]  # start from the library's first guess
        self.synthesis()
        while "tuning" in phases:
            before = self.spent["tuning"]
            self.tuning()
            if "confirmation" in phases:
                self.confirmation_round()
            if not self.fits("tuning", self.size()) or self.spent["tuning"] == before:
                break
        if "confirmation" in phases and not self.spent["confirmation"]:
            self.confirmation_round()
        self.final()
        return "budget_spent"
