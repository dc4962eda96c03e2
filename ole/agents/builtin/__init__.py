"""The built-in coding agent (embedded default host agent).

`BuiltinAgent().work(ctx)` writes policy programs into the workspace's `system/`,
submits them through the protocol and improves them from the feedback, obeying every
field of the bundle's Loop Policy. Modules: `programs/` (the program templates, real
`.py` files), `mechanism` (parameters and rendering), `control`/`goal`/`grid`/`vision`
(mechanism families: which template, which parameters), `library` (which fit a task),
`search` (CMA-ES tuning), `feedback` (reading submits), `checks` (pre-submit checks,
AST topology hash), `loop` (the edits: synthesis rounds, CMA-ES tuning rounds, retries).
Submit, judge, recover, confirm, finish and lessons are the shared
`ole.agents.session.Session` the `loop.Worker` drives (the LLM agent's too), and what each
field decides is decided by the shared `ole.agents.decisions` (docs/loop-policy.md); the
agent carries it out:

- observation: the fields read (scores, the paired test), the worst trajectories
  (saturated actuators shrink the search step, a stall widens it), `read_stdout` (a
  program whose output warns is never made the incumbent);
- planning: phases, synthesis candidates from the library, plateaus (leave tuning /
  switch mechanism / double the CMA-ES step);
- memory: kept programs (revert targets, confirmation), the edit log (1/5th success
  rule on the step), lessons (mechanism order from earlier tasks; one lesson written);
- action: submit sizes and ids, `step_size` (CMA-ES sigma0), `population` (CMA-ES
  popsize), `edit_granularity` (all constants / one function's constants per round /
  whole-file rewrites with inlined constants);
- verification: static checks with a dry run, re-tests with reference runs, the test;
- recovery: the error ladder (same program / revert / another mechanism), the round
  rule (`revert` re-centres CMA-ES on the revert target after every round, `keep` lets
  it go on, `restructure` switches mechanism after a round without a gain);
- stopping and budget: as decided; no LLM calls, so the three LLM caps are not read.

tests/ole/test_loop_policy_sensitivity.py shows each field changing the actions of both agents.
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
