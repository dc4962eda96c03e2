"""Evidence extraction ε(D): verified traces -> typed evidence items (OLE Eq. 5).

Each item is e = (direction ±, metric change δ, target component, supporting trace ids)
plus the detector that found it, a sentence, and hints naming the loop-policy fields a
proposer should move (`path:up`, `path:down` or `path=value`). Detectors are
deterministic functions of the traces; unverified traces never enter. Direction `-`
means the behaviour is consistent with failure and supports revising the component;
`+` means it is consistent with success and supports keeping or reinforcing it.
"""
from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from ole.trace import Iteration, Trace

SCHEMA_VERSION = "1"

WASTE_SHARE = 0.1
"""Share of charged episodes on failed verdicts above which budget counts as wasted."""
REGRESSION_DROP = 0.05
"""Relative drop below the best-so-far mean return that counts as a regression."""
PLATEAU_SHARE = 0.4
"""Share of charged episodes after the last improvement that counts as a plateau."""
LATE_SHARE = 0.2
"""An improvement in the last LATE_SHARE of the charged episodes counts as late."""
GAP_SHARE = 0.2
"""Relative gap of held-out score below the best train mean that counts as overfitting."""
RATE_MARGIN = 0.15
"""Difference of success rates between synthesis and tuning edits worth reporting."""
MIN_EDITS = 3
"""Fewest edits of each kind before their success rates are compared."""
MISS_SHARE = 0.5
"""Share of traces whose in-loop best submit was not the validation-selected one."""


class EvidenceItem(BaseModel):
    """One typed piece of evolution evidence."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    schema_version: Literal["1"] = SCHEMA_VERSION
    """Evidence schema version."""
    evidence_id: str
    """Stable id `ev-<detector>-<hash>` (same traces + same finding -> same id)."""
    detector: str
    """Which detector found it."""
    direction: Literal["+", "-"]
    """+ supports keeping the behaviour, - supports revising it."""
    metric: str
    """What δ measures."""
    delta: float
    """The metric change (signed: negative is bad for the run)."""
    component: Literal["observation", "planning", "memory", "action", "verification", "recovery",
                       "stopping", "budget"]
    """The loop-policy component the evidence targets."""
    trace_ids: tuple[str, ...]
    """Supporting traces."""
    sentence: str
    """One human sentence stating the finding."""
    hints: tuple[str, ...] = Field(default=())
    """Fields a proposer should move: `component.field:up`, `:down`, or `=value`."""


def _item(detector: str, direction: str, metric: str, delta: float, component: str,
          traces: Sequence[Trace], sentence: str, hints: Iterable[str]) -> EvidenceItem:
    ids = tuple(sorted(t.trace_id for t in traces))
    digest = hashlib.sha256(f"{detector}|{direction}|{component}|{','.join(ids)}".encode()).hexdigest()[:10]
    return EvidenceItem(evidence_id=f"ev-{detector}-{digest}", detector=detector, direction=direction,
                        metric=metric, delta=round(float(delta), 6), component=component, trace_ids=ids,
                        sentence=sentence, hints=tuple(hints))  # type: ignore[arg-type]


def _submits(t: Trace) -> list[Iteration]:
    return [it for it in t.history if it.submit_id is not None]


def _improvements(t: Trace) -> list[tuple[int, Iteration, bool]]:
    """(cumulative episodes after the submit, the submit, improved best-so-far?) per submit."""
    out, best, spent = [], None, 0
    for it in _submits(t):
        spent += it.episodes_charged
        better = it.mean_return is not None and (best is None or it.mean_return > best)
        if better:
            best = it.mean_return
        out.append((spent, it, better))
    return out


def failed_verdict_waste(traces: Sequence[Trace]) -> list[EvidenceItem]:
    """Budget charged to submits whose verdict was not `ok`."""
    hit, wasted, total = [], 0, 0
    for t in traces:
        bad = sum(it.episodes_charged for it in _submits(t) if it.verdict not in (None, "ok"))
        wasted, total = wasted + bad, total + sum(it.episodes_charged for it in _submits(t))
        if bad:
            hit.append(t)
    share = wasted / total if total else 0.0
    if share <= WASTE_SHARE:
        return []
    return [_item("failed_verdict_waste", "-", "share of episodes on failed verdicts", -share, "recovery", hit,
                  f"{share:.0%} of charged episodes went to submits with a failure verdict.",
                  ("recovery.on_error_verdict=revert", "recovery.max_retries:down", "verification.static_checks=true"))]


def unreverted_regressions(traces: Sequence[Trace]) -> list[EvidenceItem]:
    """A regressing submit followed by another edit from it instead of a revert."""
    hit, count, judged = [], 0, 0
    for t in traces:
        subs, best, n = _submits(t), None, 0
        judged += max(0, len(subs) - 1)
        for cur, nxt in zip(subs, subs[1:]):
            if cur.mean_return is not None and best is not None:
                drop = (best - cur.mean_return) / max(abs(best), 1e-6)
                n += drop > REGRESSION_DROP and nxt.edit_kind != "revert"
            if cur.mean_return is not None:
                best = cur.mean_return if best is None else max(best, cur.mean_return)
        if n:
            hit.append(t)
            count += n
    if not hit:
        return []
    return [_item("unreverted_regression", "-", "share of submits building on a regression", -count / judged, "recovery",
                  hit, f"{count} regressing submits were built on instead of reverted.",
                  ("recovery.on_regression=revert", "verification.retest_episodes:up"))]


def plateaus(traces: Sequence[Trace]) -> list[EvidenceItem]:
    """A large share of the budget spent after the last improvement (stop early or restructure)."""
    hit, shares = [], []
    for t in traces:
        imp = _improvements(t)
        if not imp:
            continue
        total = imp[-1][0]
        last = max((spent for spent, _, better in imp if better), default=0)
        share = (total - last) / total if total else 0.0
        if share > PLATEAU_SHARE:
            hit.append(t)
            shares.append(share)
    if not hit:
        return []
    mean = sum(shares) / len(shares)
    return [_item("plateau", "-", "share of episodes after the last improvement", -mean, "planning", hit,
                  f"{len(hit)} runs spent {mean:.0%} of their budget after their last improvement.",
                  ("planning.plateau_submits:down", "planning.on_plateau=restructure")),
            _item("early_stop", "-", "episodes that could have been saved", -mean, "stopping", hit,
                  f"Finishing at the plateau would have saved about {mean:.0%} of the budget in {len(hit)} runs.",
                  ("stopping.mode=finish_early", "stopping.patience_submits:down"))]


def late_improvements(traces: Sequence[Trace]) -> list[EvidenceItem]:
    """Improvements still arriving in the last part of the budget: the run was budget-limited."""
    hit = []
    for t in traces:
        imp = _improvements(t)
        if imp and any(better and spent > (1 - LATE_SHARE) * imp[-1][0] and i > 0
                       for i, (spent, _, better) in enumerate(imp)):
            hit.append(t)
    if not hit:
        return []
    share = len(hit) / len(traces)
    return [_item("late_improvement", "-", "share of runs improving late", -share, "budget", hit,
                  f"{len(hit)} of {len(traces)} runs still improved in the last {LATE_SHARE:.0%} of the budget.",
                  ("budget.confirmation_fraction:down", "budget.synthesis_fraction:down"))]


def heldout_gaps(traces: Sequence[Trace]) -> list[EvidenceItem]:
    """Held-out score well below the best train mean: in-loop progress did not generalize."""
    hit, gaps = [], []
    for t in traces:
        means = [it.mean_return for it in _submits(t) if it.mean_return is not None]
        if not means or t.outcome.final_score is None:
            continue
        best = max(means)
        gap = (best - t.outcome.final_score) / max(abs(best), 1.0)
        if gap > GAP_SHARE:
            hit.append(t)
            gaps.append(gap)
    if not hit:
        return []
    mean = sum(gaps) / len(gaps)
    return [_item("heldout_gap", "-", "relative gap train best -> held-out", -mean, "verification", hit,
                  f"{len(hit)} runs scored {mean:.0%} lower on held-out cases than their best train mean.",
                  ("verification.retest_episodes:up", "verification.margin:up", "action.index_selection=mixed"))]


def edit_success_rates(traces: Sequence[Trace]) -> list[EvidenceItem]:
    """EvoPolicyGym's diagnostic: how often synthesis vs tuning edits improved the best-so-far."""
    tried = {"synthesis": 0, "tuning": 0}
    won = {"synthesis": 0, "tuning": 0}
    used = []
    for t in traces:
        touched = False
        for _, it, better in _improvements(t):
            if it.edit_kind in tried:
                tried[it.edit_kind] += 1
                won[it.edit_kind] += better
                touched = True
        if touched:
            used.append(t)
    if min(tried.values()) < MIN_EDITS:
        return []
    diff = won["synthesis"] / tried["synthesis"] - won["tuning"] / tried["tuning"]
    if abs(diff) < RATE_MARGIN:
        return []
    more = "synthesis" if diff > 0 else "tuning"
    hints = (("budget.synthesis_fraction:up", "planning.max_mechanisms:up") if diff > 0
             else ("budget.synthesis_fraction:down", "action.population:up"))
    return [_item("edit_success", "+", "synthesis minus tuning success rate", diff, "budget", used,
                  f"{more.capitalize()} edits improved the best program more often "
                  f"(synthesis {won['synthesis']}/{tried['synthesis']}, tuning {won['tuning']}/{tried['tuning']}).",
                  hints)]


