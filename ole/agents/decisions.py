"""What the Loop Policy decides, decided once for every host agent.

A field means one thing to every agent that reads it (house rule): the built-in agent
samples parameter vectors and the LLM agent asks a model for a program, but *what* is
decided -- how a submit is scored, when a candidate beats the incumbent, which episode
ids a submit uses and how many, how the budget is split over the phases, what a failure
or a plateau triggers, when the run stops -- comes from the functions here. The agents
only carry the decisions out. `docs/loop-policy.md` describes exactly these functions;
the command agent gets them as written rules (`ole.agents.command.render_instructions`).

Pure: no I/O and no clocks, so each decision is tested field by field
(`tests/ole/test_decisions.py`, and through both agents in the sensitivity tests).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Literal, Mapping, Sequence

import numpy as np

from ole.loop_policy import PHASES, RUN_LENGTH_FIELDS, LoopPolicy, Phase

MIN_SCALE = 1e-6
"""Smallest |incumbent mean| a relative margin is taken of (`verification.margin`)."""

ErrorAction = Literal["retry", "revert", "restructure"]
ESCALATION: tuple[ErrorAction, ...] = ("retry", "revert", "restructure")
"""The recovery ladder: each `max_retries + 1` consecutive failures move one rung up."""



# ---- budget: the policy at the task's budget, how the episodes are split, how many one submit spends

def scaled_count(value: int, budget: int, reference: int | None, *, floor: int = 1) -> int:
    """A run-length count stated for `reference` episodes, at a task of `budget` episodes.

    count x budget / reference, rounded half up, at least `floor`; unchanged without a reference.
    """
    if reference is None:
        return value
    return max(floor, int(math.floor(value * budget / reference + 0.5)))


def for_budget(lp: LoopPolicy, budget: int) -> LoopPolicy:
    """The policy as it applies to a task of `budget` episodes, with its run-length counts scaled.

    With `budget.reference_episodes` set, `planning.plateau_submits`, `stopping.patience_submits`
    and `stopping.reserve_episodes` (`RUN_LENGTH_FIELDS`) are the same share of the run at every
    budget: patience 5 stated for 32 episodes is patience 20 at 128. The result holds the counts for
    this task and no reference, so applying it again changes nothing.
    Every agent calls this once, at the start of a task, and reads every field from the result.
    """
    ref = lp.budget.reference_episodes
    if ref is None:
        return lp
    floors = {"stopping.reserve_episodes": 0}
    updates: dict[str, dict[str, int]] = {}
    for path in RUN_LENGTH_FIELDS:
        comp, field_name = path.split(".")
        value = getattr(getattr(lp, comp), field_name)
        updates.setdefault(comp, {})[field_name] = scaled_count(value, budget, ref, floor=floors.get(path, 1))
    changes: dict[str, Any] = {comp: getattr(lp, comp).model_copy(update=vals) for comp, vals in updates.items()}
    changes["budget"] = changes.get("budget", lp.budget).model_copy(update={"reference_episodes": None})
    return lp.model_copy(update=changes)


@dataclass(frozen=True)
class PhaseBudget:
    """Episodes allotted to each phase (and never spent) for one run."""

    synthesis: int
    tuning: int
    confirmation: int
    reserve: int


def phase_budget(lp: LoopPolicy, budget: int) -> PhaseBudget:
    """Split the episode budget by `budget.*_fraction`; phases left out of `planning.phases` get nothing.

    A missing tuning phase hands its share to confirmation (or, without that, to
    synthesis); the reserve exists only under `stopping.mode = finish_early`.
    """
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


def fits(pb: PhaseBudget, phase: Phase, spent: Mapping[str, int], k: int) -> bool:
    """Whether a k-episode submit stays inside `phase`'s share.

    Tuning may also use what synthesis left unspent. No phase spends into another
    phase's share; what is left once every share is spent goes to the best program.
    """
    syn, tun, con = (int(spent.get(p, 0)) for p in PHASES)
    if phase == "synthesis":
        return syn + k <= pb.synthesis
    if phase == "tuning":
        return syn + tun + k <= pb.synthesis + pb.tuning
    return con + k <= pb.confirmation


def spendable(lp: LoopPolicy, remaining: int) -> int:
    """Episodes the agent may still spend: all of them, or all but the reserve under finish_early."""
    if lp.stopping.mode == "finish_early":
        return remaining - lp.stopping.reserve_episodes
    return remaining


def submit_size(lp: LoopPolicy, remaining: int, lo: int, hi: int, want: int | None = None) -> int:
    """Episodes in one submit: `want` (default `action.episodes_per_submit`) within the host's
    [lo, hi] and what may still be spent; 0 when not even `lo` episodes may be spent.

    Under spend_all a tail smaller than `lo` would be stranded, so the submit takes it too.
    """
    usable = spendable(lp, remaining)
    if usable < lo:
        return 0
    k = max(lo, min(lp.action.episodes_per_submit if want is None else want, hi, usable))
    tail = usable - k
    if lp.stopping.mode == "spend_all" and 0 < tail < lo and usable <= hi:
        k = usable
    return k


def synthesis_size(lp: LoopPolicy, pb: PhaseBudget, remaining: int, lo: int, hi: int) -> int:
    """Episodes per synthesis candidate: the synthesis share split over `planning.max_mechanisms`
    candidates, at most `episodes_per_submit`, at least the host's minimum (0 when nothing
    may be spent). A small budget thus screens several structures on fewer episodes each
    instead of spending its whole share on the first one."""
    want = max(lo, min(lp.action.episodes_per_submit, pb.synthesis // max(1, lp.planning.max_mechanisms)))
    return submit_size(lp, remaining, lo, hi, want)


def screen_size(lp: LoopPolicy, k: int) -> int:
    """Episodes of a candidate's first (screening) submit when its full evaluation is k episodes.

    `action.screen_episodes` between 1 and k - 1 races the candidates: each is scored on
    that many of its round's ids first, and only `survivors` get the remaining ids.
    """
    s = lp.action.screen_episodes
    return k if s <= 0 or s >= k else s


def survivors(scores: Sequence[float | None], reference: float | None = None) -> list[int]:
    """Which screened candidates of a round get their full evaluation, best first.

    The better half (rounded up) of the scored candidates, keeping only those that score
    at least `reference` (the incumbent's mean on the same screening ids, when it has
    one): a candidate that cannot match the incumbent there would not replace it. Ties
    keep the earlier candidate. For a one-proposal round (an LLM) that leaves the test
    against the incumbent.
    """
    scored = [(float(v), i) for i, v in enumerate(scores) if v is not None and math.isfinite(v)]
    scored.sort(key=lambda t: (-t[0], t[1]))
    half = scored[: (len(scored) + 1) // 2]
    return [i for v, i in half if reference is None or v >= reference]


# ---- action: episode ids --------------------------------------------------------------------------

class IndexPlan:
    """Train episode ids per round (`action.index_selection`).

    Ids are a permutation of [0, n) drawn from the agent seed; one `pick` serves one round
    (every synthesis candidate, every candidate of a tuning round, or one LLM proposal),
    so the candidates of a round always meet the same episodes (common random numbers).
    `matched` takes the same leading ids for every round; `fresh` takes ids never used
    before, from the other end of the permutation; `mixed` takes ceil(k/2) matched ids and
    the rest fresh. Re-tests and confirmations always take fresh ids, so they are evidence
    the search has not seen.
    """

    def __init__(self, lp: LoopPolicy, n_instances: int, seed: int) -> None:
        self.mode = lp.action.index_selection
        n = max(1, int(n_instances))
        self.order = [int(i) for i in np.random.default_rng(seed).permutation(n)]
        self.used_fresh = 0

    def fresh(self, k: int) -> list[int]:
        """k ids never handed out before (wrapping around only once all n are used)."""
        n = len(self.order)
        out = [self.order[n - 1 - (self.used_fresh + j) % n] for j in range(k)]
        self.used_fresh += k
        return out

    def matched(self, k: int) -> list[int]:
        n = len(self.order)
        return [self.order[j % n] for j in range(k)]

    def pick(self, k: int) -> list[int]:
        """Ids for the next round of candidates, k per candidate."""
        if self.mode == "matched":
            return self.matched(k)
        if self.mode == "fresh":
            return self.fresh(k)
        head = (k + 1) // 2
        return self.matched(head) + self.fresh(k - head)

    def retest(self, k: int) -> list[int]:
        """Ids for a re-test (and its reference run of the incumbent) or a confirmation."""
        return self.fresh(k)


# ---- observation + verification: scores and the margin test ---------------------------------------

def episode_returns(lp: LoopPolicy, summary: Mapping[str, Any]) -> list[float] | None:
    """Per-episode returns the agent may read (`observation.summary_fields` has `returns`).

    With `errors` readable too, an episode that raised counts as the worst return of its
    submit: a crash is never better than a completed episode.
    """
    fields = lp.observation.summary_fields
    raw = summary.get("returns") if "returns" in fields else None
    if not isinstance(raw, list) or not raw or not all(isinstance(r, (int, float)) for r in raw):
        return None
    r = [float(v) for v in raw]
    errors = summary.get("errors") if "errors" in fields else None
    if isinstance(errors, list) and errors:
        worst = min(r)
        for i in errors:
            if isinstance(i, int) and 0 <= i < len(r):
                r[i] = worst
    return r


def submit_score(lp: LoopPolicy, summary: Mapping[str, Any]) -> float | None:
    """A submit's score: the mean of its readable returns, else its `mean_return`; None on failure."""
    fields = lp.observation.summary_fields
    if "status" in fields and summary.get("status") not in (None, "ok"):
        return None
    returns = episode_returns(lp, summary)
    if returns is not None:
        return float(np.mean(returns))
    mean = summary.get("mean_return") if "mean_return" in fields else None
    return float(mean) if isinstance(mean, (int, float)) else None


