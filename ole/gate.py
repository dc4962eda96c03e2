"""The release gate (OLE Eq. 10): benefit · evidence quality · tail risk · cost.

A challenger is released only when all four criteria hold on its paired evaluation.
Evidence that is too thin to judge (too few pairs, too few families, unverified runs,
gate instances the proposer has seen) makes the verdict `indecisive`, never `release`;
a failed benefit, tail or cost criterion makes it `reject`.

The configured thresholds cannot relax the task contract: every challenger run must be
verified by the host and stay within the contract's resource budget β whatever the
config says (those checks have no switch). Statistics are computed first into a
`GateStats` record that keeps the per-pair values; the verdict only reads it.

**Adaptive sample.** With `max_pairs` set, a driver may judge the same challenger at several
looks, adding gate pairs between them while the verdict is still open (`should_extend`). Each
look k tests benefit at its own share of α (`look_alpha`: linear spending, α·(n_k − n_{k−1}) /
max_pairs), so the shares sum to at most α and, by the union bound, the chance of releasing a
challenger with no benefit stays ≤ α however the looks fall — optional stopping cannot buy a
release. Every look is kept in the decision record.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Final, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator
from scipy import stats as sps

from ole.ablation import Ablation
from ole.coverage import Coverage, coverage, evidence_bound
from ole.errors import ValidationError
from ole.monitor import AnalysisConfig
from ole.paired import COST_RESOURCES, Pair, PairStats, instance_key, pair_stats, regressions
from ole.trace import utc_now
from ole.transfer import TransferConfig, TransferDecision
from ole.verdicts import Verdict

SCHEMA_VERSION: Final = "1"
DEFAULT_CONFIG_PATH = Path(__file__).with_name("gate.yaml")


CriterionName = Literal["benefit", "evidence", "tail", "cost"]
"""The gate's four criteria (OLE Eq. 10), in the order they are judged."""


