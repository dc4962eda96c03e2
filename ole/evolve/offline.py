"""Offline mode: archive → evidence → staged search over generations → scopes → ablation → gates → releases.

Per generation, `population` candidates are proposed (mutations of the retained candidates
aimed at the evidence drawn from *their own* search traces, plus recombinations) and go
through a successive-halving cascade on the search instances: every candidate is screened
on the first rung (one pool of every env by default), only the best ⌈n/eta⌉ — plus the best
candidate of each env that gains there, so a specialist is not lost to the overall ranking —
move on to the next rung of twice as many instances, and so on to every search instance. The
champion's runs are paid once and shared by every rung and generation. The retained set (the
next generation's parents) is the champion plus the candidates that finished the cascade and
no other point dominates on (benefit ↑, tail ↑, episode cost and submits ↓: what the runs did,
never a clock reading).

Then the gains are split by env (`ole.evolve.scoping`): each env where some finished
candidate gains goes to the candidate that gains most there, and each such candidate becomes
one scope. Per scope, the candidate is cut down to the field changes that carry its gain on
the in-scope search instances (`ole.evolve.ablate`), registered as a `specialization` of the
champion whose applicability lists exactly those env ids, and gated on the in-scope gate
instances — at every gate budget, with the adaptive sample (`Engine.decide_gate`). A release
is bounded by what its gate's pairs covered (`ole.coverage`): hosts, env ids, the budget band.
One run may so release several scope champions; envs without a gain keep the champion. With
an empty archive the champion is run on the search instances first; those runs are also the
champion side of every search pair, so bootstrapping costs nothing extra.
"""
from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, field

from ole.ablation import Ablation
from ole.bundle import Bundle
from ole.chosen import ChosenVersion
from ole.evidence import EvidenceItem
from ole.evolve.config import EvolveConfig
from ole.evolve.engine import Candidate, Engine
from ole.evolve import scoping
from ole.evolve.ablate import ablate
from ole.evolve.store import step
from ole.gate import GateConfig, GateDecision, holds_tail_and_cost
from ole.paired import Instance, Objectives, env_family, eval_key, instance_key
from ole.trace import Trace
from ole.verdicts import is_release


@dataclass
class GateRun:
    """One scope gated by an offline run."""

    source: str
    """The candidate as the search found it."""
    final: str
    """The version gated: the source's carrying changes, scoped to `envs`."""
    envs: list[str]
    """Env ids of the scope (its search gains: `gains`)."""
    gains: dict[str, float]
    """Search mean r of the source on each env of the scope."""
    decision: GateDecision
    """The gate's decision record."""
    ablation: Ablation | None = None
    """What was cut from the source (None: gated as found)."""

    @property
    def released(self) -> bool:
        return is_release(self.decision.verdict)


@dataclass
class OfflineReport:
    """What an offline run did and decided."""

    champion: str
    candidates: list[Candidate] = field(default_factory=list)
    retained: list[str] = field(default_factory=list)
    gates: list[GateRun] = field(default_factory=list)
    """Every scope gated, largest search gain first."""
    bootstrapped: int = 0
    evidence_ids: list[str] = field(default_factory=list)
    screened: dict[str, int] = field(default_factory=dict)
    """Candidate ref -> the last rung it was evaluated on (0-based)."""
    stopped: str = ""
    """Why the run stopped early (a cost cap), empty when it ran to the end."""

    @property
    def decision(self) -> GateDecision | None:
        """The first gate's decision (the scope with the largest search gain), if any."""
        return self.gates[0].decision if self.gates else None

    @property
    def final(self) -> str | None:
        """The version the first gate judged."""
        return self.gates[0].final if self.gates else None

    @property
    def released(self) -> list[str]:
        """Versions released by this run."""
        return list(dict.fromkeys(g.final for g in self.gates if g.released))

    @property
    def derived(self) -> list[str]:
        """Versions the driver registered itself (ablation variants, the scoped versions it gated)."""
        cands = {c.ref for c in self.candidates}
        out: list[str] = []
        for g in self.gates:
            steps = g.ablation.steps if g.ablation is not None else ()
            for ref in [*(s.variant for s in steps), g.final]:
                if ref and ref not in cands and ref != self.champion and ref not in out:
                    out.append(ref)
        return out