@dataclass
class ProgramResults:
    """Every result one distinct program got: per-episode returns by id when readable, else
    one mean per submit (with the ids it covered)."""

    source: str
    mechanism: str
    per_index: dict[int, list[float]] = field(default_factory=dict)
    means: list[tuple[tuple[int, ...], float]] = field(default_factory=list)
    submit_ids: list[int] = field(default_factory=list)

    def add(self, lp: LoopPolicy, summary: Mapping[str, Any], indices: Sequence[int],
            submit_id: int | None) -> float | None:
        """Record one ok submit of this program; returns its `submit_score`."""
        score = submit_score(lp, summary)
        returns = episode_returns(lp, summary)
        ids = tuple(int(i) for i in indices)
        if returns is not None and len(returns) == len(ids):
            for i, r in zip(ids, returns):
                self.per_index.setdefault(i, []).append(r)
        if score is not None:
            self.means.append((ids, score))
        if submit_id is not None:
            self.submit_ids.append(int(submit_id))
        return score

    @property
    def first_submit(self) -> int | None:
        return self.submit_ids[0] if self.submit_ids else None

    def indices(self) -> set[int]:
        return set(self.per_index) if self.per_index else {i for ix, _ in self.means for i in ix}

    def by_index(self, on: set[int] | None = None) -> dict[int, float]:
        """Mean return per episode id (ids in `on` only, when given)."""
        return {i: float(np.mean(rs)) for i, rs in self.per_index.items() if on is None or i in on}

    def mean(self, on: set[int] | None = None) -> float | None:
        """Mean over the episodes (restricted to ids `on`); without per-episode returns, the
        episode-weighted mean of the submits whose id set is exactly `on`."""
        if self.per_index:
            vals = [r for i, rs in self.per_index.items() if on is None or i in on for r in rs]
            return float(np.mean(vals)) if vals else None
        picked = [(len(ix), m) for ix, m in self.means if on is None or set(ix) == on]
        total = sum(n for n, _ in picked)
        return sum(n * m for n, m in picked) / total if total else None

    def stderr(self) -> float:
        """Standard error of the mean over its episodes (0 without per-episode returns or n < 2)."""
        vals = [r for rs in self.per_index.values() for r in rs]
        return float(np.std(vals, ddof=1) / math.sqrt(len(vals))) if len(vals) > 1 else 0.0


