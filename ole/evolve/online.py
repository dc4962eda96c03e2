"""Online mode: evolution alongside a stream of tasks, driven by ask/tell — in one process or many.

`ask()` is the task boundary: it activates whatever was released or rolled back since the last
boundary and hands out the most specific champion whose scope matches the task
(`Registry.select`); nothing changes the bundle of a task in flight. `tell(trace)` records the
finished task as a row of the workspace's store, which every process working the stream shares,
so "every k tasks" counts the stream, not one process. The task that completes the k-th, 2k-th,
... finish runs a proposal round: a challenger from the recent traces, paired with the champion
on the gate instances (which the proposer never saw), gated, and on `release` released — bounded
by what its gate sampled, and **staged**. A challenger that does not pass as a whole but gains
on some envs of its gate pairs is gated once more as a specialization for those env ids, on
pools of its own (`OnlineConfig.scope_pools`), after an ablation on the pairs that chose it. Rounds are serialized across processes by a lease in
the registry's database (`ole.evolve.lease`); a round is skipped while a release is pending or a
canary runs — a canary widening a scope by one env excepted (`ole.evolve.widening`).

**Staged exposure.** A staged release starts, at the next task boundary, as a *canary* of its
scope (a `stage` event): it takes a share of that scope's task boundaries (`analysis.exposure`:
every second task by default, assigned by a counter in the store, unique across processes),
and each task it works is rerun by the **control** — the bundle the task would have had without
the canary — on the identical task (env, profile, budget, pool seed, agent seed). After every
such pair the monitor looks (`ole.monitor`, an anytime-valid sequential test on the pairs' r):
`promote` (the canary becomes the scope's champion for every task; a `stage` event), `rollback`
(the canary ends, its tasks go back to the control; a `stage` event), or `hold` (recorded as a
monitor evaluation); still open after `analysis.deadline` pairs, it is rolled back. Monitor
pairs, looks and stage steps are store steps whose registry events carry idempotency keys, so a
resumed or concurrent process never repeats them. Every trace a decision names is archived,
failed runs included (a host-recorded failure is a verified outcome).

Drivers: `run_stream` works a synthetic stream (`ole evolve --mode online`);
`ole.evolve.harness` feeds the engine the tasks of any external harness (`ole agent work --online`).
"""
from __future__ import annotations

import math
import os
import socket
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field

from ole.bundle import GENERAL_SCOPE, TaskContext
from ole.chosen import ChosenVersion, chosen_by
from ole.errors import ValidationError
from ole.evolve.config import EvolveConfig
from ole.evolve.engine import Candidate, Engine
from ole.evolve import scoping
from ole.evolve.ablate import ablate
from ole.evolve.store import Step, step
from ole.evolve.trial import open_trial, stream_gate_ok
from ole.gate import GateDecision
from ole.paired import (
    Instance,
    Pair,
    env_family,
    instance_key,
    run_result,
    value_score,
)
from ole.evolves import ONLINE_DEFAULTS
from ole.trace import RunCondition, SelectionRecord, TaskSpec, Trace
from ole.verdicts import is_release

if TYPE_CHECKING:
    from ole.registry import Event, RegisteredBundle

CANARY_FAILURE_SHARE = 0.2
"""Share of `alpha_rollback` a canary's look spends on the failure-count test against the control's
record (`ole.watch.failure_test`); the paired test of the monitor gets the rest, so a harmless canary
is still rolled back with probability ≤ alpha_rollback, and a canary whose every run fails is caught
by either test, whichever is faster."""
EXTERNAL_PROFILE = "external"
"""TaskSpec profile of a harness task OLE cannot rerun (unknown profile or pools): never monitored."""


