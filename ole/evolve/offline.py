"""Offline mode: archive → evidence → staged search over generations → adaptive gate → release or not.

Per generation, `population` candidates are proposed (mutations of the retained candidates
aimed at the evidence drawn from *their own* search traces, plus recombinations) and go
through a successive-halving cascade on the search instances: every candidate is screened
on the first rung (one pool of every env by default), only the best ⌈n/eta⌉ move on to the
next rung of twice as many instances, and so on to every search instance. So many more
candidates are tried for the episodes that evaluating each on every instance would cost;
the champion's runs are paid once and shared by every rung and generation. The retained set
is the champion plus the candidates that finished the cascade and no other point dominates
on (benefit ↑, tail ↑, episode and wall cost ↓); candidates the gate's cost or tail criterion
would reject on their search pairs rank below every feasible one.

The best retained candidate then meets the gate on instances no proposal has seen, with an
adaptive sample (`Engine.gate`). When its search gains come from one env family while the
others lose, its **specialisation** to that family (same policy, applicability narrowed,
a `specialization` edge) is gated instead, on the in-scope gate instances only — released,
it serves that family and the general champion keeps serving the rest. With an empty
archive the champion is run on the search instances first; those runs are also the
champion side of every search pair, so bootstrapping costs nothing extra.
"""
from __future__ import annotations

import math
import random
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

from ole.bundle import Bundle
from ole.evolve import Candidate, Engine, EvolveConfig, summarize
from ole.gate import GateConfig, GateDecision, decide
from ole.paired import Instance, env_family, eval_key, instance_key
from ole.proposers import Parent, accepted, child_bundle

SPECIALIZE_GAIN = 0.05
"""A family whose search pairs average at least this mean r is a specialisation target..."""
SPECIALIZE_LOSS = -0.02
"""...when some other family averages below this (the general change would hurt it)."""


@dataclass
class OfflineReport:
    """What an offline run did and decided."""

    champion: str
    candidates: list[Candidate] = field(default_factory=list)
    retained: list[str] = field(default_factory=list)
    final: str | None = None
    decision: GateDecision | None = None
    bootstrapped: int = 0
    evidence_ids: list[str] = field(default_factory=list)
    screened: dict[str, int] = field(default_factory=dict)
    """Candidate ref -> the last rung it was evaluated on (0-based)."""
    scope: str = "general"
    """Scope of the gated candidate: `general`, or the env family it was specialised to."""
    stopped: str = ""
    """Why the run stopped early (a cost cap), empty when it ran to the end."""


WALL_TOLERANCE = 0.1
"""Wall-time ratios closer than this count as equal when comparing candidates: agent wall time
carries scheduling noise (two identical runs differ by several percent on a loaded machine),
and a candidate must not be dropped, or kept, for noise. For short runs the tolerance is at
least `WALL_NOISE_S` seconds over the candidate's pairs (`summarize()["wall_noise"]`)."""


def dominates(a: dict, b: dict) -> bool:
    """a is at least as good as b on (benefit, tail, episode cost, wall cost) and strictly better on one."""
    aw, bw = a.get("wall", 1.0), b.get("wall", 1.0)
    tol = max(WALL_TOLERANCE, a.get("wall_noise", 0.0), b.get("wall_noise", 0.0))
    wall_le, wall_lt = aw <= bw + tol, aw < bw - tol
    ge = a["mean_r"] >= b["mean_r"] and a["cvar"] >= b["cvar"] and a["cost"] <= b["cost"] and wall_le
    gt = a["mean_r"] > b["mean_r"] or a["cvar"] > b["cvar"] or a["cost"] < b["cost"] or wall_lt
    return ge and gt


DUPLICATE_RETRIES = 3
"""Attempts per population slot when a proposal repeats an existing candidate or is rejected."""
CHAMPION_POINT = {"mean_r": 0.0, "cvar": 0.0, "cost": 1.0, "wall": 1.0}
"""The champion against itself: no change, no tail loss, the same cost."""


def nondominated(cands: Sequence[Candidate]) -> list[Candidate]:
    """Candidates dominated neither by another candidate nor by the champion."""
    scores = {c.ref: summarize(c.pairs) for c in cands}
    points = [CHAMPION_POINT, *scores.values()]
    return [c for c in cands if not any(dominates(p, scores[c.ref]) for p in points if p is not scores[c.ref])]


def gate_feasible(c: Candidate, gate: GateConfig) -> bool:
    """Would the candidate's search pairs pass the gate's cost and tail criteria?

    A candidate that buys its gain with more wall time or episodes than the gate allows, or
    that regresses some instance beyond the tail bounds, is ranked below every feasible one:
    the gate would reject it whatever its mean.
    """
    if not c.pairs:
        return False
    d = decide(c.pairs, gate, champion="search", challenger=c.ref)
    return all(k.passed for k in d.criteria if k.name in ("cost", "tail"))