@dataclass(frozen=True)
class Comparison:
    """Candidate vs incumbent: the measured improvement and what the policy requires of it."""

    delta: float
    """Candidate mean minus incumbent mean (paired: the mean per-episode difference)."""
    stderr: float
    """Standard error of `delta` (0 when the evidence gives no estimate)."""
    required: float
    """`margin` x max(|incumbent mean|, MIN_SCALE): what `delta - stderr_multiple x stderr` must exceed."""
    paired: bool
    """True when compared episode by episode on shared ids (common random numbers)."""
    n: int
    """Episodes (paired) or candidate episodes (unpaired) behind the comparison."""
    passed: bool


def compare(lp: LoopPolicy, cand: ProgramResults, inc: ProgramResults) -> Comparison | None:
    """The verification test: does `cand` beat `inc`? None when either has no score.

    With `verification.matched_comparison` and per-episode returns on shared ids, the
    test is paired: the per-id differences' mean and standard error. Otherwise it is
    the difference of the two means, with the standard errors combined. The candidate
    passes when `delta - stderr_multiple * stderr > margin * max(|incumbent|, 1e-6)`.
    """
    ver = lp.verification
    common = cand.indices() & inc.indices() if ver.matched_comparison else set()
    if common and cand.per_index and inc.per_index:
        c, i = cand.by_index(common), inc.by_index(common)
        d = np.asarray([c[j] - i[j] for j in sorted(common)])
        delta = float(d.mean())
        err = float(d.std(ddof=1) / math.sqrt(d.size)) if d.size > 1 else 0.0
        base = float(np.mean(list(i.values())))
        paired, n = True, int(d.size)
    else:
        cm, im = (cand.mean(common), inc.mean(common)) if common else (None, None)
        if cm is None or im is None:  # no submit on exactly the shared ids: compare overall means
            cm, im = cand.mean(), inc.mean()
        if cm is None or im is None:
            return None
        delta, base = cm - im, im
        err = math.hypot(cand.stderr(), inc.stderr())
        paired, n = False, len(cand.indices())
    need = ver.margin * max(abs(base), MIN_SCALE)
    return Comparison(delta, err, need, paired, n, delta - ver.stderr_multiple * err > need)


