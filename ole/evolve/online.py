"""Online mode: evolution alongside a stream of tasks, driven by ask/tell — in one process or many.

`ask()` is the task boundary: it activates whatever was released or rolled back since the last
boundary and hands out the most specific champion whose scope matches the task
(`Registry.select`); nothing changes the bundle of a task in flight. `tell(trace)` records the finished task as a row of the
workspace's store, which every process working the stream shares, so "every k tasks" counts
the stream, not one process. The task that completes the k-th, 2k-th, ... finish runs a
proposal round: a challenger from the recent traces, paired with the champion on the gate
instances (which the proposer never saw), gated, and on `release` released — effective at
the next `ask()` of whichever process comes next. Rounds are serialized across processes by a
lease in the registry's database (`ole.evolve.lease`); a round is skipped while a release is
pending or the last activation is still being monitored.

After an activation caused by a release whose parent was the previous champion, the first
`monitor` tasks worked by the new champion are also run by the parent on the identical task
(where the task can be reproduced); once all are paired, a mean r below −`rollback_tau`
records a rollback to the parent, effective at the next boundary. Monitor pairs, verdicts,
rounds and rollbacks are store steps whose registry events carry idempotency keys, so a
resumed or concurrent process never repeats them.

Drivers: `run_stream` works a synthetic stream (`ole evolve --mode online`);
`ole.evolve.harness` feeds the engine the tasks of any external harness (`ole agent work --online`).
"""
from __future__ import annotations

import os
import socket
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from pydantic import BaseModel, ConfigDict, Field

from ole.bundle import GENERAL_SCOPE, TaskContext
from ole.errors import ValidationError
from ole.evolve import Engine, EvolveConfig
from ole.evolve.lease import Lease
from ole.gate import GateDecision
from ole.paired import Instance, Pair, RunResult, instance_key, make_pair, run_result, value_score
from ole.proposers import Parent
from ole.registry import DB_FILE
from ole.trace import RunCondition, TaskSpec, Trace

EXTERNAL_PROFILE = "external"
"""TaskSpec profile of a harness task OLE cannot rerun (unknown profile or pools): never monitored."""


