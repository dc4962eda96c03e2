"""Monitoring a release on a live stream: an anytime-valid sequential test on the paired per-task r.

After a release, its first tasks are paired with the parent re-run on the same task (the
control). The monitor looks after **every** pair and answers `rollback`, `promote` or `hold`.
A fixed threshold looked at again and again (the old rule: mean r < −τ over the first
`monitor` tasks) inflates its error with every look; the tests here stay valid however often
one looks, because each is a nonnegative **test supermartingale** and Ville's inequality bounds
the chance that it ever reaches 1/α under its null by α.

* Each pair's r is clipped to ±`clip` (default 0.25, the gate's `tail_tau`: a task worse than
  that already counts as a regression, so one catastrophic task cannot outweigh every other
  task, and a bet may be large).
* **Rollback** (harm): null "the clipped mean r ≥ −`harm_tolerance`". Wealth
  K = Π (1 + λ_t (−tol − x_t)), λ_t ∈ [0, 1/(clip + tol)], rolled back once K ≥ 1/`alpha_rollback`.
  So a release that does no harm (clipped mean ≥ −tol) is rolled back with probability ≤ α
  at any stopping rule — the false-rollback guarantee tested by simulation in
  `tests/ole/test_monitor.py` (≥ 300 streams, a look after every task).
* **Promote** (no harm beyond the tolerance): null "the clipped mean r ≤ −`promote_tolerance`".
  Wealth Π (1 + μ_t (x_t + tol')), promoted once ≥ 1/`alpha_promote`: a release harmful beyond
  tol' is promoted with probability ≤ α_promote.
* **Hold** otherwise; a stage still undecided after `deadline` pairs is rolled back (an
  inconclusive analysis is not a pass).

The bets λ_t, μ_t are *predictable* (fixed before the t-th pair is seen): the GRAPA rule
(growth-rate adaptive, Waudby-Smith & Ramdas, "Estimating means of bounded random variables by
betting", JRSS-B 2024) m/(v + m²) over the payoffs seen so far, started from one pseudo-payoff
of the harm the monitor is tuned to catch fast (`prior_harm`). Any predictable bet keeps the
guarantee; the prior only decides how fast a harm of that size is caught (simulated: a −20 %
harm with per-task sd 0.04 is rolled back after a median of 4 tasks at α = 0.1; see
`experiments/results/online_stream.md`).

The configuration is one versioned record (`AnalysisConfig`) inside the gate config's
`analysis` section; its hash goes into every monitor decision (`MonitorResult.analysis_hash`).
"""
from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Final, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

SCHEMA_VERSION: Final = "1"
Decision = Literal["rollback", "promote", "hold"]


class _Record(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class AnalysisConfig(_Record):
    """How a release is exposed and monitored after it is activated (versioned; hashed into decisions).
    Strict: a value of the wrong type in the gate file is refused, not coerced."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    schema_version: Literal["1"] = SCHEMA_VERSION
    """Schema version of this section."""
    exposure: float = Field(0.5, gt=0.0, le=1.0)
    """Share of the task boundaries in the release's scope it takes while staged (0.5: every second
    in-scope task); the parent works the others. 1.0 = every in-scope task, monitored."""
    clip: float = Field(0.25, gt=0.0, le=4.0)
    """Each pair's r counts at most ±clip (the gate's tail_tau by default)."""
    alpha_rollback: float = Field(0.1, gt=0.0, lt=1.0)
    """Chance, at any sequence of looks, of rolling back a release whose clipped mean r ≥ −harm_tolerance."""
    harm_tolerance: float = Field(0.0, ge=0.0)
    """Harm (in clipped mean r) that does not count as harm for rollback."""
    alpha_promote: float = Field(0.1, gt=0.0, lt=1.0)
    """Chance of promoting a release whose clipped mean r ≤ −promote_tolerance."""
    promote_tolerance: float = Field(0.05, ge=0.0)
    """Promotion needs confidence that the clipped mean r exceeds −this (a tie-only release is
    promoted too: doing exactly what the parent does is not a harm)."""
    deadline: int = Field(16, ge=1, le=10000)
    """Monitored pairs after which a stage that is neither promoted nor rolled back is rolled back."""
    prior_harm: float = Field(0.2, ge=0.0)
    """The harm (mean r) the bets start from: caught fastest. Any value keeps the guarantee."""
    prior_sd: float = Field(0.07, gt=0.0)
    """Spread of that starting guess (one pseudo-payoff with this deviation)."""
    reference: int = Field(16, ge=1, le=10000)
    """The watch of a release that is not staged (`ole.watch`): the control's most recent scores per env
    its unpaired score test compares with."""
    min_reference: int = Field(8, ge=1, le=10000)
    """Fewest control scores on an env for the unpaired score test to judge a run on it."""

    @model_validator(mode="after")
    def _inside_the_clip(self) -> "AnalysisConfig":
        if self.harm_tolerance >= self.clip or self.promote_tolerance >= self.clip:
            raise ValueError("harm_tolerance and promote_tolerance must be below clip (no bet could be made)")
        return self

    @property
    def digest(self) -> str:
        """sha256 of the canonical JSON: names the exact analysis every decision was made under."""
        text = json.dumps(self.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()


class MonitorResult(_Record):
    """One look at the monitored pairs so far."""

    n: int
    """Pairs looked at."""
    r: tuple[float, ...]
    """Their r as measured (not clipped), in order."""
    mean_r: float
    """Mean of the clipped r."""
    wealth_rollback: float
    """The harm test's wealth (rollback when ≥ 1/alpha_rollback)."""
    wealth_promote: float
    """The no-harm test's wealth (promote when ≥ 1/alpha_promote)."""
    decision: Decision
    """rollback | promote | hold."""
    reason: str
    """Measured vs required, in one sentence."""
    analysis_hash: str
    """`AnalysisConfig.digest` of the analysis applied."""


