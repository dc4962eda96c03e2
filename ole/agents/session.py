"""One task worked by a host agent: the bookkeeping every agent shares.

A host agent only makes the next edit (the built-in agent from its mechanism library and
CMA-ES, an LLM agent by prompting a model). Everything around an edit is owned here,
once, for every agent, and decided through `ole.agents.decisions`:

- **submit**: the clock check, the static check, writing `system/policy.py`, the submit,
  the budget and phase-share bookkeeping, the results, the trace record;
- **judge**: a candidate's score and the verification test (with its re-test and
  reference run), the counters it moves, the finish-early decision;
- **recover**: the rung of the error ladder after a charged failure, the revert target;
- **confirm**: the re-test of the kept programs on fresh ids, then the best program
  last with what is left;
- **finish**: the fallback submit of a run with no ok submit, the best program last,
  `/finish`;
- **lessons**: the cross-task lesson store and the lesson written at the end.

`AgentSession.run` is a template method (SB3's `learn()` calls `_on_step()`): it runs the agent's
loop body `body` until the run stops, then finishes the run and writes the lesson the same
way for every agent. An agent implements `body` (its edits, with these methods), says which
planning phase it is in (`enter`: every submit spends that phase's share), and answers the
hooks `observe` (reading a submit's feedback), `classify` (the edit kind of a submit the
session makes itself), `precheck` (its static check), `fallback` (a known-valid program, when
it has one) and `result` (its `AgentResult`). What differed between agents is Loop Policy
behaviour decided in `decisions` (`stopping.best_last`, `recovery.max_rejects`). So a
loop-policy field has one meaning whatever agent reads it
(`tests/ole/test_loop_policy_sensitivity.py` runs the field by field test on both).
"""
from __future__ import annotations

import abc
import time
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from ole.agents import decisions
from ole.agents.base import AgentContext, AgentResult
from ole.agents.client import HostError, SubmitAnswer
from ole.agents.decisions import ErrorAction, Phase, ProgramResults
from ole.agents.edits import diff_lines
from ole.lessons import Lesson, LessonStore, signature
from ole.loop_policy import PHASES
from ole.trace import EditKind, Iteration, SubmitRole

NO_DIGEST = "sha256:" + "0" * 64
"""Observation digest of the first submit (nothing read yet)."""
NOTE_CHARS = 300
"""A trace note is cut here."""

StopReason = Literal["budget_spent", "finished_early", "wall_time", "llm_cap", "error"]


class Stop(Exception):
    """The run must end now (budget, wall time, finish decision, closed run, a host that refuses
    every submit); caught by `AgentSession.run`."""

    def __init__(self, reason: StopReason) -> None:
        super().__init__(reason)
        self.reason: StopReason = reason


class HostApi(Protocol):
    """What the session needs of the protocol client (`ole.agents.client.HostClient`, or a stand-in)."""

    def info(self) -> dict[str, Any]: ...

    def task(self) -> str: ...

    def submit(self, env_instances: list[int]) -> SubmitAnswer: ...

    def finish(self) -> int: ...


@dataclass(frozen=True)
class Observed:
    """What an agent read from one submit's feedback (`AgentSession.observe`)."""

    digest: str | None
    """sha256 of the feedback text read (the next record's observation digest); None: nothing read."""
    healthy: bool = True
    """False when the program's output warned (`observation.read_stdout`): it never becomes the incumbent."""


@dataclass(frozen=True)
class Submitted:
    """What one submit came to."""

    answer: SubmitAnswer | None
    """The host's answer; None when the agent's own static check refused the program."""
    value: float | None
    """The submit's score (`decisions.submit_score`); None on a failure verdict or a refusal."""