def beats(lp: LoopPolicy, cand: ProgramResults, inc: ProgramResults | None) -> bool:
    """`compare(...).passed`; anything with a score beats no incumbent."""
    if inc is None:
        return cand.mean() is not None
    if inc.source == cand.source:
        return False
    result = compare(lp, cand, inc)
    return result is not None and result.passed


def revert_target(incumbent: ProgramResults | None, programs: Sequence[ProgramResults],
                  mechanism: str | None) -> ProgramResults | None:
    """Where `revert` goes: the incumbent, unless a restructure is tuning another mechanism --
    then that mechanism's best program (so a revert does not undo the restructure)."""
    if incumbent is not None and (mechanism is None or incumbent.mechanism == mechanism):
        return incumbent
    same = ranked([p for p in programs if p.mechanism == mechanism], 1)
    return same[0] if same else incumbent


def ranked(programs: Sequence[ProgramResults], k: int) -> list[ProgramResults]:
    """The k best scored programs by mean (`memory.top_k_programs`), best first; ties keep the older."""
    scored = [p for p in programs if p.mean() is not None]
    return sorted(scored, key=lambda p: -float(p.mean()))[:k]  # type: ignore[arg-type]


# ---- planning, recovery, stopping: counters and what they trigger ---------------------------------

@dataclass
class Progress:
    """How the run is going, in the units the policy's thresholds count.

    A *candidate* is a submit of a new program (synthesis or tuning) or its retry; it
    improves when it becomes the incumbent. Re-tests, reference runs and confirmations
    are not candidates and move no counter.
    """

    phase_stale: int = 0
    """Non-improving candidates in a row in the current phase (`planning.plateau_submits`)."""
    run_stale: int = 0
    """Non-improving candidates in a row over the run (`stopping.patience_submits`)."""
    failures: int = 0
    """Charged failure verdicts in a row (`recovery.max_retries`)."""
    edits: list[bool] = field(default_factory=list)
    """Outcome (improved or not) of every candidate, oldest first (`memory.edit_log_size`)."""

    def candidate(self, improved: bool) -> None:
        self.edits.append(improved)
        self.phase_stale = 0 if improved else self.phase_stale + 1
        self.run_stale = 0 if improved else self.run_stale + 1

    def failed(self) -> None:
        self.failures += 1

    def ok(self) -> None:
        self.failures = 0

    def new_phase(self) -> None:
        self.phase_stale = 0


