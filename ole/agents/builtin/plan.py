"""Pure planning decisions of the built-in agent, one function per Loop Policy concern.

Kept free of I/O so each decision can be tested field by field: the same inputs
with one Loop Policy field changed must give a different decision.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ole.loop_policy import LoopPolicy

MIN_SCALE = 1e-6
"""Smallest |incumbent| used to turn the relative margin into an absolute one."""


@dataclass(frozen=True)
class PhaseBudget:
    """Episodes allotted to each phase (and never spent) for one run."""

    synthesis: int
    tuning: int
    confirmation: int
    reserve: int


def phase_budget(lp: LoopPolicy, budget: int) -> PhaseBudget:
    """Split the episode budget; phases left out of the schedule get nothing."""
    reserve = min(lp.stopping.reserve_episodes, budget - 1) if lp.stopping.mode == "finish_early" else 0
    usable = budget - reserve
    phases = lp.planning.phases
    synth = int(round(usable * lp.budget.synthesis_fraction)) if "synthesis" in phases else 0
    confirm = int(round(usable * lp.budget.confirmation_fraction)) if "confirmation" in phases else 0
    tuning = usable - synth - confirm if "tuning" in phases else 0
    if "tuning" not in phases:
        if "confirmation" in phases:
            confirm = usable - synth
        else:
            synth = usable
    return PhaseBudget(synth, max(0, tuning), confirm, reserve)


def submit_size(lp: LoopPolicy, remaining: int, lo: int, hi: int) -> int:
    """Episodes in one exploratory submit, within the host's bounds and what is left."""
    return max(lo, min(lp.action.episodes_per_submit, hi, remaining))


class IndexPlan:
    """Train episode ids per submit: matched (common random numbers), fresh, or mixed."""

    def __init__(self, lp: LoopPolicy, n_instances: int, seed: int) -> None:
        self.mode = lp.action.index_selection
        self.order = [int(i) for i in np.random.default_rng(seed).permutation(n_instances)]
        self.cursor = 0

    def _fresh(self, k: int) -> list[int]:
        out = [self.order[(self.cursor + j) % len(self.order)] for j in range(k)]
        self.cursor += k
        return out

    def pick(self, k: int) -> list[int]:
        """Indices for the next comparison submit of size k."""
        if self.mode == "matched":
            return self.order[:k]
        if self.mode == "fresh":
            return self._fresh(k)
        half = k // 2
        return self.order[:half] + self._fresh(k - half)

    def retest(self, k: int) -> list[int]:
        """Indices never used for comparison submits (independent re-test evidence)."""
        base = len(self.order) // 2
        out = [self.order[base + (self.cursor + j) % (len(self.order) - base)] for j in range(k)]
        self.cursor += k
        return out


def score(lp: LoopPolicy, summary: dict) -> float | None:
    """The agent's score of a submit, from the summary fields it is allowed to read.

    With `returns` readable the score is a lower confidence bound (mean − stderr), so an
    improvement must hold across episodes; with only `mean_return`, the plain mean.
    With `errors` readable, errored episodes count as the worst return seen.
    """
    fields = set(lp.observation.summary_fields)
    returns = summary.get("returns") if "returns" in fields else None
    if returns:
        r = np.asarray(returns, dtype=float)
        if "errors" in fields and summary.get("errors"):
            r[[i for i in summary["errors"] if 0 <= i < r.size]] = r.min()
        if summary.get("status") != "ok" and "status" in fields:
            return None
        return float(r.mean() - (r.std() / math.sqrt(r.size) if r.size > 1 else 0.0))
    mean = summary.get("mean_return") if "mean_return" in fields else None
    return None if mean is None else float(mean)


def beats(lp: LoopPolicy, candidate: float, incumbent: float | None) -> bool:
    """Candidate beats incumbent by the relative margin."""
    if incumbent is None:
        return True
    need = lp.verification.margin * max(abs(incumbent), MIN_SCALE)
    return candidate > incumbent + need


def plateau_action(lp: LoopPolicy, stale: int) -> str | None:
    """What to do after `stale` consecutive non-improving submits in a phase."""
    return lp.planning.on_plateau if stale >= lp.planning.plateau_submits else None


def error_action(lp: LoopPolicy, consecutive_failures: int) -> str:
    """Recovery after a charged failure verdict; escalates past `max_retries`."""
    action = lp.recovery.on_error_verdict
    if consecutive_failures > lp.recovery.max_retries:
        return "restructure" if action != "restructure" else "revert"
    return action


def should_finish(lp: LoopPolicy, stale_total: int, remaining: int) -> bool:
    """finish_early: stop after `patience_submits` non-improving submits or at the reserve."""
    if lp.stopping.mode != "finish_early":
        return False
    return stale_total >= lp.stopping.patience_submits or remaining <= lp.stopping.reserve_episodes


def step_factor(lp: LoopPolicy, edit_log: list[bool]) -> float:
    """1/5th success rule over the last `edit_log_size` edits: the search step multiplier."""
    window = edit_log[-lp.memory.edit_log_size:] if lp.memory.edit_log_size else []
    if len(window) < 3:
        return 1.0
    rate = sum(window) / len(window)
    return float(math.exp((rate - 0.2) / 0.8))
