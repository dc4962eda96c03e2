"""The Loop Policy: eight components that control how a host agent works a task.

Every field is a concrete control that at least one host agent reads (the built-in
coding agent reads all of them; the LLM and command agents read the ones that make
sense for a language model). `docs/loop-policy.md` explains each field's effect and
which agent reads it; `tests/ole/test_loop_policy_sensitivity.py` shows, field by
field, that changing a field changes what the agent does.
"""
from __future__ import annotations

import typing
from typing import Final, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

SCHEMA_VERSION: Final = "1"

SUMMARY_FIELDS = (
    "status", "mean_return", "std_return", "min_return", "max_return", "returns",
    "episode_lengths", "mean_episode_length", "errors", "timeouts", "remaining_budget",
)


HASH_NEUTRAL_DEFAULTS: dict[str, object] = {"verification.stderr_multiple": 1.0, "action.screen_episodes": 0,
                                            "budget.reference_episodes": None, "recovery.max_rejects": 3,
                                            "stopping.best_last": True}
"""Fields added after the first schema, each with the value that reproduces what bundles written
before it did. A policy holding that value hashes as if the field did not exist
(`ole.bundle.Bundle.content_hash`), so adding a field never changes the content hash of a bundle
already in a registry (fsck stays clean, dedupe keeps working). A new field goes here with a
default equal to its entry; `tests/ole/test_bundle.py` refuses a field that is in neither list."""


class _Component(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)


class Observation(_Component):
    """What feedback the agent reads after each submit, and how much of it."""

    summary_fields: tuple[str, ...] = ("status", "mean_return", "returns", "episode_lengths", "errors")
    """Fields of `summary.json` the agent reads (others are ignored as if absent)."""
    worst_k_episodes: int = Field(2, ge=0, le=64)
    """How many of the worst episodes of a submit have their trajectories inspected (0 = none)."""
    trajectory_window: int = Field(50, ge=0, le=5000)
    """How many final steps of each inspected trajectory are read (0 = none)."""
    read_stdout: bool = True
    """Whether policy stdout/stderr diagnostics are read (and shown to an LLM)."""
    max_context_chars: int = Field(12000, ge=500, le=400000)
    """Upper bound on the feedback text assembled for one planning step."""

    @model_validator(mode="after")
    def _known_fields(self) -> "Observation":
        unknown = sorted(set(self.summary_fields) - set(SUMMARY_FIELDS))
        if unknown:
            raise ValueError(f"unknown summary_fields {unknown}; allowed: {list(SUMMARY_FIELDS)}")
        if "mean_return" not in self.summary_fields and "returns" not in self.summary_fields:
            raise ValueError("summary_fields must include mean_return or returns (no score otherwise)")
        return self


Phase = Literal["synthesis", "tuning", "confirmation"]
"""The planning phases, in schedule order: the one spelling every agent, the brief and the proposers use."""
PHASES: tuple[Phase, ...] = typing.get_args(Phase)


class Planning(_Component):
    """The phase schedule: structural synthesis -> parametric tuning -> confirmation."""

    phases: tuple[Phase, ...] = PHASES
    """The phases run, at least one, each once, in the schedule's order (synthesis, tuning,
    confirmation); a phase left out is skipped. One meaning for every agent: the order is the
    schedule's, never the list's (the built-in agent read only membership, the LLM agent the
    list's order, and `[]` meant tuning to both agents but all budget to synthesis)."""
    max_mechanisms: int = Field(4, ge=1, le=16)
    """How many candidate mechanisms (program structures) synthesis tries at most."""
    plateau_submits: int = Field(6, ge=1, le=64)
    """Consecutive non-improving submits after which the current phase is declared plateaued."""
    on_plateau: Literal["next_phase", "restructure", "widen_search"] = "next_phase"
    """What a plateau triggers: move on, go back to synthesis with another mechanism, or double the step size."""

    @model_validator(mode="after")
    def _schedule(self) -> "Planning":
        order = PHASES
        if not self.phases:
            raise ValueError("phases must name at least one phase (synthesis, tuning, confirmation)")
        if list(self.phases) != [p for p in order if p in self.phases] or len(set(self.phases)) != len(self.phases):
            raise ValueError(f"phases must be distinct and in the schedule's order {list(order)}, got "
                             f"{list(self.phases)}")
        return self