def plateau_action(lp: LoopPolicy, progress: Progress) -> str | None:
    """`planning.on_plateau` once `plateau_submits` candidates in a row have not improved, else None.

    `next_phase` leaves the current phase; `restructure` goes back to synthesis with an
    untried mechanism (acting as `next_phase` when none is left); `widen_search` doubles
    the tuning step (for an LLM: asks for bolder edits). The caller resets the phase
    counter (`Progress.new_phase`) once it has acted.
    """
    return lp.planning.on_plateau if progress.phase_stale >= lp.planning.plateau_submits else None


def error_action(lp: LoopPolicy, failures: int) -> ErrorAction:
    """Recovery after the `failures`-th charged failure verdict in a row.

    Starts at `recovery.on_error_verdict` and moves one rung up the ladder retry ->
    revert -> restructure after every `max_retries + 1` consecutive failures, staying at
    the top. `retry` resubmits a fixed program (the built-in agent: the same one, which
    helps against transient failures such as timeouts; an LLM: its fix of the failing
    one); `revert` goes back to the incumbent; `restructure` switches mechanism (acting as
    `revert` when every allowed mechanism has been tried).
    """
    start = ESCALATION.index(lp.recovery.on_error_verdict)
    rung = start + max(0, failures - 1) // (lp.recovery.max_retries + 1)
    return ESCALATION[min(rung, len(ESCALATION) - 1)]


def regression_action(lp: LoopPolicy) -> str:
    """`recovery.on_regression` after a tuning round whose candidates did not beat the incumbent
    (including an apparent improvement its re-test did not confirm).

    `revert`: the next round starts from the incumbent; `keep`: it starts from the round's
    best candidate (the search goes on from where it moved); `restructure`: switch mechanism.
    A round is one CMA-ES generation for the built-in agent and one proposal for an LLM.
    """
    return lp.recovery.on_regression


def should_finish(lp: LoopPolicy, progress: Progress, remaining: int) -> bool:
    """finish_early: stop after `patience_submits` non-improving candidates in a row or at the reserve."""
    if lp.stopping.mode != "finish_early":
        return False
    return progress.run_stale >= lp.stopping.patience_submits or remaining <= lp.stopping.reserve_episodes


def resubmit_best(lp: LoopPolicy, reason: str, best_was_last: bool) -> bool:
    """`stopping.best_last`: whether a run stopped before its budget was spent (a finish decision, the
    wall clock) re-submits its best program, so that the program it ends on is its best."""
    return lp.stopping.best_last and reason in ("finished_early", "wall_time") and not best_was_last


def host_disagrees(lp: LoopPolicy, rejects: int) -> bool:
    """`recovery.max_rejects`: whether `rejects` submits in a row refused as malformed (HTTP 400,
    nothing charged) end the run: the host and the agent disagree about the protocol."""
    return rejects >= lp.recovery.max_rejects


def edit_window(lp: LoopPolicy, entries: Sequence[Any]) -> list[Any]:
    """The last `memory.edit_log_size` edit-log entries (none when it is 0)."""
    n = lp.memory.edit_log_size
    return list(entries[-n:]) if n else []


def step_factor(lp: LoopPolicy, progress: Progress) -> float:
    """The built-in agent's use of the edit log: a 1/5th success rule on the search step.

    Over the last `edit_log_size` candidates, a success rate above 1/5 widens the step
    and one below narrows it (x exp((rate - 0.2) / 0.8)); fewer than 3 entries: x1.
    """
    window = edit_window(lp, progress.edits)
    if len(window) < 3:
        return 1.0
    rate = sum(window) / len(window)
    return float(math.exp((rate - 0.2) / 0.8))
