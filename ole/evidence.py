"""Evidence extraction ε(D): verified traces -> typed evidence items (OLE Eq. 5).

Each item is e = (direction ±, metric change δ, target component, supporting trace ids)
plus the detector that found it, a sentence, and hints naming the loop-policy fields a
proposer should move (`path:up`, `path:down`, `path:xF` for a factor F, or `path=value`).
An item's hints are one coherent change: a proposer may apply any non-empty subset of them
together. Detectors are deterministic functions of the traces; unverified traces never enter. Direction `-`
means the behaviour is consistent with failure and supports revising the component; `+`
means it is consistent with success and supports keeping or reinforcing it.

The budget-structure detectors (`tuning_rounds`, `verification_overhead`, `phase_yield`,
`early_selection`) read what each submit was for (`Iteration.role`), the program it was
built on (`base_submit`) and the tuning round it belonged to (`search_round`); their hints
carry target values computed from the run's own arithmetic (episodes per phase, per
candidate, per round), so one proposal can move a field as far as the evidence says
instead of one ×1.5 step at a time. Traces whose agent does not record roles (older
traces, some external agents) are skipped by these detectors, never guessed at.
"""
from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Sequence
from typing import Final, Literal

from pydantic import BaseModel, ConfigDict, Field

from ole.loop_policy import Component
from ole.trace import Iteration, Trace

SCHEMA_VERSION: Final = "1"

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
TARGET_ROUNDS = 3
"""Tuning generations a run should complete: the first round only samples around the start,
so a search needs a few told rounds before its step size and mean adapt."""
FEW_ROUNDS_SHARE = 0.5
"""Share of runs completing fewer than TARGET_ROUNDS rounds that makes the budget structure news."""
OVERHEAD_SHARE = 0.3
"""Share of charged episodes spent re-testing and confirming (roles retest, reference,
confirm) above which verification is costly enough to weigh against what it catches."""
OVERTURN_SHARE = 0.34
"""A retest "overturns" when it fails to confirm the apparent improvement; below this share of
retests overturning, most retest episodes confirmed what the first submit already said."""
YIELD_EPISODE_SHARE = 0.2
"""A phase holding at least this share of the episodes..."""
YIELD_GAIN_SHARE = 0.1
"""...but producing less than this share of the best-so-far gains is a low-yield phase."""
EARLY_SELECTION = 0.4
"""Validation selecting a checkpoint from the first EARLY_SELECTION of the submits is early."""


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
    component: Component
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
    digest = hashlib.sha256(f"{detector}|{direction}|{component}|{metric}|{','.join(ids)}".encode()).hexdigest()[:10]
    return EvidenceItem(evidence_id=f"ev-{detector}-{digest}", detector=detector, direction=direction,
                        metric=metric, delta=round(float(delta), 6), component=component, trace_ids=ids,
                        sentence=sentence, hints=tuple(hints))


def _submits(t: Trace) -> list[Iteration]:
    return [it for it in t.history if it.submit_id is not None]


def _has_roles(t: Trace) -> bool:
    """True when the agent recorded why it made each submit (the budget-structure detectors need it)."""
    subs = _submits(t)
    return bool(subs) and all(it.role is not None for it in subs)


def _episodes(t: Trace, pred) -> int:
    return sum(it.episodes_charged for it in _submits(t) if pred(it))


