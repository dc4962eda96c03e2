"""The host-agent interface: how any agent (built-in, LLM, command) works a task.

An agent gets the protocol URL, the workspace path, the bundle whose loop policy it
must obey, the task and the run condition. It works only through the HTTP protocol
(`/info`, `/task`, `/submit`, `/finish`) and the workspace files — it never sees the
host's run directory, pools or scores. It reports its iterations through
`AgentContext.record`, which the runner turns into the trace history.
"""
from __future__ import annotations

import abc
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from ole.bundle import Bundle
from ole.trace import Iteration, RunCondition, TaskSpec


@dataclass
class AgentUsage:
    """Agent-side costs the host cannot see."""

    llm_calls: int = 0
    tokens: int = 0
    usd: float = 0.0


@dataclass
class AgentResult:
    """What an agent reports when it stops working a task."""

    finish_reason: str
    """budget_spent | finished_early | wall_time | llm_cap | error"""
    usage: AgentUsage = field(default_factory=AgentUsage)
    extras: dict[str, str] = field(default_factory=dict)
    """Pointers to agent logs (relative to the run's agent log folder)."""


@dataclass
class AgentContext:
    url: str
    """Base URL of the host protocol, e.g. http://127.0.0.1:PORT."""
    workspace: Path
    """The run's workspace (AGENTS.md, system/, feedback/)."""
    bundle: Bundle
    """The bundle whose loop policy the agent obeys."""
    task: TaskSpec
    condition: RunCondition
    log_dir: Path
    """Agent-owned log folder outside the workspace (LLM call records, command output)."""
    record: Callable[[Iteration], None]
    """Append one iteration to the trace history."""
    progress: Callable[[str], None] = lambda line: None
    """One-line progress messages for the user."""
    lessons_path: Path | None = None
    """Cross-task lessons file (read when memory.carry_lessons; None = no lessons store)."""


class HostAgent(abc.ABC):
    """An agent that works one EvoPolicyGym task under a loop policy."""

    name: str = "agent"

    @abc.abstractmethod
    def work(self, ctx: AgentContext) -> AgentResult:
        """Work the task until the run is finalized (budget spent or `/finish`).

        Must not raise on agent-side problems (bad model output, failed submits):
        those are recorded results. The runner finishes the run if the agent returns
        while it is still open, so a run is always scored.
        """