class _Record(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", ser_json_inf_nan="constants")


class GateConfig(_Record):
    """Thresholds of the four gate criteria (the θ of OLE Eq. 10). Strict, as bundles: `alpha: '0.1'`
    or `min_pairs: 6.0` in a gate file is refused, not coerced.

    The defaults here are the defaults: the packaged `gate.yaml` states the same values with their
    explanation (a test holds them equal), so `GateConfig()` and `load_config()` gate alike."""

    model_config = ConfigDict(frozen=True, extra="forbid", ser_json_inf_nan="constants", strict=True)

    schema_version: Literal["1"] = SCHEMA_VERSION
    """Config schema version."""
    alpha: float = Field(0.1, gt=0.0, le=0.5)
    """One-sided significance level of the paired benefit test."""
    test: Literal["wilcoxon", "bootstrap"] = "wilcoxon"
    """Benefit test: Wilcoxon signed-rank on r (H1: median r > 0) or a bootstrap lower confidence bound of mean r."""
    bootstrap_resamples: int = Field(4000, ge=200, le=200000)
    """Resamples for the bootstrap bound (and the reported CI under either test)."""
    min_mean_r: float = Field(0.0, ge=0.0)
    """Mean relative change the challenger must exceed."""
    min_win_rate: float = Field(0.5, ge=0.0, le=1.0)
    """Fraction of pairs with r > 0 (ties count half) the challenger must reach."""
    min_pairs: int = Field(6, ge=2)
    """Fewest valid pairs to judge at all (fewer: indecisive)."""
    min_families: int = Field(2, ge=1)
    """Fewest env families the pairs must cover (fewer: indecisive)."""
    tail_tau: float = Field(0.25, gt=0.0)
    """A pair with r < −tail_tau counts as a regression."""
    max_regressions: int = Field(1, ge=0)
    """Most regressing pairs tolerated."""
    cvar_alpha: float = Field(0.25, gt=0.0, le=1.0)
    """Tail share for CVaR: the mean of the worst ⌈cvar_alpha·n⌉ values of r."""
    min_cvar: float = -0.25
    """CVaR of r must be at least this."""
    min_worst_r: float = -0.5
    """The single worst r must be at least this."""
    min_env_mean_r: float = -0.02
    """Every env of the pairs must average at least this r: a release serves each env of its scope,
    so a gain elsewhere never pays for a loss there (OLE's release semantics; the 2 % is the
    tolerance of issue "Releases that hold where they land")."""
    cost_kappa: dict[str, float] = Field(default_factory=lambda: {"episodes": 0.1, "wall_s": 0.5,
                                                                  "tokens": 0.25, "usd": 0.25})
    """Per resource: the challenger's total may exceed the champion's by at most this fraction (1+κ)."""
    seed: int = Field(0, ge=0)
    """Seed of the bootstrap resampling (decisions are reproducible)."""
    max_pairs: int | None = Field(24, ge=2)
    """Cap of the adaptive sample: while a verdict is open, the driver adds gate pairs up to this
    many and α is spent over it (see `look_alpha`). None: one look at the pairs given, at α."""
    analysis: AnalysisConfig = Field(default_factory=AnalysisConfig)
    """How a release is exposed and monitored on a live stream after the gate (`ole.monitor`):
    the staged share, the anytime-valid rollback and promotion tests, the deadline."""
    transfer: TransferConfig = Field(default_factory=TransferConfig)
    """How far envs held out from the search let a released change reach (`ole.transfer`): the
    regions of task features a release may widen to, and what each claim supports."""

    @model_validator(mode="after")
    def _known_resources(self) -> "GateConfig":
        unknown = sorted(set(self.cost_kappa) - set(COST_RESOURCES))
        if unknown:
            raise ValueError(f"unknown cost_kappa resources {unknown}; allowed: {list(COST_RESOURCES)}")
        if any(v < 0 for v in self.cost_kappa.values()):
            raise ValueError("cost_kappa values must be >= 0")
        if self.min_cvar > 0 or self.min_worst_r > 0 or self.min_env_mean_r > 0:
            raise ValueError("min_cvar, min_worst_r and min_env_mean_r are loss bounds: they must be <= 0")
        if self.max_pairs is not None and self.max_pairs < self.min_pairs:
            raise ValueError(f"max_pairs {self.max_pairs} is below min_pairs {self.min_pairs}: no look could judge")
        return self


def load_config(path: Path | str | None = None) -> GateConfig:
    """Read a gate config YAML strictly; a given path that is missing is an error, never a fallback."""
    from ole.bundle import validate_data
    from ole.yamlio import read_yaml_file
    target = Path(path) if path is not None else DEFAULT_CONFIG_PATH
    return validate_data(GateConfig, read_yaml_file(target), source=str(target))


class GateStats(PairStats):
    """The pairs' statistics (`ole.paired.PairStats`, computed with the config's `cvar_alpha`) and
    what the gate adds to them: the benefit test, the interval, the config-bound counts."""

    p_value: float
    """One-sided p-value of the configured test (bootstrap: share of resampled means <= 0)."""
    ci_low: float
    """Lower end of the bootstrap interval of mean r: its alpha percentile (a one-sided 1 − alpha bound)."""
    ci_high: float
    """Upper end of the bootstrap interval of mean r: its 1 − alpha percentile."""
    ci_level: float | None = None
    """Two-sided coverage of [ci_low, ci_high]: 1 − 2·alpha (0.8 at alpha 0.1). None only in
    records made before it was stored, whose interval was computed the same way."""
    n_regressions: int
    """Pairs with r < −tail_tau."""
    leaked_keys: tuple[str, ...]
    """Gate instances the proposer had seen."""


class Check(_Record):
    """One check of a criterion: what was measured, the bound it had to meet, whether it held."""

    what: str
    """The measured quantity (e.g. `mean r`, `env gym/pusher5 mean r`, `wall_s ratio (challenger / champion)`)."""
    measured: str
    """Its value, formatted."""
    required: str
    """The bound, formatted (e.g. `>= -0.0200`)."""
    passed: bool
    """Whether it held."""
    reasons: tuple[str, ...] = ()
    """Its failure in the gate's words (one line per offending item); empty when it held."""


class Criterion(_Record):
    """Outcome of one gate criterion: its checks, and the failed ones' reasons."""

    name: CriterionName
    """Which criterion."""
    passed: bool
    """True when the criterion holds (every check held)."""
    reasons: tuple[str, ...]
    """Each failed check as `measured vs required`; empty when passed."""
    checks: tuple[Check, ...] = ()
    """The checks it is made of; empty only in decisions recorded before checks were (`criteria_of` rebuilds them)."""


class Look(_Record):
    """One look of an adaptive gate sample: the pairs so far, this look's α share, its verdict."""

    n_pairs: int
    """Pairs judged at this look (cumulative)."""
    alpha: float
    """The benefit test's level at this look (its share of the config's α)."""
    p_value: float
    """The benefit test's one-sided p-value at this look."""
    mean_r: float
    """Mean r at this look."""
    verdict: Verdict
    """The verdict this look reached."""
    extend: str | None = None
    """Why more pairs were added after this look (None: the decision stood)."""
    added: tuple[str, ...] = ()
    """Instance keys of the pairs added at this look (empty for the first look's sample)."""


class GateDecision(_Record):
    """The full, stored record of one gate decision."""

    schema_version: Literal["1"] = SCHEMA_VERSION
    """Decision record schema version."""
    decided_at: str
    """UTC ISO-8601 time of the decision."""
    champion: str
    """Champion bundle ref (`name@version`)."""
    challenger: str
    """Challenger bundle ref."""
    config: GateConfig
    """The thresholds applied."""
    pairs: tuple[Pair, ...]
    """Every pair judged (inputs, both runs, δ, r)."""
    stats: GateStats
    """Statistics computed from the pairs."""
    criteria: tuple[Criterion, ...]
    """Benefit, evidence quality, tail risk and cost, in that order."""
    verdict: Verdict
    """release | reject | indecisive."""
    reasons: tuple[str, ...]
    """Why: the failed checks, or `all criteria hold`."""
    alpha_applied: float | None = None
    """The benefit test's level of the deciding look (None: the config's α, one fixed sample)."""
    looks: tuple[Look, ...] = ()
    """Every look of an adaptive sample, in order (empty for a fixed sample)."""
    coverage: Coverage | None = None
    """The conditions the pairs covered, per (env, budget): hosts, models, budgets, ties
    (`ole.coverage`). None only in records made before it was stored (derived from `pairs`)."""
    bound: str | None = None
    """Scope key of the widest scope these pairs support (`ole.coverage.evidence_bound`): a release
    on this decision is never wider. None when no pair showed an effect (nothing to release)."""
    ablation: Ablation | None = None
    """How the gated challenger was cut down to the field changes that carry its search gain
    (None: it was gated as proposed)."""
    transfer: TransferDecision | None = None
    """The change paired with the champion on transfer envs (held out from the search) after it
    passed, and the regions of task features that evidence lets its release widen to
    (`ole.transfer`); None when no transfer envs were sampled."""

    def evidence(self) -> Coverage:
        """The coverage of the pairs (stored, or derived for records made before it was)."""
        return self.coverage if self.coverage is not None else coverage(self.pairs)

    def event_payload(self) -> dict[str, object]:
        """The record as the registry's `gate_decision` payload (its `verdict` is the word the
        registry derives the version's status from, `ole.verdicts`)."""
        return self.model_dump(mode="json")


def look_alpha(cfg: GateConfig, n: int, n_prev: int) -> float:
    """This look's share of α under linear spending over `max_pairs` (all of α without a cap).

    Shares of successive looks n_1 < n_2 < ... <= max_pairs sum to α·n_last/max_pairs <= α.
    """
    if cfg.max_pairs is None:
        return cfg.alpha
    n = min(n, cfg.max_pairs)
    return cfg.alpha * max(0, n - n_prev) / cfg.max_pairs


def should_extend(decision: "GateDecision", n_next: int) -> str | None:
    """Why the sample should grow to `n_next` pairs before deciding, or None when it should not.

    Only an open verdict grows: thin evidence (too few pairs or families), or a benefit that
    is on the right side (mean r above the minimum, win rate reached) but not yet significant
    at this look's α. Tail and cost failures, unverified runs, leaked instances and a mean on
    the wrong side are final (more pairs cannot undo a regressing pair, and stopping for
    futility never inflates the error rate). Never beyond `max_pairs`.
    """
    cfg, s = decision.config, decision.stats
    if decision.verdict == "release" or cfg.max_pairs is None or n_next > cfg.max_pairs or n_next <= s.n_pairs:
        return None
    by = {c.name: c for c in decision.criteria}
    if not (by["tail"].passed and by["cost"].passed) or not s.all_verified or s.leaked_keys:
        return None
    if not by["evidence"].passed:  # verified, nothing leaked: only too few pairs or families remain
        return f"thin evidence ({s.n_pairs} pairs, {len(s.families)} families): adding pairs up to {n_next}"
    alpha = decision.alpha_applied if decision.alpha_applied is not None else cfg.alpha
    if s.mean_r > cfg.min_mean_r and s.win_rate >= cfg.min_win_rate and s.p_value >= alpha:
        return (f"benefit not yet significant (p {s.p_value:.4f} >= this look's alpha {alpha:.4f}, "
                f"mean r {s.mean_r:+.4f}): adding pairs up to {n_next}")
    return None


def interval_level(cfg: GateConfig) -> float:
    """Two-sided level of the reported interval: the [alpha, 1 − alpha] percentiles cover 1 − 2·alpha."""
    return 1.0 - 2.0 * cfg.alpha


def ci_text(stats: "GateStats", digits: int = 3) -> str:
    """`80% CI [+0.010, +0.050]`: the interval labelled with its true two-sided level."""
    level = f"{stats.ci_level:.0%} CI" if stats.ci_level is not None else "CI"
    return f"{level} [{stats.ci_low:+.{digits}f}, {stats.ci_high:+.{digits}f}]"


def _bootstrap(r: np.ndarray, cfg: GateConfig) -> tuple[float, float, float]:
    rng = np.random.default_rng(cfg.seed)
    idx = rng.integers(0, len(r), size=(cfg.bootstrap_resamples, len(r)))
    means = r[idx].mean(axis=1)
    low, high = np.quantile(means, [cfg.alpha, 1 - cfg.alpha])
    p = float((np.sum(means <= 0.0) + 1) / (len(means) + 1))
    return float(low), float(high), p


def _wilcoxon_p(r: np.ndarray) -> float:
    if np.all(r == 0.0):
        return 1.0
    return float(sps.wilcoxon(r, alternative="greater", zero_method="zsplit").pvalue)


def compute_stats(pairs: Sequence[Pair], cfg: GateConfig, seen_keys: Iterable[str] = ()) -> GateStats:
    """Everything the verdict reads, from the pairs alone (pure; seeded bootstrap)."""
    base = pair_stats(pairs, cfg.cvar_alpha)
    leaked = tuple(sorted({instance_key(p.task, p.condition) for p in pairs} & set(seen_keys)))
    if base.n_pairs == 0:
        return GateStats(**dict(base), p_value=1.0, ci_low=0.0, ci_high=0.0, ci_level=interval_level(cfg),
                         n_regressions=0, leaked_keys=leaked)
    r = np.array(base.r, dtype=float)
    low, high, p_boot = _bootstrap(r, cfg)
    return GateStats(**dict(base), p_value=_wilcoxon_p(r) if cfg.test == "wilcoxon" else p_boot,
                     ci_low=low, ci_high=high, ci_level=interval_level(cfg),
                     n_regressions=regressions(base.r, cfg.tail_tau), leaked_keys=leaked)


def holds_tail_and_cost(stats: PairStats, cfg: GateConfig) -> bool:
    """Would pairs with these statistics pass the gate's tail and cost criteria? (No test is run:
    the ranking of a search asks this of every candidate at every rung.)"""
    return _tail(stats, cfg).passed and _cost(stats, cfg).passed


def _criterion(name: CriterionName, checks: Sequence[Check]) -> Criterion:
    return Criterion(name=name, passed=all(c.passed for c in checks),
                     reasons=tuple(r for c in checks if not c.passed for r in c.reasons), checks=tuple(checks))


def _one(what: str, measured: str, required: str, passed: bool, reason: str) -> Check:
    return Check(what=what, measured=measured, required=required, passed=passed, reasons=() if passed else (reason,))


def _benefit(s: GateStats, c: GateConfig, alpha: float) -> Criterion:
    return _criterion("benefit", (
        _one("mean r", f"{s.mean_r:+.4f}", f"> {c.min_mean_r:+.4f}", s.mean_r > c.min_mean_r,
             f"mean r {s.mean_r:+.4f} <= required {c.min_mean_r:+.4f}"),
        _one("win rate", f"{s.win_rate:.2f}", f">= {c.min_win_rate:.2f}", not s.win_rate < c.min_win_rate,
             f"win rate {s.win_rate:.2f} < required {c.min_win_rate:.2f}"),
        _one(f"{c.test} one-sided p", f"{s.p_value:.4f}", f"< alpha {alpha:.4g}", s.p_value < alpha,
             f"{c.test} one-sided p {s.p_value:.4f} >= alpha {alpha:.4g}")))


def _evidence(s: GateStats, c: GateConfig, min_families: int) -> Criterion:
    covered = s.families if s.informative_families is None else s.informative_families
    ties = sorted(set(s.families) - set(covered))
    relaxed = f" (a scope of {min_families} {'family' if min_families == 1 else 'families'})" \
        if min_families < c.min_families else ""
    return _criterion("evidence", (
        _one("pairs", str(s.n_pairs), f">= {c.min_pairs}", not s.n_pairs < c.min_pairs,
             f"{s.n_pairs} pairs < required {c.min_pairs}"),
        _one("env families where pairs differed", f"{len(covered)} ({', '.join(covered) or '-'})",
             f">= {min_families}{relaxed}", not len(covered) < min_families,
             f"{len(covered)} families where pairs differed {list(covered)} < required {min_families}"
             + (f" (only ties, i.e. no effect, on {ties})" if ties else "")),
        _one("every run verified by the host", str(s.all_verified), "True", s.all_verified,
             "some runs were not verified by the host (contract V)"),
        _one("gate instances seen by the proposer", str(len(s.leaked_keys)), "0", not s.leaked_keys,
             f"{len(s.leaked_keys)} gate instances were seen by the proposer: {list(s.leaked_keys)[:3]}")))


def _tail(s: PairStats, c: GateConfig) -> Criterion:
    n_regressions = regressions(s.r, c.tail_tau)
    checks = [
        _one("worst r", f"{s.worst_r:+.4f}", f">= {c.min_worst_r:+.4f}", not s.worst_r < c.min_worst_r,
             f"worst r {s.worst_r:+.4f} < required {c.min_worst_r:+.4f}"),
        _one(f"CVaR {c.cvar_alpha:g}", f"{s.cvar:+.4f}", f">= {c.min_cvar:+.4f}", not s.cvar < c.min_cvar,
             f"CVaR_{c.cvar_alpha:g} {s.cvar:+.4f} < required {c.min_cvar:+.4f}"),
        _one(f"pairs with r < -{c.tail_tau:g}", str(n_regressions), f"<= {c.max_regressions}",
             not n_regressions > c.max_regressions,
             f"{n_regressions} pairs regress beyond tau={c.tail_tau:g} > allowed {c.max_regressions}")]
    checks += [_one(f"env {env} mean r", f"{m:+.4f}", f">= {c.min_env_mean_r:+.4f}", not m < c.min_env_mean_r,
                    f"env {env} mean r {m:+.4f} < required {c.min_env_mean_r:+.4f} (the release would serve it)")
               for env, m in s.env_mean_r.items()]
    return _criterion("tail", checks)


def _cost(s: PairStats, c: GateConfig) -> Criterion:
    breaches = s.contract_breaches
    checks = [Check(what="runs over the contract budget", measured=str(len(breaches)), required="0",
                    passed=not breaches, reasons=tuple(f"contract budget exceeded by {b}" for b in breaches[:5]))]
    for name, kappa in c.cost_kappa.items():
        ratio = s.cost_ratio.get(name, 1.0)
        checks.append(_one(f"{name} ratio (challenger / champion)", f"{ratio:.3f}", f"<= {1.0 + kappa:.3f}",
                           not ratio > 1.0 + kappa, f"{name} ratio {ratio:.3f} > allowed {1.0 + kappa:.3f}"))
    return _criterion("cost", checks)


LEGACY_DEFAULTS: dict[str, Any] = {"min_families": 1, "max_pairs": None}
"""What a recorded config that lacks these fields meant: the class defaults when it was written
(one family sufficed; one look at the pairs given). Records dump every field, so only a record
older than the field lacks it."""


def criteria_of(payload: dict) -> tuple[Criterion, ...]:
    """The criteria of a stored decision (a `gate_decision` event's payload), each with its checks:
    the one reader of recorded criteria (the report, the CLI).

    Decisions recorded since checks exist carry them. An older record's checks are rebuilt by the
    same functions that decide (`_benefit` ... `_cost`) from its stats and config; the recorded
    pass/fail and reasons stay authoritative (a scoped record needed fewer families than its
    config: the family bound is the one its recorded evidence criterion implies). A record too old
    to rebuild keeps its reasons without checks.
    """
    recorded = [c for c in payload.get("criteria") or [] if isinstance(c, dict)]
    if recorded and all(isinstance(c.get("checks"), list) for c in recorded):
        return tuple(Criterion.model_validate(c) for c in recorded)
    bare = tuple(Criterion(name=c.get("name"), passed=bool(c.get("passed")),
                           reasons=tuple(c.get("reasons") or ())) for c in recorded
                 if c.get("name") in ("benefit", "evidence", "tail", "cost"))
    try:
        s = GateStats.model_validate(payload["stats"])
        cfg = GateConfig.model_validate({**LEGACY_DEFAULTS, **payload["config"]})
    except (KeyError, TypeError, ValueError):  # a record from before these models: its reasons only
        return bare
    applied = payload.get("alpha_applied")
    alpha = float(applied) if isinstance(applied, (int, float)) else cfg.alpha
    covered = s.families if s.informative_families is None else s.informative_families
    evidence = next((c for c in bare if c.name == "evidence"), None)
    family_failed = evidence is not None and any("families where pairs differed" in r for r in evidence.reasons)
    need = cfg.min_families if family_failed else min(cfg.min_families, max(1, len(covered)))
    rebuilt = {c.name: c for c in (_benefit(s, cfg, alpha), _evidence(s, cfg, need), _tail(s, cfg), _cost(s, cfg))}
    return tuple(c.model_copy(update={"checks": rebuilt[c.name].checks}) for c in bare)


def decide(pairs: Sequence[Pair], cfg: GateConfig, *, champion: str, challenger: str,
           seen_keys: Iterable[str] = (), alpha: float | None = None,
           scope_families: Sequence[str] | None = None, looks: Sequence[Look] = (),
           ablation: Ablation | None = None) -> GateDecision:
    """Judge a paired evaluation; `seen_keys` are the instance keys of the proposer's traces.

    `alpha` is this look's level (`look_alpha`; default the config's α). `scope_families`
    names the env families inside a specialised challenger's scope: its pairs must cover
    min(min_families, that many) families — a scope of one family cannot cover two — while
    every other check (pairs, verification, leaks, benefit, tail, cost) is unchanged.
    """
    s = compute_stats(pairs, cfg, seen_keys)
    level = cfg.alpha if alpha is None else alpha
    need = cfg.min_families if scope_families is None else min(cfg.min_families, max(1, len(set(scope_families))))
    criteria = (_benefit(s, cfg, level), _evidence(s, cfg, need), _tail(s, cfg), _cost(s, cfg))
    by = {c.name: c for c in criteria}
    failed = [f"{c.name}: {r}" for c in criteria for r in c.reasons]
    verdict: Verdict
    if not by["evidence"].passed:
        verdict = "indecisive"
    elif failed:
        verdict = "reject"
    else:
        verdict = "release"
    cov = coverage(pairs)
    try:
        bound: str | None = evidence_bound(cov).scope_key
    except ValidationError:  # every pair a tie (or none): the evidence supports no scope
        bound = None
    return GateDecision(decided_at=utc_now(), champion=champion, challenger=challenger, config=cfg,
                        pairs=tuple(pairs), stats=s, criteria=criteria, verdict=verdict,
                        reasons=tuple(failed) or ("all criteria hold",),
                        alpha_applied=None if alpha is None else level, looks=tuple(looks),
                        coverage=cov, bound=bound, ablation=ablation)
