"""Offline mode: archive → evidence → population → generations → final gate → release or not.

Per generation, every new candidate is paired against the fixed champion on the search
instances in one batch; the retained set is the champion plus the candidates no other
point dominates on (benefit ↑, tail ↑, cost ↓); the next generation mutates retained
candidates and recombines pairs of them. The best retained candidate then meets the
gate on the gate instances, which no proposal has seen. With an empty archive the
champion is run on the search instances first (and the driver says so); those runs are
also the champion side of every search pair, so bootstrapping costs nothing extra.
"""
from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field

from ole.bundle import Bundle
from ole.evolve import Candidate, Engine, EvolveConfig, summarize
from ole.gate import GateDecision
from ole.paired import Instance, eval_key, instance_key
from ole.proposers import Parent


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
    stopped: str = ""
    """Why the run stopped early (a cost cap), empty when it ran to the end."""


def dominates(a: dict, b: dict) -> bool:
    """a is at least as good as b on (benefit, tail, cost) and strictly better on one."""
    ge = a["mean_r"] >= b["mean_r"] and a["cvar"] >= b["cvar"] and a["cost"] <= b["cost"]
    gt = a["mean_r"] > b["mean_r"] or a["cvar"] > b["cvar"] or a["cost"] < b["cost"]
    return ge and gt


DUPLICATE_RETRIES = 3
"""Attempts per population slot when a proposal repeats an existing candidate or is rejected."""
CHAMPION_POINT = {"mean_r": 0.0, "cvar": 0.0, "cost": 1.0}
"""The champion against itself: no change, no tail loss, the same cost."""


def nondominated(cands: Sequence[Candidate]) -> list[Candidate]:
    """Candidates dominated neither by another candidate nor by the champion."""
    scores = {c.ref: summarize(c.pairs) for c in cands}
    points = [CHAMPION_POINT, *scores.values()]
    return [c for c in cands if not any(dominates(p, scores[c.ref]) for p in points if p is not scores[c.ref])]


def _best(retained: Sequence[Candidate]) -> Candidate | None:
    """Highest mean r, then highest CVaR, then the oldest version (deterministic)."""
    def key(c: Candidate) -> tuple:
        s = summarize(c.pairs)
        return s["mean_r"], s["cvar"], -int(c.ref.split("@")[1])
    return max(retained, key=key) if retained else None


class OfflineEvolution:
    """One offline run over an engine; `run()` is resumable (same config + store = no re-spending)."""

    def __init__(self, engine: Engine, cfg: EvolveConfig, champion_ref: str, champion: Bundle) -> None:
        self.e, self.cfg = engine, cfg
        self.champ = (champion_ref, champion)
        self.search: list[Instance] = cfg.suite.instances(cfg.search_pools, cfg.agent_seeds)
        self.gate_set: list[Instance] = cfg.suite.instances(cfg.gate_pools, cfg.agent_seeds)
        self.report = OfflineReport(champion=champion_ref)

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

    def _next_generation(self, g: int, retained: list[Candidate], ev) -> list[Candidate]:
        rng = random.Random(f"{self.cfg.seed}|gen{g}")
        parents = [c.parent for c in retained] or [Parent(*self.champ)]
        n_rec = min(self.cfg.recombinations, self.cfg.population) if len(parents) >= 2 and g > 1 else 0
        out: list[Candidate] = []
        for j in range(self.cfg.population):
            for attempt in range(DUPLICATE_RETRIES):
                seed = self.cfg.seed * 100_000 + g * 1000 + j * 10 + attempt
                if j < n_rec:
                    a, b = rng.sample(parents, 2)
                    prop = self.e.proposer.recombine(a, b, ev, generation=g, seed=seed)
                else:
                    prop = self.e.proposer.mutate(rng.choice(parents), ev, edge="offline_mutation",
                                                  generation=g, seed=seed)
                cand = self.e.register(prop, self.champ[1])
                if cand is not None and all(cand.ref != c.ref for c in out + retained):
                    out.append(cand)
                    break
        return out

    def search_generations(self, ev) -> list[Candidate]:
        retained: list[Candidate] = []
        for g in range(1, self.cfg.generations + 1):
            self.e.progress(f"generation {g}/{self.cfg.generations}: proposing {self.cfg.population} candidates")
            new = self._next_generation(g, retained, ev)
            self.report.candidates.extend(new)
            if new:
                self.e.progress(f"generation {g}: paired evaluation of {len(new)} candidates on "
                                f"{len(self.search)} search instances")
                self.e.evaluate(self.champ, new, self.search, stage=f"search-g{g}")
            retained = nondominated([*retained, *new])
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
            self.final_gate(_best(retained), self.seen_keys(traces))
        except CapReached as exc:
            self.report.stopped = str(exc)
            self.e.progress(f"stopped before crossing a cost cap: {exc}")
        return self.report

    def final_gate(self, best: Candidate | None, seen: set[str]) -> None:
        if best is None:
            self.e.progress("no candidate survived the search: nothing to gate, the champion stays")
            return
        self.report.final = best.ref
        self.e.progress(f"final gate: {best.ref} vs {self.champ[0]} on {len(self.gate_set)} unseen gate instances")
        self.e.evaluate(self.champ, [best], self.gate_set, stage="gate")
        decision = self.e.judge(self.champ[0], best, seen, stage="offline")
        self.report.decision = decision
        if decision.verdict == "release":
            self.e.release(best.ref, f"offline gate: mean r {decision.stats.mean_r:+.3f}, "
                                     f"p={decision.stats.p_value:.3f}", stage="offline")