def rank_key(c: Candidate, gate: GateConfig | None = None) -> tuple:
    """Gate-feasible first, then highest mean r, then highest CVaR, then the oldest version."""
    s = summarize(c.pairs)
    ok = gate_feasible(c, gate) if gate is not None else True
    return ok, s["mean_r"], s["cvar"], -int(c.ref.split("@")[1])


def _best(retained: Sequence[Candidate], gate: GateConfig | None = None) -> Candidate | None:
    return max(retained, key=lambda c: rank_key(c, gate)) if retained else None


def family_means(pairs) -> dict[str, float]:
    """Mean r per env family of a candidate's pairs."""
    by: dict[str, list[float]] = defaultdict(list)
    for p in pairs:
        by[p.family].append(p.r)
    return {f: sum(v) / len(v) for f, v in sorted(by.items())}


def specialization_target(pairs) -> str | None:
    """The family to specialise to: it gains at least SPECIALIZE_GAIN while another loses.

    None when the change helps (or does not hurt) every family — then the general candidate
    is gated — or when no family gains enough to be worth a scope of its own.
    """
    means = family_means(pairs)
    if len(means) < 2 or min(means.values()) >= SPECIALIZE_LOSS:
        return None
    best = max(means, key=means.get)
    return best if means[best] >= SPECIALIZE_GAIN else None


