"""The transfer rule: how far envs held out from the search let a released change reach.

A change the gate released for its search envs (env ids) often helps elsewhere too — and
harms elsewhere: one-episode submits gained on halfcheetah5, bipedal and roundabout and lost
35–75 % on two other continuous-control envs (issue "Releases that travel"). Where a change
applies is therefore learned per change, from evidence: the change is also paired with the
champion on **transfer envs**, envs the search and the ablation never touched, and its release
may then name a *region* of task features (`ole.bundle.Applicability`'s region conditions:
family, observation and action space kind, action dimension, horizon) that those envs support.

**The rule** (pure: the same pairs give the same regions). Per env, its pairs at each budget are
a cell (`ole.coverage.Cell`); an env *lost* when some cell with an effect averages below
`max_loss` (−0.02, the gate's per-env bound), *gained* when its pairs average above `min_gain`
(+0.02: a gain must be as material as a loss must be to count), else it *tied*: every pair
bit-identical (the change had no effect: the parent behaves identically), or an effect within
(`max_loss`, `min_gain`] — noise-sized either way, evidence of nothing. (A first fresh
`make evolve` with any positive mean counting as a gain claimed a four-env region for
one-episode submits on "gains" of +0.000, +0.001 and +0.061; experiments/results/releases_travel.md.)
Envs where the change
lost — transfer envs, and the search and gate envs of every role — are **exclusions**. A region
is the span of a set of sampled transfer envs (the smallest region holding them: their families,
space kinds, and the action-dimension and horizon ranges between their extremes), and it is
**claimed** only when

* it holds at least `min_envs` transfer envs sampled at every budget of the band,
* none of them lost and it holds no excluded env of any role,
* at least `min_gains` of them gained (a region whose sampled envs all tie supports no
  widening: ties are no effect, never evidence), and their pairs' mean r is positive.

Of the spans that qualify, the one with the most sampled envs is claimed (then the most gains,
then the narrower span, then the scope key), then the largest among the envs left, up to
`max_regions`. What a claim supports is stated, never more: an exact one-sided Clopper–Pearson
upper bound, at level 1 − `alpha`, on the share of the region's envs the change harms — *if*
the sampled envs were a random draw from the region; they are a chosen pool, so it is a
statement about envs like them, not a guarantee for every env the region admits. Spans with a
gain and no exclusion that miss `min_envs` are recorded as **candidates**: an online stream may
try the change there as a watched canary (`ole.evolve.widening`), widening the scope env by env
on the monitor's verdict.
"""
from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field

from evogym.features import EnvFeatures
from ole.bundle import Applicability, validate_data
from ole.coverage import Cell, coverage

SCHEMA_VERSION: Final = "1"
Role = Literal["transfer", "scope", "search"]
"""Where an env's evidence came from: the transfer sample, the scope's gate pairs, or the search."""
EnvVerdict = Literal["gain", "tie", "loss"]


