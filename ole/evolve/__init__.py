"""Evolution: the pieces offline and online mode share, and their configuration.

Both modes run the same chain — evidence ε(D) → proposer → registration → paired
evaluation → gate → release — through one `Engine`; `offline.py` and `online.py` are
thin drivers that differ only in where traces come from and when candidates are made.
Every registry write the engine makes is first checked against the resume store, so a
resumed driver neither re-spends evaluations nor appends an event twice.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from evogym.sandbox.isolation import DEFAULT_ISOLATION
from ole import evidence as evidence_mod
from ole.ablation import Ablation
from ole.bundle import Bundle, parse_ref, parse_scope
from ole.chosen import ChosenVersion
from ole.cost import CostCaps, CostMeter
from ole.evidence import EvidenceItem
from ole.evolve.store import (EvaluationStore, Fingerprint, Step, fingerprint, package_versions, source_digest,
                              step)
from ole.gate import GateConfig, GateDecision, Look, decide, look_alpha, should_extend
from ole.jobs import EvalJob
from ole.paired import Instance, Pair, PairedEvaluation, PairStats, RunResult, instance_key, pair_stats
from ole.proposers import Proposal, Proposer
from ole.trace import RunCondition, TaskSpec, Trace, TraceArchive
from ole.transfer import TransferDecision

DEFAULT_SUITE = ("gym/halfcheetah5", "gym/pusher5", "gym/continuouscar")
"""The `make evolve` workload: the envs of each family where the built-in agent has headroom and
its held-out score moves with the loop policy far above the noise floor, at 32 episodes and at
128 (`experiments/results/sensitivity.md`, `sensitivity_combos.md`): halfcheetah5 (one-episode
submits +60 % at 32, +29 % at 128) and pusher5 (smaller retests +45 % at 32) of `generic`, and
continuouscar of `curated` (the seed is below the best paper row at 128; one-episode submits
reach it). acrobot, ant5, Fetch*, reacher5, Pendulum and the MiniGrid envs are left out: every
move of the maps left them bit-identical or within 2 % (nothing to learn, only cost); bipedal is
multimodal (two agent seeds of one policy: q 15 vs 0), so its pairs are noise. Releases are
bounded to the env ids their gates sampled (`ole.coverage`), so the envs left out keep the seed."""


DEFAULT_TRANSFER = ("gym/bipedal", "gymnasium/roundabout-v0", "gym/reacher5", "gymnasium/Pendulum-v1",
                    "gymnasium/MiniGrid-FourRooms-v0", "gymnasium/InvertedDoublePendulum-v5")
"""Transfer envs of `make evolve`: held out from the search and the ablation, paired with the champion
after a scope's gate released its change, so its release may widen to the region of task features
they support (`ole.transfer`). Chosen to span the feature regions the engine may claim (box and
discrete actions, 1 to 4 action dimensions, horizons 11 to 1600, box and dict observations) with
envs quick enough here that `make evolve` can carry them; see docs/evolution.md, "Releases that travel"."""


class Suite(BaseModel):
    """The tasks evolution evaluates on: envs × pool seeds × agent seeds under one profile."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    envs: tuple[str, ...] = DEFAULT_SUITE
    """Env slugs."""
    profile: str = "quick"
    """Host run profile."""
    budget: int | None = Field(32, ge=1)
    """Episode budget per run (None = the profile's)."""
    host: Literal["builtin", "llm", "command"] = "builtin"
    """Host agent kind of every run."""
    model: str | None = None
    """Model string for LLM agents."""
    command: tuple[str, ...] | None = None
    """Command line of the external agent (host `command` only); it travels in every run condition."""

    @model_validator(mode="after")
    def _command_iff_command_host(self) -> "Suite":
        if (self.host == "command") != bool(self.command):
            raise ValueError("host `command` needs a command line (-- CMD ...), and only it takes one")
        return self

    def condition(self, seed: int) -> RunCondition:
        """The run condition of every run of this suite with this agent seed."""
        return RunCondition(host=self.host, seed=seed, model=self.model, command=self.command)

    def instances(self, pool_seeds: Sequence[int], agent_seeds: Sequence[int],
                  budget: int | None = None) -> list[Instance]:
        """Every (task, condition) of the suite on these pools and agent seeds, env-major; at the
        suite's budget, or at `budget` (a gate tier) when given."""
        b = self.budget if budget is None else budget
        return [(TaskSpec(env=env, profile=self.profile, budget=b, pool_seed=p), self.condition(s))
                for p in pool_seeds for env in self.envs for s in agent_seeds]