class OfflineEvolution:
    """One offline run over an engine; `run()` is resumable (same config + store = no re-spending)."""

    def __init__(self, engine: Engine, cfg: EvolveConfig, champion_ref: str, champion: Bundle) -> None:
        self.e, self.cfg = engine, cfg
        self.champ = (champion_ref, champion)
        self.search: list[Instance] = cfg.suite.instances(cfg.search_pools, cfg.agent_seeds)
        self.gate_looks: list[list[Instance]] = cfg.gate_looks()
        self.report = OfflineReport(champion=champion_ref)
        self.traces_by_ref: dict[str, list] = {}

    @property
    def gate_set(self) -> list[Instance]:
        return [i for look in self.gate_looks for i in look]

    def seen_keys(self, traces) -> set[str]:
        return {instance_key(p[0], p[1]) for p in self.search} | {instance_key(t.task, t.condition) for t in traces}

    def _evidence_traces(self):
        gate_keys = {instance_key(*i) for i in self.gate_set}
        prefer = {}
        for inst in self.search:
            hit = self.e.store.get(eval_key(self.champ[1].content_hash, *inst))
            if hit is not None:
                prefer[instance_key(*inst)] = hit[0].trace_id
        return self.e.champion_traces(self.champ[1], gate_keys, prefer)

    def bootstrap(self):
        traces = self._evidence_traces()
        if traces:
            self.e.progress(f"archive: {len(traces)} verified traces of {self.champ[0]} (gate instances excluded)")
            return traces
        self.e.progress(f"archive is empty for {self.champ[0]}: bootstrapping {len(self.search)} traces by "
                        "running the champion on the search instances first")
        self.e.paired.run([self.champ], self.search)
        self.report.bootstrapped = len(self.search)
        return self._evidence_traces()

    # ----- proposals -------------------------------------------------------------------------
    def _parent_evidence(self, parent: Parent, champion_evidence):
        """Evidence for mutating a parent: from its own search traces when it has some."""
        if parent.ref == self.champ[0]:
            return champion_evidence
        traces = self.e.traces_of(parent.bundle, {instance_key(*i) for i in self.search})
        return self.e.evidence(traces, quiet=True) if traces else champion_evidence

    def _next_generation(self, g: int, retained: list[Candidate], ev) -> list[Candidate]:
        rng = random.Random(f"{self.cfg.seed}|gen{g}")
        parents = [Parent(*self.champ)] + [c.parent for c in retained]
        n_rec = min(self.cfg.recombinations, self.cfg.population) if len(parents) >= 3 and g > 1 else 0
        evidence = {p.ref: self._parent_evidence(p, ev) for p in parents}
        out: list[Candidate] = []
        for j in range(self.cfg.population):
            for attempt in range(DUPLICATE_RETRIES):
                seed = self.cfg.seed * 100_000 + g * 1000 + j * 10 + attempt
                if j < n_rec:
                    a, b = rng.sample(parents[1:], 2)
                    prop = self.e.proposer.recombine(a, b, ev, generation=g, seed=seed)
                else:
                    # later generations mutate retained candidates more often than the champion
                    parent = parents[0] if len(parents) == 1 or rng.random() < 0.25 else rng.choice(parents[1:])
                    prop = self.e.proposer.mutate(parent, evidence[parent.ref], edge="offline_mutation",
                                                  generation=g, seed=seed)
                cand = self.e.register(prop, self.champ[1])
                if cand is not None and all(cand.ref != c.ref for c in out + retained):
                    out.append(cand)
                    break
        return out

    # ----- staged evaluation ----------------------------------------------------------------------
    def cascade(self, cands: list[Candidate], g: int) -> list[Candidate]:
        """Successive halving over the search rungs; returns the candidates that finished it."""
        rungs = self.cfg.rungs()
        alive = list(cands)
        for k, n in enumerate(rungs):
            last = k == len(rungs) - 1
            insts = self.search[:n]
            self.e.progress(f"generation {g} rung {k}: {len(alive)} candidates on {n} search instances")
            self.e.evaluate(self.champ, alive, insts, stage=f"search-g{g}-r{k}")
            self.e.observe(alive, rung=k, final=last)
            for c in alive:
                self.report.screened[c.ref] = k
            if last:
                break
            keep = max(1, math.ceil(len(alive) / self.cfg.eta))
            ranked = sorted(alive, key=lambda c: rank_key(c, self.e.gate), reverse=True)
            cut = ranked[keep:]
            if cut:
                self.e.progress(f"  rung {k}: promoted " + ", ".join(f"{c.ref} ({summarize(c.pairs)['mean_r']:+.3f})"
                                                                      for c in ranked[:keep])
                                + f"; stopped {len(cut)} (best stopped {summarize(cut[0].pairs)['mean_r']:+.3f})")
            alive = ranked[:keep]
        return alive

    def search_generations(self, ev) -> list[Candidate]:
        retained: list[Candidate] = []
        for g in range(1, self.cfg.generations + 1):
            self.e.progress(f"generation {g}/{self.cfg.generations}: proposing {self.cfg.population} candidates")
            new = self._next_generation(g, retained, ev)
            self.report.candidates.extend(new)
            finished = self.cascade(new, g) if new else []
            retained = nondominated([*retained, *finished])
            self.e.progress(f"generation {g}: retained {self.champ[0]} + "
                            + (", ".join(f"{c.ref} (mean r {summarize(c.pairs)['mean_r']:+.3f})" for c in retained)
                               or "no candidate"))
        return retained

    def run(self) -> OfflineReport:
        from ole.cost import CapReached
        try:
            traces = self.bootstrap()
            ev = self.e.evidence(traces)
            self.report.evidence_ids = [e.evidence_id for e in ev]
            retained = self.search_generations(ev)
            self.report.retained = [c.ref for c in retained]
            self.final_gate(_best(retained, self.e.gate), self.seen_keys(traces))
        except CapReached as exc:
            self.report.stopped = str(exc)
            self.e.progress(f"stopped before crossing a cost cap: {exc}")
        return self.report

    # ----- gate -------------------------------------------------------------------------
    def specialize(self, best: Candidate, family: str) -> Candidate | None:
        """The best candidate's policy, scoped to one env family (a `specialization` child)."""
        data = best.bundle.model_dump(mode="json")
        data["applicability"]["env_families"] = [family]
        data["applicability"]["env_ids"] = []
        note = (f"specialised to env family {family}: search mean r per family "
                + ", ".join(f"{f} {m:+.3f}" for f, m in family_means(best.pairs).items()))
        try:
            bundle = child_bundle([best.parent], data["loop_policy"], edge="specialization",
                                  evidence_ids=best.bundle.provenance.evidence_ids,
                                  generation=best.bundle.provenance.generation, proposer=self.e.proposer.name,
                                  note=note, applicability=data["applicability"])
        except Exception as exc:  # a registry without specialisation support: gate the general candidate
            self.e.progress(f"  cannot specialise {best.ref} to {family}: {exc}")
            return None
        prop = accepted(self.e.proposer.name, "specialization", [best.parent], bundle)
        cand = self.e.register(prop, self.champ[1])
        if cand is not None:
            cand.pairs = [p for p in best.pairs if p.family == family]
        return cand

    def final_gate(self, best: Candidate | None, seen: set[str]) -> None:
        if best is None:
            self.e.progress("no candidate survived the search: nothing to gate, the champion stays")
            return
        looks, scope_families = self.gate_looks, None
        family = specialization_target(best.pairs)
        if family is not None:
            spec = self.specialize(best, family)
            if spec is not None:
                self.e.progress(f"{best.ref} gains on {family} only (search mean r per family "
                                + ", ".join(f"{f} {m:+.3f}" for f, m in family_means(best.pairs).items())
                                + f"): gating its specialisation {spec.ref} on the in-scope gate instances")
                best, scope_families = spec, [family]
                looks = [[i for i in look if env_family(i[0].env) == family] for look in self.gate_looks]
                looks = [look for look in looks if look]
                self.report.scope = family
        self.report.final = best.ref
        self.e.progress(f"final gate: {best.ref} vs {self.champ[0]} on {len(looks[0])} unseen gate instances "
                        f"(up to {sum(len(x) for x in looks)} with the adaptive sample)")
        decision = self.e.decide_gate(self.champ, best, looks, seen, stage="offline", scope_families=scope_families)
        self.report.decision = decision
        if decision.verdict == "release":
            self.e.release(best.ref, f"offline gate: mean r {decision.stats.mean_r:+.3f}, "
                                     f"p={decision.stats.p_value:.3f} at alpha {decision.alpha_applied}",
                           stage="offline")
