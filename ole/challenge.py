"""A challenge: any registered version paired with a champion on unseen tasks and judged by the gate.

An evolve gates only the candidates it proposed; a challenge gates a version someone wrote by
hand (`ole bundle register my.yaml --parent 1`, then `ole gate coder@2`). It runs the same
machinery as an evolve's gate — `ole.evolve.open_engine` over a workdir (resume store, paired
evaluation, cost meter), `Engine.decide_gate` with its adaptive looks, `ole.gate.decide` — so the
decision is recorded in the registry exactly as an engine's, and `ole release` of the version is
bounded by what these pairs covered (`ole.coverage`).

What makes it fair:

* **Unseen instances.** Instances where the challenger has runs outside any paired evaluation
  (`ole run --bundle coder@2 --pool-seed 201`: its author could tune on them) count as seen, and a
  gate on a seen instance is indecisive (`ole.gate`'s evidence criterion).
* **In scope.** Every gate task must be one the challenger's applicability admits: a release
  serves only its scope, so pairs outside it would judge tasks it never works.
* **One champion.** The challenger is paired with the version the channel routes those tasks to
  now (or `vs`); tasks routed to different champions are refused (gate each scope on its own).
* **A gate that can release.** Settings whose pairs can never reach the gate's `min_pairs` are
  refused before anything runs (`ole.evolves.check_gate_reach`).

As in an offline scope gate, the families of the gate's envs are the scope's families: the
release is bounded to the env ids the pairs covered, so a gate on one family judges one family.
"""
from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict

from ole.errors import ValidationError
from ole.proposers import Edge, Parent, Proposal, Proposer, rejected
from ole.vocab import HostKind

if TYPE_CHECKING:
    from ole.evidence import EvidenceItem
    from ole.evolve.config import EvolveConfig
    from ole.evolve.engine import Engine
    from ole.gate import GateConfig, GateDecision
    from ole.registry import Registry, RegisteredBundle

STAGE = "manual"
"""Stage name of a challenge's evaluation and gate steps (an evolve's are `offline`, `online`)."""
WORKDIRS = Path("runs") / "gate"
"""Where a challenge keeps its resume store and host runs by default: one folder per settings."""


class Challenge(BaseModel):
    """What to gate, against what, on which tasks (None: the default described on each field)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    challenger: str
    """`NAME@VERSION` of the registered version to judge."""
    vs: str | None = None
    """`NAME@VERSION` of the champion; None: the version the channel routes the gate tasks to now."""
    envs: tuple[str, ...] | None = None
    """Env slugs; None: the env ids of the challenger's scope, else the evolve's default suite."""
    budgets: tuple[int, ...] | None = None
    """Episode budgets of every gate instance; None: an evolve's gate budgets (32 and 128)."""
    pools: tuple[int, ...] | None = None
    """Pool seeds of the first look; None: an evolve's gate pools (201-204)."""
    extra_pools: tuple[int, ...] | None = None
    """Pool seeds of the adaptive looks; None: an evolve's (205-208) when `pools` is None, else none."""
    agent_seeds: tuple[int, ...] = (0,)
    """Agent seeds crossed with every pool."""
    host: HostKind = "builtin"
    """Host agent of every run."""
    model: str | None = None
    """Model string of the LLM agent."""
    command: tuple[str, ...] | None = None
    """The command agent's command line."""
    profile: str = "quick"
    """Host run profile (its validation and held-out sizes)."""
    channel: str = "default"
    """Channel whose routing picks the champion."""


class PersonProposer(Proposer):
    """The proposer of a challenge: the person who wrote the challenger. It proposes nothing here."""

    name = "person"

    def mutate(self, parent: Parent, evidence: Sequence["EvidenceItem"], *, edge: Edge,
               generation: int, seed: int) -> Proposal:
        return rejected(self.name, edge, [parent], "a challenge gates a version a person wrote; it proposes none")


def _version(registry: "Registry", ref: str, what: str) -> "RegisteredBundle":
    from ole.bundle import format_ref, parse_ref
    name, version = parse_ref(ref)
    if version is None:
        latest = registry.get(name).version
        raise ValidationError(f"{what} `{ref}` needs an explicit version", hint=f"e.g. `{format_ref(name, latest)}`")
    return registry.get(ref)


def default_envs(entry: "RegisteredBundle") -> tuple[str, ...]:
    """The env ids of the challenger's scope, else the evolve's default suite (in the order it lists them)."""
    from ole.evolve.config import DEFAULT_SUITE
    return tuple(entry.bundle.applicability.env_ids) or DEFAULT_SUITE


def config_of(c: Challenge, envs: tuple[str, ...], workers: int) -> "EvolveConfig":
    """The engine's configuration of a challenge: its tasks as an evolve's gate, and no search."""
    import pydantic

    from ole.evolve.config import EvolveConfig, Suite
    base = EvolveConfig()
    # a challenge has no search, so nothing is held out from one (the engine's transfer sample, where
    # it exists, follows an evolve's release, never a challenge's)
    held_out = {"transfer_envs": ()} if "transfer_envs" in EvolveConfig.model_fields else {}
    extra = c.extra_pools if c.extra_pools is not None else (() if c.pools is not None else base.gate_extra_pools)
    try:
        return EvolveConfig(suite=Suite(envs=envs, profile=c.profile, host=c.host, model=c.model, command=c.command),
                            search_pools=(), gate_pools=base.gate_pools if c.pools is None else c.pools,
                            gate_extra_pools=extra,
                            gate_budgets=base.gate_budgets if c.budgets is None else c.budgets, agent_seeds=c.agent_seeds,
                            channel=c.channel, workers=workers, **held_out)
    except pydantic.ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "gate"
        raise ValidationError(f"bad gate settings: {where}: {first['msg'].removeprefix('Value error, ')}",
                              hint="see `ole gate --help`") from None