def _median(values: Sequence[float]) -> float:
    v = sorted(values)
    return v[len(v) // 2] if v else 0.0





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


def _built_on_regressions(t: Trace) -> tuple[int, int]:
    """(regressing submits that a later edit was built on, submits judged) for one trace.

    With `base_submit` recorded, a regression counts only when a later submit names it as its
    base — a search sample that scored badly and was dropped is not built on, whatever came
    next. Without it (agents that do not say), the next submit not being a revert counts.
    """
    subs, best, n = _submits(t), None, 0
    regressed: set[int | None] = set()
    with_base = any(it.base_submit is not None for it in subs)
    for cur, nxt in zip(subs, [*subs[1:], None]):
        if cur.mean_return is not None and best is not None and cur.role in (None, "candidate"):
            if (best - cur.mean_return) / max(abs(best), 1e-6) > REGRESSION_DROP:
                regressed.add(cur.submit_id)
                if not with_base and nxt is not None and nxt.edit_kind != "revert":
                    n += 1
        if cur.mean_return is not None and cur.role in (None, "candidate", "retest"):
            best = cur.mean_return if best is None else max(best, cur.mean_return)
    if with_base:
        n = len({it.base_submit for it in subs if it.base_submit in regressed and it.role in (None, "candidate")})
    return n, max(0, len(subs) - 1)


def unreverted_regressions(traces: Sequence[Trace]) -> list[EvidenceItem]:
    """A regressing submit that later edits were built on instead of reverted."""
    hit, count, judged = [], 0, 0
    for t in traces:
        n, k = _built_on_regressions(t)
        judged += k
        if n:
            hit.append(t)
            count += n
    if not hit:
        return []
    return [_item("unreverted_regression", "-", "share of submits building on a regression", -count / judged, "recovery",
                  hit, f"{count} regressing submits were built on instead of reverted.",
                  ("recovery.on_regression=revert", "verification.retest_episodes:up"))]


def _above(traces: Sequence[Trace], measure: Callable[[Trace], float | None],
           floor: float) -> tuple[list[Trace], float]:
    """The traces whose measure exceeds `floor` (None: not measurable), and their mean measure."""
    hit, values = [], []
    for t in traces:
        value = measure(t)
        if value is not None and value > floor:
            hit.append(t)
            values.append(value)
    return hit, (sum(values) / len(values) if values else 0.0)


def _plateau_share(t: Trace) -> float | None:
    """Share of the run's charged episodes spent after its last improvement."""
    imp = _improvements(t)
    if not imp:
        return None
    total = imp[-1][0]
    last = max((spent for spent, _, better in imp if better), default=0)
    return (total - last) / total if total else 0.0


def plateaus(traces: Sequence[Trace]) -> list[EvidenceItem]:
    """A large share of the budget spent after the last improvement (stop early or restructure)."""
    hit, mean = _above(traces, _plateau_share, PLATEAU_SHARE)
    if not hit:
        return []
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


def _heldout_gap(t: Trace) -> float | None:
    """Relative gap from the run's best train mean down to its held-out score."""
    means = [it.mean_return for it in _submits(t) if it.mean_return is not None]
    if not means or t.outcome.final_score is None:
        return None
    best = max(means)
    return (best - t.outcome.final_score) / max(abs(best), 1.0)


def heldout_gaps(traces: Sequence[Trace]) -> list[EvidenceItem]:
    """Held-out score well below the best train mean: in-loop progress did not generalize."""
    hit, mean = _above(traces, _heldout_gap, GAP_SHARE)
    if not hit:
        return []
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
        top = max(subs, key=lambda it: it.mean_return or 0.0)  # every one has a mean (filtered above)
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


def _completed_rounds(t: Trace) -> int:
    """Tuning rounds followed by a later round of the same search (so they were scored and told)."""
    rounds = [it.search_round for it in _submits(t) if it.role == "candidate" and it.search_round is not None]
    return sum(1 for a, b in zip(rounds, rounds[1:]) if b == a + 1)


def tuning_rounds(traces: Sequence[Trace]) -> list[EvidenceItem]:
    """Budget structure: how many tuning generations the runs completed, and what would fit.

    The hint's targets come from each run's own arithmetic: T episodes went to tuning and E
    to each candidate, so about T/E candidates fit. The hint picks the largest submit size S
    (at most E/2) at which a population of 2 runs TARGET_ROUNDS + 1 rounds within T, the largest
    population that fits at S, and retests no larger than a submit: together they give the
    search its rounds (population x S x rounds <= T).
    """
    hit, done, targets = [], [], []
    for t in traces:
        if not _has_roles(t):
            continue
        cands = [it for it in _submits(t) if it.phase == "tuning" and it.role == "candidate"]
        tuning = _episodes(t, lambda it: it.phase == "tuning")
        if not cands or tuning <= 0:
            continue
        completed = _completed_rounds(t)
        done.append(completed)
        if completed < TARGET_ROUNDS:
            hit.append(t)
            per = max(1, int(_median([it.episodes_charged for it in cands])))
            targets.append((tuning, per))
    if not done or len(hit) / len(done) < FEW_ROUNDS_SHARE:
        return []
    tuning, per = min(targets)  # the tightest run decides: the change must fit every hit run
    rounds = TARGET_ROUNDS + 1  # TARGET_ROUNDS completed rounds take one more round of candidates
    # the largest submit (at most half today's) with which the smallest population (2) fits the rounds,
    # then the largest population that fits at that size: the hint must fit its own arithmetic
    size = max(1, min(per // 2, tuning // (2 * rounds)))
    population = max(2, min(8, tuning // (size * rounds)))
    mean_done = sum(done) / len(done)
    return [_item("tuning_rounds", "-", "mean completed tuning rounds", mean_done - TARGET_ROUNDS, "action", hit,
                  f"{len(hit)} of {len(done)} runs completed fewer than {TARGET_ROUNDS} tuning rounds "
                  f"(mean {mean_done:.1f}); {tuning} tuning episodes at {per} per candidate fit about "
                  f"{tuning // per} candidates.",
                  (f"action.population={population}", f"action.episodes_per_submit={size}",
                   f"verification.retest_episodes={min(size, 2)}", "budget.confirmation_fraction:x0.5"))]


def _retest_outcomes(t: Trace) -> tuple[int, int]:
    """(retests, retests that failed to confirm) — a retest followed by its reference submit."""
    subs, n, overturned = _submits(t), 0, 0
    for a, b in zip(subs, subs[1:]):
        if a.role == "retest":
            n += 1
            ref = b.mean_return if b.role == "reference" else None
            if a.mean_return is None or (ref is not None and a.mean_return <= ref):
                overturned += 1
    return n, overturned


def verification_overhead(traces: Sequence[Trace]) -> list[EvidenceItem]:
    """Budget spent re-testing and confirming, weighed against how often a retest overturned."""
    hit, shares, retests, overturned = [], [], 0, 0
    for t in traces:
        if not _has_roles(t):
            continue
        total = _episodes(t, lambda it: True)
        over = _episodes(t, lambda it: it.role in ("retest", "reference", "confirm"))
        n, o = _retest_outcomes(t)
        retests, overturned = retests + n, overturned + o
        if total and over / total > OVERHEAD_SHARE:
            hit.append(t)
            shares.append(over / total)
    if not hit:
        return []
    share = sum(shares) / len(shares)
    rate = overturned / retests if retests else 0.0
    if retests and rate >= OVERTURN_SHARE:
        return [_item("verification_overhead", "+", "share of retests that overturned an apparent gain", rate,
                      "verification", hit,
                      f"{share:.0%} of the episodes went to retests and confirmation, and {overturned} of "
                      f"{retests} retests overturned an apparent improvement: verification is catching noise.",
                      ("verification.retest_episodes:up", "budget.confirmation_fraction:down"))]
    return [_item("verification_overhead", "-", "share of episodes on retests and confirmation", -share,
                  "verification", hit,
                  f"{len(hit)} runs spent {share:.0%} of their episodes re-testing and confirming, "
                  + (f"while only {overturned} of {retests} retests overturned a result" if retests
                     else "and no retest ever ran to overturn a result")
                  + ": those episodes could score new candidates.",
                  ("verification.retest_episodes=0", "budget.confirmation_fraction=0.0",
                   "verification.matched_comparison=false"))]


PHASE_FIELDS = {"synthesis": "budget.synthesis_fraction", "confirmation": "budget.confirmation_fraction"}
"""The budget share that sizes each phase (tuning gets the rest)."""


def phase_yield(traces: Sequence[Trace]) -> list[EvidenceItem]:
    """Where in the phase schedule the gains came from, against where the episodes went.

    Gain = the rise of the best-so-far candidate score, credited to the phase of the submit
    that made it, over the run's total rise. A phase with much budget and little gain should
    shrink; one whose gains outrun its budget should grow.
    """
    episodes: dict[str, int] = {}
    gains: dict[str, float] = {}
    used = []
    for t in traces:
        if not _has_roles(t):
            continue
        means = [it.mean_return for it in _submits(t) if it.mean_return is not None]
        if len(means) < 2:
            continue
        best: float | None = None
        for it in _submits(t):
            episodes[it.phase] = episodes.get(it.phase, 0) + it.episodes_charged
            if it.mean_return is None or it.role not in ("candidate", "retest"):
                continue
            if best is not None and it.mean_return > best:
                lo = min(means)
                span = max(means) - lo
                gains[it.phase] = gains.get(it.phase, 0.0) + (it.mean_return - best) / max(span, 1e-9)
            best = it.mean_return if best is None else max(best, it.mean_return)
        used.append(t)
    total_e, total_g = sum(episodes.values()), sum(gains.values())
    if not used or not total_e:
        return []
    out = []
    for phase, field in PHASE_FIELDS.items():
        e_share = episodes.get(phase, 0) / total_e
        g_share = gains.get(phase, 0.0) / total_g if total_g > 0 else 0.0
        if e_share >= YIELD_EPISODE_SHARE and g_share < YIELD_GAIN_SHARE:
            hints = (f"{field}=0.0",) if phase == "confirmation" else (f"{field}:x0.5", "planning.max_mechanisms:down")
            out.append(_item("phase_yield", "-", f"gain share minus episode share of {phase}", g_share - e_share,
                             "budget", used, f"{phase.capitalize()} took {e_share:.0%} of the episodes but made "
                             f"{g_share:.0%} of the best-so-far gains.", hints))
        elif g_share > max(e_share * 1.5, YIELD_GAIN_SHARE) and phase == "synthesis":
            out.append(_item("phase_yield", "+", "gain share minus episode share of synthesis", g_share - e_share,
                             "budget", used, f"Synthesis took {e_share:.0%} of the episodes and made {g_share:.0%} "
                             "of the gains.", (f"{field}:x1.5", "planning.max_mechanisms:up")))
    return out


def early_selection(traces: Sequence[Trace]) -> list[EvidenceItem]:
    """Hidden validation kept choosing an early checkpoint: later submits did not generalise."""
    hit, judged, positions = [], 0, []
    for t in traces:
        subs = _submits(t)
        sel = t.outcome.best_submit_index
        if len(subs) < 4 or sel is None:
            continue
        judged += 1
        pos = sel / len(subs)
        if pos < EARLY_SELECTION:
            hit.append(t)
            positions.append(pos)
    if not judged or len(hit) / judged < 0.5:
        return []
    return [_item("early_selection", "-", "share of runs whose selected checkpoint came early", -len(hit) / judged,
                  "planning", hit,
                  f"In {len(hit)} of {judged} runs hidden validation selected a checkpoint from the first "
                  f"{EARLY_SELECTION:.0%} of the submits: the later programs did not generalise better.",
                  ("action.index_selection=mixed", "action.episodes_per_submit:x2", "budget.synthesis_fraction:x1.5"))]


def single_structure(traces: Sequence[Trace]) -> list[EvidenceItem]:
    """Every submit of a run was one program structure: no alternative was ever compared.

    Reads `Iteration.mechanism` (the program family the agent says it submitted). When the runs
    had no synthesis phase at all, the hint restores the phase with a real share of the budget
    (a fraction of 0 cannot grow by steps); otherwise it widens the synthesis that ran.
    """
    hit, judged = [], 0
    for t in traces:
        mechs = {it.mechanism for it in _submits(t) if it.mechanism}
        if not mechs:
            continue
        judged += 1
        if len(mechs) == 1:
            hit.append(t)
    if not judged or len(hit) / judged < 0.5:
        return []
    no_synthesis = all(_episodes(t, lambda it: it.phase == "synthesis") == 0 for t in hit)
    hints = (("planning.phases=synthesis,tuning,confirmation", "budget.synthesis_fraction=0.3",
              "planning.max_mechanisms=4") if no_synthesis
             else ("planning.max_mechanisms:x2", "budget.synthesis_fraction:x1.5"))
    return [_item("single_structure", "-", "share of runs that tried one program structure", -len(hit) / judged,
                  "planning", hit, f"{len(hit)} of {judged} runs submitted a single program structure"
                  + (" and had no synthesis phase" if no_synthesis else "") + ": no alternative was compared.",
                  hints)]


DETECTORS: tuple[Callable[[Sequence[Trace]], list[EvidenceItem]], ...] = (
    failed_verdict_waste, unreverted_regressions, plateaus, late_improvements, heldout_gaps,
    edit_success_rates, verification_misses, tuning_rounds, verification_overhead, phase_yield, early_selection,
    single_structure)


def extract(traces: Iterable[Trace]) -> list[EvidenceItem]:
    """ε(D): run every detector on the verified traces; same traces -> same items, same order."""
    usable = sorted((t for t in traces if t.verified), key=lambda t: t.trace_id)
    if not usable:
        return []
    return [item for detector in DETECTORS for item in detector(usable)]
