"""The built-in coding agent (embedded default host agent).

`BuiltinAgent().work(ctx)` writes policy programs into the workspace's `system/`,
submits them through the protocol and improves them from the feedback, obeying every
field of the bundle's Loop Policy. Modules: `prelude`/`mechanism` (program text),
`control`/`goal`/`grid`/`vision` (mechanism families), `library` (which fit a task),
`search` (CMA-ES tuning), `feedback` (reading submits), `checks` (pre-submit checks,
AST topology hash), `plan` (pure Loop Policy decisions), `loop` (the agent loop).
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
