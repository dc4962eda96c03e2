"""Which envs a search's gains come from, and which candidate to gate for which envs.

A candidate's search gain is rarely uniform: one-episode submits gain +60 % on halfcheetah5,
tie on acrobot and change nothing elsewhere; another candidate gains on pusher5 alone. Gating
the best candidate on every env judged a one-env gain as a general one (issue "Releases that
hold where they land"). So the offline driver splits the search's gains by env first:

* an env is a **target** of a candidate when the candidate's search pairs there differ from
  the champion's (not all ties) and average at least `SCOPE_GAIN`;
* every target env goes to the candidate that gains most there, preferring, among candidates
  within `MERGE_TOLERANCE` of that best, one that already serves other envs;
* the candidate's search pairs on its envs must pass the gate's tail and cost criteria
  (`feasible`);
* with `split` (the offline driver), each target env is a scope of its own, even where one
  candidate is the best bet for several: a gate decides a scope as a whole, so in a merged
  scope one env's cost or loss sinks another env's gain. Measured on a fresh `make evolve`
  (experiments/results/releases_travel.md): one-episode submits gated on halfcheetah5 and
  pusher5 together cost 1.53x the champion's wall (over the 1.5x bound: rejected, nothing
  released), 1.34x on halfcheetah5 alone and 2.1x on pusher5 alone. A one-env scope is widened
  afterwards by evidence (`ole.transfer`), never by being gated beside another env.
  Without `split` (an online round: one candidate, one fresh-pool gate) its target envs form
  one scope;
* at most `max_scopes` scopes are kept, largest total gain first.

Envs with no target stay with the champion. Each scope is then ablated, scoped to its env ids
and gated on the in-scope gate instances only (`ole.evolve.offline`). The scope is fixed from
the search before any gate pair is run, so the gate tests a pre-declared claim.
"""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ole.bundle import Applicability

if TYPE_CHECKING:
    from ole.ablation import Ablation
    from ole.chosen import ChosenVersion
    from ole.evolve.config import EvolveConfig
    from ole.evolve.engine import Candidate, Engine
    from ole.paired import Pair
    from ole.proposers import Edge

SCOPE_GAIN = 0.05
"""Mean r over a candidate's search pairs on one env at which that env becomes its target (the
search's noise floor on the workload is ~0.01-0.11 mean |r| per env at 32; see
`experiments/results/sensitivity.md`)."""
MERGE_TOLERANCE = 0.02
"""A candidate within this mean r of an env's best gain may take the env if it already serves others."""


@dataclass(frozen=True)
class EnvGain:
    """A candidate's search pairs on one env."""

    mean_r: float
    n_pairs: int
    informative: bool
    """At least one pair differed (r != 0)."""


def env_gains(pairs: Sequence[Pair]) -> dict[str, EnvGain]:
    """Per env: mean r, pairs, and whether any pair differed."""
    by: dict[str, list[float]] = defaultdict(list)
    for p in pairs:
        by[p.task.env].append(float(p.r))
    return {e: EnvGain(sum(rs) / len(rs), len(rs), any(r != 0.0 for r in rs)) for e, rs in sorted(by.items())}


@dataclass
class ScopePlan:
    """One scope to gate: the candidate and the envs it is the best bet for."""

    candidate: Candidate
    """The candidate (it finished the search cascade)."""
    envs: list[str] = field(default_factory=list)
    """Target envs, sorted."""
    gains: dict[str, float] = field(default_factory=dict)
    """Search mean r on each of them."""

    @property
    def total(self) -> float:
        return sum(self.gains.values())


def plan(cands: Sequence[Candidate], *, max_scopes: int, split: bool = False,
         feasible: Callable[[Candidate, Sequence[str]], bool] = lambda c, envs: True) -> list[ScopePlan]:
    """The scopes to gate, largest total search gain first (module docstring); `split`: one scope per env."""
    gains = {c.ref: env_gains(c.pairs) for c in cands}
    targets: dict[str, list[tuple[float, Candidate]]] = defaultdict(list)
    for c in cands:
        for env, g in gains[c.ref].items():
            if g.informative and g.mean_r >= SCOPE_GAIN and feasible(c, [env]):
                targets[env].append((g.mean_r, c))
    chosen: dict[str, ScopePlan] = {}
    for env in sorted(targets, key=lambda e: -max(m for m, _ in targets[e])):
        best = max(m for m, _ in targets[env])
        near = [c for m, c in targets[env] if m >= best - MERGE_TOLERANCE]
        serving = [c for c in near if c.ref in chosen]
        pool = serving or near
        pick = max(pool, key=lambda c: (len(chosen[c.ref].envs) if c.ref in chosen else 0,
                                        gains[c.ref][env].mean_r, -c.chosen.version))
        entry = chosen.setdefault(pick.ref, ScopePlan(candidate=pick))
        entry.envs.append(env)
        entry.gains[env] = gains[pick.ref][env].mean_r
    plans: list[ScopePlan] = []
    if split:
        for entry in chosen.values():
            plans.extend(ScopePlan(candidate=entry.candidate, envs=[e], gains={e: entry.gains[e]})
                         for e in sorted(entry.envs))
        plans.sort(key=lambda p: (-p.total, p.candidate.ref, p.envs))
        return plans[:max_scopes]
    for entry in chosen.values():
        entry.envs.sort()
        if len(entry.envs) == 1 or feasible(entry.candidate, entry.envs):
            plans.append(entry)
            continue
        # the envs together fail a tail or cost bound: keep the single best env of the candidate
        top = max(entry.envs, key=lambda e: entry.gains[e])
        plans.append(ScopePlan(candidate=entry.candidate, envs=[top], gains={top: entry.gains[top]}))
    plans.sort(key=lambda p: (-p.total, p.candidate.ref))
    return plans[:max_scopes]


