"""The LLM coding agent: a language model writes `system/policy.py`, the loop policy runs the loop.

The model only proposes programs. Everything else -- which feedback it sees, which
phase it is in, what is kept and reverted to, how many episodes a submit spends, when
an improvement is trusted, what happens after a failure, when to stop -- is decided
from the bundle's loop policy by the shared `ole.agents.session.AgentSession` (the built-in
agent's too), so two bundles give two different runs with the same model. This module
makes the edits: the prompt turn, the model call with its repair prompts, parsing and
checking the answer, and the fallback. The agent works only through the HTTP protocol
and workspace files.

A run is never lost to the model: unusable answers get repair prompts, then the best
known program (or the schema baseline) is submitted instead; a spent LLM cap or an
unreachable model ends the loop cleanly and the run is finished.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

from ole.agents import decisions
from ole.agents.base import AgentContext, AgentResult, AgentUsage, HostAgent
from ole.agents.builtin import control
from ole.agents.builtin.mechanism import render
from ole.agents.client import HostClient, HostError, SubmitAnswer
from ole.agents.edits import (EditRejected, ParsedAnswer, diff_lines, edit_kind, parse_answer, scope_problem,
                              static_problems)
from ole.agents.prompts import Turn, lesson_lines, render_feedback, repair_prompt, system_prompt, user_prompt
from ole.agents.session import HostApi, Observed, AgentSession, Stop, StopReason, Submitted
from ole.llm import Caps, LLMCapReached, LLMClient, LLMDeadline, LLMError
from ole.trace import EditKind, SubmitRole

CALL_LOG = "llm_calls.jsonl"
"""Per-run record of every model call, under the agent log dir; `--model replay:<it>` replays the run."""
LESSONS_SEEN = "lessons_seen.json"
"""The lesson lines a run showed its model, next to the call log; a replay shows these, not today's file."""
MAX_ANSWER_TOKENS = 4096
"""Completion tokens asked for per call (a full policy file fits comfortably)."""
BASELINE_MECHANISM = "schema baseline"
"""Mechanism name of the fallback program derived from the action schema."""
STOP_FILE = "llm_stop.json"
"""In the agent log folder when the model or the host ended the run early: the reason and the error."""


def _baseline() -> str:
    neutral = control.neutral({}, {})
    return render(neutral, neutral.defaults()).source


BASELINE_POLICY = _baseline()
"""Submitted when the model never produced a valid program, so the run is still scored: the
built-in agent's `neutral` template (`ole/agents/builtin/programs/neutral.py`), one fixed
valid action derived from the action schema."""


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
        return LLMSession(self, ctx, self.make_client(ctx), HostClient(ctx.url)).run()


