"""The proposer factory: the proposer a `--proposer` string names, an LLM client under the run's caps.

Kept apart from `ole.proposers` (the proposal types every proposer imports) so that the package
face imports no proposer implementation: `ole.proposers.builtin`, `.baselines` and `.llm` import
the package, and the factory imports them.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pathlib import Path

    from ole.cost import CostCaps
    from ole.proposers import Proposer


def make_proposer(spec: str, *, host: str = "builtin", seed: int = 0, log_path: "Path | None" = None,
                  caps: "CostCaps | None" = None) -> "Proposer":
    """The proposer named by `--proposer`: `builtin`, `random`, `tpe`, or an LLM model string (its
    calls logged to `log_path`). An LLM proposer's client runs under the run's token and dollar caps
    (`caps`): it refuses a call once its own spend reaches them, and the engine charges what each
    proposal spent to the run's meter (`CostMeter.charge_proposal`), which stops the run first when
    agents and proposer together approach a cap."""
    if spec == "builtin":
        from ole.proposers.builtin import BuiltinProposer
        return BuiltinProposer(host=host)
    if spec in ("random", "tpe"):
        from ole.proposers.baselines import RandomProposer, TPEProposer
        return (RandomProposer if spec == "random" else TPEProposer)(host=host, seed=seed)
    from ole.llm import Caps, LLMClient
    from ole.proposers.llm import LLMProposer
    limits = Caps() if caps is None else Caps(tokens=caps.tokens, usd=caps.usd)
    return LLMProposer(LLMClient.from_model_string(spec, log_path=log_path, caps=limits))