class Memory(_Component):
    """What the agent keeps within a run and carries across tasks."""

    top_k_programs: int = Field(3, ge=1, le=32)
    """How many best programs by mean are kept: revert targets, restart points, and what a confirmation
    round re-tests (all but the best, each on fresh ids)."""
    edit_log_size: int = Field(20, ge=0, le=1000)
    """How many of the most recent candidates the next edit is informed by (`decisions.edit_window` over the
    session's one edit log, one entry per candidate): the built-in agent adapts its search step by the 1/5th
    success rule over them; an LLM is shown their one-line outcomes. 0 = none."""
    carry_lessons: bool = True
    """Read and write cross-task lessons (which mechanism worked for which observation/action signature)."""


class Action(_Component):
    """How the agent acts: submit sizes, episode indices, edit form and step sizes."""

    episodes_per_submit: int = Field(4, ge=1, le=128)
    """Episodes asked for in one exploratory submit (capped by the host's maximum and the remaining budget)."""
    index_selection: Literal["matched", "fresh", "mixed"] = "matched"
    """Episode indices: the same set for every comparison (common random numbers), new ones each submit, or half each."""
    step_size: float = Field(0.3, gt=0.0, le=5.0)
    """Initial search step size for parametric tuning, relative to each parameter's scale."""
    population: int = Field(6, ge=2, le=64)
    """Candidates per search generation during tuning (CMA-ES population size)."""
    screen_episodes: int = Field(0, ge=0, le=128)
    """Racing: a candidate is first scored on this many of its round's episodes and only the better half is
    scored on the rest (0, or at least episodes_per_submit, = every candidate gets the full submit)."""
    edit_granularity: Literal["parameters", "function", "file"] = "parameters"
    """Unit of one edit: constants only, one function of the program, or the whole file (LLM agents: diff vs full file)."""


class Verification(_Component):
    """How an apparent improvement is confirmed before it is trusted."""

    static_checks: bool = True
    """Parse, AST and import-name checks before spending budget on a submit."""
    retest_episodes: int = Field(4, ge=0, le=64)
    """Extra episodes spent re-testing a candidate that beat the incumbent (0 = trust the first result)."""
    margin: float = Field(0.0, ge=0.0, le=1.0)
    """Relative margin a candidate must beat the incumbent by (of the incumbent's |score|, at least 1e-6)."""
    matched_comparison: bool = True
    """Compare candidate and incumbent only on the same episode indices."""
    stderr_multiple: float = Field(1.0, ge=0.0, le=5.0)
    """Standard errors of the measured improvement it must clear on top of the margin (0 = compare plain means)."""


class Recovery(_Component):
    """What the agent does when things go wrong."""

    on_error_verdict: Literal["retry", "revert", "restructure"] = "revert"
    """After a charged failure verdict: fix and resubmit, return to the best program, or change mechanism."""
    on_regression: Literal["revert", "keep", "restructure"] = "revert"
    """After a confirmed regression: return to the best program, keep going from the new one, or change mechanism."""
    max_retries: int = Field(2, ge=0, le=10)
    """Consecutive failed attempts tolerated before escalating to the next recovery action."""
    max_rejects: int = Field(3, ge=1, le=64)
    """Consecutive submits the host refuses as malformed (HTTP 400, nothing charged) after which the
    agent ends the run with `error`: the host and the agent disagree about the protocol."""