class OnlineConfig(BaseModel):
    """Stream settings of online mode (how releases are exposed and monitored: the gate config's
    `analysis` section, `ole.monitor.AnalysisConfig`)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    tasks: int = Field(ONLINE_DEFAULTS["tasks"], ge=1)
    """Stream length (tasks worked); synthetic stream only."""
    every_k: int = Field(ONLINE_DEFAULTS["every_k"], ge=1)
    """A challenger is made after every k finished tasks (of the whole stream, all processes)."""
    recent: int = Field(ONLINE_DEFAULTS["recent"], ge=1)
    """How many recent stream traces the proposer reads."""
    stream_pool_base: int = 1000
    """Synthetic stream task i uses pool seed stream_pool_base + i (fresh instances)."""
    widen: bool = True
    """Try a scoped champion on an env no scope serves, as a watched canary of that one env, where its
    gate decision's transfer evidence gained in a region holding the env (`ole.evolve.widening`)."""
    scope_pools: tuple[int, ...] = (209, 210, 211, 212, 213, 214)
    """Pool seeds of a round's **scoped gate**: when a challenger does not pass as a whole but its
    gate pairs gain on some envs (`ole.evolve.scoping.plan`), its change (ablated on those pairs)
    is gated again as a specialization for those env ids, on these pools only — never on the
    pairs that chose the scope. Disjoint from the gate pools and the stream. Empty: no scoped gates."""
    scoped: bool = True
    """A round's challenger that does not pass as a whole but gains on some envs is gated again as a
    specialization for those env ids: on `scope_pools` (gate_on pools) or on a scoped trial on the
    stream's later tasks of those envs (gate_on stream). Off: neither."""
    gate_on: Literal["stream", "pools"] = "stream"
    """Where a round's challenger is gated. `stream`: on trial on the stream's next tasks that its
    champion works and the host can rerun, the stream's own run as the champion side, one rerun per
    pair (`ole.evolve.trial`); a round whose window is mostly tasks the host cannot rerun (an external
    harness) falls back to the pools. `pools`: on the gate pools, both sides run."""
    trial_tasks: int = Field(96, ge=1)
    """A trial still without a final verdict after this many stream tasks ends unjudged."""
    adapt_exposure: bool = True
    """A canary's share of its scope's tasks moves with the monitor's evidence (`ole.monitor.exposure_after`):
    up towards 0.9 as the no-harm test's wealth grows, down towards 0.1 as the harm test's does; off: the
    release's exposure throughout."""


@dataclass(frozen=True)
class Assignment:
    """One stream task handed out by `ask()`."""

    index: int
    """Tasks of the stream finished before this boundary (the synthetic stream's task index)."""
    task: TaskSpec | None
    """The task (synthetic stream), or None when the harness decides it."""
    condition: RunCondition
    """The run condition the task is worked under."""
    chosen: ChosenVersion
    """The version fixed for this task at its boundary, with how it was chosen (its selection)."""
    activation: int
    """Seq of the activation event of the chosen scope in force at the boundary (0: none yet)."""
    scope: str = GENERAL_SCOPE
    """Scope key the bundle was chosen for."""
    canary: int | None = None
    """Seq of the `stage` event of the canary this task was assigned to (None: not a canary task)."""
    control: str | None = None
    """For a canary task: the bundle the task would have had without the canary (reruns it as control);
    for a watched task: what served the scope before the release (`ole.evolve.watching`)."""
    watch: int | None = None
    """Seq of the activation whose watch this task belongs to (a release that is not staged), or None."""

    @property
    def bundle_ref(self) -> str:
        """`NAME@VERSION` of the version fixed for this task."""
        return self.chosen.ref


@dataclass
class OnlineEvents:
    """What this process saw happen during an online run (for summaries and experiments)."""

    decisions: list[GateDecision] = field(default_factory=list)
    releases: list[str] = field(default_factory=list)
    activations: list[tuple[int, str]] = field(default_factory=list)
    rollbacks: list[tuple[int, str, float]] = field(default_factory=list)
    promotions: list[tuple[int, str, float]] = field(default_factory=list)
    monitor_pairs: list[Pair] = field(default_factory=list)
    worked: list[tuple[int, str, float | None]] = field(default_factory=list)


