"""Evolution: the package face. `config` (EvolveConfig, Suite, the default workload), `engine`
(Engine, Candidate, open_engine), the drivers `offline` and `online`, the resume `store`.

Names are loaded when first used, so importing a submodule (the store, the config) never loads the
engine and what it imports.
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ole.evolve.config import DEFAULT_SUITE, DEFAULT_TRANSFER, EvolveConfig, Suite
    from ole.evolve.engine import Candidate, Engine, on_result_counter, open_engine, run_fingerprint

_WHERE = {"DEFAULT_SUITE": "config", "DEFAULT_TRANSFER": "config", "EvolveConfig": "config", "Suite": "config",
          "Candidate": "engine", "Engine": "engine", "on_result_counter": "engine", "open_engine": "engine",
          "run_fingerprint": "engine"}

__all__ = ["DEFAULT_SUITE", "DEFAULT_TRANSFER", "Candidate", "Engine", "EvolveConfig", "Suite", "on_result_counter",
           "open_engine", "run_fingerprint"]


def __getattr__(name: str) -> Any:
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"module 'ole.evolve' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"ole.evolve.{where}"), name)
    globals()[name] = value
    return value
