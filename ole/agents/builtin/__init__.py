"""The built-in coding agent (embedded default host agent).

`BuiltinAgent().work(ctx)` writes policy programs into the workspace's `system/`,
submits them through the protocol and improves them from the feedback, obeying every
field of the bundle's Loop Policy. Modules: `prelude`/`mechanism` (program text),
`control`/`goal`/`grid`/`vision` (mechanism families), `library` (which fit a task),
`search` (CMA-ES tuning), `feedback` (reading submits), `checks` (pre-submit checks,
AST topology hash), `plan` (pure Loop Policy decisions), `loop` (the agent loop).

What each Loop Policy field does here (tests/ole/test_loop_policy_sensitivity.py shows
each one changing the agent's actions):
- observation: `summary_fields` (score = mean − stderr when `returns` is readable, else
  the mean), `worst_k_episodes`/`trajectory_window`/`max_context_chars` (how much of the
  worst trajectories is read; saturated actuators shrink the search step, a stall widens
  it), `read_stdout` (a program whose output warns is never made the incumbent);
- planning: `phases`, `max_mechanisms` (synthesis candidates), `plateau_submits` and
  `on_plateau` (leave tuning / switch mechanism / double the step);
- memory: `top_k_programs` (re-tested in confirmation), `edit_log_size` (1/5th success
  rule on the step), `carry_lessons` (mechanism order from earlier tasks; lesson written);
- action: `episodes_per_submit`, `index_selection`, `step_size` (CMA-ES sigma0),
  `population` (CMA-ES popsize), `edit_granularity` (all constants / one function's
  constants per generation / whole-file rewrites with inlined constants);
- verification: `static_checks` (parse, imports, dry run before submitting),
  `retest_episodes`, `margin`, `matched_comparison` (incumbent re-run on the retest ids);
- recovery: `on_error_verdict`, `on_regression`, `max_retries`;
- stopping: `mode`, `patience_submits`, `reserve_episodes`;
- budget: `synthesis_fraction`, `confirmation_fraction`, `wall_time_s`. The agent makes
  no model calls, so `max_llm_calls`, `max_tokens` and `max_usd` bind only LLM agents.
"""
from __future__ import annotations

from ole.agents.base import AgentContext, AgentResult, HostAgent
from ole.agents.builtin.loop import Worker
from ole.agents.builtin.mechanism import Mechanism
from ole.agents.client import HostClient, HostError


class BuiltinAgent(HostAgent):
    """Synthesis from the mechanism library, CMA-ES tuning, confirmation."""

    name = "builtin"

    def __init__(self, *, extra_mechanisms: tuple[Mechanism, ...] = ()) -> None:
        self.extra_mechanisms = tuple(extra_mechanisms)
        """Mechanisms tried before the library's (an experiment's own templates)."""

    def work(self, ctx: AgentContext) -> AgentResult:
        try:
            worker = Worker(ctx, HostClient(ctx.url), self.extra_mechanisms)
        except HostError as err:
            return AgentResult(finish_reason="error", extras={"error": str(err)})
        return worker.run()


__all__ = ["BuiltinAgent"]
