"""Host agents: `get_agent(name, **options)` for `builtin`, `llm` and `command`.

The LLM and command agents live in their own modules and are imported only when
asked for, so the built-in agent works without their optional dependencies.
"""
from __future__ import annotations

import importlib
from typing import Any

from ole.agents.base import HostAgent
from ole.errors import NotFound

AGENTS = {
    "builtin": ("ole.agents.builtin", "BuiltinAgent"),
    "llm": ("ole.agents.llm", "LLMAgent"),
    "command": ("ole.agents.command", "CommandAgent"),
}
"""Agent name -> (module, class), resolved lazily."""


def get_agent(name: str, **options: Any) -> HostAgent:
    """An agent instance by name; unknown names raise NotFound with the known ones."""
    if name not in AGENTS:
        import difflib
        raise NotFound(f"no host agent {name!r}; known: {', '.join(AGENTS)}",
                       suggestions=difflib.get_close_matches(name, list(AGENTS), n=1))
    module, cls = AGENTS[name]
    return getattr(importlib.import_module(module), cls)(**options)
