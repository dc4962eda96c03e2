"""What the LLM agent remembers within one task: kept programs, their results, the edit log, indices.

Results are kept per episode index so a comparison can be matched (same indices for
candidate and incumbent, i.e. common random numbers) when the loop policy asks for it.
Only what the loop policy lets the agent read enters here: per-episode returns only
when `returns` is among the observed summary fields, else one mean per submit.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

from ole.loop_policy import Verification

SCORE_FLOOR = 1e-6
"""Smallest |incumbent score| a relative margin is taken of (loop_policy.Verification.margin)."""


@dataclass
class Kept:
    """One distinct program and every result it got."""

    source: str
    mechanism: str
    per_index: dict[int, list[float]] = field(default_factory=dict)
    """Episode index -> returns seen on it (when per-episode returns are observed)."""
    means: list[tuple[tuple[int, ...], float]] = field(default_factory=list)
    """(indices, mean) of each ok submit."""
    submit_ids: list[int] = field(default_factory=list)

    def mean(self, on: set[int] | None = None) -> float | None:
        if self.per_index:
            vals = [r for i, rs in self.per_index.items() if on is None or i in on for r in rs]
            return sum(vals) / len(vals) if vals else None
        picked = [(len(ix), m) for ix, m in self.means if on is None or set(ix) == on]
        total = sum(n for n, _ in picked)
        return sum(n * m for n, m in picked) / total if total else None

    def indices(self) -> set[int]:
        return set(self.per_index) if self.per_index else {i for ix, _ in self.means for i in ix}


class ProgramMemory:
    """Kept programs (top-k by train score), the incumbent, the edit log and episode index selection."""

    def __init__(self, top_k: int, log_size: int, verification: Verification) -> None:
        self.top_k, self.log_size, self.ver = top_k, log_size, verification
        self.kept: dict[str, Kept] = {}
        self.incumbent: Kept | None = None
        self.entries: list[str] = []
        self._matched: list[int] = []
        self._cursor = 0
        self._n = 1
        self._confirm_round: list[int] = []
        self._confirm_queue: list[Kept] = []

    # ---- episode indices ---------------------------------------------------------------------
    def set_index_space(self, n_ids: int, matched_size: int) -> None:
        self._n = max(1, n_ids)
        self._matched = list(range(min(matched_size, self._n)))
        self._cursor = len(self._matched) % self._n

    def _fresh(self, k: int) -> list[int]:
        out = [(self._cursor + j) % self._n for j in range(k)]
        self._cursor = (self._cursor + k) % self._n
        return out

    def indices(self, k: int, selection: str) -> list[int]:
        """matched: the same leading set every time; fresh: never-used ids; mixed: half of each."""
        if selection == "fresh":
            return self._fresh(k)
        n_matched = k if selection == "matched" else (k + 1) // 2
        head = self._matched[:n_matched]
        return head + self._fresh(k - len(head))

    def next_to_confirm(self, k: int) -> tuple[Kept | None, list[int]]:
        """The next kept program to re-test and its indices: one shared set of new ids per round over the top-k."""
        if not self._confirm_queue:
            self._confirm_queue = self.ranked()
            self._confirm_round = self._fresh(k)
        target = self._confirm_queue.pop(0) if self._confirm_queue else None
        return target, list(self._confirm_round[:k])

    # ---- results -----------------------------------------------------------------------------
    @staticmethod
    def score_of(summary: dict[str, Any], fields: Sequence[str]) -> float | None:
        """The submit's score from the observed fields only (mean_return, else the mean of returns)."""
        if "mean_return" in fields and isinstance(summary.get("mean_return"), (int, float)):
            return float(summary["mean_return"])
        returns = summary.get("returns") if "returns" in fields else None
        if isinstance(returns, list) and returns and all(isinstance(r, (int, float)) for r in returns):
            return sum(returns) / len(returns)
        return None

    def add_result(self, source: str, mechanism: str, answer: Any, fields: Sequence[str]) -> None:
        kept = self.kept.get(source) or Kept(source, mechanism)
        self.kept[source] = kept
        indices = tuple(int(i) for i in answer.summary.get("env_instances") or ())
        returns = answer.summary.get("returns") if "returns" in fields else None
        if isinstance(returns, list) and len(returns) == len(indices):
            for i, r in zip(indices, returns):
                kept.per_index.setdefault(i, []).append(float(r))
        score = self.score_of(answer.summary, fields)
        if score is not None:
            kept.means.append((indices, score))
        if answer.submit_id is not None:
            kept.submit_ids.append(int(answer.submit_id))
        self._trim()

    def _trim(self) -> None:
        """Keep the top-k programs (and the incumbent); the rest are forgotten."""
        keep = {k.source for k in self.ranked()[:self.top_k]}
        if self.incumbent is not None:
            keep.add(self.incumbent.source)
        self.kept = {s: k for s, k in self.kept.items() if s in keep or k.mean() is None}

    def ranked(self) -> list[Kept]:
        scored = [k for k in self.kept.values() if k.mean() is not None]
        return sorted(scored, key=lambda k: -float(k.mean()))[:self.top_k]  # type: ignore[arg-type]

    def best(self) -> Kept | None:
        ranked = self.ranked()
        return ranked[0] if ranked else None

    def kept_for(self, source: str | None) -> Kept | None:
        return self.kept.get(source) if source is not None else None

    def mean(self, source: str) -> float:
        kept = self.kept.get(source)
        value = kept.mean() if kept else None
        return float("nan") if value is None else value

    def beats(self, source: str, incumbent: Kept | None) -> bool:
        """Candidate beats the incumbent by the relative margin, on shared indices when matched."""
        cand = self.kept.get(source)
        if cand is None or cand.mean() is None:
            return False
        if incumbent is None or incumbent.source == source:
            return incumbent is None
        common = cand.indices() & incumbent.indices() if self.ver.matched_comparison else set()
        on = common if common and (cand.per_index or len(common) == len(cand.indices())) else None
        c, i = cand.mean(on), incumbent.mean(on)
        if c is None or i is None:
            c, i = cand.mean(), incumbent.mean()
        if c is None or i is None:
            return False
        return c > i + self.ver.margin * max(abs(i), SCORE_FLOOR)

    # ---- what the model is shown -------------------------------------------------------------
    def log(self, entry: str) -> None:
        self.entries.append(entry)

    def log_lines(self) -> tuple[str, ...]:
        return tuple(self.entries[-self.log_size:]) if self.log_size else ()

    def best_lines(self) -> tuple[tuple[str, float, int], ...]:
        return tuple((k.mechanism, float(k.mean()), k.submit_ids[-1] if k.submit_ids else -1)  # type: ignore[arg-type]
                     for k in self.ranked())