def dominates(a: Objectives, b: Objectives) -> bool:
    """a is at least as good as b on (benefit, tail, episode cost, submit count) and strictly better on one.

    Every objective is what the runs did, never a clock reading: the measured wall ratio of the
    same candidate moved 1.06 / 1.73 / 1.31 in three runs of one commit (the champion's runs are
    cached from another moment than a challenger's; experiments/results/refactor_release_check.md),
    so ranking on it, at a 10 % tolerance, kept different parents on the same inputs. Wall is
    read only against the gate's wide bound (`gate_feasible`), and by the gate itself."""
    a_sub, b_sub = a.get("submits", 1.0), b.get("submits", 1.0)
    ge = a["mean_r"] >= b["mean_r"] and a["cvar"] >= b["cvar"] and a["cost"] <= b["cost"] and a_sub <= b_sub
    gt = a["mean_r"] > b["mean_r"] or a["cvar"] > b["cvar"] or a["cost"] < b["cost"] or a_sub < b_sub
    return ge and gt


DUPLICATE_RETRIES = 3
"""Attempts per population slot when a proposal repeats an existing candidate or is rejected."""
CHAMPION_POINT = Objectives(mean_r=0.0, cvar=0.0, cost=1.0, submits=1.0)
"""The champion against itself: no change, no tail loss, the same cost."""


def nondominated(cands: Sequence[Candidate]) -> list[Candidate]:
    """Candidates dominated neither by another candidate nor by the champion."""
    scores = {c.ref: c.stats.objectives() for c in cands}
    points = [CHAMPION_POINT, *scores.values()]
    return [c for c in cands if not any(dominates(p, scores[c.ref]) for p in points if p is not scores[c.ref])]


def gate_feasible(c: Candidate, gate: GateConfig) -> bool:
    """Would the candidate's search pairs pass the gate's cost and tail criteria?

    A candidate that buys its gain with more wall time or episodes than the gate allows, or
    that regresses some instance beyond the tail bounds, is ranked below every feasible one:
    the gate would reject it whatever its mean. This is the one place the search reads a clock:
    against the gate's bound (`cost_kappa`, 50 % wide by default), which real costs cross
    (four times the submits: 1.8-2.5x the wall on pusher5). Noise crosses it too where a
    candidate's ratio lies near it or the load changes a lot between a champion's run and a
    challenger's (1.06 vs 1.73 for one candidate with a test suite run beside it), so two runs of
    the same inputs agree only where no candidate's ratio changes side; `dominates` never reads it.
    """
    return bool(c.pairs) and holds_tail_and_cost(c.stats, gate)


def rank_key(c: Candidate, gate: GateConfig | None = None) -> tuple[bool, float, float, int]:
    """Gate-feasible first, then highest mean r, then highest CVaR, then the oldest version."""
    ok = gate_feasible(c, gate) if gate is not None else True
    return ok, c.stats.mean_r, c.stats.cvar, -c.chosen.version