def check_scope(entry: "RegisteredBundle", cfg: "EvolveConfig") -> None:
    """Every gate task must be one the challenger's scope admits (`OutOfScope` otherwise)."""
    from ole.registry.scopes import context_for, explicit
    for look in cfg.gate_looks():
        for task, cond in look:
            explicit(entry, context_for(task, cond))


def routed_champion(registry: "Registry", cfg: "EvolveConfig", challenger: str) -> str:
    """The one version the channel routes every gate task to now (nothing is activated or written)."""
    from ole.registry.scopes import context_for
    routed: dict[str, list[str]] = {}
    for task, cond in cfg.gate_looks()[0]:
        ref = registry.select(cfg.channel, context_for(task, cond), activate=False).ref
        where = f"{task.env} at budget {task.budget}"
        if where not in routed.setdefault(ref, []):
            routed[ref].append(where)
    if len(routed) > 1:
        who = "; ".join(f"{ref} serves {', '.join(w)}" for ref, w in routed.items())
        raise ValidationError(f"the gate tasks are served by different champions ({who})",
                              hint="gate against one of them with --vs NAME@VERSION, or gate one scope's envs at a time")
    champion = next(iter(routed))
    if champion == challenger:
        raise ValidationError(f"{challenger} already serves these tasks on channel `{cfg.channel}`",
                              hint="gate it against another version with --vs NAME@VERSION")
    return champion


def seen_instances(engine: "Engine", registry: "Registry", entry: "RegisteredBundle") -> set[str]:
    """Instance keys of the challenger's archived runs made outside any paired evaluation (its author
    may have tuned on them); the runs a paired evaluation made are named by its `evaluation` events."""
    from ole.paired import instance_key
    paired = {t for e in registry.events(kind="evaluation") for t in e.payload.get("trace_ids") or ()}
    return {instance_key(t.task, t.condition) for t in engine.archive.select(bundle_hash=entry.content_hash)
            if t.trace_id not in paired}


def default_workdir(c: Challenge, champion: str, envs: tuple[str, ...], gate: "GateConfig") -> Path:
    """`runs/gate/CHALLENGER-vs-CHAMPION-HASH`: one workdir per settings, so the same call resumes
    (returns the stored decision) and other settings never meet a store made under these."""
    doc = {**c.model_dump(mode="json"), "vs": champion, "envs": list(envs), "gate": gate.model_dump(mode="json")}
    digest = hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:8]
    return WORKDIRS / f"{c.challenger.replace('@', '-')}-vs-{champion.replace('@', '-')}-{digest}"


def run(c: Challenge, *, registry: "Registry", gate_config: "GateConfig | str | Path | None" = None,
        workdir: str | Path | None = None, traces: Path = Path("traces"), workers: int = 1,
        executor: str = "local", address: str | None = None, isolation: str | None = None,
        progress: Callable[[str], None] = print) -> "GateDecision":
    """Gate the challenge (see the module docstring); the decision is recorded in the registry."""
    from evogym.sandbox.isolation import DEFAULT_ISOLATION
    from ole.chosen import ChosenVersion
    from ole.evolve.engine import Candidate, open_engine
    from ole.evolves import check_envs, check_gate_reach
    from ole.executors import make_executor
    from ole.gate import GateConfig, load_config
    from ole.jobs import run_job
    from ole.paired import env_family
    from ole.preflight import check_task_names, check_writable
    entry = _version(registry, c.challenger, "challenger")
    if c.envs is not None:
        check_envs(c.envs)
    envs = c.envs if c.envs is not None else default_envs(entry)
    for flag, values in (("--budgets", c.budgets), ("--pools", c.pools)):
        if values is not None and (not values or len(set(values)) != len(values)):
            raise ValidationError(f"{flag} must name distinct values, got {list(values)}", hint=f"e.g. {flag} 201 202")
    check_task_names(envs, c.profile)
    gate = gate_config if isinstance(gate_config, GateConfig) else load_config(gate_config)
    cfg = config_of(c, envs, workers)
    check_gate_reach(cfg, gate, "online", pools_flag="--pools")
    check_scope(entry, cfg)
    champion = _version(registry, c.vs, "--vs") if c.vs else registry.get(routed_champion(registry, cfg, entry.ref))
    if champion.ref == entry.ref:
        raise ValidationError(f"--vs {c.vs} is the challenger itself", hint="gate it against another version")
    folder = check_writable("--workdir", workdir or default_workdir(c, champion.ref, envs, gate))
    check_writable("--traces", traces)
    with make_executor(executor, workers=workers, address=address) as pool:
        engine = open_engine(registry=registry, workdir=folder, traces_root=traces, cfg=cfg, evaluate=run_job,
                             proposer=PersonProposer(), gate=gate, executor=pool,
                             isolation=isolation or DEFAULT_ISOLATION, progress=progress,
                             driver={"mode": "gate", "challenger": entry.ref, "champion": champion.ref})
        looks = cfg.gate_looks()
        progress(f"gate: {entry.ref} vs {champion.ref} on {len(looks[0])} unseen instances of {', '.join(envs)} at "
                 f"budgets {', '.join(map(str, cfg.gate_budgets))} (up to {sum(map(len, looks))} with the adaptive "
                 f"sample); workdir {folder}")
        candidate = Candidate(ChosenVersion(entry.ref, entry.bundle), None)  # a version a person wrote: no Proposal
        return engine.decide_gate(ChosenVersion(champion.ref, champion.bundle), candidate, looks,
                                  seen_instances(engine, registry, entry), stage=STAGE,
                                  scope_families=sorted({env_family(e) for e in envs}))
