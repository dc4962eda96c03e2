"""What the LLM agent remembers within one task: kept programs, their results, the edit log.

Results are the shared `decisions.ProgramResults` (per episode id when the loop policy
lets the agent read per-episode returns, else one mean per submit), and every judgement
over them -- ranking, the margin test, where a revert goes, which ids a submit uses --
is made by `ole.agents.decisions`, the same functions the built-in agent uses.
"""
from __future__ import annotations

from typing import Any

from ole.agents import decisions
from ole.agents.decisions import IndexPlan, ProgramResults
from ole.loop_policy import LoopPolicy

Kept = ProgramResults
"""One distinct program and every result it got (the shared record)."""


class ProgramMemory:
    """Kept programs (top-k by mean), the incumbent, the edit log and the episode index plan."""

    def __init__(self, policy: LoopPolicy, n_ids: int, seed: int) -> None:
        self.pol = policy
        self.kept: dict[str, Kept] = {}
        self.incumbent: Kept | None = None
        self.entries: list[str] = []
        self.index_plan = IndexPlan(policy, n_ids, seed)
        self._confirm_round: list[int] = []
        self._confirm_queue: list[Kept] = []

    # ---- episode indices ---------------------------------------------------------------------
    def indices(self, k: int, role: str = "candidate") -> list[int]:
        """Ids for a candidate submit (`action.index_selection`) or a re-test/confirmation (fresh ids)."""
        return self.index_plan.pick(k) if role == "candidate" else self.index_plan.retest(k)

    def next_to_confirm(self, k: int) -> tuple[Kept | None, list[int], bool]:
        """The next kept program to re-test, its ids (one shared set of fresh ids per round over
        the top-k), and whether this is the round's last program."""
        if not self._confirm_queue:
            self._confirm_queue = self.ranked()
            self._confirm_round = self.index_plan.retest(k)
        target = self._confirm_queue.pop(0) if self._confirm_queue else None
        return target, list(self._confirm_round[:k]), not self._confirm_queue

    # ---- results -----------------------------------------------------------------------------
    def score_of(self, summary: dict[str, Any]) -> float | None:
        """The submit's score from the observed fields only (`decisions.submit_score`)."""
        return decisions.submit_score(self.pol, summary)

    def add_result(self, source: str, mechanism: str, answer: Any) -> None:
        kept = self.kept.get(source) or Kept(source, mechanism)
        self.kept[source] = kept
        indices = tuple(int(i) for i in answer.summary.get("env_instances") or ())
        kept.add(self.pol, answer.summary, indices, answer.submit_id)
        self._trim()

    def _trim(self) -> None:
        """Keep the top-k programs (and the incumbent); the rest are forgotten."""
        keep = {k.source for k in self.ranked()}
        if self.incumbent is not None:
            keep.add(self.incumbent.source)
        self.kept = {s: k for s, k in self.kept.items() if s in keep or k.mean() is None}

    def ranked(self) -> list[Kept]:
        return decisions.ranked(list(self.kept.values()), self.pol.memory.top_k_programs)

    def best(self) -> Kept | None:
        ranked = self.ranked()
        return ranked[0] if ranked else None

    def revert_target(self, mechanism: str | None) -> Kept | None:
        """Where a revert goes (`decisions.revert_target`)."""
        return decisions.revert_target(self.incumbent or self.best(), list(self.kept.values()), mechanism)

    def kept_for(self, source: str | None) -> Kept | None:
        return self.kept.get(source) if source is not None else None

    def first_submit(self, source: str | None) -> int | None:
        kept = self.kept_for(source)
        return kept.first_submit if kept else None

    def mean(self, source: str) -> float:
        kept = self.kept.get(source)
        value = kept.mean() if kept else None
        return float("nan") if value is None else value

    def beats(self, source: str, incumbent: Kept | None) -> bool:
        """The shared margin test (`decisions.beats`)."""
        cand = self.kept.get(source)
        return cand is not None and decisions.beats(self.pol, cand, incumbent)

    # ---- what the model is shown -------------------------------------------------------------
    def log(self, entry: str) -> None:
        self.entries.append(entry)

    def log_lines(self) -> tuple[str, ...]:
        return tuple(decisions.edit_window(self.pol, self.entries))

    def best_lines(self) -> tuple[tuple[str, float, int], ...]:
        return tuple((k.mechanism, float(k.mean()), k.submit_ids[-1] if k.submit_ids else -1)  # type: ignore[arg-type]
                     for k in self.ranked())
