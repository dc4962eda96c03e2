"""OpenLoopEvolve: Loop Policies as versioned, gated, reversible assets.

The Python API (docs/python.md); every name is imported on first use, so `import ole` stays as
fast as the `ole` command's start (a name's module loads scipy or the engine only when used):

    import ole
    with ole.open_registry("bundles") as reg:
        ole.evolve_offline(envs=["gym/acrobot"], budget=8, registry=reg)
        print(ole.judge("coder@2", envs=["gym/acrobot"], registry=reg).verdict)

Functions (`ole.api`): `open_registry`, `run`, `evolve_offline`, `evolve_online`, `stream` (online
ask/tell), `judge` (`ole gate`), `lineage`, `champions`, `decisions`. Records: `EvolveSettings`,
`EvolveResult`, `GateConfig`, `GateDecision`, `Registry`, `RegisteredBundle`, `ScopeChampion`,
`Lineage`, `Bundle`, `load_bundle` / `dump_bundle` (YAML text or a path), `TaskSpec`, `RunCondition`, `Trace`.
"""
from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_FACE: dict[str, tuple[str, str]] = {
    "open_registry": ("ole.api", "open_registry"),
    "run": ("ole.api", "run"),
    "evolve_offline": ("ole.api", "evolve_offline"),
    "evolve_online": ("ole.api", "evolve_online"),
    "stream": ("ole.api", "stream"),
    "judge": ("ole.api", "judge"),
    "lineage": ("ole.api", "lineage"),
    "champions": ("ole.api", "champions"),
    "decisions": ("ole.api", "decisions"),
    "EvolveResult": ("ole.api", "EvolveResult"),
    "EvolveSettings": ("ole.evolves", "EvolveSettings"),
    "GateConfig": ("ole.gate", "GateConfig"),
    "GateDecision": ("ole.gate", "GateDecision"),
    "Registry": ("ole.registry", "Registry"),
    "RegisteredBundle": ("ole.registry", "RegisteredBundle"),
    "ScopeChampion": ("ole.registry", "ScopeChampion"),
    "Lineage": ("ole.registry.lineage", "Lineage"),
    "Bundle": ("ole.bundle", "Bundle"),
    "load_bundle": ("ole.bundle", "load_bundle_yaml"),
    "dump_bundle": ("ole.bundle", "dump_bundle_yaml"),
    "TaskSpec": ("ole.trace", "TaskSpec"),
    "RunCondition": ("ole.trace", "RunCondition"),
    "Trace": ("ole.trace", "Trace"),
}
"""Public name -> (module, attribute); `ole/__init__.pyi` gives type checkers and IDEs their real
signatures (a stub: importing them here, even under TYPE_CHECKING, would put the package face in
an import circle with every module that reads `ole.__version__`). Names of submodules (`evolve`, `gate`) are not used for
functions: importing `ole.gate` sets the attribute `ole.gate` to that module, which would shadow a
function of the same name."""

__all__ = ["__version__", "open_registry", "run", "evolve_offline", "evolve_online", "stream", "judge", "lineage",
           "champions", "decisions", "EvolveResult", "EvolveSettings", "GateConfig", "GateDecision", "Registry",
           "RegisteredBundle", "ScopeChampion", "Lineage", "Bundle", "load_bundle", "dump_bundle", "TaskSpec",
           "RunCondition", "Trace"]
"""The public names: `__version__` and those of `_FACE` (tests/ole/test_api.py checks they agree)."""

def __getattr__(name: str) -> Any:
    """Import a public name's module on first use (PEP 562)."""
    try:
        module, attribute = _FACE[name]
    except KeyError:
        raise AttributeError(f"module 'ole' has no attribute {name!r}") from None
    value = getattr(importlib.import_module(module), attribute)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_FACE})
