"""The LLM coding agent: a language model writes `system/policy.py`, the loop policy runs the loop.

The model only proposes programs. Everything else -- which feedback it sees, which
phase it is in, what is kept and reverted to, how many episodes a submit spends, when
an improvement is trusted, what happens after a failure, when to stop -- is decided
here from the bundle's loop policy, so two bundles give two different runs with the
same model. The agent works only through the HTTP protocol and workspace files.

A run is never lost to the model: unusable answers get repair prompts, then the best
known program (or a schema-derived baseline) is submitted instead; a spent LLM cap or
an unreachable model ends the loop cleanly and the runner finishes the run.
"""
from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path

from ole.agents import decisions
from ole.agents.base import AgentContext, AgentResult, AgentUsage, HostAgent
from ole.agents.client import HostClient, HostError, SubmitAnswer
from ole.agents.edits import (EditRejected, Proposal, diff_lines, edit_kind, parse_answer, scope_problem,
                              static_problems)
from ole.agents.memory import Kept, ProgramMemory
from ole.agents.prompts import BASELINE_POLICY, Turn, render_feedback, repair_prompt, system_prompt, user_prompt
from ole.lessons import Lesson, LessonStore, signature
from ole.llm import Caps, LLMCapReached, LLMClient, LLMError
from ole.trace import Iteration

CALL_LOG = "llm_calls.jsonl"
"""Per-run record of every model call, under the agent log dir; `--model replay:<it>` replays the run."""
LESSONS_SEEN = "lessons_seen.json"
"""The lesson lines a run showed its model, next to the call log; a replay shows these, not today's file."""
MAX_ANSWER_TOKENS = 4096
"""Completion tokens asked for per call (a full policy file fits comfortably)."""
MAX_REJECTS = 3
"""Consecutive Phase-1 rejects (nothing charged) after which the agent stops: the host disagrees with it."""
LESSONS_SHOWN = 5
"""Cross-task lessons put in a prompt."""
BASELINE_MECHANISM = "schema baseline"
"""Mechanism name of the fallback program derived from the action schema."""


class LLMAgent(HostAgent):
    """Host agent backed by a language model; `model` is any litellm string, `scripted:` or `replay:`."""

    name = "llm"

    def __init__(self, model: str, *, temperature: float = 0.0, max_answer_tokens: int = MAX_ANSWER_TOKENS,
                 timeout_s: float | None = None, retries: int | None = None, api_base: str | None = None) -> None:
        if not model:
            raise ValueError("LLMAgent needs a model string, e.g. openai/gpt-4o-mini or scripted:<file>")
        self.model = model
        self.temperature = temperature
        self.max_answer_tokens = max_answer_tokens
        self.client_options = {k: v for k, v in (("timeout_s", timeout_s), ("retries", retries)) if v is not None}
        self.api_base = api_base

    def make_client(self, ctx: AgentContext) -> LLMClient:
        """The model client with the loop policy's caps, logging every call to the run's call log."""
        bud = ctx.bundle.loop_policy.budget
        caps = Caps(calls=bud.max_llm_calls, tokens=bud.max_tokens, usd=bud.max_usd)
        params = {"api_base": self.api_base} if self.api_base else {}
        return LLMClient.from_model_string(self.model, caps=caps, log_path=ctx.log_dir / CALL_LOG,
                                           params=params, **self.client_options)

    def work(self, ctx: AgentContext) -> AgentResult:
        ctx.log_dir.mkdir(parents=True, exist_ok=True)
        session = _Session(self, ctx, self.make_client(ctx))
        return session.run()