class Stopping(_Component):
    """When the agent ends the run."""

    mode: Literal["spend_all", "finish_early"] = "spend_all"
    """Spend the whole episode budget, or call `/finish` once progress has stalled."""
    patience_submits: int = Field(10, ge=1, le=128)
    """For finish_early: non-improving submits after which the agent finishes."""
    reserve_episodes: int = Field(0, ge=0, le=128)
    """Episodes never spent (finish_early keeps them; spend_all ignores this)."""
    best_last: bool = True
    """A run that stops before its budget is spent (finish decision, wall time) re-submits its best
    program when that was not its last submit, so the program the run ends on is its best."""


class Budget(_Component):
    """How the agent splits episodes, LLM calls, tokens, money and wall time."""

    synthesis_fraction: float = Field(0.3, ge=0.0, le=1.0)
    """Share of the episode budget for structural synthesis."""
    confirmation_fraction: float = Field(0.15, ge=0.0, le=1.0)
    """Share of the episode budget kept for confirmation rounds at the end (the kept programs other than the best,
    each re-tested on fresh ids); what is left after every share goes to the best program."""
    max_llm_calls: int = Field(64, ge=0, le=100000)
    """Hard cap on LLM calls in one task (LLM agents)."""
    max_tokens: int = Field(400000, ge=0, le=100000000)
    """Hard cap on LLM tokens (prompt + completion) in one task."""
    max_usd: float = Field(5.0, ge=0.0, le=10000.0)
    """Hard cap on LLM spend in one task, in US dollars."""
    wall_time_s: float = Field(1800.0, gt=0.0, le=86400.0)
    """Wall-clock cap for the agent's work on one task; at the cap it stops submitting and finishes."""
    reference_episodes: int | None = Field(None, ge=1, le=100000)
    """The episode budget the run-length counts (`RUN_LENGTH_FIELDS`: plateau, patience, reserve) are
    stated for: at a task of budget B each is used as count x B / reference, so it is the same share
    of the run at any budget (`ole.agents.decisions.for_budget`). Null: the counts are used as
    written at every budget (the seed's choice, and the meaning of bundles written before it)."""

    @model_validator(mode="after")
    def _fractions(self) -> "Budget":
        if self.synthesis_fraction + self.confirmation_fraction > 1.0:
            raise ValueError("synthesis_fraction + confirmation_fraction must be <= 1")
        return self


class LoopPolicy(_Component):
    """A complete loop policy: the eight components of OLE §III-C."""

    schema_version: Literal["1"] = SCHEMA_VERSION
    """Version of this schema; a bundle written for another version is rejected."""
    observation: Observation = Observation()
    """Which feedback is read and how much."""
    planning: Planning = Planning()
    """Phase schedule and plateau rule."""
    memory: Memory = Memory()
    """Kept programs, edit log, cross-task lessons."""
    action: Action = Action()
    """Submit sizes, index selection, step sizes, edit granularity."""
    verification: Verification = Verification()
    """How improvements are confirmed."""
    recovery: Recovery = Recovery()
    """Responses to error verdicts and regressions."""
    stopping: Stopping = Stopping()
    """When to stop."""
    budget: Budget = Budget()
    """Split of episodes, LLM calls, tokens, money and wall time."""


RUN_LENGTH_FIELDS: tuple[str, ...] = ("planning.plateau_submits", "stopping.patience_submits",
                                      "stopping.reserve_episodes")
"""Counts that measure a share of the run, scaled by `budget.reference_episodes`. Sample sizes
(`action.episodes_per_submit`, `action.screen_episodes`, `verification.retest_episodes`) are not:
measured at budgets 32 and 128, 1-episode submits win at both (+0.60 and +0.29 on halfcheetah5) and
8-episode submits lose at 128, so a submit size transfers as a count of episodes, not as a share
(`experiments/results/sensitivity.md`, `experiments/results/budget_transfer.md`). Confirmation and
synthesis are already shares (`budget.*_fraction`)."""

Component = Literal["observation", "planning", "memory", "action", "verification", "recovery", "stopping", "budget"]
"""The eight loop-policy components (OLE §III-C), in schema order."""
COMPONENTS: tuple[Component, ...] = typing.get_args(Component)