class LLMSession(AgentSession):
    """One task worked by the LLM agent: the shared session, edits made by prompting the model.

    One iteration is one proposal (a round of one candidate): the current phase's prompt,
    the model's answer (repaired up to `recovery.max_retries` times), its screening and full
    evaluation, and the judgement. Confirmation makes no model calls.
    """

    verification_phase = "verification"

    def __init__(self, agent: LLMAgent, ctx: AgentContext, llm: LLMClient, host: HostApi) -> None:
        super().__init__(ctx, host)
        self.agent, self.llm = agent, llm
        self.stop_message = ""
        """Why the model or the host ended the run early (written to `STOP_FILE`), else empty."""
        # the wall-clock cap binds inside a model call too (a hung or trickling server held the run for minutes)
        llm.deadline = self.t0 + self.lp.budget.wall_time_s
        self.learns = llm.mode != "replay"  # a replay is not new experience
        self.phase_index = 0
        self.rounds = 0
        self.bold = False
        self.force_synthesis = False
        self.mechanisms: list[str] = []
        """Mechanisms proposed in synthesis so far."""
        self.current: str | None = None
        """The program the next tuning or recovery prompt edits."""
        self.feedback = ""
        self.last_edit = ""
        self.recovering = False
        self.system = system_prompt(host.task(), self.info, self.lp)
        self.lessons = self._read_lessons()

    # ---- the session's hooks -----------------------------------------------------------------
    def observe(self, answer: SubmitAnswer) -> Observed:
        """Render the feedback the next prompt shows (`observation.*`); its hash is the digest."""
        self.feedback = self._feedback(answer)
        return Observed("sha256:" + hashlib.sha256(self.feedback.encode()).hexdigest())

    def classify(self, source: str, role: SubmitRole) -> EditKind:
        """The session's own submits re-run a known program: a re-test, else back to a kept one."""
        return "none" if role == "retest" else "revert"

    def fallback(self) -> tuple[str, str]:
        return BASELINE_POLICY, BASELINE_MECHANISM

    # ---- the loop ----------------------------------------------------------------------------
    def result(self, reason: StopReason) -> AgentResult:
        """The stop reason with the model usage, the call log and, after an early stop, why."""
        u = self.llm.usage
        extras = {"llm_calls": CALL_LOG, "lessons_seen": LESSONS_SEEN}
        if self.stop_message:  # why the run stopped early, in the trace and not only on stderr
            (self.ctx.log_dir / STOP_FILE).write_text(
                json.dumps({"reason": reason, "message": self.stop_message, "failed_attempts": u.failed_attempts})
                + "\n")
            extras["stop"] = STOP_FILE
        return AgentResult(reason, AgentUsage(u.calls, u.tokens, u.usd), extras=extras)

    def body(self) -> StopReason:
        """One proposal per iteration until the budget, the clock, the caps or the host end the run
        (`Stop` ends it through `AgentSession.run`; the model's and the host's errors are reasons here)."""
        try:
            while True:
                if self.remaining <= 0:
                    return "budget_spent"
                self.check_stop()
                self.size()  # what is left cannot be spent (the reserve, or less than one submit)
                self._iterate()
        except LLMCapReached as exc:
            return self._stopped("llm_cap", exc.message)
        except LLMDeadline as exc:
            return self._stopped("wall_time", exc.message)
        except LLMError as exc:
            return self._stopped("error", f"model unavailable ({exc.message})")
        except HostError as exc:
            return self._stopped("error", f"host said {exc.message}")

    def _stopped(self, reason: StopReason, message: str) -> StopReason:
        self.stop_message = message
        self.ctx.progress(f"llm agent: {message}; stopping")
        return reason

    # ---- one iteration -----------------------------------------------------------------------
    def _iterate(self) -> None:
        phase = self._phase()
        if phase == "confirmation":
            self._confirm()
            return
        synth = phase == "synthesis" or self.force_synthesis or self.current is None and not self.results
        turn_phase = "recovery" if self.recovering else ("synthesis" if synth else "tuning")
        turn = self._turn(turn_phase)
        calls0 = self._usage()
        proposal, why = self._ask(turn)
        if proposal is None:
            source, mechanism, kind, note = self._fallback_program(why)
            self._send(source, self._indices(), turn_phase, kind, note, mechanism, calls0, role="candidate",
                       base=self.first_submit(source))
            self.candidate(False, f"{self.last_edit}: model output unusable")  # patience and plateaus see it
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
            size = decisions.synthesis_size(self.lp, self.shares, self.remaining, self.lo, self.hi)
            ids = self.indices.pick(max(self.lo, size))
        else:
            ids = self._indices()
        ks = decisions.screen_size(self.lp, len(ids))
        done = self._send(proposal.source, ids[:ks], turn_phase, kind, f"{proposal.form} edit", mechanism, calls0,
                          base_program=turn.program, role="retry" if turn_phase == "recovery" else "candidate",
                          base=base, search_round=search_round)
        if done is None:
            return
        value = done.value
        if ks < len(ids) and value is not None:
            inc = self.incumbent
            if not decisions.survivors([value], inc.mean(set(ids[:ks])) if inc else None):
                value = None  # screened out: not evaluated in full, never the incumbent
            elif self.room(len(ids) - ks) > 0:
                self._send(proposal.source, ids[ks:ks + self.room(len(ids) - ks)], turn_phase, "none",
                           "full evaluation of a screened candidate", mechanism, self._usage(), role="retest",
                           base=self.first_submit(proposal.source), search_round=search_round)
        self._judge(proposal.source, mechanism, done, value, turn_phase)

    def _base_of(self, program: str | None) -> int | None:
        """Submit id of the program an edit was made to (also when it failed and is not kept)."""
        return self.submitted.get(program) if program is not None else None

    def _phase(self) -> str:
        """The current phase of planning.phases; advances when a phase's share is spent or it plateaued."""
        phases = self.lp.planning.phases
        while self.phase_index < len(phases) - 1 and self._phase_over(phases[self.phase_index]):
            self.phase_index += 1
            self.progress.new_phase()
            self.bold = False
        self.enter(phases[self.phase_index])
        return phases[self.phase_index]

    def _phase_over(self, name: str) -> bool:
        if not self.results:
            return False  # never leave synthesis (or tuning) without a single working program
        if decisions.plateau_action(self.lp, self.progress) == "next_phase":
            return True
        k = max(1, self.room())
        if name == "synthesis":
            return not self.fits("synthesis", k) or len(self.mechanisms) >= self.lp.planning.max_mechanisms
        if name == "tuning":
            return not self.fits("tuning", k)
        return False

    def _turn(self, phase: str) -> Turn:
        extra: tuple[str, ...] = ()
        if phase == "recovery":
            extra = (f"Failed attempts in a row: {self.progress.failures}.",)
        best = tuple((k.mechanism, float(k.mean()), k.submit_ids[-1] if k.submit_ids else -1)  # type: ignore[arg-type]
                     for k in self.top())
        return Turn(phase=phase, granularity=self.lp.action.edit_granularity, program=self.current,
                    feedback=self.feedback, step_size=self.lp.action.step_size, remaining_episodes=self.remaining,
                    tried_mechanisms=tuple(self.mechanisms), best=best, edit_log=self.edit_log(),
                    lessons=self.lessons, bold=self.bold, extra=extra)

    def _ask(self, turn: Turn) -> tuple[ParsedAnswer | None, str]:
        """Model answer -> checked program; an unusable answer is a failed attempt, repaired up to
        `recovery.max_retries` times before the agent escalates (to the best known program)."""
        messages = [{"role": "system", "content": self.system}, {"role": "user", "content": user_prompt(turn)}]
        why = ""
        for _ in range(self.lp.recovery.max_retries + 1):
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

    def _check(self, text: str, turn: Turn, truncated: bool) -> ParsedAnswer:
        """The answer as a program, or EditRejected (static checks, unchanged, out of the edit unit)."""
        proposal = parse_answer(text, turn.program, truncated=truncated)
        if self.lp.verification.static_checks:
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

    def _fallback_program(self, why: str) -> tuple[str, str, EditKind, str]:
        """(source, mechanism, edit kind, note) submitted instead of an unusable answer."""
        best = self.revert_target(self._mechanism_of(self.current))
        note = f"model output unusable after {self.lp.recovery.max_retries + 1} tries ({why[:120]})"
        if best is not None:
            return best.source, best.mechanism, "revert", note + "; resubmitting the best program"
        return BASELINE_POLICY, BASELINE_MECHANISM, "synthesis", note + "; submitting the schema baseline"

    # ---- submits and verdicts ----------------------------------------------------------------
    def _indices(self) -> list[int]:
        """Ids for a candidate submit of the default size (`action.index_selection`)."""
        return self.indices.pick(max(self.lo, self.room()))

    def _send(self, source: str, indices: list[int], phase: str, kind: EditKind, note: str, mechanism: str,
              calls0: tuple[int, int, float], *, role: SubmitRole, base: int | None = None,
              base_program: str | None = None, search_round: int | None = None) -> Submitted | None:
        """Submit a program the agent chose (`AgentSession.submit`, with the model usage since `calls0`);
        None when the host rejected it outright (HTTP 400, nothing charged)."""
        calls, tokens, usd = (a - b for a, b in zip(self._usage(), calls0))
        done = self.submit(source, mechanism, indices, phase=phase, note=note, role=role, kind=kind, base=base,
                           search_round=search_round, cost=(int(calls), int(tokens), float(usd)))
        answer = done.answer
        assert answer is not None  # the LLM agent checks its programs before it submits them (`_check`)
        self.last_edit = (f"submit {answer.submit_id} [{phase} phase] {kind} edit, "
                          f"{diff_lines(base_program, source)} lines changed")
        return None if answer.http_status == 400 else done

    def _judge(self, source: str, mechanism: str, done: Submitted, value: float | None, phase: str) -> None:
        """What the last candidate's verdict means: improvement, regression or failure."""
        assert done.answer is not None
        if done.answer.status != "ok":
            self._on_error(source, done.answer.status)
            return
        self.recovered()
        self.recovering = False
        improved = self.judge(source, value, phase)
        mean = self.results[source].mean()
        self.candidate(improved, f"{self.last_edit}: mean {float('nan') if mean is None else mean:.4g}, "
                                 + ("improved" if improved else "no improvement"))
        if improved:
            self.current = source
            return
        self._on_plateau()
        action = decisions.regression_action(self.lp)
        if action == "keep":
            self.current = source
        elif action == "restructure" and self._restructure():
            self.current = source
        else:
            target = self.revert_target(mechanism)
            self.current = target.source if target is not None else source

    def _on_error(self, source: str, status: str) -> None:
        """The error ladder's rung: retry (the model fixes it), restructure, or revert."""
        action = self.failed()
        self.candidate(False, f"{self.last_edit}: failed with {status}")
        self.recovering = action == "retry"
        if action == "retry":
            self.current = source
            return
        if action == "restructure" and self._restructure():
            return
        target = self.revert_target(self._mechanism_of(source))
        self.current = target.source if target else None

    def _restructure(self) -> bool:
        """Back to synthesis for an untried mechanism; False when `max_mechanisms` are all tried."""
        if len(self.mechanisms) < self.lp.planning.max_mechanisms:
            self.force_synthesis = True
            return True
        return False

    def _on_plateau(self) -> None:
        action = decisions.plateau_action(self.lp, self.progress)
        if action == "widen_search":
            self.bold = True
            self.progress.new_phase()
        elif action == "restructure":
            self._restructure()
            self.progress.new_phase()

    def _confirm(self) -> None:
        """Confirmation (`AgentSession.confirmation_round`), no model calls; then tuning resumes from the
        incumbent while its share lasts, else what is left goes to the best program and the run ends."""
        self.confirmation_round()
        phases = self.lp.planning.phases
        if "tuning" in phases and self.fits("tuning", max(1, self.room())):
            self.phase_index = phases.index("tuning")
            self.current = self.incumbent.source if self.incumbent else self.current
            self.progress.new_phase()
            return
        self.final()
        raise Stop("budget_spent")

    # ---- helpers -----------------------------------------------------------------------------
    def _feedback(self, answer: SubmitAnswer) -> str:
        if answer.submit_id is None:
            return f"submit refused: {answer.status}"
        sub = self.ctx.workspace / "feedback" / f"submit_{answer.submit_id:03d}"
        return render_feedback(sub, self.lp.observation) if sub.is_dir() else f"status: {answer.status}"

    def _usage(self) -> tuple[int, int, float]:
        u = self.llm.usage
        return u.calls, u.tokens, u.usd

    def _mechanism_of(self, program: str | None) -> str:
        kept = self.results.get(program) if program else None
        return kept.mechanism if kept else (self.mechanisms[-1] if self.mechanisms else "?")

    def _read_lessons(self) -> tuple[str, ...]:
        """Lesson lines for the prompt, recorded in the log dir so a replay shows the model the same ones."""
        lines = self._replayed_lessons() if self.llm.mode == "replay" else None
        if lines is None:
            lines = lesson_lines(self.store, self.sig) if self.store is not None else ()
        (self.ctx.log_dir / LESSONS_SEEN).write_text(json.dumps(list(lines), indent=1) + "\n")
        return lines

    def _replayed_lessons(self) -> tuple[str, ...] | None:
        seen = Path(self.llm.store_path or "").parent / LESSONS_SEEN
        if not seen.is_file():
            return None
        return tuple(str(line) for line in json.loads(seen.read_text()))