class _Session:
    """One task worked by the LLM agent; all state of the loop lives here.

    What each loop-policy field decides comes from `ole.agents.decisions` (shared with the
    built-in agent); the session carries it out by prompting the model.
    """

    def __init__(self, agent: LLMAgent, ctx: AgentContext, llm: LLMClient) -> None:
        self.agent, self.ctx, self.llm = agent, ctx, llm
        self.pol = ctx.bundle.loop_policy
        self.host = HostClient(ctx.url)
        self.system_dir = ctx.workspace / "system"
        self.started = time.monotonic()
        self.iterations = 0
        self.phase_index = 0
        self.progress = decisions.Progress()
        self.spent = {"synthesis": 0, "tuning": 0, "confirmation": 0}
        self.rounds = 0
        self.rejects = 0
        self.bold = False
        self.force_synthesis = False
        self.mechanisms: list[str] = []
        self.current: str | None = None
        self.feedback = ""
        self.digest = "sha256:" + hashlib.sha256(b"").hexdigest()
        self.last_edit = ""
        self.recovering = False
        self.ok_submits = 0
        self.submitted: dict[str, int] = {}
        """Program source -> its first submit id (failed programs included), for `base_submit`."""

    # ---- the loop ----------------------------------------------------------------------------
    def run(self) -> AgentResult:
        info = self.host.info()
        self.budget = int(info["episode_budget"])
        self.pol = decisions.for_budget(self.pol, self.budget)
        self.remaining = int(info["state"]["remaining_budget"])
        self.min_per = int(info.get("min_episodes_per_submit", 1))
        self.max_per = int(info.get("max_episodes_per_submit", self.budget))
        self.shares = decisions.phase_budget(self.pol, self.remaining)
        self.memory = ProgramMemory(self.pol, int(info["env_meta"]["n_env_instances"]), self.ctx.condition.seed)
        self.signature = signature(info["env_meta"].get("obs_space", {}), info["env_meta"].get("action_space", {}))
        self.system = system_prompt(self.host.task(), info, self.pol)
        self.lessons = self._read_lessons()
        reason = self._loop()
        reason = self._ensure_scored(reason)
        if reason == "finished_early" and not self._finalized():
            self.host.finish()
        self._write_lesson()
        u = self.llm.usage
        return AgentResult(reason, AgentUsage(u.calls, u.tokens, u.usd),
                           extras={"llm_calls": CALL_LOG, "lessons_seen": LESSONS_SEEN})

    def _loop(self) -> str:
        try:
            while True:
                reason = self._stop_reason()
                if reason:
                    return reason
                self._iterate()
        except LLMCapReached as exc:
            self.ctx.progress(f"llm agent: {exc.message}; stopping")
            return "llm_cap"
        except LLMError as exc:
            self.ctx.progress(f"llm agent: model unavailable ({exc.message}); stopping")
            return "error"
        except HostError as exc:
            self.ctx.progress(f"llm agent: host said {exc.message}; stopping")
            return "budget_spent" if self._finalized() else "error"

    def _stop_reason(self) -> str | None:
        if self.remaining <= 0:
            return "budget_spent"
        if time.monotonic() - self.started >= self.pol.budget.wall_time_s:
            return "wall_time"
        if self.rejects >= MAX_REJECTS:
            return "error"
        if decisions.should_finish(self.pol, self.progress, self.remaining):
            return "finished_early"
        if self._size() == 0:  # what is left cannot be spent (the reserve, or less than one submit)
            return "finished_early" if self.pol.stopping.mode == "finish_early" else "budget_spent"
        return None

    def _finalized(self) -> bool:
        try:
            return bool(self.host.info().get("state", {}).get("is_finalized"))
        except HostError:
            return False

    # ---- one iteration -----------------------------------------------------------------------
    def _iterate(self) -> None:
        phase = self._phase()
        if phase == "confirmation":
            self._confirm()
            return
        synth = phase == "synthesis" or self.force_synthesis or self.current is None and not self.memory.kept
        turn_phase = "recovery" if self.recovering else ("synthesis" if synth else "tuning")
        turn = self._turn(turn_phase)
        calls0 = self._usage()
        proposal, why = self._ask(turn)
        if proposal is None:
            source, mechanism, kind, note = self._fallback(why)
            self._submit(source, self._indices(), turn_phase, kind, note, mechanism, calls0, role="candidate",
                         base=self.memory.first_submit(source))
            self.progress.candidate(False)  # a fallback is a non-improving candidate: patience and plateaus see it
            self._on_plateau()
            return
        if turn_phase == "synthesis":
            self.force_synthesis = False
            self.mechanisms.append(proposal.mechanism or f"mechanism {len(self.mechanisms) + 1}")
        mechanism = proposal.mechanism or self._mechanism_of(turn.program)
        kind = edit_kind(turn.program, proposal.source)
        base = None if turn_phase == "synthesis" and kind == "synthesis" else self._base_of(turn.program)
        search_round = None
        if turn_phase == "tuning":
            search_round, self.rounds = self.rounds, self.rounds + 1
        if turn_phase == "synthesis":
            size = decisions.synthesis_size(self.pol, self.shares, self.remaining, self.min_per, self.max_per)
            ids = self.memory.indices(max(self.min_per, size))
        else:
            ids = self._indices()
        ks = decisions.screen_size(self.pol, len(ids))
        answer = self._submit(proposal.source, ids[:ks], turn_phase, kind, f"{proposal.form} edit",
                              mechanism, calls0, base_program=turn.program,
                              role="retry" if turn_phase == "recovery" else "candidate", base=base,
                              search_round=search_round)
        if answer is None:
            return
        survived = True
        if ks < len(ids) and answer.status == "ok":
            inc = self.memory.incumbent
            score = self.memory.score_of(answer.summary)
            survived = bool(decisions.survivors([score], inc.mean(set(ids[:ks])) if inc else None))
            if survived and self._size(len(ids) - ks) > 0:
                self._submit(proposal.source, ids[ks:ks + self._size(len(ids) - ks)], turn_phase, "none",
                             "full evaluation of a screened candidate", mechanism, self._usage(), role="retest",
                             base=self.memory.first_submit(proposal.source), search_round=search_round)
        self._judge(proposal.source, mechanism, answer, screened_out=not survived)

    def _base_of(self, program: str | None) -> int | None:
        """Submit id of the program an edit was made to (also when it failed and is not kept)."""
        return self.submitted.get(program) if program is not None else None

    def _spent_phase(self) -> str:
        phases = self.pol.planning.phases or ("tuning",)
        return phases[min(self.phase_index, len(phases) - 1)]

    def _phase(self) -> str:
        """The current phase of planning.phases; advances when a phase's share is spent or it plateaued."""
        phases = self.pol.planning.phases or ("tuning",)
        while self.phase_index < len(phases) - 1 and self._phase_over(phases[self.phase_index]):
            self.phase_index += 1
            self.progress.new_phase()
            self.bold = False
        return phases[self.phase_index]

    def _phase_over(self, name: str) -> bool:
        if not self.memory.kept:
            return False  # never leave synthesis (or tuning) without a single working program
        if decisions.plateau_action(self.pol, self.progress) == "next_phase":
            return True
        k = max(1, self._size())
        if name == "synthesis":
            return (not decisions.fits(self.shares, "synthesis", self.spent, k)
                    or len(self.mechanisms) >= self.pol.planning.max_mechanisms)
        if name == "tuning":
            return not decisions.fits(self.shares, "tuning", self.spent, k)
        return False

    def _turn(self, phase: str) -> Turn:
        mem = self.memory
        extra = ()
        if phase == "recovery":
            extra = (f"Failed attempts in a row: {self.progress.failures}.",)
        return Turn(phase=phase, granularity=self.pol.action.edit_granularity, program=self.current,
                    feedback=self.feedback, step_size=self.pol.action.step_size, remaining_episodes=self.remaining,
                    tried_mechanisms=tuple(self.mechanisms), best=mem.best_lines(), edit_log=mem.log_lines(),
                    lessons=self.lessons, bold=self.bold, extra=extra)

    def _ask(self, turn: Turn) -> tuple[Proposal | None, str]:
        """Model answer -> checked program; an unusable answer is a failed attempt, repaired up to
        `recovery.max_retries` times before the agent escalates (to the best known program)."""
        messages = [{"role": "system", "content": self.system}, {"role": "user", "content": user_prompt(turn)}]
        why = ""
        for _ in range(self.pol.recovery.max_retries + 1):
            comp = self.llm.complete(messages, temperature=self.agent.temperature,
                                     max_tokens=self.agent.max_answer_tokens, seed=self.ctx.condition.seed)
            try:
                return self._check(comp.text, turn, comp.finish_reason == "length"), ""
            except EditRejected as exc:
                why = str(exc)
            granularity = "file" if turn.phase == "synthesis" else turn.granularity
            repair = repair_prompt(why, granularity, turn.program is not None)
            messages = messages + [{"role": "assistant", "content": comp.text[:8000]},
                                   {"role": "user", "content": repair}]
        return None, why

    def _check(self, text: str, turn: Turn, truncated: bool) -> Proposal:
        proposal = parse_answer(text, turn.program, truncated=truncated)
        if self.pol.verification.static_checks:
            problems = static_problems(proposal.source)
            if problems:
                raise EditRejected("; ".join(problems))
        if turn.program is not None and proposal.source == turn.program:
            raise EditRejected("the program is unchanged; propose a different program")
        if turn.phase == "tuning" and turn.program is not None:
            try:
                problem = scope_problem(turn.program, proposal.source, turn.granularity)  # type: ignore[arg-type]
            except SyntaxError:
                problem = None  # static checks are off: the host's verdict will say it
            if problem:
                raise EditRejected(problem)
        return proposal

    def _fallback(self, why: str) -> tuple[str, str, str, str]:
        """(source, mechanism, edit kind, note) submitted instead of an unusable answer."""
        best = self.memory.revert_target(self._mechanism_of(self.current))
        note = f"model output unusable after {self.pol.recovery.max_retries + 1} tries ({why[:120]})"
        if best is not None:
            return best.source, best.mechanism, "revert", note + "; resubmitting the best program"
        return BASELINE_POLICY, BASELINE_MECHANISM, "synthesis", note + "; submitting the schema baseline"

    # ---- submits and verdicts ----------------------------------------------------------------
    def _indices(self, k: int | None = None, role: str = "candidate") -> list[int]:
        return self.memory.indices(max(self.min_per, self._size(k)), role)

    def _size(self, want: int | None = None) -> int:
        return decisions.submit_size(self.pol, self.remaining, self.min_per, self.max_per, want)

    def _submit(self, source: str, indices: list[int], phase: str, kind: str, note: str, mechanism: str | None,
                calls0: tuple[int, int, float], *, role: str, base: int | None = None,
                base_program: str | None = None, search_round: int | None = None) -> SubmitAnswer | None:
        t0 = time.monotonic()
        read_digest = self.digest
        previous = self._read_policy()
        self._write_policy(source)
        answer = self.host.submit(indices)
        info_state = self.host.info().get("state", {})
        self.remaining = int(info_state.get("remaining_budget", self.remaining - answer.charged))
        self.spent[self._spent_phase()] += answer.charged
        self.feedback = self._feedback(answer)
        self.digest = "sha256:" + hashlib.sha256(self.feedback.encode()).hexdigest()
        calls, tokens, usd = (a - b for a, b in zip(self._usage(), calls0))
        returns = answer.summary.get("returns") if "returns" in self.pol.observation.summary_fields else None
        self.ctx.record(Iteration(
            index=self.iterations, phase=phase, observation_digest=read_digest,
            edit_kind=kind,  # type: ignore[arg-type]
            diff_lines=diff_lines(previous, source), mechanism=mechanism, submitted_indices=tuple(indices),
            submit_id=answer.submit_id, verdict=answer.status,
            returns=tuple(float(r) for r in returns) if isinstance(returns, list) and answer.status == "ok" else None,
            mean_return=self.memory.score_of(answer.summary) if answer.status == "ok" else None,
            episodes_charged=answer.charged, wall_s=round(time.monotonic() - t0, 3), llm_calls=int(calls),
            tokens=int(tokens), usd=float(usd), note=note[:200], role=role, base_submit=base,  # type: ignore[arg-type]
            search_round=search_round))
        self.iterations += 1
        if answer.submit_id is not None:
            self.submitted.setdefault(source, int(answer.submit_id))
        self.last_edit = (f"submit {answer.submit_id} [{phase} phase] {kind} edit, "
                          f"{diff_lines(base_program, source)} lines changed")
        self.ctx.progress(f"llm agent: submit {answer.submit_id} {answer.status} "
                          f"(mean {answer.summary.get('mean_return')}, {self.remaining} episodes left)")
        if answer.http_status == 400:
            self.rejects += 1
            return None
        self.rejects = 0
        if answer.status == "ok":
            self.ok_submits += 1
            self.memory.add_result(source, mechanism or "?", answer)
        return answer

    def _judge(self, source: str, mechanism: str, answer: SubmitAnswer, *, screened_out: bool = False) -> None:
        """What the last candidate's verdict means: improvement, regression or failure."""
        if answer.status != "ok":
            self._on_error(source, answer.status)
            return
        self.progress.ok()
        self.recovering = False
        incumbent = self.memory.incumbent
        improved = not screened_out and self.memory.beats(source, incumbent)
        if improved and incumbent is not None and self.pol.verification.retest_episodes > 0 and self._size() > 0:
            improved = self._retest(source, mechanism, incumbent)
        outcome = "improved" if improved else "no improvement"
        self.memory.log(f"{self.last_edit}: mean {self.memory.mean(source):.4g}, {outcome}")
        self.progress.candidate(improved)
        if improved:
            self.memory.incumbent = self.memory.kept_for(source)
            self.current = source
            return
        self._on_plateau()
        action = decisions.regression_action(self.pol)
        if action == "keep":
            self.current = source
        elif action == "restructure" and self._restructure():
            self.current = source
        else:
            target = self.memory.revert_target(mechanism)
            self.current = target.source if target is not None else source

    def _retest(self, source: str, mechanism: str, incumbent: Kept) -> bool:
        """Re-run a candidate that beat the incumbent on fresh ids (and the incumbent too when matched)."""
        ver = self.pol.verification
        indices = self._indices(ver.retest_episodes, "retest")
        self._submit(source, indices, "verification", "none", "retest of an apparent improvement", mechanism,
                     self._usage(), role="retest", base=self.memory.first_submit(source))
        if ver.matched_comparison and self._size(len(indices)) == len(indices):
            self._submit(incumbent.source, indices, "verification", "revert", "incumbent on the retest episodes",
                         incumbent.mechanism, self._usage(), role="reference", base=incumbent.first_submit)
        return self.memory.beats(source, incumbent)

    def _on_error(self, source: str, status: str) -> None:
        self.progress.failed()
        self.progress.candidate(False)
        self.memory.log(f"{self.last_edit}: failed with {status}")
        action = decisions.error_action(self.pol, self.progress.failures)
        self.recovering = action == "retry"
        if action == "retry":
            self.current = source
            return
        if action == "restructure" and self._restructure():
            return
        target = self.memory.revert_target(self._mechanism_of(source))
        self.current = target.source if target else None

    def _restructure(self) -> bool:
        """Back to synthesis for an untried mechanism; False when `max_mechanisms` are all tried."""
        if len(self.mechanisms) < self.pol.planning.max_mechanisms:
            self.force_synthesis = True
            return True
        return False

    def _on_plateau(self) -> None:
        action = decisions.plateau_action(self.pol, self.progress)
        if action == "widen_search":
            self.bold = True
            self.progress.new_phase()
        elif action == "restructure":
            self._restructure()
            self.progress.new_phase()

    def _confirm(self) -> None:
        """Confirmation: re-run the kept programs on shared fresh ids; no model calls.

        Within the confirmation share each round re-tests every kept program once; after a
        round, tuning resumes while its share lasts (a restart from the best program);
        what is left beyond every share goes to the best program.
        """
        k = self._size()
        if decisions.fits(self.shares, "confirmation", self.spent, k):
            target, indices, last = self.memory.next_to_confirm(k)
            note = "confirmation re-test"
        else:
            target, indices, last = self.memory.best(), self._indices(k, "confirm"), False
            note = "confirm the best program last"
        if target is None:
            target = Kept(BASELINE_POLICY, BASELINE_MECHANISM)
        answer = self._submit(target.source, indices, "confirmation", "revert", note, target.mechanism,
                              self._usage(), role="confirm", base=target.first_submit)
        if answer is not None and answer.status == "ok" and self.memory.incumbent is not None:
            self.memory.incumbent = self.memory.best()
        phases = self.pol.planning.phases
        if last and "tuning" in phases and decisions.fits(self.shares, "tuning", self.spent, max(1, self._size())):
            self.phase_index = phases.index("tuning")
            self.current = self.memory.incumbent.source if self.memory.incumbent else self.current
            self.progress.new_phase()

    def _ensure_scored(self, reason: str) -> str:
        """A run with no ok submit gets one small submit of the best (or baseline) program if budget allows."""
        if self.ok_submits or self.remaining <= 0 or self._finalized():
            return reason
        try:  # no ok submit means nothing was kept either: the baseline is the only known-good program
            self._submit(BASELINE_POLICY, self.memory.indices(max(1, self.min_per)), "recovery", "synthesis",
                         "ensure the run has a valid submit", BASELINE_MECHANISM, self._usage(), role="candidate")
        except HostError:
            pass
        return reason

    # ---- helpers -----------------------------------------------------------------------------
    def _feedback(self, answer: SubmitAnswer) -> str:
        if answer.submit_id is None:
            return f"submit refused: {answer.status}"
        sub = self.ctx.workspace / "feedback" / f"submit_{answer.submit_id:03d}"
        return render_feedback(sub, self.pol.observation) if sub.is_dir() else f"status: {answer.status}"

    def _usage(self) -> tuple[int, int, float]:
        u = self.llm.usage
        return u.calls, u.tokens, u.usd

    def _mechanism_of(self, program: str | None) -> str:
        kept = self.memory.kept_for(program) if program else None
        return kept.mechanism if kept else (self.mechanisms[-1] if self.mechanisms else "?")

    def _read_policy(self) -> str | None:
        path = self.system_dir / "policy.py"
        return path.read_text() if path.is_file() else None

    def _write_policy(self, source: str) -> None:
        self.system_dir.mkdir(parents=True, exist_ok=True)
        tmp = self.system_dir / ".policy.py.tmp"
        tmp.write_text(source)
        tmp.replace(self.system_dir / "policy.py")

    def _read_lessons(self) -> tuple[str, ...]:
        """Lesson lines for the prompt, recorded in the log dir so a replay shows the model the same ones."""
        lines = self._replayed_lessons() if self.llm.mode == "replay" else None
        if lines is None:
            lines = self._lessons_from_store()
        (self.ctx.log_dir / LESSONS_SEEN).write_text(json.dumps(list(lines), indent=1) + "\n")
        return lines

    def _replayed_lessons(self) -> tuple[str, ...] | None:
        seen = Path(self.llm.store_path or "").parent / LESSONS_SEEN
        if not seen.is_file():
            return None
        return tuple(str(line) for line in json.loads(seen.read_text()))

    def _lessons_from_store(self) -> tuple[str, ...]:
        """Mechanisms that won earlier tasks with the same interface signature (memory.carry_lessons)."""
        path = self.ctx.lessons_path
        if not self.pol.memory.carry_lessons or path is None:
            return ()
        store = LessonStore(path)
        same = [les for les in store.all() if les.signature == self.signature][-LESSONS_SHOWN:]
        ranking = store.ranking(self.signature)
        lines = [f"{les.env}: mechanism `{les.mechanism}` was best (train score {les.score:.4g})" for les in same]
        if ranking:
            lines.append("mechanisms that won most often on this interface: " + ", ".join(ranking[:LESSONS_SHOWN]))
        return tuple(lines)

    def _write_lesson(self) -> None:
        best, path = self.memory.best(), self.ctx.lessons_path
        if not self.pol.memory.carry_lessons or path is None or best is None or self.llm.mode == "replay":
            return  # a replay is not new experience
        LessonStore(path).add(Lesson(signature=self.signature, mechanism=best.mechanism, env=self.ctx.task.env,
                                     score=self.memory.mean(best.source)))
