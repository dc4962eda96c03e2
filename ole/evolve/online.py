"""Online mode: evolution alongside a stream of benchmark tasks, driven by ask/tell.

`ask()` is the task boundary: it activates whatever was released or rolled back since
the last boundary and hands out the next task with the active champion; nothing changes
the bundle of a task in flight. `tell(trace)` records the finished task; every `k`
tasks it makes one challenger from the recent traces, pairs it with the champion on the
gate instances (never seen by the proposer), gates it and, on `release`, releases it to
take effect at the next `ask()`. After an activation, the next `monitor` stream tasks
are also run by the parent on the identical task; if the mean relative change falls
below −`rollback_tau` the channel is rolled back to the parent (recorded, effective at
the next boundary).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from pydantic import BaseModel, ConfigDict, Field

from ole.errors import ValidationError
from ole.evolve import Engine, EvolveConfig
from ole.gate import GateDecision
from ole.paired import Instance, Pair, env_family, instance_key, make_pair, run_result, value_score
from ole.proposers import Parent
from ole.trace import RunCondition, TaskSpec, Trace


class OnlineConfig(BaseModel):
    """Stream and monitoring settings of online mode."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    tasks: int = Field(6, ge=1)
    """Stream length (tasks worked by the active champion)."""
    every_k: int = Field(3, ge=1)
    """A challenger is made after every k finished tasks."""
    recent: int = Field(6, ge=1)
    """How many recent stream traces the proposer reads."""
    stream_pool_base: int = 1000
    """Stream task i uses pool seed stream_pool_base + i (fresh instances)."""
    monitor: int = Field(2, ge=1)
    """Stream tasks after an activation on which the parent runs alongside."""
    rollback_tau: float = Field(0.1, gt=0.0)
    """Roll back when the monitored mean r < −rollback_tau."""


@dataclass(frozen=True)
class Assignment:
    """One stream task handed out by `ask()`."""

    index: int
    task: TaskSpec
    condition: RunCondition
    bundle_ref: str


@dataclass
class OnlineEvents:
    """What happened during an online run (for the summary and the experiments)."""

    decisions: list[GateDecision] = field(default_factory=list)
    releases: list[str] = field(default_factory=list)
    activations: list[tuple[int, str]] = field(default_factory=list)
    rollbacks: list[tuple[int, str, float]] = field(default_factory=list)
    monitor_pairs: list[Pair] = field(default_factory=list)
    worked: list[tuple[int, str, float | None]] = field(default_factory=list)