class OfflineEvolution:
    """One offline run over an engine; `run()` is resumable (same config + store = no re-spending)."""

    def __init__(self, engine: Engine, cfg: EvolveConfig, champion_ref: str, champion: Bundle) -> None:
        self.e, self.cfg = engine, cfg
        self.champ = ChosenVersion(ref=champion_ref, bundle=champion)
        self.search: list[Instance] = cfg.suite.instances(cfg.search_pools, cfg.agent_seeds)
        self.gate_looks: list[list[Instance]] = cfg.gate_looks()
        self.report = OfflineReport(champion=champion_ref)
        self.traces_by_ref: dict[str, list[Trace]] = {}
        self.finished: list[Candidate] = []

    @property
    def gate_set(self) -> list[Instance]:
        return [i for look in self.gate_looks for i in look]

    def seen_keys(self, traces: Sequence[Trace]) -> set[str]:
        return {instance_key(p[0], p[1]) for p in self.search} | {instance_key(t.task, t.condition) for t in traces}

    def _evidence_traces(self) -> list[Trace]:
        gate_keys = {instance_key(*i) for i in self.gate_set}
        prefer: dict[str, str] = {}
        for inst in self.search:
            hit = self.e.store.get(eval_key(self.champ.content_hash, *inst))
            if hit is not None:
                prefer[instance_key(*inst)] = hit[0].trace_id
        return self.e.champion_traces(self.champ.bundle, gate_keys, prefer)

    def bootstrap(self) -> list[Trace]:
        traces = self._evidence_traces()
        if traces:
            self.e.progress(f"archive: {len(traces)} verified traces of {self.champ.ref} (gate instances excluded)")
            return traces
        self.e.progress(f"archive is empty for {self.champ.ref}: bootstrapping {len(self.search)} traces by "
                        "running the champion on the search instances first")
        self.e.paired.run([self.champ], self.search)
        self.report.bootstrapped = len(self.search)
        return self._evidence_traces()

    # ----- proposals -------------------------------------------------------------------------
    def _parent_evidence(self, parent: ChosenVersion, champion_evidence: list[EvidenceItem]) -> list[EvidenceItem]:
        """Evidence for mutating a parent: from its own search traces when it has some."""
        if parent.ref == self.champ.ref:
            return champion_evidence
        traces = self.e.traces_of(parent.bundle, {instance_key(*i) for i in self.search})
        return self.e.evidence(traces, quiet=True) if traces else champion_evidence

    def _next_generation(self, g: int, retained: list[Candidate], ev: list[EvidenceItem]) -> list[Candidate]:
        rng = random.Random(f"{self.cfg.seed}|gen{g}")
        parents = [self.champ] + [c.chosen for c in retained]
        n_rec = min(self.cfg.recombinations, self.cfg.population) if len(parents) >= 3 and g > 1 else 0
        evidence = {p.ref: self._parent_evidence(p, ev) for p in parents}
        out: list[Candidate] = []
        for j in range(self.cfg.population):
            for attempt in range(DUPLICATE_RETRIES):
                seed = self.cfg.seed * 100_000 + g * 1000 + j * 10 + attempt
                self.e.meter.reserve_proposal()
                if j < n_rec:
                    a, b = rng.sample(parents[1:], 2)
                    prop = self.e.proposer.recombine(a, b, ev, generation=g, seed=seed)
                else:
                    # later generations mutate retained candidates more often than the champion
                    parent = parents[0] if len(parents) == 1 or rng.random() < 0.25 else rng.choice(parents[1:])
                    prop = self.e.proposer.mutate(parent, evidence[parent.ref], edge="offline_mutation",
                                                  generation=g, seed=seed)
                cand = self.e.register(prop, self.champ.bundle)
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
            promoted = ranked[:keep] + [c for c in env_leaders(alive) if c not in ranked[:keep]]
            cut = [c for c in ranked if c not in promoted]
            if cut:
                self.e.progress(f"  rung {k}: promoted " + ", ".join(f"{c.ref} ({c.stats.mean_r:+.3f})" for c in promoted)
                                + f"; stopped {len(cut)} (best stopped {cut[0].stats.mean_r:+.3f})")
            alive = promoted
        return alive

    def search_generations(self, ev: list[EvidenceItem]) -> list[Candidate]:
        retained: list[Candidate] = []
        for g in range(1, self.cfg.generations + 1):
            self.e.progress(f"generation {g}/{self.cfg.generations}: proposing {self.cfg.population} candidates")
            new = self._next_generation(g, retained, ev)
            self.report.candidates.extend(new)
            finished = self.cascade(new, g) if new else []
            self.finished.extend(finished)
            retained = nondominated([*retained, *finished])
            self.e.progress(f"generation {g}: retained {self.champ.ref} + "
                            + (", ".join(f"{c.ref} (mean r {c.stats.mean_r:+.3f})" for c in retained)
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
            self.final_gates(self.seen_keys(traces))
        except CapReached as exc:
            self.report.stopped = str(exc)
            self.e.progress(f"stopped before crossing a cost cap: {exc}")
        return self.report

    # ----- scopes, ablation, gates -------------------------------------------------------------
    def feasible(self, cand: Candidate, envs: Sequence[str]) -> bool:
        """Would the candidate's search pairs on these envs pass the gate's tail and cost criteria?"""
        return scoping.holds_tail_and_cost(self.e, cand, envs)

    def final_gates(self, seen: set[str]) -> None:
        """Plan the scopes from the finished candidates, then ablate, scope and gate each."""
        plans = scoping.plan(self.finished, max_scopes=self.cfg.max_scopes, split=True, feasible=self.feasible)
        if not plans:
            self.e.progress(f"no candidate gains >= {scoping.SCOPE_GAIN} mean r on any env of the search: "
                            "nothing to gate, the champion stays")
            return
        self.e.progress("scopes: " + "; ".join(f"{p.candidate.ref} on {', '.join(p.envs)} (search gain "
                                               + ", ".join(f"{m:+.3f}" for m in p.gains.values()) + ")"
                                               for p in plans))
        for plan in plans:
            self.gate_scope(plan, seen)

    def incumbents(self, envs: Sequence[str]) -> dict[str, str]:
        """Per env, the bundle its gate tasks are routed to now when that is not this run's champion.

        A scope champion released by an earlier run already serves those tasks: a candidate
        derived from (and searched against) the general champion says nothing about beating it,
        so such envs are left out of this run's scopes (evolve that scope's champion instead).
        """
        from ole.registry.scopes import context_for
        out: dict[str, str] = {}
        for env in envs:
            for budget in self.cfg.gate_budgets:
                task, cond = self.cfg.suite.instances(self.cfg.gate_pools[:1], self.cfg.agent_seeds[:1], budget)[0]
                if task.env != env:
                    task = task.model_copy(update={"env": env})
                chosen = self.e.registry.select(self.e.channel, context_for(task, cond), activate=False)
                # a resumed run's own release (its gate step is marked before the release is appended)
                ours = self.e.store.step(step("gate", "offline", chosen.ref, self.champ.ref)) is not None
                if chosen.ref != self.champ.ref and not ours:
                    out[env] = f"{chosen.ref} (scope {chosen.scope})"
        return out

    def gate_scope(self, plan: scoping.ScopePlan, seen: set[str]) -> None:
        """Ablate the plan's candidate on its in-scope search instances, scope it, gate it, release it."""
        taken = self.incumbents(plan.envs)
        if taken:
            self.e.progress("  left out, already served by another champion: "
                            + "; ".join(f"{e} -> {who}" for e, who in taken.items()))
            plan = scoping.ScopePlan(candidate=plan.candidate, envs=[e for e in plan.envs if e not in taken],
                                     gains={e: m for e, m in plan.gains.items() if e not in taken})
            if not plan.envs:
                return
        inside = [i for i in self.search if i[0].env in plan.envs]
        minimal, ablation = plan.candidate, None
        if self.cfg.ablate:
            minimal, ablation = ablate(self.e, self.champ, plan.candidate, inside,
                                      stage=f"scope-{plan.candidate.ref}-{'+'.join(plan.envs)}")
        gated = scoping.specialize(self.e, self.champ, minimal, plan, ablation,
                                   applicability=scoping.reach(self.champ.bundle.applicability, self.cfg))
        if gated is None:
            return
        looks = [[i for i in look if i[0].env in plan.envs] for look in self.gate_looks]
        looks = [look for look in looks if look]
        families = sorted({env_family(e) for e in plan.envs})
        self.e.progress(f"gate: {gated.ref} ({', '.join(plan.envs)}) vs {self.champ.ref} on {len(looks[0])} unseen "
                        f"gate instances at budgets {', '.join(map(str, self.cfg.gate_budgets))} "
                        f"(up to {sum(len(x) for x in looks)} with the adaptive sample)")
        transfer = self.cfg.transfer_instances()
        if transfer:
            self.e.progress(f"  then, if released, the transfer sample: {len(transfer)} instances of "
                            f"{len(self.cfg.transfer_envs)} envs held out from the search")
        # a change the search found best on several envs is gated once per env (`scoping.plan(split=True)`);
        # its later scopes get stage keys of their own, so each has its own decision, release and widening
        earlier = [g for g in self.report.gates if g.final == gated.ref]
        stage = "offline" if not earlier else "offline:" + "+".join(plan.envs)
        decision = self.e.decide_gate(self.champ, gated, looks, seen, stage=stage, scope_families=families,
                                      ablation=ablation, transfer=transfer, search_pairs=plan.candidate.pairs)
        self.report.gates.append(GateRun(source=plan.candidate.ref, final=gated.ref, envs=list(plan.envs),
                                         gains=dict(plan.gains), decision=decision, ablation=ablation))
        if is_release(decision.verdict):
            self.e.release(gated.ref, f"offline gate: mean r {decision.stats.mean_r:+.3f}, "
                                      f"p={decision.stats.p_value:.3f} at alpha {decision.alpha_applied}",
                           stage=stage)
            widened = {r.scope for g in earlier if g.released and g.decision is not None
                       and g.decision.transfer is not None for r in g.decision.transfer.regions}
            for region in decision.transfer.regions if decision.transfer is not None else ():
                if region.scope in widened:  # the same transfer sample already widened this change there
                    continue
                self.e.widen(gated.ref, region.scope, f"transfer evidence: {region.statement()}", stage=stage)


def env_leaders(cands: Sequence[Candidate]) -> list[Candidate]:
    """Per env, the candidate with the highest mean r there when that reaches `scoping.SCOPE_GAIN`."""
    out: list[Candidate] = []
    gains = {c.ref: scoping.env_gains(c.pairs) for c in cands}
    envs = sorted({e for g in gains.values() for e in g})
    for env in envs:
        have = [c for c in cands if env in gains[c.ref] and gains[c.ref][env].informative]
        if not have:
            continue
        best = max(have, key=lambda c: (gains[c.ref][env].mean_r, -c.chosen.version))
        if gains[best.ref][env].mean_r >= scoping.SCOPE_GAIN and best not in out:
            out.append(best)
    return out