def holds_tail_and_cost(engine: Engine, cand: Candidate, envs: Sequence[str]) -> bool:
    """Would the candidate's pairs on these envs pass the gate's tail and cost criteria? (As
    `ole.evolve.offline.gate_feasible`: the measured wall ratio against the gate's wide bound.)"""
    from ole import gate
    from ole.paired import pair_stats
    pairs = [p for p in cand.pairs if p.task.env in envs]
    return bool(pairs) and gate.holds_tail_and_cost(pair_stats(pairs, engine.gate.cvar_alpha), engine.gate)


def reach(champion: Applicability, cfg: EvolveConfig) -> dict:
    """Where a change gated by `cfg`'s gate may ever be released: the champion's applicability narrowed
    to the suite's host agent (and model family) and the gate's budget band, every env of it. The
    release itself is bounded by evidence (`ole.coverage`, `ole.transfer`), env ids or a region of
    task features inside this; this is only the widest a later widening may go."""
    data = champion.model_dump(mode="json")
    host = cfg.suite.host
    data["hosts"] = [h for h in data["hosts"] if h == host] or data["hosts"]
    data["min_budget"] = max(data["min_budget"], min(cfg.gate_budgets))
    high = max(cfg.gate_budgets)
    data["max_budget"] = high if data["max_budget"] is None else min(data["max_budget"], high)
    if data["max_budget"] < data["min_budget"]:
        data["min_budget"], data["max_budget"] = champion.min_budget, champion.max_budget
    if cfg.suite.model and not data["model_families"]:
        data["model_families"] = [cfg.suite.model.rsplit("/", 1)[-1]]
    return data


def specialize(engine: Engine, champion: ChosenVersion, minimal: Candidate, scope: ScopePlan,
               ablation: Ablation | None = None, *, keep_pairs: bool = True, basis: str = "search",
               applicability: dict | None = None) -> Candidate | None:
    """`minimal`'s policy registered as a child of `champion` (a `ChosenVersion`) to be gated on the
    scope's env ids, or None when nothing can be registered.

    Its own applicability is `applicability` (`reach`: the host agent and budget band its gate
    samples, every env — a `specialization` when that is narrower than the champion's), never the
    env ids: those bound its first release (the gate's evidence), and transfer envs or watched
    canaries may widen it later inside this (`ole.transfer`, `ole.registry.api.Registry.widen`).
    Without `applicability` it is the champion's narrowed to the scope's env ids (the older rule).
    `keep_pairs`: carry `minimal`'s pairs on those envs over (they are search pairs, not gate
    pairs; an online round's scope comes from its gate pairs, which the scoped gate must not reuse).
    `basis` names the pairs the scope's gains come from (in the version's note).
    """
    from ole.bundle import validate_data
    from ole.proposers import accepted, child_bundle
    from ole.registry.scopes import features_of
    if applicability is None:
        applicability = champion.bundle.applicability.model_dump(mode="json")
        applicability.update(env_families=[], env_ids=list(scope.envs))
    own = validate_data(Applicability, applicability, source="scope")
    narrower = own.narrower_than(champion.bundle.applicability, features_of=features_of)
    source = scope.candidate
    prov = source.bundle.provenance
    edge: Edge = "specialization" if narrower else ("online" if prov.edge == "online" else "offline_mutation")
    note = (f"{source.ref}'s change gated on {', '.join(scope.envs)} ({basis} mean r "
            + ", ".join(f"{e} {m:+.3f}" for e, m in scope.gains.items()) + ")"
            + (f"; {ablation.describe()}" if ablation is not None and ablation.dropped else ""))
    try:
        bundle = child_bundle([champion], minimal.bundle.loop_policy.model_dump(mode="json"),
                              edge=edge, evidence_ids=prov.evidence_ids, generation=prov.generation,
                              proposer=engine.proposer.name, note=note, applicability=applicability)
    except Exception as exc:  # noqa: BLE001 - e.g. a champion already scoped to these envs: nothing narrower
        engine.progress(f"  cannot scope {minimal.ref} to {', '.join(scope.envs)} under {champion.ref}: {exc}")
        return None
    cand = engine.register(accepted(engine.proposer.name, edge, [champion], bundle), champion.bundle)
    if cand is not None and keep_pairs:
        engine.keep_pairs(cand, [p for p in minimal.pairs if p.task.env in scope.envs])
    return cand