class AgentSession(abc.ABC):
    """All state of one task, and the steps every agent takes the same way.

    Subclasses make the edits; the hooks below say how they read feedback and name edits.
    """

    verification_phase: str | None = None
    """Trace phase of re-tests and reference runs; None: the phase of the candidate re-tested."""

    def __init__(self, ctx: AgentContext, host: HostApi) -> None:
        self.ctx, self.host = ctx, host
        self.info = host.info()
        self.lp = decisions.for_budget(ctx.bundle.loop_policy, int(self.info["episode_budget"]))
        meta = self.info["env_meta"]
        self.obs_space, self.act_space = meta["obs_space"], meta["action_space"]
        self.remaining = int(self.info["state"]["remaining_budget"])
        self.lo = int(self.info.get("min_episodes_per_submit", 1))
        self.hi = int(self.info.get("max_episodes_per_submit", self.remaining))
        self.shares = decisions.phase_budget(self.lp, self.remaining)
        self.indices = decisions.IndexPlan(self.lp, int(meta.get("n_env_instances", 1)), ctx.condition.seed)
        self.sig = signature(self.obs_space, self.act_space)
        self.store = LessonStore(ctx.lessons_path) if ctx.lessons_path and self.lp.memory.carry_lessons else None
        self.learns = True
        """Whether this run's lesson is written (a replayed run is not new experience)."""
        self.results: dict[str, ProgramResults] = {}
        """Every program with an ok submit, by source."""
        self.submitted: dict[str, int] = {}
        """Program source -> its first submit id (failed programs included)."""
        self.incumbent: ProgramResults | None = None
        self.best_value: float | None = None  # progress lines only; the incumbent also needs the verification test
        self.progress = decisions.Progress()
        self.edit_lines: list[str] = []
        """One line per candidate (parallel to `progress.edits`), read through `edit_log`."""
        self.spent: dict[str, int] = {p: 0 for p in PHASES}
        self.phase: Phase = self.lp.planning.phases[0]
        """The planning phase the agent is in (`enter`): every submit spends this phase's share."""
        self.prev_source = ""
        self.last_digest = NO_DIGEST
        self.last_submitted: str | None = None
        self.last_verdict: str | None = None
        self.last_submit_id: int | None = None
        self.unhealthy = False
        self.rejects = 0
        """Phase-1 rejects (HTTP 400, nothing charged) in a row."""
        self.n_iter = 0
        self.t0 = time.monotonic()

    # ---- the template -----------------------------------------------------------------------
    def run(self) -> AgentResult:
        """Work the task: the agent's loop body until the run stops (a `Stop`, or `body` returning
        its reason), then `finish` and the lesson, the same for every agent."""
        try:
            reason = self.body()
        except Stop as stop:
            reason = stop.reason
        self.finish(reason)
        self.write_lesson()
        return self.result(reason)

    @abc.abstractmethod
    def body(self) -> StopReason:
        """The agent's loop body: edits and submits until the run should stop; the stop reason
        (raising `Stop` ends it too). Finishing the run is `run`'s, not the agent's."""

    def result(self, reason: StopReason) -> AgentResult:
        """What the agent reports for the run (an LLM agent adds its usage and files)."""
        return AgentResult(finish_reason=reason)

    def enter(self, phase: Phase) -> None:
        """The agent is now in planning phase `phase`: its submits spend that phase's share."""
        self.phase = phase

    # ---- hooks ------------------------------------------------------------------------------
    @abc.abstractmethod
    def observe(self, answer: SubmitAnswer) -> Observed:
        """Read the feedback of a submit the host answered (each agent reads it its own way)."""

    @abc.abstractmethod
    def classify(self, source: str, role: SubmitRole) -> EditKind:
        """The edit kind of a submit the session makes on its own (re-test, reference, confirmation)."""

    def precheck(self, source: str) -> list[str]:
        """Problems the agent's static check finds (read only under `verification.static_checks`)."""
        return []

    def fallback(self) -> tuple[str, str] | None:
        """(source, mechanism) of a known-valid program for a run with no ok submit; None: none."""
        return None

    # ---- budget and clock -------------------------------------------------------------------
    def room(self, want: int | None = None) -> int:
        """Episodes the next submit may take (`decisions.submit_size`); 0 when none may be spent."""
        return decisions.submit_size(self.lp, self.remaining, self.lo, self.hi, want)

    def size(self, want: int | None = None) -> int:
        """`room`, ending the run when nothing more may be spent."""
        k = self.room(want)
        if k == 0:
            raise Stop("budget_spent" if self.shares.reserve == 0 else "finished_early")
        return k

    def fits(self, share: Phase, k: int) -> bool:
        """Whether a k-episode submit stays inside the phase's share (`decisions.fits`)."""
        return decisions.fits(self.shares, share, self.spent, k)

    def check_stop(self) -> None:
        """End the run once `budget.wall_time_s` has passed, or once the host has refused
        `recovery.max_rejects` submits in a row (`decisions.host_disagrees`)."""
        if time.monotonic() - self.t0 > self.lp.budget.wall_time_s:
            raise Stop("wall_time")
        if decisions.host_disagrees(self.lp, self.rejects):
            self.ctx.progress(f"stopping: the host refused {self.rejects} submits in a row")
            raise Stop("error")

    # ---- submit -----------------------------------------------------------------------------
    def submit(self, source: str, mechanism: str, indices: list[int], *, phase: str, note: str,
               role: SubmitRole, kind: EditKind | None = None, base: int | None = None,
               search_round: int | None = None, cost: tuple[int, int, float] = (0, 0, 0.0),
               timed: bool = True) -> Submitted:
        """Check, write and submit one program, record it and return what it came to.

        `kind` defaults to `classify`; `cost` is the LLM usage (calls, tokens, usd) behind
        the submit; `timed=False` skips `check_stop` (a final guarantee submit). The episodes
        charged come off the share of the phase the agent is in (`enter`).
        """
        if timed:
            self.check_stop()
        start = time.monotonic()
        problems = self.precheck(source) if self.lp.verification.static_checks else []
        if problems:
            self._record(phase, source, mechanism, None, start, f"static check refused: {problems[0]}", (),
                         role=role, kind="none", base=base, search_round=search_round, cost=cost)
            self.last_verdict = None
            return Submitted(None, None)
        kind = kind or self.classify(source, role)
        self._write(source)
        try:
            answer = self.host.submit(indices)
        except HostError as err:
            if "closed" in str(err):
                raise Stop("budget_spent") from err
            self.ctx.progress(f"stopping: the submit failed: {err}")  # the reason `ole agent work` reports
            raise Stop("error") from err
        self.remaining = int(answer.summary.get("remaining_budget", self.remaining - answer.charged))
        self.spent[self.phase] += answer.charged
        self.rejects = self.rejects + 1 if answer.http_status == 400 else 0
        seen = self.observe(answer)
        value = None
        if answer.status == "ok":
            rec = self.results.setdefault(source, ProgramResults(source, mechanism))
            value = rec.add(self.lp, answer.summary, indices, answer.submit_id)
        self.unhealthy = not seen.healthy
        self._record(phase, source, mechanism, answer, start, note, indices, role=role, kind=kind, base=base,
                     search_round=search_round, cost=cost)
        if seen.digest is not None:
            self.last_digest = seen.digest
        if value is not None:
            self.best_value = value if self.best_value is None else max(self.best_value, value)
        self._progress_line(phase, mechanism, answer, value)
        if answer.submit_id is not None:
            self.submitted.setdefault(source, int(answer.submit_id))
        self.last_submitted = source
        self.last_verdict, self.last_submit_id = answer.status, answer.submit_id
        return Submitted(answer, value)

    def _write(self, source: str) -> None:
        system = self.ctx.workspace / "system"
        system.mkdir(parents=True, exist_ok=True)
        tmp = system / ".policy.py.tmp"
        tmp.write_text(source)
        tmp.replace(system / "policy.py")

    def _record(self, phase: str, source: str, mechanism: str, answer: SubmitAnswer | None, start: float,
                note: str, indices: list[int] | tuple[()], *, role: SubmitRole, kind: EditKind,
                base: int | None, search_round: int | None, cost: tuple[int, int, float]) -> None:
        summary = answer.summary if answer is not None else {}
        returns = summary.get("returns")
        calls, tokens, usd = cost
        self.ctx.record(Iteration(
            index=self.n_iter, phase=phase, observation_digest=self.last_digest, edit_kind=kind,
            diff_lines=diff_lines(self.prev_source, source) if answer is not None else 0, mechanism=mechanism,
            submitted_indices=tuple(indices), submit_id=None if answer is None else answer.submit_id,
            verdict=None if answer is None else answer.status,
            returns=tuple(float(r) for r in returns) if returns else None,
            mean_return=summary.get("mean_return"), episodes_charged=0 if answer is None else answer.charged,
            wall_s=round(time.monotonic() - start, 3), llm_calls=int(calls), tokens=int(tokens), usd=float(usd),
            note=note[:NOTE_CHARS], role=role, base_submit=base, search_round=search_round))
        self.n_iter += 1
        if answer is not None:
            self.prev_source = source

    def _progress_line(self, phase: str, mechanism: str, answer: SubmitAnswer, value: float | None) -> None:
        self.ctx.progress(f"[{phase}] submit {answer.submit_id} {mechanism} {answer.status} "
                          f"mean return {_fmt(answer.summary.get('mean_return'))}, score (mean) {_fmt(value)}, "
                          f"best score so far {_fmt(self.best_value)}; {self.remaining} episodes left")

    # ---- kept programs ----------------------------------------------------------------------
    def first_submit(self, source: str | None) -> int | None:
        """The first ok submit of a program (None when it has none)."""
        rec = self.results.get(source) if source is not None else None
        return rec.first_submit if rec else None

    def top(self) -> list[ProgramResults]:
        """The kept programs (`memory.top_k_programs`), best first."""
        return decisions.ranked(list(self.results.values()), self.lp.memory.top_k_programs)

    def best(self) -> ProgramResults | None:
        """The incumbent, else the best kept program."""
        top = self.top()
        return self.incumbent or (top[0] if top else None)

    def revert_target(self, mechanism: str | None) -> ProgramResults | None:
        """Where a revert goes (`decisions.revert_target`)."""
        return decisions.revert_target(self.incumbent, list(self.results.values()), mechanism)

    # ---- judge ------------------------------------------------------------------------------
    def judge(self, source: str, value: float | None, phase: str) -> bool:
        """Verification: does the candidate replace the incumbent? Re-tests when configured.

        A candidate without a score (failed, refused, screened out: `value` None) or whose
        output warned never does; otherwise it must pass `decisions.beats` against the
        incumbent, and again after its re-test.
        """
        if value is None or self.unhealthy:
            return False
        cand = self.results[source]
        if not decisions.beats(self.lp, cand, self.incumbent):
            return False
        if self.incumbent is not None and self.lp.verification.retest_episodes > 0:
            if not self.retest(cand, phase):
                return False
        self.incumbent = cand
        return True

    def retest(self, cand: ProgramResults, phase: str) -> bool:
        """Re-run an apparent improvement on fresh ids (and the incumbent on the same ids when
        matched); it stands only if it still beats the incumbent on all the evidence."""
        k = self.room(self.lp.verification.retest_episodes)
        if k == 0:
            return True  # nothing left to re-test with: the first result is all the evidence there is
        idx = self.indices.retest(k)
        label = self.verification_phase or phase
        again = self.submit(cand.source, cand.mechanism, idx, phase=label, note="retest of an apparent improvement",
                            role="retest", base=self.first_submit(cand.source))
        if again.value is None:
            return False
        inc = self.incumbent
        assert inc is not None  # judge re-tests only against an incumbent
        if self.lp.verification.matched_comparison and self.room(k) == k:
            self.submit(inc.source, inc.mechanism, idx, phase=label, note="incumbent on the retest indices",
                        role="reference", base=inc.first_submit)
        return decisions.beats(self.lp, cand, inc)

    def candidate(self, improved: bool, line: str = "") -> None:
        """Count one candidate's outcome (and its edit-log line); end the run when `should_finish`."""
        self.progress.candidate(improved)
        self.edit_lines.append(line)
        if decisions.should_finish(self.lp, self.progress, self.remaining):
            raise Stop("finished_early")

    def edit_log(self) -> tuple[str, ...]:
        """The edit-log lines of the last `memory.edit_log_size` candidates (`decisions.edit_window`)."""
        return tuple(line for line in decisions.edit_window(self.lp, self.edit_lines) if line)

    # ---- recover ----------------------------------------------------------------------------
    def failed(self) -> ErrorAction:
        """Count a charged failure verdict; the error ladder's action for it (`decisions.error_action`)."""
        self.progress.failed()
        return decisions.error_action(self.lp, self.progress.failures)

    def recovered(self) -> None:
        """A scored submit ends a run of failures."""
        self.progress.ok()

    # ---- confirm and finish -----------------------------------------------------------------
    def confirmation_round(self) -> None:
        """Re-test the kept programs (all but the best) on fresh ids, within the confirmation share."""
        self.enter("confirmation")
        for rec in self.top()[1:]:
            k = self.size()
            if not self.fits("confirmation", k):
                return
            self.submit(rec.source, rec.mechanism, self.indices.retest(k), phase="confirmation",
                        note="re-test a kept program", role="confirm", base=rec.first_submit)

    def final(self) -> None:
        """Spend what is left on the best program, so the last submit is the best one."""
        self.enter("confirmation")
        best = self.best()
        if best is None:
            return
        while self.room() > 0:
            if self.lp.stopping.mode == "finish_early" and self.last_submitted == best.source:
                break
            self.submit(best.source, best.mechanism, self.indices.retest(self.size()), phase="confirmation",
                        note="confirm the best program last", role="confirm", base=best.first_submit)

    def finish(self, reason: StopReason) -> None:
        """End the run: a run with no ok submit gets one small submit of the `fallback` program;
        a run stopped early re-submits its best program when that was not its last submit
        (`decisions.resubmit_best`, `stopping.best_last`); then `/finish` while budget remains."""
        if not self.results and (fb := self.fallback()) is not None and self.remaining >= self.lo:
            self._final_submit(*fb, phase="recovery", note="ensure the run has a valid submit", role="candidate",
                               kind="synthesis", timed=False)  # a run is never left without a score
        best = self.best()
        if best is not None and decisions.resubmit_best(self.lp, reason, self.last_submitted == best.source) \
                and self.remaining >= self.lo:
            self._final_submit(best.source, best.mechanism, phase="confirmation", note="best program last",
                               role="confirm", base=best.first_submit)
        if self.remaining > 0:
            try:
                self.host.finish()
            except HostError:
                pass  # the runner finishes a run the agent left open

    def _final_submit(self, source: str, mechanism: str, *, phase: str, note: str, role: SubmitRole,
                      kind: EditKind | None = None, base: int | None = None, timed: bool = True) -> None:
        """One `lo`-episode submit at the end of the run; a stop (the clock, a closed run) skips it."""
        try:
            self.submit(source, mechanism, self.indices.pick(self.lo), phase=phase, note=note, role=role,
                        kind=kind, base=base, timed=timed)
        except Stop:
            pass  # the run is over already: nothing to keep good

    # ---- lessons ----------------------------------------------------------------------------
    def preferred_mechanisms(self) -> list[str]:
        """Mechanisms that won earlier tasks of this interface, most often first (none without a store)."""
        return self.store.ranking(self.sig) if self.store else []

    def write_lesson(self) -> None:
        """Record the best program's mechanism for this interface (`memory.carry_lessons`)."""
        best = self.best()
        if self.store is None or best is None or not self.learns:
            return
        self.store.add(Lesson(self.sig, best.mechanism, self.ctx.task.env, float(best.mean())))  # type: ignore[arg-type]


def _fmt(v: float | None) -> str:
    return "-" if v is None else f"{v:.4g}"
