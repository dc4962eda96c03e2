"""Types of the package face (`ole/__init__.py` imports each name on first use; see `_FACE` there)."""
from typing import Any

from ole.api import EvolveResult as EvolveResult
from ole.api import champions as champions
from ole.api import decisions as decisions
from ole.api import evolve_offline as evolve_offline
from ole.api import evolve_online as evolve_online
from ole.api import judge as judge
from ole.api import lineage as lineage
from ole.api import open_registry as open_registry
from ole.api import run as run
from ole.api import stream as stream
from ole.bundle import Bundle as Bundle
from ole.bundle import dump_bundle_yaml, load_bundle_yaml
from ole.evolves import EvolveSettings as EvolveSettings
from ole.gate import GateConfig as GateConfig
from ole.gate import GateDecision as GateDecision
from ole.registry import RegisteredBundle as RegisteredBundle
from ole.registry import Registry as Registry
from ole.registry import ScopeChampion as ScopeChampion
from ole.registry.lineage import Lineage as Lineage
from ole.trace import RunCondition as RunCondition
from ole.trace import TaskSpec as TaskSpec
from ole.trace import Trace as Trace

dump_bundle = dump_bundle_yaml
load_bundle = load_bundle_yaml
__version__: str
__all__: list[str]
_FACE: dict[str, tuple[str, str]]

def __getattr__(name: str) -> Any: ...
def __dir__() -> list[str]: ...
