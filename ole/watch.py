"""Watching a release that is not staged: anytime-valid tests against what served before.

A staged release (a canary) is monitored by `ole.monitor` on pairs with its control. A release
that is *not* staged — the engine's gated release, or a person's `ole release REF` — serves every
task of its scope from its activation, so it is **watched** on those tasks instead, from the first
one, against the version that served the scope before it (the control):

* **paired r** (`ole.monitor.look`), where OLE can rerun the task: the control reruns the identical
  task and the pair's r feeds the same test supermartingale a canary's monitor uses;
* **failure count**, on every watched task: a failed run (no scored outcome: `q` is None) is a
  Bernoulli draw; the null "the watched version fails at most as often as the control did" is
  tested with a betting e-process against `p0`, an upper confidence bound on the control's failure
  rate from its runs recorded *before* the watch began (frozen, so the baseline never sees a
  watched run);
* **per-env score**, on tasks OLE cannot rerun (an external harness's): a scored run is *low* when
  it scored below the lowest of the control's recent scores on that env (at least
  `min_reference` of them); the chance a control run lands below the lowest of k of its own runs
  is bounded by `1 - delta**(1/k)` with probability 1 - delta (the minimum of k draws has
  F(min) ~ Beta(1, k)), and the low-run count is tested against that bound like failures.

**Error budget.** `alpha_rollback` is split by a union bound: 40 % for the paired r test, 40 % for
the failure test (a tenth of it spent on the baseline bound), 20 % for the score test (a tenth on
its baseline bounds). The failure test gets the large share because it is the one that catches a
release that breaks every run within three tasks (given ≥ 24 control runs with at most one failure). So a release that does no harm — its failure rate and score distribution
no worse than the control's, its clipped mean paired r ≥ −harm_tolerance — is rolled back with
probability ≤ alpha_rollback however often the watch looks (each test is a nonnegative
supermartingale under its null; Ville's inequality). The per-env score test compares
distributions only where the task mix a version sees is the same for both (a stream that moves to
harder tasks of the same env when the release activates is indistinguishable from harm).

A watch ends when the paired test shows no harm (`promote`: the release stays, unwatched), when a
test shows harm (the scope is rolled back to the control; the rollback names the test), or after
`deadline` watched tasks with neither (closed: the release stays; recorded, so the silence is
visible). Pure: the same runs give the same answer.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict
from scipy.stats import beta

from ole.monitor import AnalysisConfig, look

WatchDecision = Literal["rollback", "promote", "hold", "closed"]
Test = Literal["paired_r", "failures", "env_scores"]
FAILURE_SHARE = 0.4
"""Share of alpha_rollback spent on the failure-count test (`BOUND_SHARE` of it on its baseline bound)."""
SCORE_SHARE = 0.2
"""Share of alpha_rollback spent on the per-env score test (`BOUND_SHARE` of it on its baseline bounds)."""
PAIRED_SHARE = 1.0 - FAILURE_SHARE - SCORE_SHARE
"""Share of alpha_rollback of the paired r test."""
BOUND_SHARE = 0.1
"""Share of an unpaired test's alpha spent on the chance that its baseline bound is wrong."""
BET_CAP = 0.95
"""A bet stakes at most this share of the wealth a miss (a run that is not a hit) would cost."""


