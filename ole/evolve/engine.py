"""The chain offline and online mode share: evidence ε(D) → proposer → registration → paired
evaluation → gate → release, through one `Engine`; `offline.py` and `online.py` are thin drivers
that differ only in where traces come from and when candidates are made. Every registry write the
engine makes is a driver step (`ole.evolve.store.Step`), checked against the resume store and
committed once, so a resumed driver neither re-spends evaluations nor appends an event twice.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from evogym.sandbox.isolation import DEFAULT_ISOLATION
from ole import evidence as evidence_mod
from ole.ablation import Ablation
from ole.bundle import Bundle, parse_ref, parse_scope
from ole.chosen import ChosenVersion
from ole.cost import CostMeter
from ole.evidence import EvidenceItem
from ole.evolve.store import (EvaluationStore, Fingerprint, Step, fingerprint, package_versions, source_digest,
                              step)
from ole.gate import GateConfig, GateDecision, Look, decide, look_alpha, should_extend
from ole.jobs import EvalJob
from ole.paired import Instance, Pair, PairedEvaluation, PairStats, RunResult, instance_key, pair_stats
from ole.proposers import Proposal, Proposer
from ole.trace import Archive, Trace
from ole.transfer import TransferDecision

from ole.evolve.config import EvolveConfig

if TYPE_CHECKING:
    from ole.executors import Executor
    from ole.registry import Registry
    from ole.registry.widening import WideningKind


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

    def __init__(self, registry: Registry, store: EvaluationStore, archive: Archive, paired: PairedEvaluation,
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

    def record_pairs(self, champion: str, candidate: Candidate, stage: str) -> None:
        """Record the candidate's kept pairs as one evaluation event (pairs made outside `evaluate`,
        e.g. a stream trial's: `ole.evolve.trial`), once per stage."""
        self._record_evaluation(champion, candidate.ref, candidate.pairs, candidate.stats, stage)

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

    def widen(self, ref: str, scope: str, reason: str, stage: str, *, kind: WideningKind = "transfer",
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


def run_fingerprint(*, registry: Registry, traces_root: str | Path, cfg: EvolveConfig,
                    evaluate: Callable[[EvalJob], Trace], proposer: Proposer,
                    gate: GateConfig, isolation: str, driver: dict | None = None) -> Fingerprint:
    """Everything that determines what a workspace's stored steps say (caps and workers do not)."""
    return fingerprint({
        "evolve": cfg.model_dump(mode="json", exclude={"caps", "workers"}), "gate": gate.model_dump(mode="json"),
        "proposer": getattr(proposer, "name", type(proposer).__qualname__),
        "evaluate": f"{evaluate.__module__}.{getattr(evaluate, '__qualname__', type(evaluate).__qualname__)}",
        "isolation": isolation, "driver": driver or {}, **places(registry, traces_root),
        "packages": package_versions(), "source": source_digest()})


def places(registry: Registry, traces_root: str | Path) -> dict[str, str]:
    """Where the registry and the trace archive are, for the fingerprint: their folders (resolved) on
    files; on PostgreSQL the database and the archive's schema, which every machine of a stream shares
    whatever its own folder paths (a store is found by its workspace folder's name, so its fingerprint
    must not hold a machine's full paths)."""
    if registry.storage is None:
        return {"registry": str(Path(registry.root).resolve()), "traces": str(Path(traces_root).resolve())}
    from ole.storage import postgres
    database = registry.journal.connection.execute("SELECT current_database()").fetchone()[0]
    return {"registry": f"postgresql database {database}", "traces": postgres.trace_schema(Path(traces_root))}


def open_engine(*, registry: Registry, workdir: str | Path, traces_root: str | Path, cfg: EvolveConfig,
                evaluate: Callable[[EvalJob], Trace], proposer: Proposer, gate: GateConfig, executor: Executor,
                isolation: str = DEFAULT_ISOLATION,
                progress: Callable[[str], None] = print, driver: dict | None = None,
                execution: str = "fast") -> Engine:
    """Assemble the engine over a workspace folder (resume store and host runs live there).

    The store is bound to the run's fingerprint (`run_fingerprint`; `driver` adds the mode's
    own settings): a workspace made under another configuration is refused. `execution`
    (`ole.jobs.EXECUTIONS`) is not part of it: it changes how runs execute, never their results.
    """
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
    engine = Engine(registry, store, paired.archive, paired, proposer, gate, meter,
                    channel=cfg.channel, progress=progress)
    engine.reference_budget = budget
    return engine