class EvolveConfig(BaseModel):
    """Everything that determines an evolution run (recorded with its results)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    suite: Suite = Suite()
    """Envs, profile, budget and agent kind."""
    search_pools: tuple[int, ...] = (101, 102)
    """Pool seeds of the search instances (the proposer sees their traces)."""
    gate_pools: tuple[int, ...] = (201, 202, 203, 204)
    """Pool seeds of the gate's first look (disjoint from the search pools)."""
    gate_extra_pools: tuple[int, ...] = (205, 206, 207, 208)
    """Pool seeds the adaptive gate adds while its verdict is open and the gate config's
    `max_pairs` allows, half as many per look as `gate_pools` has (see `gate_extra_chunks`);
    disjoint from the search and first-look pools."""
    gate_budgets: tuple[int, ...] = (32, 128)
    """Episode budgets every gate instance is run at (the quick budget and the bench/paper one). A
    release covers the band between the smallest and the largest (`ole.coverage`), so a policy
    searched at 32 serves budget-128 tasks only when the gate sampled 128 too. Runs at each
    budget use the suite's profile (its validation and held-out sizes)."""
    transfer_envs: tuple[str, ...] = ()
    """Envs held out from the search and the ablation on which a scope's released change is paired
    with the champion (the transfer sample, `ole.transfer`); empty: releases never widen offline.
    `ole evolve --mode offline` fills `DEFAULT_TRANSFER` (less the search envs) unless told otherwise."""
    transfer_pools: tuple[int, ...] = (221,)
    """Pool seeds of the transfer sample (each transfer env at every gate budget); disjoint from the
    search pools (`search_pools`), so no transfer instance is one the proposer saw."""
    max_scopes: int = Field(3, ge=1, le=16)
    """Most scope champions one offline run gates: the search's gains are split by env into at
    most this many scopes, each gated (and released) on its own (`ole.evolve.scoping`)."""
    ablate: bool = True
    """Before gating, cut a multi-field candidate down to the field changes that carry its search
    gain (`ole.evolve.ablate`); False gates the candidates as proposed."""
    agent_seeds: tuple[int, ...] = (0,)
    """Agent seeds crossed with every pool seed."""
    population: int = Field(12, ge=1, le=64)
    """Candidates proposed per offline generation (all screened; see `eta`)."""
    eta: int = Field(3, ge=1, le=16)
    """Successive-halving rate of the staged search evaluation: after each rung only the best
    ⌈n/eta⌉ candidates are evaluated on the next, larger rung (1 = every candidate on every rung)."""
    screen: int | None = Field(None, ge=1)
    """Search instances of the first rung (None: one pool of every env); each later rung doubles
    it, the last rung is every search instance."""
    generations: int = Field(2, ge=1, le=100)
    """Offline generations."""
    recombinations: int = Field(1, ge=0)
    """Of each later generation's candidates, how many come from recombination."""
    seed: int = Field(0, ge=0)
    """Seed of the proposer."""
    channel: str = "default"
    """Release channel."""
    caps: CostCaps = CostCaps()
    """Cost caps."""
    workers: int = Field(2, ge=1)
    """Parallel evaluation workers."""

    @model_validator(mode="after")
    def _disjoint(self) -> "EvolveConfig":
        both = sorted(set(self.search_pools) & (set(self.gate_pools) | set(self.gate_extra_pools)))
        if both:
            raise ValueError(f"search_pools and gate pools share {both}: the gate must judge unseen instances")
        twice = sorted(set(self.gate_pools) & set(self.gate_extra_pools))
        if twice:
            raise ValueError(f"gate_pools and gate_extra_pools share {twice}: an added look must bring new instances")
        if not self.agent_seeds or any(s < 0 for s in self.agent_seeds) or len(set(self.agent_seeds)) != len(self.agent_seeds):
            raise ValueError(f"agent_seeds must be distinct seeds >= 0, got {list(self.agent_seeds)}")
        if not self.gate_budgets or any(b < 1 for b in self.gate_budgets) \
                or len(set(self.gate_budgets)) != len(self.gate_budgets):
            raise ValueError(f"gate_budgets must be distinct budgets >= 1, got {list(self.gate_budgets)}")
        searched = sorted(set(self.transfer_envs) & set(self.suite.envs))
        if searched:
            raise ValueError(f"transfer_envs {searched} are also search envs: a transfer env must be held out "
                             "from the search")
        if len(set(self.transfer_envs)) != len(self.transfer_envs):
            raise ValueError(f"transfer_envs lists an env twice: {list(self.transfer_envs)}")
        if self.transfer_envs and not self.transfer_pools:
            raise ValueError("transfer_envs need transfer_pools")
        if set(self.transfer_pools) & set(self.search_pools):
            raise ValueError(f"transfer_pools {sorted(set(self.transfer_pools) & set(self.search_pools))} are also "
                             "search pools: the transfer sample must be held out from the search")
        return self

    def transfer_instances(self) -> list[Instance]:
        """Every transfer env on the transfer pools at every gate budget (budget-major)."""
        return [(TaskSpec(env=env, profile=self.suite.profile, budget=b, pool_seed=p), self.suite.condition(s))
                for b in self.gate_budgets for p in self.transfer_pools for env in self.transfer_envs
                for s in self.agent_seeds]

    def gate_extra_chunks(self) -> list[tuple[int, ...]]:
        """The extra gate pools grouped per look: each look adds half as many pools as the first had
        (at least one), so a look is never a sliver that spends its share of alpha on a few pairs."""
        stride = max(1, len(self.gate_pools) // 2)
        pools = self.gate_extra_pools
        return [pools[i:i + stride] for i in range(0, len(pools), stride)]

    def gate_instances(self, pools: Sequence[int]) -> list[Instance]:
        """Every suite instance on these pools, at every gate budget (budget-major)."""
        return [i for b in self.gate_budgets for i in self.suite.instances(pools, self.agent_seeds, b)]

    def gate_looks(self) -> list[list[Instance]]:
        """The gate instances look by look: the first gate pools, then each extra chunk; every
        look at every gate budget."""
        return [self.gate_instances(self.gate_pools)] + [self.gate_instances(c) for c in self.gate_extra_chunks()]

    def rungs(self) -> list[int]:
        """Instance counts of the staged search evaluation's rungs (the last is every search instance)."""
        total = len(self.suite.envs) * len(self.search_pools) * len(self.agent_seeds)
        first = min(total, self.screen or len(self.suite.envs) * len(self.agent_seeds))
        out = [first]
        while out[-1] < total:
            out.append(min(total, out[-1] * 2))
        return out


@dataclass
class Candidate:
    """A registered candidate and what is known about it so far."""

    chosen: ChosenVersion
    """The registered version (ref and bundle) that is paired and gated."""
    proposal: Proposal | None
    """The proposal it was registered from; None for a version a person wrote (`ole gate`)."""
    pairs: list[Pair] = field(default_factory=list)
    """Its pairs against the champion on the instances evaluated so far."""
    stats: PairStats = field(default_factory=lambda: pair_stats(()))
    """What `pairs` say, computed once when they are set (`Engine.keep_pairs`)."""

    @property
    def ref(self) -> str:
        """`NAME@VERSION` of the candidate."""
        return self.chosen.ref

    @property
    def bundle(self) -> Bundle:
        """The candidate's bundle."""
        return self.chosen.bundle


class Engine:
    """The shared chain; drivers call its steps in their own order."""

    def __init__(self, registry, store: EvaluationStore, archive: TraceArchive, paired: PairedEvaluation,
                 proposer: Proposer, gate: GateConfig, meter: CostMeter, *, channel: str = "default",
                 progress: Callable[[str], None] = print) -> None:
        self.registry, self.store, self.archive, self.paired = registry, store, archive, paired
        self.proposer, self.gate, self.meter, self.channel, self.progress = proposer, gate, meter, channel, progress
        self.rejections: list[Proposal] = []
        self.reference_budget: int | None = None
        """The search budget: run-length counts a proposal moves are stated for it (`_anchored`)."""

    # ----- evidence ------------------------------------------------------------------------
    def evidence(self, traces: Sequence[Trace], *, quiet: bool = False) -> list[EvidenceItem]:
        """ε(D) over verified traces (printed unless `quiet`)."""
        items = evidence_mod.extract(traces)
        if not quiet:
            self.progress(f"evidence: {len(items)} items from {len(traces)} verified traces"
                          + "".join(f"\n  {e.direction} {e.component:<12} {e.sentence} [{e.evidence_id}]"
                                    for e in items))
        return items

    def traces_of(self, bundle: Bundle, keys: set[str]) -> list[Trace]:
        """Verified traces of a bundle's runs made by this engine on the given instance keys."""
        by_key = {instance_key(t.task, t.condition): t for t in self.paired.traces.values()
                  if t.bundle_hash == bundle.content_hash and t.verified}
        if len(by_key) < len(keys):
            for t in self.archive.select(bundle_hash=bundle.content_hash):
                if t.verified:  # the archive also keeps host-recorded failures, which are never evidence
                    by_key.setdefault(instance_key(t.task, t.condition), t)
        return [by_key[k] for k in sorted(by_key) if k in keys]

    def champion_traces(self, champion: Bundle, exclude: set[str], prefer: dict[str, str]) -> list[Trace]:
        """Archived traces of the champion, one per instance, never on excluded (gate) instances.

        `prefer` maps instance keys to the trace id stored for them (the deterministic pick).
        """
        by_key: dict[str, Trace] = {}
        for t in self.archive.select(bundle_hash=champion.content_hash):
            key = instance_key(t.task, t.condition)
            if key in exclude or not t.verified:
                continue
            if prefer.get(key) == t.trace_id or key not in by_key:
                by_key[key] = t
        return [by_key[k] for k in sorted(by_key)]

    # ----- candidates ------------------------------------------------------------------------
    def register(self, proposal: Proposal, champion: Bundle) -> Candidate | None:
        """Register a valid proposal (dedupes by content); a rejection is kept, not registered.
        What the proposal spent (LLM tokens, dollars) is charged to the run's caps either way."""
        self.meter.charge_proposal(proposal.tokens, proposal.usd)
        if not proposal.valid:
            self.rejections.append(proposal)
            self.progress(f"  rejected proposal from {proposal.parents}: {proposal.rejection}")
            return None
        proposal = self._anchored(proposal)
        bundle = proposal.bundle
        assert bundle is not None, "a valid proposal carries its bundle"
        if bundle.content_hash == champion.content_hash:
            return None
        known = self.registry.find_content(bundle.name, bundle.content_hash)
        reg = known or self.registry.register(bundle)
        what = f"same content as {reg.ref}" if known else f"registered {reg.ref}"
        self.progress(f"  {what} ({proposal.edge} of {', '.join(proposal.parents)}): {proposal.note[:120]}")
        return Candidate(ChosenVersion(reg.ref, reg.bundle), proposal)

    def _anchored(self, proposal: Proposal) -> Proposal:
        """The proposal with moved run-length counts stated for the search budget (`space.anchor_run_lengths`)."""
        from ole.bundle import bundle_from_data
        from ole.proposers.space import anchor_run_lengths
        bundle = proposal.bundle
        if self.reference_budget is None or bundle is None or not proposal.parents:
            return proposal
        parent = self.registry.get(proposal.parents[0]).bundle.loop_policy.model_dump(mode="json")
        data = bundle.model_dump(mode="json")
        before = data["loop_policy"]["budget"].get("reference_episodes")
        anchor_run_lengths(parent, data["loop_policy"], self.reference_budget)
        if data["loop_policy"]["budget"].get("reference_episodes") == before:
            return proposal
        data["provenance"]["note"] = (data["provenance"]["note"] + f"; run-length counts stated for "
                                      f"{self.reference_budget} episodes").lstrip("; ")[:4000]
        return proposal.model_copy(update={"bundle": bundle_from_data(data, source="anchored proposal"),
                                           "note": data["provenance"]["note"]})

    # ----- evaluation and gate ------------------------------------------------------------------
    def keep_pairs(self, candidate: Candidate, pairs: Sequence[Pair]) -> None:
        """Set the candidate's pairs and, from them, its statistics (under the gate's `cvar_alpha`)."""
        candidate.pairs = list(pairs)
        candidate.stats = pair_stats(candidate.pairs, self.gate.cvar_alpha)

    def evaluate(self, champion: ChosenVersion, candidates: Sequence[Candidate],
                 instances: Sequence[Instance], stage: str) -> None:
        """Paired evaluation of a batch against the champion; records one evaluation event each
        (the candidate's `PairStats`, its instances and trace ids)."""
        out = self.paired.pairs(champion, [c.chosen for c in candidates], instances)
        for c in candidates:
            self.keep_pairs(c, out[c.ref])
            self._record_evaluation(champion.ref, c.ref, c.pairs, c.stats, stage)

    def side_pairs(self, champion: ChosenVersion, candidate: Candidate, instances: Sequence[Instance],
                   stage: str) -> list[Pair]:
        """Pairs of `candidate` on instances outside its own sample (the transfer envs): recorded as an
        evaluation event, returned, never kept as the candidate's pairs."""
        pairs = self.paired.pairs(champion, [candidate.chosen], instances)[candidate.ref]
        self._record_evaluation(champion.ref, candidate.ref, pairs, pair_stats(pairs, self.gate.cvar_alpha), stage)
        return pairs

    def _record_evaluation(self, champion: str, ref: str, pairs: Sequence[Pair], stats: PairStats,
                           stage: str) -> None:
        done = step("evaluation", stage, ref, champion)
        if self.store.step(done) is None:
            payload = {"stage": stage, "champion": champion, **stats.model_dump(mode="json"),
                       "instances": [instance_key(p.task, p.condition) for p in pairs],
                       "trace_ids": [p.challenger.trace_id for p in pairs]}
            self.store.commit(done, payload, lambda key: self.registry.record_evaluation(ref, payload, key=key))

    def observe(self, candidates: Sequence[Candidate], rung: int, final: bool) -> None:
        """Tell the proposer how its candidates did (search pairs only; never gate pairs)."""
        for c in candidates:
            self.proposer.observe(c.ref, c.bundle, c.stats.objectives(), rung=rung, final=final)

    def decide_gate(self, champion: ChosenVersion, candidate: Candidate, looks: Sequence[Sequence[Instance]],
                    seen_keys: set[str], stage: str, scope_families: Sequence[str] | None = None,
                    ablation: Ablation | None = None, transfer: Sequence[Instance] = (),
                    search_pairs: Sequence[Pair] = ()) -> GateDecision:
        """The gate with an adaptive sample: judge on the first look's instances, add the next
        look's while the verdict is open (`gate.should_extend`), each look at its share of α.

        With `transfer` instances (envs held out from the search) a released verdict is followed by
        the transfer sample: the change paired with the champion there, and the regions of task
        features the rule lets its release widen to (`ole.transfer`; `search_pairs`, the search's
        pairs of the candidate the change came from, count only as exclusions where it lost).

        Every added pair is logged; the final decision (with every look) is recorded once in the
        lineage. A resumed run re-judges from stored evaluations and returns the stored decision.
        """
        done = step("gate", stage, candidate.ref, champion.ref)
        stored = self.store.step(done)
        if stored is not None:
            return GateDecision.model_validate(stored)
        instances: list[Instance] = []
        record: list[Look] = []
        decision: GateDecision | None = None
        n_prev = 0
        for k, batch in enumerate(looks):
            if decision is not None:
                n_next = len(instances) + len(batch)
                why = should_extend(decision, n_next)
                if why is None:
                    break
                record[-1] = record[-1].model_copy(update={"extend": why})
                self.progress(f"  gate look {k}: {why}; adding {len(batch)} pairs: "
                              + ", ".join(f"{instance_key(*i)}|budget{i[0].budget}" for i in batch))
            instances += list(batch)
            self.evaluate(champion, [candidate], instances, stage=f"{stage}-look{k}")
            alpha = look_alpha(self.gate, len(candidate.pairs), n_prev)
            decision = decide(candidate.pairs, self.gate, champion=champion.ref, challenger=candidate.ref,
                              seen_keys=seen_keys, alpha=alpha, scope_families=scope_families,
                              ablation=ablation)
            record.append(Look(n_pairs=decision.stats.n_pairs, alpha=alpha, p_value=decision.stats.p_value,
                               mean_r=decision.stats.mean_r, verdict=decision.verdict,
                               added=tuple(instance_key(*i) for i in batch) if k else ()))
            self.progress(f"  gate look {k}: {decision.stats.n_pairs} pairs, mean r {decision.stats.mean_r:+.3f}, "
                          f"p {decision.stats.p_value:.4f} vs alpha {alpha:.4f} -> {decision.verdict}")
            n_prev = decision.stats.n_pairs
            if self.gate.max_pairs is None:
                break
        assert decision is not None, "a gate needs at least one look"
        decision = decision.model_copy(update={"looks": tuple(record)})
        if transfer and decision.verdict == "release" and decision.bound is not None:
            decision = decision.model_copy(update={"transfer": self.transfer(champion, candidate, decision, transfer,
                                                                             search_pairs, stage)})
        final = decision
        self.store.commit(done, final.model_dump(mode="json"),
                          lambda key: self.registry.record_gate_decision(candidate.ref, final.event_payload(), key=key))
        return final

    def transfer(self, champion: ChosenVersion, candidate: Candidate, decision: GateDecision,
                 instances: Sequence[Instance], search_pairs: Sequence[Pair], stage: str) -> TransferDecision:
        """The transfer sample of a released change and what it supports (`ole.transfer`)."""
        from ole.registry.scopes import features_of
        from ole.transfer import decide_transfer
        self.progress(f"  transfer: {candidate.ref} vs {champion.ref} on {len(instances)} instances of "
                      f"{len({i[0].env for i in instances})} envs held out from the search")
        pairs = self.side_pairs(champion, candidate, instances, stage=f"{stage}-transfer")
        bound = parse_scope(decision.bound or "general").model_copy(update={"env_ids": ()})
        out = decide_transfer({"transfer": pairs, "scope": candidate.pairs, "search": search_pairs},
                              self.gate.transfer, bound, sorted({i[0].budget or 0 for i in instances}), features_of)
        self.progress("  " + out.describe())
        for region in out.regions:
            self.progress(f"  region `{region.scope}`: {region.statement()}")
        return out

    def release(self, ref: str, reason: str, stage: str, *, exposure: float | None = None,
                analysis: str | None = None) -> None:
        """Release on the channel (active from the next task boundary, or staged as a canary with
        `exposure`), once."""
        done = step("release", stage, ref)
        if self.store.step(done) is None:
            self.store.commit(done, {"ref": ref, "reason": reason, "exposure": exposure},
                              lambda key: self.registry.release(ref, channel=self.channel, reason=reason, key=key,
                                                                exposure=exposure, analysis=analysis))

    def widen(self, ref: str, scope: str, reason: str, stage: str, *, kind: str = "transfer",
              exposure: float | None = None, analysis: str | None = None) -> None:
        """Widen a released version into one more scope on its gate decision's evidence (once)."""
        from ole.coverage import decision_event
        done = step("widen", stage, ref, scope)
        if self.store.step(done) is None:
            name, version = parse_ref(ref)
            decision = decision_event(self.registry.events(name=name, version=version), name, version or 0)
            assert decision is not None, "a widening follows the version's gate decision"
            seq = decision.seq
            self.store.commit(done, {"ref": ref, "scope": scope, "reason": reason, "kind": kind},
                              lambda key: self.registry.widen(ref, scope, kind=kind, decision_seq=seq,
                                                              reason=reason, channel=self.channel, key=key,
                                                              exposure=exposure, analysis=analysis))

    # ----- online monitoring -------------------------------------------------------------------
    def record_monitor(self, active: str, done: Step, payload: dict) -> dict:
        """One monitor pair of a canary against its control, recorded once."""
        stored = self.store.step(done)
        if stored is None:
            stored = self.store.commit(done, payload, lambda key: self.registry.record_evaluation(
                active, {"stage": "monitor", **payload}, key=key))
        return stored


def on_result_counter(meter: CostMeter, progress: Callable[[str], None]) -> Callable[[EvalJob, RunResult], None]:
    """Progress line and cost accounting for each completed run."""
    def on_result(job: EvalJob, res: RunResult) -> None:
        meter.add(res.episodes, res.tokens, res.usd)
        q = "failed" if res.q is None else f"q={res.q:.1f}"
        progress(f"    run {job.chosen.ref:<10} {job.task.env:<34} pool {job.task.pool_seed} seed "
                 f"{job.condition.seed}: {q} ({res.wall_s:.0f}s)  [spent {meter.episodes} episodes, "
                 f"{meter.wall_s / 60:.1f} min]")
    return on_result


def run_fingerprint(*, registry, traces_root, cfg: EvolveConfig, evaluate: Callable, proposer: Proposer,
                    gate: GateConfig, isolation: str, driver: dict | None = None) -> Fingerprint:
    """Everything that determines what a workspace's stored steps say (caps and workers do not)."""
    from pathlib import Path
    return fingerprint({
        "evolve": cfg.model_dump(mode="json", exclude={"caps", "workers"}), "gate": gate.model_dump(mode="json"),
        "proposer": getattr(proposer, "name", type(proposer).__qualname__),
        "evaluate": f"{evaluate.__module__}.{getattr(evaluate, '__qualname__', type(evaluate).__qualname__)}",
        "isolation": isolation, "driver": driver or {}, "registry": str(Path(registry.root).resolve()),
        "traces": str(Path(traces_root).resolve()), "packages": package_versions(), "source": source_digest()})


def open_engine(*, registry, workdir, traces_root, cfg: EvolveConfig, evaluate: Callable[[EvalJob], Trace],
                proposer: Proposer, gate: GateConfig, executor, isolation: str = DEFAULT_ISOLATION,
                progress: Callable[[str], None] = print, driver: dict | None = None,
                execution: str = "fast") -> Engine:
    """Assemble the engine over a workspace folder (resume store and host runs live there).

    The store is bound to the run's fingerprint (`run_fingerprint`; `driver` adds the mode's
    own settings): a workspace made under another configuration is refused. `execution`
    (`ole.jobs.EXECUTIONS`) is not part of it: it changes how runs execute, never their results.
    """
    from pathlib import Path

    from evogym.pools import profile
    workdir = Path(workdir)
    fp = run_fingerprint(registry=registry, traces_root=traces_root, cfg=cfg, evaluate=evaluate, proposer=proposer,
                         gate=gate, isolation=isolation, driver=driver)
    store = EvaluationStore(workdir / "evaluations.sqlite3", fingerprint=fp)
    budget = cfg.suite.budget or profile(cfg.suite.profile).budget
    meter = CostMeter(cfg.caps, budget=budget, workers=cfg.workers)
    paired = PairedEvaluation(executor, store, evaluate, traces_root=str(traces_root), runs_root=str(workdir / "runs"),
                              isolation=isolation, execution=execution,
                              before_batch=lambda jobs: meter.reserve([(j.task.env, j.task.budget) for j in jobs]),
                              on_result=on_result_counter(meter, progress))
    engine = Engine(registry, store, TraceArchive(traces_root), paired, proposer, gate, meter,
                    channel=cfg.channel, progress=progress)
    engine.reference_budget = budget
    return engine