class OnlineEvolution:
    """Ask/tell surface over the shared engine."""

    def __init__(self, engine: Engine, cfg: EvolveConfig, online: OnlineConfig) -> None:
        self.e, self.cfg, self.online = engine, cfg, online
        self.gate_set: list[Instance] = cfg.suite.instances(cfg.gate_pools, cfg.agent_seeds)
        self.index = 0
        self.in_flight: Assignment | None = None
        self.recent: list[Trace] = []
        self.seen: set[str] = set()
        self.monitoring: tuple[str, str, list[Pair]] | None = None
        self.events = OnlineEvents()
        gate_pools = set(cfg.gate_pools)
        stream = set(range(online.stream_pool_base, online.stream_pool_base + online.tasks))
        if gate_pools & stream:
            raise ValidationError(f"gate pools {sorted(gate_pools & stream)} overlap the stream's pool seeds",
                                  hint="move --gate-pools or the stream base so the gate judges unseen instances")
        self._active = self._boundary()

    def _boundary(self) -> str:
        active = self.e.registry.activate_pending(self.e.channel)
        return active.ref

    def finish(self) -> str:
        """Final task boundary: whatever is pending (a late rollback) takes effect; returns the active ref."""
        before = self._active
        self._active = self._boundary()
        if self._active != before:
            self.events.activations.append((self.index, self._active))
        return self._active

    def stream_task(self, i: int) -> tuple[TaskSpec, RunCondition]:
        s = self.cfg.suite
        env = s.envs[i % len(s.envs)]
        return (TaskSpec(env=env, profile=s.profile, budget=s.budget, pool_seed=self.online.stream_pool_base + i),
                s.condition(self.cfg.agent_seeds[i % len(self.cfg.agent_seeds)]))

    def ask(self) -> Assignment:
        """Next task at a task boundary: pending releases and rollbacks take effect here only."""
        if self.in_flight is not None:
            raise RuntimeError(f"task {self.in_flight.index} is still in flight; tell() its trace first")
        before = self._active
        self._active = self._boundary()
        if self._active != before:
            self.e.progress(f"task boundary {self.index}: {self._active} is now active (was {before})")
            self.events.activations.append((self.index, self._active))
            self._start_monitoring(before)
        task, cond = self.stream_task(self.index)
        self.in_flight = Assignment(self.index, task, cond, self._active)
        return self.in_flight

    def _start_monitoring(self, previous: str) -> None:
        bundle = self.e.registry.get(self._active).bundle
        parents = bundle.provenance.parents
        name = self._active.split("@")[0]
        parent = f"{name}@{parents[0]}" if parents else None
        self.monitoring = (self._active, parent, []) if parent == previous else None

    def tell(self, trace: Trace) -> None:
        """Record the finished task; monitor, propose, evaluate, gate and release as due."""
        a = self.in_flight
        if a is None or trace.task != a.task or trace.condition != a.condition:
            raise RuntimeError("tell() needs the trace of the task handed out by the last ask()")
        self.in_flight = None
        self.index += 1
        self.recent = (self.recent + [trace])[-self.online.recent:]
        self.seen.add(instance_key(trace.task, trace.condition))
        self.events.worked.append((a.index, a.bundle_ref, value_score(trace)[0]))
        if self.monitoring is not None:
            self._monitor(a, trace)
        if self.index % self.online.every_k == 0 and self.monitoring is None:
            self._round()

    def _monitor(self, a: Assignment, trace: Trace) -> None:
        active, parent, pairs = self.monitoring
        parent_bundle = self.e.registry.get(parent).bundle
        champ_res = self.e.paired.run([(parent, parent_bundle)], [(a.task, a.condition)])
        (res, family), = champ_res.values()
        pair = make_pair(a.task, a.condition, env_family(a.task.env), res, run_result(trace))
        pairs.append(pair)
        self.events.monitor_pairs.append(pair)
        self.e.record_monitor(active, f"monitor|{active}|{trace.trace_id}",
                              {"parent": parent, "task_index": a.index, "r": pair.r, "trace_id": trace.trace_id})
        if len(pairs) < self.online.monitor:
            return
        mean_r = sum(p.r for p in pairs) / len(pairs)
        self.monitoring = None
        if mean_r < -self.online.rollback_tau:
            reason = (f"monitoring after activation: mean r {mean_r:+.3f} over {len(pairs)} tasks "
                      f"< -{self.online.rollback_tau:g} against parent {parent}")
            self.e.rollback(parent, reason, step=f"rollback|{active}|{a.index}")
            self.events.rollbacks.append((a.index, active, mean_r))
            self.e.progress(f"ROLLBACK recorded: {active} -> {parent} ({reason}); effective at the next boundary")
        else:
            self.e.progress(f"monitoring of {active} passed: mean r {mean_r:+.3f} over {len(pairs)} tasks")

    def _round(self) -> None:
        round_no = self.index // self.online.every_k
        champ = self.e.registry.get(self._active)
        ev = self.e.evidence(self.recent)
        prop = self.e.proposer.mutate(Parent(champ.ref, champ.bundle), ev, edge="online",
                                      generation=round_no, seed=self.cfg.seed * 100_000 + round_no)
        cand = self.e.register(prop, champ.bundle)
        if cand is None:
            return
        self.e.progress(f"round {round_no}: challenger {cand.ref} vs {champ.ref} on {len(self.gate_set)} gate instances")
        self.e.evaluate((champ.ref, champ.bundle), [cand], self.gate_set, stage=f"online-r{round_no}")
        decision = self.e.judge(champ.ref, cand, self.seen, stage=f"online-r{round_no}")
        self.events.decisions.append(decision)
        self.e.progress(f"round {round_no}: gate says {decision.verdict}: {'; '.join(decision.reasons)[:200]}")
        if decision.verdict == "release":
            self.e.release(cand.ref, f"online gate round {round_no}: mean r {decision.stats.mean_r:+.3f}",
                           stage=f"online-r{round_no}")
            self.events.releases.append(cand.ref)


def run_stream(evo: OnlineEvolution, work: Callable[[Assignment], Trace]) -> OnlineEvents:
    """Drive a whole stream: ask, let `work` run the task with the assigned bundle, tell."""
    for _ in range(evo.online.tasks):
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