class OnlineConfig(BaseModel):
    """Stream and monitoring settings of online mode."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    tasks: int = Field(6, ge=1)
    """Stream length (tasks worked by the active champion); synthetic stream only."""
    every_k: int = Field(3, ge=1)
    """A challenger is made after every k finished tasks (of the whole stream, all processes)."""
    recent: int = Field(6, ge=1)
    """How many recent stream traces the proposer reads."""
    stream_pool_base: int = 1000
    """Synthetic stream task i uses pool seed stream_pool_base + i (fresh instances)."""
    monitor: int = Field(2, ge=1)
    """Stream tasks after an activation on which the parent runs alongside."""
    rollback_tau: float = Field(0.1, gt=0.0)
    """Roll back when the monitored mean r < −rollback_tau."""


@dataclass(frozen=True)
class Assignment:
    """One stream task handed out by `ask()`."""

    index: int
    """Tasks of the stream finished before this boundary (the synthetic stream's task index)."""
    task: TaskSpec | None
    """The task (synthetic stream), or None when the harness decides it."""
    condition: RunCondition
    """The run condition the task is worked under."""
    bundle_ref: str
    """The bundle fixed for this task at its boundary."""
    activation: int
    """Seq of the activation event of the chosen scope in force at the boundary (0: none yet)."""
    scope: str = GENERAL_SCOPE
    """Scope key the bundle was chosen for."""


@dataclass
class OnlineEvents:
    """What this process saw happen during an online run (for summaries and experiments)."""

    decisions: list[GateDecision] = field(default_factory=list)
    releases: list[str] = field(default_factory=list)
    activations: list[tuple[int, str]] = field(default_factory=list)
    rollbacks: list[tuple[int, str, float]] = field(default_factory=list)
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
        self.selection = None
        """The `Selection` of the last task boundary (which bundle, which scope, why)."""
        self._monitored: dict[int, tuple[str, str] | None] = {}
        gate_pools = {*cfg.gate_pools, *cfg.gate_extra_pools}
        stream = set(range(online.stream_pool_base, online.stream_pool_base + online.tasks))
        if not external and gate_pools & stream:
            raise ValidationError(f"gate pools {sorted(gate_pools & stream)} overlap the stream's pool seeds",
                                  hint="move --gate-pools or the stream base so the gate judges unseen instances")

    @property
    def gate_set(self) -> list[Instance]:
        return [i for look in self.gate_looks for i in look]

    @property
    def index(self) -> int:
        """Finished tasks of the stream (all processes)."""
        return len(self.e.store.tasks())

    # ----- task boundaries -----------------------------------------------------------------------
    def _boundary(self, ctx: TaskContext) -> tuple[str, int, str]:
        """(chosen ref, seq of its scope's last activation, scope) after activating what is pending."""
        reg = self.e.registry
        chosen = reg.select(self.e.channel, ctx)
        self.selection = chosen
        acts = [e for e in reg.events(kind="activation", channel=self.e.channel)
                if e.payload.get("scope", GENERAL_SCOPE) == chosen.scope]
        return chosen.ref, (acts[-1].seq if acts else 0), chosen.scope

    def finish(self) -> str:
        """Final task boundary: whatever is pending (a late rollback) takes effect; returns the general champion."""
        before = self._active
        self._active = self.e.registry.activate_pending(self.e.channel).ref
        if before is not None and self._active != before:
            self.events.activations.append((self.index, self._active))
        return self._active

    def stream_task(self, i: int) -> tuple[TaskSpec, RunCondition]:
        s = self.cfg.suite
        env = s.envs[i % len(s.envs)]
        return (TaskSpec(env=env, profile=s.profile, budget=s.budget, pool_seed=self.online.stream_pool_base + i),
                s.condition(self.cfg.agent_seeds[i % len(self.cfg.agent_seeds)]))

    def ask(self, condition: RunCondition | None = None, ctx: TaskContext | None = None) -> Assignment:
        """Next task at a task boundary: pending releases and rollbacks take effect here only.

        Without `condition` the next task of the synthetic stream is handed out; with it (a
        harness task, whose `ctx` says what the task is) only the bundle is fixed and the
        harness's own task is worked.
        """
        from ole.scopes import context_for
        if self.in_flight is not None:
            raise RuntimeError(f"task {self.in_flight.index} is still in flight; tell() its trace first")
        index = self.index
        task, cond = (None, condition) if condition is not None else self.stream_task(index)
        if ctx is None:
            if task is None:
                raise ValueError("a harness task needs its TaskContext")
            ctx = context_for(task, cond)
        before = self._active
        self._active, activation, scope = self._boundary(ctx)
        if before is not None and self._active != before:
            self.e.progress(f"task boundary {index}: {self._active} is now active (was {before})")
            self.events.activations.append((index, self._active))
        self.in_flight = Assignment(index, task, cond, self._active, activation, scope)
        return self.in_flight

    # ----- finished tasks ------------------------------------------------------------------------
    def tell(self, trace: Trace) -> None:
        """Record the finished task; monitor, propose, evaluate, gate and release as due."""
        a = self.in_flight
        if a is None or trace.condition != a.condition or (a.task is not None and trace.task != a.task):
            raise RuntimeError("tell() needs the trace of the task handed out by the last ask()")
        if trace.bundle_hash != self.e.registry.get(a.bundle_ref).content_hash:
            raise RuntimeError(f"the trace was worked by bundle {trace.bundle_hash[:12]}, not by {a.bundle_ref}")
        self.in_flight = None
        q = value_score(trace)[0]
        n = self.e.store.add_task(trace.trace_id, {
            "trace_id": trace.trace_id, "bundle_ref": a.bundle_ref, "activation": a.activation, "q": q,
            "instance": instance_key(trace.task, trace.condition), "verified": trace.verified,
            "reproducible": trace.task.profile != EXTERNAL_PROFILE, "task": trace.task.model_dump(mode="json"),
            "condition": trace.condition.model_dump(mode="json"), "result": run_result(trace).model_dump(mode="json")})
        self.events.worked.append((n - 1, a.bundle_ref, q))
        self._monitor(n, a, trace)
        if n % self.online.every_k == 0:
            self._round(n // self.online.every_k)

    # ----- monitoring ------------------------------------------------------------------------------
    def _monitored_activation(self, seq: int) -> tuple[str, str, str] | None:
        """(activated ref, parent ref, scope) when activation `seq` is a release of a child of the
        previous champion of that scope."""
        if seq not in self._monitored:
            found = [e for e in self.e.registry.events(kind="activation", channel=self.e.channel, since=seq - 1)
                     if e.seq == seq] if seq else []
            out = None
            if found and found[0].payload.get("cause") == "release":
                ev = found[0]
                parents = self.e.registry.get(ev.ref).bundle.provenance.parents
                parent = f"{ev.name}@{parents[0]}" if parents else None
                scope = ev.payload.get("scope", GENERAL_SCOPE)
                out = (ev.ref, parent, scope) if parent is not None and ev.payload.get("from") == parent else None
            self._monitored[seq] = out
        return self._monitored[seq]

    def _window(self, activation: int) -> list[tuple[int, dict]]:
        """The first `monitor` reproducible stream tasks (n, row) worked under an activation, in finish order."""
        rows = [(n, p) for n, p in self.e.store.tasks() if p["activation"] == activation and p["reproducible"]]
        return rows[:self.online.monitor]

    def _monitor(self, n: int, a: Assignment, trace: Trace) -> None:
        watched = self._monitored_activation(a.activation)
        if watched is None:
            return
        active, parent, scope = watched
        if trace.task.profile == EXTERNAL_PROFILE:
            self.e.progress(f"task {n} cannot be rerun by OLE (profile {EXTERNAL_PROFILE}): not monitored")
        for m, row in self._window(a.activation):  # also any pair a crashed process left unrecorded
            self._pair(m, row, a.activation, active, parent)
        self._verdict(n, a.activation, active, parent, scope)

    def _pair(self, n: int, row: dict, activation: int, active: str, parent: str) -> None:
        """The monitor pair of stream task n: the parent reruns its identical task (recorded once)."""
        step = f"monitor|{activation}|{row['trace_id']}"
        if self.e.store.step(step) is not None:
            return
        lease = Lease(self.e.registry.home / DB_FILE, f"monitor:{self.e.channel}:{row['trace_id']}", self.holder)
        if not lease.hold():  # a live process is making this pair; a dead one's lease expires
            return
        try:
            if self.e.store.step(step) is None:
                self._make_pair(n, row, step, activation, active, parent)
        finally:
            lease.release()

    def _make_pair(self, n: int, row: dict, step: str, activation: int, active: str, parent: str) -> None:
        task, cond = TaskSpec.model_validate(row["task"]), RunCondition.model_validate(row["condition"])
        parent_bundle = self.e.registry.get(parent).bundle
        (res, family), = self.e.paired.run([(parent, parent_bundle)], [(task, cond)]).values()
        pair = make_pair(task, cond, family, res, RunResult.model_validate(row["result"]))
        self.events.monitor_pairs.append(pair)
        self.e.record_monitor(active, step, {"parent": parent, "activation": activation, "task_index": n,
                                             "r": pair.r, "trace_id": row["trace_id"]})

    def _verdict(self, n: int, activation: int, active: str, parent: str, scope: str) -> None:
        step = f"monitor-verdict|{activation}"
        window = self._window(activation)
        pairs = [self.e.store.step(f"monitor|{activation}|{p['trace_id']}") for _, p in window]
        if len(pairs) < self.online.monitor or any(p is None for p in pairs) or self.e.store.step(step) is not None:
            return
        mean_r = sum(p["r"] for p in pairs) / len(pairs)
        rolled = mean_r < -self.online.rollback_tau
        champion = self.e.registry.state().champion(self.e.channel, scope)
        if rolled and (champion is None or f"{champion[0]}@{champion[1]}" != active):
            self.e.progress(f"monitoring of {active}: mean r {mean_r:+.3f}, but the channel moved on; no rollback")
            rolled = False
        elif rolled:
            reason = (f"monitoring after activation: mean r {mean_r:+.3f} over {len(pairs)} tasks "
                      f"< -{self.online.rollback_tau:g} against parent {parent}")
            self.e.rollback(parent, reason, step=f"rollback|{activation}", scope=scope)
            self.events.rollbacks.append((n - 1, active, mean_r))
            self.e.progress(f"ROLLBACK recorded: {active} -> {parent} ({reason}); effective at the next boundary")
        else:
            self.e.progress(f"monitoring of {active} passed: mean r {mean_r:+.3f} over {len(pairs)} tasks")
        self.e.store.mark(step, {"active": active, "parent": parent, "mean_r": mean_r, "rolled_back": rolled})

    def _monitoring(self) -> bool:
        """True while the channel's last activation is monitored and has no verdict yet."""
        acts = self.e.registry.events(kind="activation", channel=self.e.channel)
        if not acts or self._monitored_activation(acts[-1].seq) is None:
            return False
        return self.e.store.step(f"monitor-verdict|{acts[-1].seq}") is None

    def _pending(self) -> bool:
        state = self.e.registry.state()
        return any(state.is_pending(self.e.channel, s) for s in state.scopes(self.e.channel))

    # ----- proposal rounds -------------------------------------------------------------------------
    def _round(self, r: int) -> None:
        step = f"round|{r}"
        if self.e.store.step(step) is not None:
            return
        lease = Lease(self.e.registry.home / DB_FILE, f"round:{self.e.channel}", self.holder,
                      on_wait=lambda other: self.e.progress(f"round {r}: waiting for the round lease held by {other}"))
        with lease:
            if self.e.store.step(step) is not None:
                return
            started = time.time()
            if self._pending() or self._monitoring():
                why = "a release is pending" if self._pending() else "the last activation is being monitored"
                self.e.progress(f"round {r}: skipped, {why}")
                out = {"skipped": why}
            else:
                out = self._propose_and_gate(r)
            self.e.store.mark(step, {**out, "holder": self.holder, "started": started, "ended": time.time()})

    def _propose_and_gate(self, r: int) -> dict:
        champ = self.e.registry.champion(self.e.channel)
        rows = [p for _, p in self.e.store.tasks(r * self.online.every_k)][-self.online.recent:]
        recent = [self.e.archive.get(p["trace_id"]) for p in rows if p["verified"]]
        ev = self.e.evidence(recent)
        prop = self.e.proposer.mutate(Parent(champ.ref, champ.bundle), ev, edge="online",
                                      generation=r, seed=self.cfg.seed * 100_000 + r)
        cand = self.e.register(prop, champ.bundle)
        if cand is None:
            return {"champion": champ.ref, "candidate": None}
        seen = {p["instance"] for _, p in self.e.store.tasks()}
        self.e.progress(f"round {r}: challenger {cand.ref} vs {champ.ref} on {len(self.gate_looks[0])} gate instances")
        decision = self.e.decide_gate((champ.ref, champ.bundle), cand, self.gate_looks, seen, stage=f"online-r{r}")
        self.events.decisions.append(decision)
        self.e.progress(f"round {r}: gate says {decision.verdict}: {'; '.join(decision.reasons)[:200]}")
        if decision.verdict == "release":
            self.e.release(cand.ref, f"online gate round {r}: mean r {decision.stats.mean_r:+.3f}",
                           stage=f"online-r{r}")
            self.events.releases.append(cand.ref)
        return {"champion": champ.ref, "candidate": cand.ref, "verdict": decision.verdict}


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
        reg = engine.registry.get(a.bundle_ref)
        (res, _), = engine.paired.run([(reg.ref, reg.bundle)], [(a.task, a.condition)]).values()
        return engine.paired.traces.get(res.trace_id) or engine.archive.get(res.trace_id)
    return work