class _Record(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Baseline(_Record):
    """The control's record before the watch began (frozen when the watch starts)."""

    control: str
    """`NAME@VERSION` of the control."""
    runs: int
    """Runs of the control counted for the failure rate."""
    failures: int
    """Of them, runs with no scored outcome."""
    env_scores: dict[str, tuple[float, ...]] = {}
    """Per env, the control's most recent scores (at most `reference`)."""

    def failure_bound(self, delta: float) -> float | None:
        """Exact one-sided Clopper–Pearson upper bound (level 1 − delta) on the control's failure rate;
        None without runs (no failure test can be made)."""
        if self.runs == 0:
            return None
        if self.failures >= self.runs:
            return 1.0
        return float(beta.ppf(1.0 - delta, self.failures + 1, self.runs - self.failures))

    def low_bound(self, env: str, delta: float, min_reference: int) -> tuple[float, float] | None:
        """(threshold, bound): a run below `threshold` (the lowest recent control score on `env`) happens to
        a control run with probability ≤ bound, at confidence 1 − delta; None with too few scores."""
        scores = self.env_scores.get(env, ())
        if len(scores) < min_reference:
            return None
        return min(scores), 1.0 - delta ** (1.0 / len(scores))


class WatchedRun(_Record):
    """One task the watched release worked."""

    env: str
    q: float | None
    """Its score (None: failed)."""
    paired_r: float | None = None
    """Its paired r against the control's rerun (None: not rerun, an external task)."""


class WatchLook(_Record):
    """One look of the watch at the runs so far."""

    n: int
    """Watched runs."""
    decision: WatchDecision
    test: Test | None
    """The test that decided (None: hold or closed)."""
    reason: str
    wealth: dict[str, float]
    """Each test's wealth at this look (a test not made is absent)."""
    need: dict[str, float]
    """The wealth each test needs to roll back (1 / its share of alpha)."""
    analysis_hash: str


def bernoulli_wealth(hits: Sequence[bool], p0: float) -> float:
    """Wealth of the betting test of "P(hit) ≤ p0" after `hits` (a nonnegative supermartingale under it).

    Bet t is predictable: the Kelly bet (p̂ − p0) / (p0 (1 − p0)) for the hit rate p̂ estimated from the
    hits before it plus one pseudo-hit (the harm a watch exists to catch: every run failing), kept in
    [0, `BET_CAP`/p0] so a miss keeps a twentieth of the wealth. Any predictable bet in [0, 1/p0]
    keeps the guarantee; this one grows fastest when every run is a hit."""
    if p0 >= 1.0:
        return 1.0
    if p0 <= 0.0:
        return float("inf") if any(hits) else 1.0
    k, seen, n = 1.0, 1.0, 1.0
    for hit in hits:
        lam = min(BET_CAP / p0, max(0.0, (seen / n - p0) / (p0 * (1.0 - p0))))
        k *= 1.0 + lam * ((1.0 if hit else 0.0) - p0)
        seen, n = seen + (1.0 if hit else 0.0), n + 1.0
    return k


def failure_test(failed: Sequence[bool], baseline: Baseline, alpha: float) -> tuple[float, float, float] | None:
    """The failure-count test at level `alpha` (`BOUND_SHARE` of it on the control's bound): (wealth,
    the wealth that rolls back, the bound p0 on the control's failure rate); None when the control's
    record bounds nothing (no runs, or a bound of 1)."""
    p0 = baseline.failure_bound(alpha * BOUND_SHARE)
    if p0 is None or p0 >= 1.0:
        return None
    return bernoulli_wealth(failed, p0), 1.0 / (alpha * (1.0 - BOUND_SHARE)), p0


def judge(runs: Sequence[WatchedRun], baseline: Baseline, cfg: AnalysisConfig) -> WatchLook:
    """The watch's decision after `runs` (in order): each test at its share of alpha_rollback; a
    decided look stays decided (the caller stops at the first non-hold look)."""
    alpha = cfg.alpha_rollback
    wealth: dict[str, float] = {}
    need: dict[str, float] = {}
    paired = [r.paired_r for r in runs if r.paired_r is not None]
    paired_result = None
    if paired:
        paired_cfg = cfg.model_copy(update={"alpha_rollback": alpha * PAIRED_SHARE})
        paired_result = look(paired, paired_cfg)
        wealth["paired_r"], need["paired_r"] = paired_result.wealth_rollback, 1.0 / (alpha * PAIRED_SHARE)
    made = failure_test([r.q is None for r in runs], baseline, alpha * FAILURE_SHARE)
    p0 = None if made is None else made[2]
    if made is not None:
        wealth["failures"], need["failures"] = made[0], made[1]
    external = [r for r in runs if r.paired_r is None]
    low: list[bool] = []
    bounds: list[float] = []
    for r in external:
        if r.q is None:  # a failure is the failure test's: the bound covers scored runs only
            continue
        low_at = baseline.low_bound(r.env, alpha * SCORE_SHARE * BOUND_SHARE, cfg.min_reference)
        if low_at is not None:
            threshold, bound = low_at
            low.append(r.q < threshold)
            bounds.append(bound)
    if low:
        wealth["env_scores"] = bernoulli_wealth(low, max(bounds))
        need["env_scores"] = 1.0 / (alpha * SCORE_SHARE * (1.0 - BOUND_SHARE))
    n = len(runs)
    tests: tuple[Test, ...] = ("failures", "env_scores", "paired_r")
    for test in tests:
        if test in wealth and wealth[test] >= need[test]:
            what = {"failures": f"{sum(r.q is None for r in runs)} of {n} watched runs failed, against the "
                                f"control's failure rate of at most {p0:.2f} ({baseline.failures}/{baseline.runs} "
                                "before the watch)",
                    "env_scores": f"{sum(low)} of {len(low)} unpaired scored runs scored below the control's "
                                  "lowest recent score on their env",
                    "paired_r": paired_result.reason if paired_result is not None else ""}[test]
            return WatchLook(n=n, decision="rollback", test=test, wealth=wealth, need=need,
                             reason=f"{test} test: wealth {wealth[test]:.1f} >= {need[test]:g}: {what}",
                             analysis_hash=cfg.digest)
    if paired_result is not None and paired_result.decision == "promote":
        return WatchLook(n=n, decision="promote", test="paired_r", wealth=wealth, need=need,
                         reason=f"paired_r test: {paired_result.reason}", analysis_hash=cfg.digest)
    if n >= cfg.deadline:
        return WatchLook(n=n, decision="closed", test=None, wealth=wealth, need=need,
                         reason=f"no harm shown in {n} watched tasks (the deadline): the release stays, unwatched",
                         analysis_hash=cfg.digest)
    shown = ", ".join(f"{t} {wealth[t]:.2f} < {need[t]:g}" for t in wealth) or "no test could be made yet"
    return WatchLook(n=n, decision="hold", test=None, wealth=wealth, need=need,
                     reason=f"watching after {n} of at most {cfg.deadline} tasks ({shown})", analysis_hash=cfg.digest)