def _bets(payoffs: Sequence[float], cap: float, prior: float, prior_sd: float) -> list[float]:
    """Predictable GRAPA bets: bet t uses payoffs[:t] plus one pseudo-payoff (prior, prior_sd)."""
    out = []
    total, sq, n = prior, prior_sd ** 2 + prior ** 2, 1.0
    for y in payoffs:
        m = total / n
        v = max(sq / n - m * m, 1e-12)
        out.append(min(cap, max(0.0, m / (v + m * m))))
        total, sq, n = total + y, sq + y * y, n + 1.0
    return out


def _wealth(payoffs: Sequence[float], cap: float, prior: float, prior_sd: float) -> list[float]:
    """The wealth after each payoff, betting `_bets` (a test supermartingale under its null)."""
    k, out = 1.0, []
    for lam, y in zip(_bets(payoffs, cap, prior, prior_sd), payoffs):
        k *= 1.0 + lam * y
        out.append(k)
    return out


def look(r: Sequence[float], cfg: AnalysisConfig, *, min_gain: float | None = None) -> MonitorResult:
    """The decision after the pairs `r` (in order). Pure; the same pairs give the same answer.

    Decides at the first look where a test crossed (a crossed test stays decided), so looking
    after every pair or only now gives the same result.

    With `min_gain` (a canary that would *widen* a scope to an env: never on ties) promotion needs
    a gain, not only no harm: its test's null is "clipped mean r ≤ min_gain" (wealth
    Π (1 + μ_t (x_t − min_gain))), so a change that ties or gains less on the env is promoted with
    probability ≤ alpha_promote; such a canary is held until the deadline and then rolled back.
    """
    x = [max(-cfg.clip, min(cfg.clip, float(v))) for v in r]
    harm = _wealth([-cfg.harm_tolerance - v for v in x], 1.0 / (cfg.clip + cfg.harm_tolerance),
                   cfg.prior_harm - cfg.harm_tolerance, cfg.prior_sd)
    if min_gain is None:
        safe = _wealth([v + cfg.promote_tolerance for v in x], 1.0 / (cfg.clip - cfg.promote_tolerance),
                       cfg.promote_tolerance, cfg.prior_sd)
    else:
        if not 0.0 <= min_gain < cfg.clip:
            raise ValueError(f"min_gain {min_gain} must lie in [0, clip {cfg.clip})")
        safe = _wealth([v - min_gain for v in x], 1.0 / (cfg.clip + min_gain), cfg.prior_harm, cfg.prior_sd)
    need_r, need_p = 1.0 / cfg.alpha_rollback, 1.0 / cfg.alpha_promote
    decision: Decision = "hold"
    at = len(x)
    for t in range(len(x)):
        if harm[t] >= need_r:
            decision, at = "rollback", t + 1
            break
        if safe[t] >= need_p:
            decision, at = "promote", t + 1
            break
    mean = sum(x) / len(x) if x else 0.0
    wr, wp = (harm[at - 1], safe[at - 1]) if x else (1.0, 1.0)
    if decision == "rollback":
        reason = (f"harm shown after {at} monitored pairs: wealth {wr:.1f} >= 1/alpha {need_r:g} "
                  f"(clipped mean r {sum(x[:at]) / at:+.3f} < -{cfg.harm_tolerance:g})")
    elif decision == "promote" and min_gain is not None:
        reason = (f"a gain above {min_gain:g} shown after {at} monitored pairs: wealth {wp:.1f} >= "
                  f"1/alpha {need_p:g} (clipped mean r {sum(x[:at]) / at:+.3f})")
    elif decision == "promote":
        reason = (f"no harm beyond {cfg.promote_tolerance:g} shown after {at} monitored pairs: wealth {wp:.1f} >= "
                  f"1/alpha {need_p:g} (clipped mean r {sum(x[:at]) / at:+.3f})")
    elif len(x) >= cfg.deadline:
        decision, reason = "rollback", (f"inconclusive after the deadline of {cfg.deadline} monitored pairs "
                                        f"(harm wealth {wr:.1f}, {'gain' if min_gain is not None else 'no-harm'} "
                                        f"wealth {wp:.1f}): an open analysis is not a pass")
    else:
        reason = (f"inconclusive after {len(x)} of at most {cfg.deadline} pairs (harm wealth {wr:.2f} < {need_r:g}, "
                  f"no-harm wealth {wp:.2f} < {need_p:g})")
    return MonitorResult(n=len(x), r=tuple(float(v) for v in r), mean_r=mean, wealth_rollback=wr,
                         wealth_promote=wp, decision=decision, reason=reason, analysis_hash=cfg.digest)


