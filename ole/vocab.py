"""Vocabularies spelled once (standard library only, so every CLI module may import them at start).

`Host` is the kind of host agent a run uses; every model field, Python API argument and `--host` /
`--agent` choice reads it from here.
"""
from __future__ import annotations

from typing import Literal, get_args

Host = Literal["builtin", "llm", "command"]
"""Host agent kinds: the embedded built-in agent, an LLM agent through litellm, an external command."""
HOSTS: tuple[Host, ...] = get_args(Host)
"""`Host`'s values, in order (argparse choices)."""