class _Record(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class TransferConfig(_Record):
    """Thresholds of the transfer rule (the gate config's `transfer` section). Strict, as the gate."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    schema_version: Literal["1"] = SCHEMA_VERSION
    """Schema version of this section."""
    min_envs: int = Field(3, ge=1)
    """Sampled transfer envs a region needs before it is claimed."""
    min_gains: int = Field(2, ge=1)
    """Of those, envs where the change gained (ties are no effect and count for nothing)."""
    max_loss: float = Field(-0.02, le=0.0)
    """An env lost when a cell with an effect averages below this r (the gate's `min_env_mean_r`)."""
    min_gain: float = Field(0.02, ge=0.0)
    """An env gained only when its pairs average above this r; between `max_loss` and this it tied."""
    alpha: float = Field(0.1, gt=0.0, lt=1.0)
    """Level of the stated upper bound on the share of harmed envs in a region (1 − alpha confidence)."""
    max_regions: int = Field(2, ge=0, le=8)
    """Most regions one change claims (0: no widening by transfer evidence)."""


class EnvResult(_Record):
    """One env's evidence for the rule."""

    env: str
    """Env slug."""
    role: Role
    """Where its pairs came from."""
    features: EnvFeatures
    """Its features (`evogym.features`)."""
    cells: tuple[Cell, ...]
    """Its pairs per budget."""
    verdict: EnvVerdict
    """gain | tie | loss (module docstring)."""

    @property
    def budgets(self) -> tuple[int, ...]:
        return tuple(sorted({c.budget for c in self.cells}))

    @property
    def mean_r(self) -> float:
        n = sum(c.n_pairs for c in self.cells)
        return sum(c.mean_r * c.n_pairs for c in self.cells) / n if n else 0.0


class Region(_Record):
    """A claimed (or candidate) region: its scope, the envs that support it, what it supports."""

    scope: str
    """Scope key of the region (with the hosts, budget band and models of the pairs)."""
    envs: tuple[str, ...]
    """Sampled transfer envs inside it."""
    gains: tuple[str, ...]
    """Those where the change gained."""
    ties: tuple[str, ...]
    """Those where every pair was a tie (no effect)."""
    mean_r: float
    """Mean r over the transfer pairs of its envs."""
    harm_ucb: float
    """Exact one-sided upper confidence bound (level `level`) on the share of the region's envs the
    change harms, from 0 harmed of `len(envs)` sampled (Clopper–Pearson)."""
    level: float
    """Confidence level of `harm_ucb` (1 − alpha)."""

    def statement(self) -> str:
        """What the claim supports, in one sentence."""
        return (f"{len(self.envs)} sampled transfer envs in it ({len(self.gains)} gained, {len(self.ties)} tied, "
                f"none lost; mean r {self.mean_r:+.3f}); if they were a random draw from the region, the share of "
                f"its envs the change harms is below {self.harm_ucb:.0%} with {self.level:.0%} confidence "
                "(Clopper-Pearson; the pool is chosen, not random: a statement about envs like them)")


class TransferDecision(_Record):
    """The transfer part of a gate decision: every env's result and the regions the rule claims."""

    schema_version: Literal["1"] = SCHEMA_VERSION
    """Record schema version."""
    config: TransferConfig
    """The thresholds applied."""
    envs: tuple[EnvResult, ...]
    """Every env with evidence (transfer first), sorted by role then env."""
    regions: tuple[Region, ...]
    """Claimed regions: the release may widen to each (a widening release per region)."""
    candidates: tuple[Region, ...]
    """Spans with a gain and no exclusion that miss `min_envs`: where an online canary may try it."""
    excluded: tuple[str, ...]
    """Envs where the change lost (of any role): no region holding one is ever claimed."""
    rule: str
    """The rule as applied, in one sentence."""

    def describe(self) -> str:
        got = "; ".join(f"`{r.scope}` ({', '.join(r.envs)})" for r in self.regions) or "no region"
        return (f"transfer: {sum(e.role == 'transfer' for e in self.envs)} envs "
                f"({', '.join(f'{e.env} {e.verdict} {e.mean_r:+.3f}' for e in self.envs if e.role == 'transfer')}); "
                f"claimed {got}" + (f"; excluded {', '.join(self.excluded)}" if self.excluded else ""))


def env_results(pairs_by_role: dict[Role, Sequence[Any]], cfg: TransferConfig,
                features_of: Callable[[str], EnvFeatures | None]) -> list[EnvResult]:
    """Per env and role, its cells and verdict (an env with no known features is left out)."""
    out: list[EnvResult] = []
    for role in ("transfer", "scope", "search"):
        cov = coverage(pairs_by_role.get(role, ()))
        for env in cov.envs:
            found = features_of(env)
            if found is None:
                continue
            cells = tuple(cov.env_cells(env))
            out.append(EnvResult(env=env, role=role, features=found, cells=cells, verdict=_verdict(cells, cfg)))
    return out


def _verdict(cells: Sequence[Cell], cfg: TransferConfig) -> EnvVerdict:
    if any(c.informative and c.mean_r < cfg.max_loss for c in cells):
        return "loss"
    if not any(c.informative for c in cells):
        return "tie"
    n = sum(c.n_pairs for c in cells)
    return "gain" if sum(c.mean_r * c.n_pairs for c in cells) / n > cfg.min_gain else "tie"


def harm_bound(n: int, alpha: float) -> float:
    """Exact one-sided (1 − alpha) Clopper–Pearson upper bound on a share with 0 of n harmed."""
    from scipy.stats import beta
    return float(beta.ppf(1.0 - alpha, 1, n)) if n else 1.0


# ----- spans -----------------------------------------------------------------------------

def _span(envs: Sequence[EnvFeatures]) -> dict[str, Any]:
    """The smallest region holding these envs, as Applicability region fields."""
    dims = [e.action_dim for e in envs]
    horizons = [e.horizon for e in envs]
    return {"env_families": sorted({e.family for e in envs}), "obs_kinds": sorted({e.obs for e in envs}),
            "action_kinds": sorted({e.act for e in envs}), "min_action_dim": min(dims), "max_action_dim": max(dims),
            "min_horizon": min(horizons), "max_horizon": max(horizons)}


def _inside(span: dict[str, Any], f: EnvFeatures) -> bool:
    return (f.family in span["env_families"] and f.obs in span["obs_kinds"] and f.act in span["action_kinds"]
            and span["min_action_dim"] <= f.action_dim <= span["max_action_dim"]
            and span["min_horizon"] <= f.horizon <= span["max_horizon"])


def _boxes(sampled: Sequence[EnvFeatures]) -> Iterable[list[EnvFeatures]]:
    """Every distinct set of sampled envs that some feature box cuts out (categorical dims any or one
    value; ranges between sampled values): the sets whose spans the rule considers."""
    seen: set[frozenset[str]] = set()
    fams = [None, *sorted({e.family for e in sampled})]
    obs = [None, *sorted({e.obs for e in sampled})]
    acts = [None, *sorted({e.act for e in sampled})]
    dims = sorted({e.action_dim for e in sampled})
    hors = sorted({e.horizon for e in sampled})
    dim_ranges = [(a, b) for i, a in enumerate(dims) for b in dims[i:]]
    hor_ranges = [(a, b) for i, a in enumerate(hors) for b in hors[i:]]
    for fam, ob, act in itertools.product(fams, obs, acts):
        cat = [e for e in sampled if (fam is None or e.family == fam) and (ob is None or e.obs == ob)
               and (act is None or e.act == act)]
        if not cat:
            continue
        for (d0, d1), (h0, h1) in itertools.product(dim_ranges, hor_ranges):
            inside = [e for e in cat if d0 <= e.action_dim <= d1 and h0 <= e.horizon <= h1]
            key = frozenset(e.env for e in inside)
            if inside and key not in seen:
                seen.add(key)
                yield inside


def regions(results: Sequence[EnvResult], cfg: TransferConfig, base: Applicability,
            budgets: Sequence[int]) -> tuple[list[Region], list[Region]]:
    """(claimed regions, candidate regions) by the rule of the module docstring. `base` carries the
    hosts and models of the pairs; every region gets the budget band [min, max] of `budgets` and
    only transfer envs sampled at each of those budgets support it."""
    excluded = [r.features for r in results if r.verdict == "loss"]
    usable = {r.env: r for r in results if r.role == "transfer" and r.verdict != "loss"
              and set(budgets) <= set(r.budgets)}
    claimed: list[Region] = []
    left = dict(usable)
    while len(claimed) < cfg.max_regions:
        best = _best(left, excluded, cfg, base, budgets, need_envs=cfg.min_envs, need_gains=cfg.min_gains)
        if best is None:
            break
        claimed.append(best)
        for env in best.envs:
            left.pop(env, None)
    candidate = _best(left, excluded, cfg, base, budgets, need_envs=1, need_gains=1)
    return claimed, [candidate] if candidate is not None else []


def _best(pool: dict[str, EnvResult], excluded: Sequence[EnvFeatures], cfg: TransferConfig, base: Applicability,
          budgets: Sequence[int], *, need_envs: int, need_gains: int) -> Region | None:
    """The best span of envs of `pool` that holds no excluded env, has `need_envs` envs of the pool,
    `need_gains` gains and a positive mean r (None when no span does)."""
    if len(pool) < need_envs:
        return None
    found: list[tuple[tuple, Region]] = []
    seen: set[frozenset[str]] = set()
    for subset in _boxes([r.features for r in pool.values()]):
        span = _span(subset)
        members = [r for r in pool.values() if _inside(span, r.features)]
        key = frozenset(m.env for m in members)
        if key in seen or len(members) < need_envs or any(_inside(span, f) for f in excluded):
            continue
        seen.add(key)
        gains = [m for m in members if m.verdict == "gain"]
        n = sum(c.n_pairs for m in members for c in m.cells)
        mean = sum(c.mean_r * c.n_pairs for m in members for c in m.cells) / n
        if len(gains) < need_gains or mean <= 0:
            continue
        span = _span([m.features for m in members])
        scope = validate_data(Applicability, {**base.model_dump(mode="json"), "env_ids": [], **span,
                                              "min_budget": min(budgets), "max_budget": max(budgets)},
                              source="transfer region")
        region = Region(scope=scope.scope_key, envs=tuple(sorted(m.env for m in members)),
                        gains=tuple(sorted(m.env for m in gains)),
                        ties=tuple(sorted(m.env for m in members if m.verdict == "tie")), mean_r=mean,
                        harm_ucb=harm_bound(len(members), cfg.alpha), level=1.0 - cfg.alpha)
        width = (len(span["env_families"]) + len(span["obs_kinds"]) + len(span["action_kinds"]),
                 span["max_action_dim"] - span["min_action_dim"], span["max_horizon"] - span["min_horizon"])
        found.append(((-len(members), -len(gains), width, region.scope), region))
    return min(found, key=lambda item: item[0])[1] if found else None


def decide_transfer(pairs_by_role: dict[Role, Sequence[Any]], cfg: TransferConfig, base: Applicability,
                    budgets: Sequence[int], features_of: Callable[[str], EnvFeatures | None]) -> TransferDecision:
    """The transfer part of a gate decision from the pairs of each role (module docstring)."""
    return _decision(env_results(pairs_by_role, cfg, features_of), cfg, base, budgets)


def rejudge(recorded: TransferDecision, cfg: TransferConfig, base: Applicability,
            budgets: Sequence[int]) -> TransferDecision:
    """A recorded transfer decision judged again under `cfg` from its own per-env cells (pure; no
    run): what another rule would have claimed from the same evidence."""
    results = [r.model_copy(update={"verdict": _verdict(r.cells, cfg)}) for r in recorded.envs]
    return _decision(results, cfg, base, budgets)


def _decision(results: Sequence[EnvResult], cfg: TransferConfig, base: Applicability,
              budgets: Sequence[int]) -> TransferDecision:
    claimed, candidates = regions(results, cfg, base, budgets)
    rule = (f"a region is the span of >= {cfg.min_envs} transfer envs sampled at budgets "
            f"{', '.join(map(str, sorted(budgets)))}, >= {cfg.min_gains} of them gaining (mean r above "
            f"{cfg.min_gain:+.2f}), none below mean r "
            f"{cfg.max_loss:+.2f} and no env of any role that lost inside it; at most {cfg.max_regions}")
    return TransferDecision(config=cfg, envs=tuple(results), regions=tuple(claimed), candidates=tuple(candidates),
                            excluded=tuple(sorted({r.env for r in results if r.verdict == "loss"})), rule=rule)
