"""Vocabularies spelled once (standard library only, so every CLI module may import them at start).

`HostKind` is the kind of host agent a run uses (not `evogym.host.Host`, the protocol host); every
model field, Python API argument and `--host` / `--agent` choice reads it from here.
"""
from __future__ import annotations

from typing import Literal, get_args

HostKind = Literal["builtin", "llm", "command"]
"""Host agent kinds: the embedded built-in agent, an LLM agent through litellm, an external command."""
HOSTS: tuple[HostKind, ...] = get_args(HostKind)
"""`HostKind`'s values, in order (argparse choices)."""