def holder_id() -> str:
    """A lease holder name unique to this process: host, pid and a random tag."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


class OnlineEvolution:
    """Ask/tell surface over the shared engine; its stream state lives in the engine's store."""

    def __init__(self, engine: Engine, cfg: EvolveConfig, online: OnlineConfig, *, external: bool = False) -> None:
        self.e, self.cfg, self.online, self.external = engine, cfg, online, external
        self.gate_looks: list[list[Instance]] = cfg.gate_looks()
        self.in_flight: Assignment | None = None
        self.events = OnlineEvents()
        self.holder = holder_id()
        self._active: str | None = None
        gate_pools = {*cfg.gate_pools, *cfg.gate_extra_pools, *online.scope_pools}
        stream = set(range(online.stream_pool_base, online.stream_pool_base + online.tasks))
        if not external and gate_pools & stream:
            raise ValidationError(f"gate pools {sorted(gate_pools & stream)} overlap the stream's pool seeds",
                                  hint="move --gate-pools or the stream base so the gate judges unseen instances")
        reused = set(online.scope_pools) & {*cfg.gate_pools, *cfg.gate_extra_pools}
        if reused:
            raise ValidationError(f"scope pools {sorted(reused)} are also gate pools",
                                  hint="a scoped gate must judge pools its scope was not chosen on")

    @property
    def gate_set(self) -> list[Instance]:
        return [i for look in self.gate_looks for i in look]

    @property
    def index(self) -> int:
        """Finished tasks of the stream (all processes)."""
        return len(self.e.store.tasks())

    # ----- task boundaries -----------------------------------------------------------------------
    def _boundary(self, ctx: TaskContext) -> tuple[ChosenVersion, int, str]:
        """(the routed version with its selection, seq of its scope's last activation, scope) after
        activating what is pending."""
        reg = self.e.registry
        selection = reg.select(self.e.channel, ctx)
        acts = [e for e in reg.events(kind="activation", channel=self.e.channel)
                if e.payload.get("scope", GENERAL_SCOPE) == selection.scope]
        return chosen_by(selection), (acts[-1].seq if acts else 0), selection.scope

    def finish(self) -> str:
        """Final task boundary: whatever is pending (a late rollback) takes effect; returns the general champion."""
        before = self._active
        active = self.e.registry.activate_pending(self.e.channel)
        assert active is not None, "the stream's channel has a general champion (its tasks were routed from it)"
        self._active = active.ref
        if before is not None and self._active != before:
            self.events.activations.append((self.index, self._active))
        return self._active

    def stream_task(self, i: int) -> tuple[TaskSpec, RunCondition]:
        s = self.cfg.suite
        env = s.envs[i % len(s.envs)]
        return (TaskSpec(env=env, profile=s.profile, budget=s.budget, pool_seed=self.online.stream_pool_base + i),
                s.condition(self.cfg.agent_seeds[i % len(self.cfg.agent_seeds)]))

    def abandon(self) -> None:
        """The task handed out by `ask` ended without an outcome to `tell` (its run never finalized):
        forget it, so the next boundary asks afresh."""
        self.in_flight = None

    def close(self) -> None:
        """Stop the worker processes of the stream's evaluations (a harness task's driver owns them:
        `ole.evolve.harness.open_stream` starts them; a driver inside `ole.api.evolve` leaves them to
        the executor's own context)."""
        self.e.paired.executor.close()

    def ask(self, condition: RunCondition | None = None, ctx: TaskContext | None = None) -> Assignment:
        """Next task at a task boundary: pending releases and rollbacks take effect here only.

        Without `condition` the next task of the synthetic stream is handed out; with it (a
        harness task, whose `ctx` says what the task is) only the bundle is fixed and the
        harness's own task is worked.
        """
        from ole.registry.scopes import context_for
        if self.in_flight is not None:
            raise RuntimeError(f"task {self.in_flight.index} is still in flight; tell() its trace first")
        index = self.index
        task, cond = (None, condition) if condition is not None else self.stream_task(index)
        if ctx is None:
            if task is None:
                raise ValueError("a harness task needs its TaskContext")
            ctx = context_for(task, cond)
        if self.online.widen:
            from ole.evolve.widening import canary_widening
            canary_widening(self, ctx)  # staged now: its canary starts at this boundary
        before = self._active
        routed, activation, scope = self._boundary(ctx)
        self._active = routed.ref
        if before is not None and self._active != before:
            self.e.progress(f"task boundary {index}: {self._active} is now active (was {before})")
            self.events.activations.append((index, self._active))
        canary = self._canary_for(ctx)
        if canary is not None:
            draw = self.e.store.draw(f"canary|{canary.seq}")
            share = self.exposure(canary)
            if math.ceil((draw + 1) * share) > math.ceil(draw * share):
                scope_key = canary.payload.get("scope", GENERAL_SCOPE)
                why = (f"canary {canary.ref} (scope {scope_key}) takes this task (in-scope boundary {draw}, "
                       f"exposure {share:g}); {routed.ref} reruns it as control")
                self.e.progress(f"task boundary {index}: {why}")
                chosen = ChosenVersion(ref=canary.ref, bundle=self.e.registry.get(canary.ref).bundle,
                                       selection=SelectionRecord(ref=canary.ref, scope=scope_key, reason=why,
                                                                 channel=self.e.channel))
                self.in_flight = Assignment(index, task, cond, chosen, activation, scope_key, canary.seq, routed.ref)
                return self.in_flight
        from ole.evolve.watching import watch_of
        watched = watch_of(self, ctx, activation, scope)
        if watched is not None:
            self.e.progress(f"task boundary {index}: {routed.ref} is watched against {watched[1]} "
                            f"(released, not staged: activation #{watched[0]})")
            self.in_flight = Assignment(index, task, cond, routed, activation, scope, control=watched[1],
                                        watch=watched[0])
            return self.in_flight
        self.in_flight = Assignment(index, task, cond, routed, activation, scope)
        return self.in_flight

    def exposure(self, canary: Event) -> float:
        """The canary's share of its scope's task boundaries now: its release's exposure, moved by the
        monitor's evidence so far when `adapt_exposure` (a function of stored pairs: every process
        agrees)."""
        base = float(canary.payload["exposure"])
        if not self.online.adapt_exposure:
            return base
        from ole.monitor import exposure_after
        made = [self.e.store.step(step("monitor", canary.seq, p["trace_id"])) for _, p in self._canary_rows(canary.seq)]
        return exposure_after([p["r"] for p in made if p is not None], self.e.gate.analysis, base)

    def _canary_for(self, ctx: TaskContext) -> Event | None:
        """The `stage` event of the most specific canary on the channel whose scope admits the task."""
        from ole.bundle import parse_scope
        from ole.registry.scopes import rank
        running = self.e.registry.canaries(self.e.channel)
        matching = [s for s in running if parse_scope(s).matches_task(ctx)]
        return running[rank(matching)[0]] if matching else None

    # ----- finished tasks ------------------------------------------------------------------------
    def tell(self, trace: Trace) -> None:
        """Record the finished task; monitor, propose, evaluate, gate and release as due."""
        a = self.in_flight
        if a is None or trace.condition != a.condition or (a.task is not None and trace.task != a.task):
            raise RuntimeError("tell() needs the trace of the task handed out by the last ask()")
        if trace.bundle_hash != a.chosen.content_hash:
            raise RuntimeError(f"the trace was worked by bundle {trace.bundle_hash[:12]}, not by {a.chosen.ref}")
        self.in_flight = None
        q = value_score(trace)[0]
        n = self.e.store.add_task(trace.trace_id, {
            "trace_id": trace.trace_id, "bundle_ref": a.chosen.ref, "activation": a.activation, "q": q,
            "instance": instance_key(trace.task, trace.condition), "verified": trace.verified,
            "reproducible": trace.task.profile != EXTERNAL_PROFILE, "task": trace.task.model_dump(mode="json"),
            "condition": trace.condition.model_dump(mode="json"), "result": run_result(trace).model_dump(mode="json"),
            "canary": a.canary, "control": a.control, "scope": a.scope, "watch": a.watch})
        self.events.worked.append((n - 1, a.chosen.ref, q))
        if a.canary is not None:
            self._monitor(n, a.canary, a.chosen.ref, a.scope)
        if a.watch is not None and a.control is not None:
            from ole.evolve.watching import after_task
            after_task(self, n, a.watch, a.control, a.chosen.ref, a.scope)
        if self.online.gate_on == "stream":
            from ole.evolve import trial
            trial.after_task(self, n)
        if n % self.online.every_k == 0:
            self._round(n // self.online.every_k)

    # ----- monitoring of a canary -------------------------------------------------------------------
    def _canary_rows(self, canary: int) -> list[tuple[int, dict]]:
        """The reproducible stream tasks (n, row) the canary worked, in finish order."""
        return [(n, p) for n, p in self.e.store.tasks() if p.get("canary") == canary and p["reproducible"]]

    def _monitor(self, n: int, canary: int, ref: str, scope: str) -> None:
        """Pair every finished task of the canary with its control (also any pair a crashed process
        left unmade), then look."""
        rows = self.e.store.tasks()
        for m, row in self._canary_rows(canary):
            self._pair(m, row, canary)
        if any(not p["reproducible"] for _, p in rows if p.get("canary") == canary):
            if not rows[n - 1][1]["reproducible"]:
                self.e.progress(f"task {n} cannot be rerun by OLE (profile {EXTERNAL_PROFILE}): judged unpaired")
            from ole.evolve.watching import canary_look_unpaired
            canary_look_unpaired(self, n, canary, ref, scope)
            return
        self._look(n, canary, ref, scope)

    def _pair(self, n: int, row: dict, canary: int) -> None:
        """The monitor pair of stream task n: the control reruns its identical task (recorded once)."""
        done = step("monitor", canary, row["trace_id"])
        if self.e.store.step(done) is not None:
            return
        lease = self.e.registry.lease(f"monitor:{self.e.channel}:{row['trace_id']}", self.holder)
        if not lease.hold():  # a live process is making this pair; a dead one's lease expires
            return
        try:
            if self.e.store.step(done) is None:
                self._make_pair(n, row, done, canary)
        finally:
            lease.release()

    def _make_pair(self, n: int, row: dict, done: Step, canary: int) -> None:
        from ole.evolve.watching import control_pair
        control_pair(self, row, row["control"], done, {"canary": canary, "task_index": n})

    def _look(self, n: int, canary: int, ref: str, scope: str) -> None:
        """The monitor's look after the pairs so far: hold (an evaluation), promote or roll back (a stage)."""
        from ole.monitor import look
        if self.e.store.step(step("stage", canary)) is not None:
            return
        rows = self._canary_rows(canary)
        made = [self.e.store.step(step("monitor", canary, p["trace_id"])) for _, p in rows]
        pairs = [p for p in made if p is not None]
        failed = [row.get("q") is None for (_, row), p in zip(rows, made) if p is not None]
        if not pairs:
            return
        analysis = self.e.gate.analysis
        min_gain = self._widening_gain(canary)
        paired_cfg = analysis.model_copy(update={"alpha_rollback": analysis.alpha_rollback * (1 - CANARY_FAILURE_SHARE)})
        from ole.evolve.watching import baseline
        from ole.watch import failure_test
        base = baseline(self, f"canary-{canary}", rows[0][1]["control"])
        for k in range(1, len(pairs) + 1):  # a look after every pair, also those a crashed process missed
            result = look([p["r"] for p in pairs[:k]], paired_cfg, min_gain=min_gain)
            fails = failure_test(failed[:k], base, analysis.alpha_rollback * CANARY_FAILURE_SHARE)
            if result.decision == "hold" and fails is not None and fails[0] >= fails[1]:
                result = result.model_copy(update={"decision": "rollback", "reason": (
                    f"failures test: wealth {fails[0]:.1f} >= {fails[1]:g}: {sum(failed[:k])} of {k} canary runs "
                    f"failed, against the control's failure rate of at most {fails[2]:.2f} ({base.failures}/"
                    f"{base.runs} before the canary)")})
            result = result.model_copy(update={"analysis_hash": analysis.digest})
            looked = step("look", canary, k)
            if self.e.store.step(looked) is None:
                event = {"stage": "monitor-look", "canary": canary, "scope": scope, **result.model_dump(mode="json"),
                         "trace_ids": [p["trace_id"] for p in pairs[:k]],
                         "control_trace_ids": [p.get("control_trace_id") for p in pairs[:k]]}
                self.e.store.commit(looked, result.model_dump(mode="json"),
                                    lambda key: self.e.registry.record_evaluation(ref, event, key=key))
            if result.decision != "hold":
                break
        if result.decision == "hold":
            self.e.progress(f"canary {ref} ({scope}): hold — {result.reason}")
            return
        staged: Literal["promoted", "rolled_back"] = "promoted" if result.decision == "promote" else "rolled_back"
        monitor = result.model_dump(mode="json")
        self.e.store.commit(step("stage", canary), {"stage": staged, **monitor},
                            lambda key: self.e.registry.stage(self.e.channel, scope, staged,
                                                              reason=f"monitor: {result.reason}", monitor=monitor,
                                                              key=key))
        record = (n - 1, ref, result.mean_r)
        (self.events.promotions if staged == "promoted" else self.events.rollbacks).append(record)
        self.e.progress(f"canary {ref} ({scope}): {staged.upper().replace('_', ' ')} — {result.reason}; "
                        "effective at the next task boundary")

    def _widening_gain(self, canary: int) -> float | None:
        """For a canary that would widen a scope to an env (`ole.evolve.widening`): the gain its monitor
        must show before promotion (the transfer rule's `min_gain`: never widen on ties); else None."""
        stage = next(e for e in self.e.registry.events(kind="stage", channel=self.e.channel) if e.seq == canary)
        cause = stage.payload.get("release_seq")
        release = [e for e in self.e.registry.events(kind="release") if e.seq == cause]
        widening = bool(release) and release[0].payload.get("widening") == "canary"
        return self.e.gate.transfer.min_gain if widening else None

    # ----- proposal rounds -------------------------------------------------------------------------
    def _round(self, r: int) -> None:
        done = step("round", r)
        if self.e.store.step(done) is not None:
            return
        lease = self.e.registry.lease(f"round:{self.e.channel}", self.holder,
                      on_wait=lambda other: self.e.progress(f"round {r}: waiting for the round lease held by {other}"))
        with lease:
            if self.e.store.step(done) is not None:
                return
            started = time.time()
            from ole.evolve.trial import open_trials
            from ole.evolve.widening import round_holders
            trials = open_trials(self) if self.online.gate_on == "stream" else []
            holder = round_holders(self)
            if holder or trials:
                why = holder or f"challenger {trials[0][1]['candidate']} is on trial"
                self.e.progress(f"round {r}: skipped, {why}")
                out = {"skipped": why}
            else:
                out = self._propose_and_gate(r)
            self.e.store.commit(done, {**out, "holder": self.holder, "started": started, "ended": time.time()})

    def _propose_and_gate(self, r: int) -> dict:
        champ = self.e.registry.champion(self.e.channel)
        rows = [p for _, p in self.e.store.tasks(r * self.online.every_k)][-self.online.recent:]
        recent = [self.e.archive.get(p["trace_id"]) for p in rows if p["verified"]]
        ev = self.e.evidence(recent)
        tried = self.tried_detectors(champ)
        fresh = [item for item in ev if item.detector not in tried]
        if tried and fresh:
            self.e.progress(f"round {r}: evidence of detectors earlier rounds already tried on {champ.ref} "
                            f"({', '.join(sorted(tried))}) waits until the others were tried")
        ev = fresh or ev
        champion = ChosenVersion(ref=champ.ref, bundle=champ.bundle)
        self.e.meter.reserve_proposal()
        prop = self.e.proposer.mutate(champion, ev, edge="online", generation=r, seed=self.cfg.seed * 100_000 + r)
        cand = self.e.register(prop, champ.bundle)
        if cand is None:
            return {"champion": champ.ref, "candidate": None}
        seen = {p["instance"] for _, p in self.e.store.tasks()}
        if self.online.gate_on == "stream" and stream_gate_ok(rows):
            return open_trial(self, r, champion, cand, seen)
        self.e.progress(f"round {r}: challenger {cand.ref} vs {champ.ref} on {len(self.gate_looks[0])} gate instances")
        decision = self.e.decide_gate(champion, cand, self.gate_looks, seen, stage=f"online-r{r}")
        self.events.decisions.append(decision)
        self.e.progress(f"round {r}: gate says {decision.verdict}: {'; '.join(decision.reasons)[:200]}")
        out = {"champion": champ.ref, "candidate": cand.ref, "verdict": decision.verdict}
        if is_release(decision.verdict):
            self.release_staged(cand.ref, f"online gate round {r}: mean r {decision.stats.mean_r:+.3f}", r)
        else:
            out.update(self._scoped_round(r, champion, cand, seen))
        return out

    def tried_detectors(self, champ: RegisteredBundle) -> set[str]:
        """Detectors whose evidence an earlier online challenger of this champion already acted on.

        A round has one challenger; re-drawing from evidence a gate already judged (the same
        finding about the same champion) would spend rounds on it while other findings wait.
        So a round reads first the evidence of detectors no earlier challenger of the champion
        cited; when every finding was tried, all of them again. A new champion starts afresh.
        """
        out: set[str] = set()
        for rb in self.e.registry.versions(champ.name, skip_damaged=True):
            prov = rb.bundle.provenance
            if prov.edge == "online" and prov.parents == (champ.version,):
                out.update(e.split("-")[1] for e in prov.evidence_ids if e.count("-") >= 2)
        return out

    def release_staged(self, ref: str, reason: str, r: int | str) -> None:
        """Release a round's gated version staged (a canary at the analysis' exposure), once."""
        from ole.evolve.widening import clear_for_release
        analysis = self.e.gate.analysis
        clear_for_release(self, ref)
        self.e.release(ref, reason, stage=f"online-r{r}", exposure=analysis.exposure, analysis=analysis.digest)
        self.events.releases.append(ref)

    def scope_looks(self, envs: Sequence[str]) -> list[list[Instance]]:
        """The scoped gate's instances look by look: the first look takes enough scope pools for
        the gate's `min_pairs`, each later look one more pool; every look at every gate budget."""
        pools = list(self.online.scope_pools)
        per_pool = len(envs) * len(self.cfg.agent_seeds) * len(self.cfg.gate_budgets)
        first = max(1, math.ceil(self.e.gate.min_pairs / per_pool))
        chunks = [pools[:first]] + [[p] for p in pools[first:]]
        looks = [[i for i in self.cfg.gate_instances(c) if i[0].env in envs] for c in chunks if c]
        return [look for look in looks if look]

    def _scoped_round(self, r: int, champion: ChosenVersion, cand: Candidate, seen: set[str]) -> dict:
        """The round's challenger did not pass as a whole: where its gate pairs gained (a scope
        plan over those pairs), ablate it on them, register it as a specialization for those env
        ids and gate that on the scope pools only (the pairs that chose the scope never judge it)."""
        if not self.online.scope_pools or not self.online.scoped:
            return {}
        plans = scoping.plan([cand], max_scopes=1, feasible=lambda c, envs: scoping.holds_tail_and_cost(self.e, c, envs))
        if not plans:
            return {}
        scope = plans[0]
        inside = [(p.task, p.condition) for p in cand.pairs if p.task.env in scope.envs]
        minimal, ablation = cand, None
        if self.cfg.ablate:
            minimal, ablation = ablate(self.e, champion, cand, inside, stage=f"online-r{r}-scope")
        gated = scoping.specialize(self.e, champion, minimal, scope, ablation, keep_pairs=False,
                                   basis=f"round {r} gate")
        if gated is None:
            return {}
        looks = self.scope_looks(scope.envs)
        families = sorted({env_family(e) for e in scope.envs})
        self.e.progress(f"round {r}: scoped challenger {gated.ref} ({', '.join(scope.envs)}) vs {champion.ref} on "
                        f"{len(looks[0])} scope-pool instances (up to {sum(len(x) for x in looks)})")
        decision = self.e.decide_gate(champion, gated, looks, seen, stage=f"online-r{r}-scope",
                                      scope_families=families, ablation=ablation)
        self.events.decisions.append(decision)
        self.e.progress(f"round {r}: scoped gate says {decision.verdict}: {'; '.join(decision.reasons)[:200]}")
        if is_release(decision.verdict):
            self.release_staged(gated.ref, f"online scoped gate round {r} ({', '.join(scope.envs)}): "
                                     f"mean r {decision.stats.mean_r:+.3f}", r)
        return {"scoped": gated.ref, "scope_envs": list(scope.envs), "scoped_verdict": decision.verdict}


def run_stream(evo: OnlineEvolution, work: Callable[[Assignment], Trace]) -> OnlineEvents:
    """Drive the synthetic stream to its length: ask, let `work` run the task with the assigned bundle, tell.

    Resumable: tasks already in the workspace's stream are not worked again.
    """
    while evo.index < evo.online.tasks:
        a = evo.ask()
        evo.tell(work(a))
    evo.finish()
    return evo.events


def engine_worker(engine: Engine) -> Callable[[Assignment], Trace]:
    """Work stream tasks through the engine's evaluation path (stored, costed, archived)."""
    def work(a: Assignment) -> Trace:
        assert a.task is not None, "a synthetic stream task (the harness works its own tasks)"
        (res, _), = engine.paired.run([a.chosen], [(a.task, a.condition)]).values()
        return engine.paired.traces.get(res.trace_id) or engine.archive.get(res.trace_id)
    return work