def verification_misses(traces: Sequence[Trace]) -> list[EvidenceItem]:
    """The in-loop best submit was not the one validation selected: the agent's signal misled it."""
    hit, judged = [], 0
    for t in traces:
        subs = [it for it in _submits(t) if it.mean_return is not None]
        if not subs or t.outcome.best_submit_index is None:
            continue
        judged += 1
        top = max(subs, key=lambda it: it.mean_return)
        if top.submit_id != t.outcome.best_submit_index:
            hit.append(t)
    if not judged or len(hit) / judged < MISS_SHARE:
        return []
    share = len(hit) / judged
    return [_item("verification_miss", "-", "share of runs whose in-loop best lost on validation", -share,
                  "verification", hit,
                  f"In {len(hit)} of {judged} runs the best train submit was not the validation-selected one.",
                  ("verification.retest_episodes:up", "verification.matched_comparison=true",
                   "action.episodes_per_submit:up"))]


DETECTORS: tuple[Callable[[Sequence[Trace]], list[EvidenceItem]], ...] = (
    failed_verdict_waste, unreverted_regressions, plateaus, late_improvements, heldout_gaps,
    edit_success_rates, verification_misses)


def extract(traces: Iterable[Trace]) -> list[EvidenceItem]:
    """ε(D): run every detector on the verified traces; same traces -> same items, same order."""
    usable = sorted((t for t in traces if t.verified), key=lambda t: t.trace_id)
    if not usable:
        return []
    return [item for detector in DETECTORS for item in detector(usable)]