def tasks_to_decision(r: Sequence[float], cfg: AnalysisConfig) -> tuple[Decision, int]:
    """The decision a look after every pair reaches first, and after how many pairs (for simulations)."""
    for n in range(1, len(r) + 1):
        res = look(r[:n], cfg)
        if res.decision != "hold":
            return res.decision, n
    return "hold", len(r)



EXPOSURE_FLOOR: Final = 0.1
EXPOSURE_CEILING: Final = 0.9
"""A canary's adapted share stays inside [floor, ceiling]: some tasks always go to each side."""


def exposure_after(r: Sequence[float], cfg: AnalysisConfig, base: float) -> float:
    """A canary's share of its scope's tasks after the monitored pairs `r`: `base` moved by evidence.

    Two test supermartingales on the clipped r, the harm test's (as `look`, null "no harm") and a
    benefit test's (null "clipped mean r ≤ 0", bets as `look`'s), each read as the share of the way
    its wealth has gone to its threshold on a log scale. Evidence of benefit moves the share from
    `base` towards `EXPOSURE_CEILING`, evidence of harm towards `EXPOSURE_FLOOR` (a base beyond them
    stays the bound on that side); pairs that tie move
    nothing (a tie is no evidence either way, and every canary task costs a control rerun). A pure
    function of the pairs: every process of the stream computes the same share. The monitor's own
    decisions do not depend on it, so its guarantees hold at any share.
    """
    import math
    if not r:
        return base
    x = [max(-cfg.clip, min(cfg.clip, float(v))) for v in r]
    harm = _wealth([-cfg.harm_tolerance - v for v in x], 1.0 / (cfg.clip + cfg.harm_tolerance),
                   cfg.prior_harm - cfg.harm_tolerance, cfg.prior_sd)[-1]
    gain = _wealth(x, 1.0 / cfg.clip, cfg.prior_harm, cfg.prior_sd)[-1]
    to_gain = max(0.0, math.log(gain)) / math.log(1.0 / cfg.alpha_promote) if gain > 0 else 0.0
    to_harm = max(0.0, math.log(harm)) / math.log(1.0 / cfg.alpha_rollback) if harm > 0 else 0.0
    up, down = max(EXPOSURE_CEILING, base), min(EXPOSURE_FLOOR, base)
    if to_gain > to_harm:
        return base + (up - base) * min(1.0, to_gain - to_harm)
    if to_harm > to_gain:
        return base - (base - down) * min(1.0, to_harm - to_gain)
    return base
