"""The Python API: what the `ole` command does, as functions returning the records it prints.

    import ole
    reg = ole.open_registry("bundles")
    result = ole.evolve_offline(envs=["gym/acrobot"], budget=8, registry=reg)
    decision = ole.judge("coder@3", envs=["gym/acrobot"], budgets=[8], pools=[201, 202], registry=reg)
    print(decision.verdict, decision.reasons)

Every function takes `registry=`: an open `Registry`, a root folder, or None (the root search of
`ole.roots`); a registry it opened itself it also closes. Settings have the CLI's defaults and
names (`ole.evolve_offline(gate_pools=[201, 202])` is `ole evolve --mode offline --gate-pools 201 202`;
`ole.judge` is `ole gate`, `ole.stream` the online ask/tell surface), and the CLI is a
thin layer over these functions: it parses flags, calls them and renders what they return. The
records are the ones `--json` prints: `GateDecision` (`ole gate`), `ScopeChampion` (`ole champion
show`), `Lineage` (`ole lineage show`), `EvolveResult.summary` (`ole evolve`), `Trace` (`ole run`).
"""
from __future__ import annotations

import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict

from ole.errors import ValidationError
from ole.evolves import EvolveSettings
from ole.vocab import HostKind

if TYPE_CHECKING:
    from ole.cost import CostEstimate
    from ole.evolve.config import EvolveConfig
    from ole.evolve.engine import Engine
    from ole.evolve.online import OnlineEvolution
    from ole.gate import GateConfig, GateDecision
    from ole.proposers import Proposer
    from ole.registry import Registry, ScopeChampion
    from ole.registry.lineage import Lineage
    from ole.trace import RunCondition, TaskSpec, Trace

Progress = Callable[[str], None]


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def open_registry(root: str | Path | None = None) -> "Registry":
    """The registry at `root` (None: `$OLE_ROOT`, the project's `bundles/`, else the per-user root);
    seed bundles are registered on first open. Close it when done (`with ole.open_registry() as reg:`)."""
    from ole.registry import Registry
    return Registry(root)


@contextmanager
def _opened(registry: Any) -> Iterator["Registry"]:
    """`registry` itself when it is an open Registry, else one opened here (and closed after)."""
    from ole.registry import Registry
    if isinstance(registry, Registry):
        yield registry
        return
    with Registry(registry) as reg:
        yield reg


# ----- one task ---------------------------------------------------------------------------------

def run(task: "str | TaskSpec", *, bundle: str | None = None, agent: HostKind = "builtin",
        condition: "RunCondition | None" = None, seed: int = 0, model: str | None = None,
        command: Sequence[str] | None = None, profile: str = "quick", budget: int | None = None, pool_seed: int = 0,
        channel: str = "default", force: bool = False, root: str | Path | None = None,
        runs_dir: str | Path = "runs", traces_dir: str | Path = "traces", lessons: str | Path | None = None,
        isolation: str | None = None, progress: Progress | None = None) -> "Trace":
    """Work one task (an env slug, or a `TaskSpec`) with a host agent; returns its trace, archived in
    `traces_dir` when the host scored it (`trace.verified`).

    Without `bundle` the task gets the channel's most specific champion whose scope matches it.
    `lessons` names a cross-task lessons file to read and extend (`ole run` uses
    `.ole/lessons.jsonl`); None runs without one, so a run does not depend on earlier ones.
    """
    from evogym.sandbox.isolation import DEFAULT_ISOLATION
    from ole.preflight import check_task_names
    from ole.runner import run_task
    from ole.trace import RunCondition, TaskSpec
    spec = task if isinstance(task, TaskSpec) else TaskSpec(env=task, profile=profile, budget=budget,
                                                            pool_seed=pool_seed)
    check_task_names([spec.env], spec.profile)
    cond = condition or RunCondition(host=agent, seed=seed, model=model,
                                     command=tuple(command) if command else None)
    return run_task(spec, bundle, cond.host, cond, root=root, runs_dir=runs_dir, traces_dir=traces_dir,
                    channel=channel, lessons_path=lessons, isolation=isolation or DEFAULT_ISOLATION,
                    progress=progress, force=force)


# ----- evolve -----------------------------------------------------------------------------------

class EvolveResult(BaseModel):
    """What one evolve did: its resolved settings, every gate decision, and the summary `--json` prints."""

    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True)
    settings: EvolveSettings
    """The resolved settings (also written to `WORKDIR/evolve.yaml`: `--config` resumes from it)."""
    summary: dict[str, Any]
    """The JSON summary `ole evolve --json` prints (also written to `WORKDIR/outcome.json`)."""
    decisions: tuple[Any, ...]
    """Every `GateDecision` made, in order (offline: one per gated scope, as `summary["gates"]`)."""
    released: tuple[str, ...]
    """Versions released."""
    failure: str | None = None
    """Why the evolve could not work at all (every proposal failed before a candidate existed), else None."""


@dataclass(frozen=True)
class EvolvePlan:
    """An evolve checked and estimated, before anything runs or is written (`plan_evolve`)."""

    settings: EvolveSettings
    """The settings as given."""
    mode: Literal["offline", "online"]
    """offline or online."""
    cfg: "EvolveConfig"
    """The engine's configuration."""
    gate: "GateConfig"
    """The gate's thresholds."""
    estimate: "CostEstimate"
    """Runs, episodes, wall time, tokens and dollars it is expected to spend."""
    notes: tuple[str, ...]
    """Warnings about the settings (e.g. a scope of one env cannot reach the gate's min_pairs)."""

    @property
    def workdir(self) -> Path:
        return self.settings.workdir_path()

    @property
    def traces(self) -> Path:
        return Path(self.settings.traces or "traces")


def settings_of(settings: EvolveSettings | None = None, **given: Any) -> EvolveSettings:
    """`settings` with the keyword settings over it (`ole.evolve(envs=[...])`); unknown names are refused."""
    import pydantic
    try:
        over = EvolveSettings.model_validate({k: tuple(v) if isinstance(v, list) else v for k, v in given.items()})
    except pydantic.ValidationError as exc:
        first = exc.errors()[0]
        raise ValidationError(f"bad evolve setting {'.'.join(map(str, first['loc']))}: {first['msg']}",
                              hint="settings are named as `ole evolve` flags: envs, budget, gate_pools, ...") from None
    return over.over(settings or EvolveSettings())


def plan_evolve(settings: EvolveSettings, *, writing: bool = True, gate: "GateConfig | None" = None) -> EvolvePlan:
    """Check every setting and estimate the cost; nothing runs. `writing=False` (`--estimate-only`)
    checks that the workdir and the trace archive could be written without creating them. `gate`
    replaces the settings' gate config file (the API's `gate=`)."""
    from ole.evolves import check_gate_reach, estimate_of
    from ole.gate import load_config
    from ole.preflight import (check_could_write, check_model, check_proposer, check_task_names,
                               check_writable)
    cfg = settings.evolve_config()
    mode = settings.check_mode()
    check_task_names(cfg.suite.envs, cfg.suite.profile)
    if gate is not None and settings.gate_config is not None:
        raise ValidationError("give the gate once: a GateConfig (gate=) or a file (gate_config=)")
    gate = gate or load_config(settings.gate_config)
    if cfg.suite.host == "llm" and not cfg.suite.model:
        raise ValidationError("--host llm needs --model", hint="e.g. --model openai/gpt-4o-mini or replay:FILE")
    check_proposer("--proposer", settings.proposer or "builtin")
    if settings.track is not None:
        from ole.extras import check
        check(settings.track, f"--track {settings.track}")
    elif settings.track_uri is not None:
        raise ValidationError("--track-uri names where --track logs", hint="add --track mlflow, or drop --track-uri")
    check_model("--model", cfg.suite.model if cfg.suite.host == "llm" else None)
    if mode == "online":
        _online_config(settings)
    note = check_gate_reach(cfg, gate, mode)
    est = estimate_of(settings, cfg, gate)
    for flag, folder in (("--workdir", settings.workdir_path()), ("--traces", Path(settings.traces or "traces"))):
        if writing:
            check_writable(flag, folder)
        else:
            check_could_write(flag, folder)
    return EvolvePlan(settings, mode, cfg, gate, est, (note,) if note else ())


def _online_config(settings: EvolveSettings):
    import pydantic

    from ole.evolve.online import OnlineConfig
    from ole.evolves import ONLINE_DEFAULTS, ONLINE_ONLY
    try:
        return OnlineConfig(**{k: v if (v := getattr(settings, k)) is not None else ONLINE_DEFAULTS[k]
                               for k in ONLINE_ONLY})
    except pydantic.ValidationError as exc:
        first = exc.errors()[0]
        flag = "--" + str(first["loc"][0]).replace("_", "-")
        raise ValidationError(f"bad {flag}: {first['msg']} (got {first.get('input')!r})",
                              hint="see `ole evolve --help`") from None


def make_proposer(spec: str, workdir: Path, cfg: "EvolveConfig") -> "Proposer":
    """The proposer an evolve of `cfg` in `workdir` uses (`ole.proposers.factory.make_proposer`): its LLM calls
    logged to `WORKDIR/proposer-calls.jsonl`, under the run's cost caps."""
    from ole.proposers.factory import make_proposer as made
    return made(spec, host=cfg.suite.host, seed=cfg.seed, log_path=workdir / "proposer-calls.jsonl", caps=cfg.caps)


def _driver(plan: EvolvePlan) -> dict[str, Any]:
    """The mode's own settings, part of the workspace fingerprint (a resume must use the same)."""
    if plan.mode == "offline":
        return {"mode": "offline"}
    online = _online_config(plan.settings)
    return {"mode": "online", "tasks": online.tasks, "every_k": online.every_k}


@contextmanager
def _engine(plan: EvolvePlan, registry: "Registry", progress: Progress) -> Iterator["Engine"]:
    """The engine over the plan's workdir, its executor closed after; the resolved settings (and the
    gate config they name, `WORKDIR/gate.yaml`) are written into the workdir once the workdir's
    fingerprint has accepted them, so the workdir alone says what made it."""
    from ole.evolve.engine import open_engine
    from ole.evolves import write_gate, write_settings
    from ole.executors import make_executor
    from ole.jobs import run_job
    s = plan.settings
    with make_executor(s.executor or "local", workers=plan.cfg.workers, address=s.address) as executor:
        engine = open_engine(registry=registry, workdir=plan.workdir, traces_root=plan.traces, cfg=plan.cfg,
                             evaluate=run_job, proposer=make_proposer(s.proposer or "builtin", plan.workdir, plan.cfg),
                             gate=plan.gate, executor=executor, progress=progress, driver=_driver(plan),
                             execution=s.execution or "fast")
        gate_file = write_gate(plan.workdir, plan.gate)
        write_settings(plan.workdir, s.resolve(Path(registry.root)).model_copy(
            update={"gate_config": str(gate_file.resolve())}))
        yield engine


def evolve_offline(settings: EvolveSettings | None = None, *, registry: Any = None, gate: "GateConfig | None" = None,
                   progress: Progress | None = None, **given: Any) -> EvolveResult:
    """`ole evolve --mode offline`: search the archive's evidence over generations, gate each env scope's
    gain on unseen instances, release what passes (bounded by its gate's evidence). Settings by flag name."""
    return evolve(settings, registry=registry, gate=gate, progress=progress, **{**given, "mode": "offline"})


def evolve_online(settings: EvolveSettings | None = None, *, registry: Any = None, gate: "GateConfig | None" = None,
                  progress: Progress | None = None, **given: Any) -> EvolveResult:
    """`ole evolve --mode online`: work a synthetic task stream of `tasks` tasks, a gated challenger
    every `every_k`, each release staged and monitored. To feed your own tasks, use `stream`."""
    return evolve(settings, registry=registry, gate=gate, progress=progress, **{**given, "mode": "online"})


def evolve(settings: EvolveSettings | None = None, *, registry: Any = None, gate: "GateConfig | None" = None,
           progress: Progress | None = None, on_start: Callable[["Engine"], None] | None = None,
           **given: Any) -> EvolveResult:
    """Run one evolve (offline or online, `mode`) with the CLI's defaults; resumable from its workdir.

    Settings are `ole evolve`'s flags by name (`mode`, `envs`, `budget`, `gate_pools`, ...), given as
    an `EvolveSettings` and/or keywords; `gate` a `GateConfig` instead of a `gate_config` file.
    `progress` gets every progress line, the estimate first (default: stderr); `on_start` gets the
    engine before the first run (the CLI's progress bar follows its cost meter).
    """
    plan = plan_evolve(settings_of(settings, **given), gate=gate)
    say = progress or _stderr
    for line in estimate_lines(plan):
        say(line)
    return run_evolve(plan, registry=registry, progress=say, on_start=on_start)


def estimate_lines(plan: EvolvePlan) -> list[str]:
    """The estimate as `ole evolve` prints it before anything runs, then the plan's notes."""
    head = (f"ole evolve --mode {plan.mode}: envs {', '.join(plan.cfg.suite.envs)}; "
            "estimate (ablation runs not counted):")
    return [head, *("  " + line for line in plan.estimate.lines(plan.cfg.caps)), *plan.notes]


def run_evolve(plan: EvolvePlan, *, registry: Any = None, progress: Progress | None = None,
               on_start: Callable[["Engine"], None] | None = None) -> EvolveResult:
    """Run a checked plan (`plan_evolve`): the engine over its workdir, the offline or online driver,
    then `WORKDIR/outcome.json` and (with `track`) the MLflow run."""
    from ole.evolves import write_outcome
    say = progress or _stderr
    with _opened(registry) as reg, _tracked(plan, reg) as tracker, _engine(plan, reg, say) as engine:
        if on_start is not None:
            on_start(engine)
        result = _offline(engine, plan, reg) if plan.mode == "offline" else _online(engine, plan, reg)
        write_outcome(plan.workdir, result.summary)
        if tracker is not None:  # ole.tracking: metrics and artifacts of this evolve
            from ole.tracking import record_evolve
            record_evolve(tracker, reg, result.summary, [plan.workdir])
    return result


@contextmanager
def _tracked(plan: EvolvePlan, registry: "Registry") -> Iterator[Any]:
    """The `--track` run around the evolve (None without `--track`)."""
    from ole.distribution import version
    from ole.tracking import track
    s = plan.settings
    params = {"mode": plan.mode, "proposer": s.proposer or "builtin", "executor": s.executor or "local",
              "config": plan.cfg.model_dump(mode="json"), **({"online": _driver(plan)} if plan.mode == "online" else {})}
    with track(s.track, uri=s.track_uri, mode=plan.mode, envs=plan.cfg.suite.envs, params=params,
               tags={"ole.version": version(), "ole.registry": str(registry.root),
                     "ole.channel": plan.cfg.channel}) as tracker:
        yield tracker


def _offline(engine: "Engine", plan: EvolvePlan, registry: "Registry") -> EvolveResult:
    from ole.bundle import diff_bundles
    from ole.evolve.offline import OfflineEvolution
    cfg = plan.cfg
    champ = registry.champion(cfg.channel)
    report = OfflineEvolution(engine, cfg, champ.ref, champ.bundle).run()
    if report.released:
        registry.activate_pending(cfg.channel)  # no task is in flight offline: this is a task boundary
    gates = []
    for g in report.gates:
        d = g.decision
        changes = [f"{c.component}.{c.field}: {c.old!r} -> {c.new!r}"
                   for c in diff_bundles(champ.bundle, registry.get(g.final).bundle) if c.component != "applicability"]
        scope = released_scope(registry, g.final) if g.released else None
        gates.append({"source": g.source, "final": g.final, "envs": g.envs, "search_gains": g.gains,
                      "verdict": d.verdict, "reasons": list(d.reasons), "gain": gain_of(d), "changes": changes,
                      "bound": d.bound, "released_scope": scope, "coverage": d.evidence().describe(),
                      "ablation": d.ablation.model_dump(mode="json") if d.ablation else None})
    first = gates[0] if gates else None
    summary = {"mode": "offline", "champion": report.champion, "candidates": [c.ref for c in report.candidates],
               "retained": report.retained, "gates": gates, "released": report.released,
               "final": first["final"] if first else None, "verdict": first["verdict"] if first else None,
               "screened": report.screened, "stopped": report.stopped,
               "rejected_proposals": len(engine.rejections), "spent": engine.meter.summary(),
               "estimate": plan.estimate.model_dump(), "config": cfg.model_dump(mode="json")}
    failed = [p.rejection for p in engine.rejections if (p.rejection or "").startswith("LLM call failed")]
    failure = None
    if failed and len(failed) == len(engine.rejections) and not report.candidates:  # the proposer never answered
        failure = f"all {len(failed)} proposals failed before a candidate existed: {failed[0]}"
    return EvolveResult(settings=plan.settings, summary=summary, decisions=tuple(g.decision for g in report.gates),
                        released=tuple(report.released), failure=failure)


def released_scope(registry: "Registry", ref: str) -> str | None:
    """The scope key the release of `ref` took (bounded by its gate's evidence)."""
    releases = [e for e in registry.events(kind="release") if e.ref == ref]
    return releases[-1].payload.get("scope") if releases else None


def gain_of(d: "GateDecision") -> dict[str, Any]:
    """The gate's measured gain: mean r, its interval with the true level, pairs and looks."""
    s = d.stats
    return {"mean_r": s.mean_r, "ci_low": s.ci_low, "ci_high": s.ci_high, "ci_level": s.ci_level,
            "n_pairs": s.n_pairs, "p_value": s.p_value, "alpha": d.alpha_applied, "looks": len(d.looks)}


def _online(engine: "Engine", plan: EvolvePlan, registry: "Registry") -> EvolveResult:
    from ole.evolve.online import OnlineEvolution, engine_worker, run_stream
    evo = OnlineEvolution(engine, plan.cfg, _online_config(plan.settings))
    events = run_stream(evo, engine_worker(engine))
    summary = {"mode": "online", "tasks": len(events.worked), "releases": events.releases,
               "released": events.releases,
               "rollbacks": [{"task": i, "bundle": ref, "mean_r": r} for i, ref, r in events.rollbacks],
               "promotions": [{"task": i, "bundle": ref, "mean_r": r} for i, ref, r in events.promotions],
               "decisions": [{"challenger": d.challenger, "verdict": d.verdict, "mean_r": d.stats.mean_r}
                             for d in events.decisions],
               "active": registry.champion(plan.cfg.channel).ref, "spent": engine.meter.summary(),
               "estimate": plan.estimate.model_dump()}
    return EvolveResult(settings=plan.settings, summary=summary, decisions=tuple(events.decisions),
                        released=tuple(events.releases))


@contextmanager
def stream(settings: EvolveSettings | None = None, *, registry: Any = None, gate: "GateConfig | None" = None,
           progress: Progress | None = None, **given: Any) -> Iterator["OnlineEvolution"]:
    """An online evolution to drive with ask/tell from your own task loop (settings as `evolve`'s,
    mode online): `a = evo.ask()` fixes the bundle of the next task at its boundary, `evo.tell(trace)`
    records the finished task and every `every_k` tasks gates a challenger. The stream lives in the
    workdir, so several processes may ask and tell on one stream."""
    from ole.evolve.online import OnlineEvolution
    plan = plan_evolve(settings_of(settings, **{"mode": "online", **given}), gate=gate)
    with _opened(registry) as reg, _engine(plan, reg, progress or _stderr) as engine:
        evo = OnlineEvolution(engine, plan.cfg, _online_config(plan.settings))
        yield evo
        evo.finish()


# ----- the gate of any registered version -------------------------------------------------------

def judge(challenger: str, *, vs: str | None = None, envs: Sequence[str] | None = None,
         budgets: Sequence[int] | None = None, pools: Sequence[int] | None = None,
         extra_pools: Sequence[int] | None = None, agent_seeds: Sequence[int] = (0,),
         host: HostKind = "builtin", model: str | None = None,
         command: Sequence[str] | None = None, profile: str = "quick", gate_config: "GateConfig | str | Path | None" = None,
         channel: str = "default", registry: Any = None, workdir: str | Path | None = None,
         traces: str | Path = "traces", workers: int = 1, executor: str = "local", address: str | None = None,
         isolation: str | None = None, progress: Progress | None = None) -> "GateDecision":
    """`ole gate`: pair `challenger` (`NAME@VERSION`, e.g. a hand-written bundle you registered) with a champion on
    unseen gate instances and judge it with the release gate, as an evolve's gate does; the decision
    is recorded in the registry, so `ole release` of it is bounded by what these pairs covered.

    `vs` defaults to the version the channel routes these tasks to now; `envs` to the env ids of the
    challenger's scope, else the evolve's default suite; `budgets`, `pools` and `extra_pools` (the
    adaptive looks added while the verdict is open) to an evolve's gate. Every gate task must lie in
    the challenger's scope. Settings whose gate could never release (too few pairs) are refused.
    Repeating the call with the same settings returns the stored decision (nothing is run again).
    """
    from ole import challenge
    def given(values: Sequence[Any] | None) -> tuple[Any, ...] | None:
        return None if values is None else tuple(values)
    request = challenge.Challenge(challenger=challenger, vs=vs, envs=given(envs), budgets=given(budgets),
                                  pools=given(pools),
                                  extra_pools=given(extra_pools), agent_seeds=tuple(agent_seeds), host=host,
                                  model=model, command=given(command), profile=profile, channel=channel)
    with _opened(registry) as reg:
        return challenge.run(request, registry=reg, gate_config=gate_config, workdir=workdir, traces=Path(traces),
                              workers=workers, executor=executor, address=address, isolation=isolation,
                              progress=progress or _stderr)


# ----- reading the registry ---------------------------------------------------------------------

def lineage(registry: Any = None) -> "Lineage":
    """The version graph of every bundle (`ole lineage show`): `.render("tree"|"json"|"dot"|"mermaid")`."""
    from ole.registry.lineage import Lineage
    with _opened(registry) as reg:
        return Lineage.from_registry(reg)


def champions(channel: str = "default", *, registry: Any = None) -> "list[ScopeChampion]":
    """Every scope of `channel` with its champion, pending change and canary (`ole champion show --json`)."""
    with _opened(registry) as reg:
        reg.require_channel(channel)
        return reg.scope_champions(channel)


def decisions(ref: str | None = None, *, registry: Any = None) -> "list[GateDecision]":
    """Every gate decision recorded as a `GateDecision` (an evolve's or `ole gate`'s; of `ref` =
    `NAME@VERSION` only, when given), oldest first. A bare verdict someone recorded by hand with
    `Registry.record_gate_decision` is not a decision record and is left out (`ole events` shows it)."""
    import pydantic

    from ole.bundle import parse_ref
    from ole.gate import GateDecision
    name, version = parse_ref(ref) if ref else (None, None)
    with _opened(registry) as reg:
        events = reg.events(kind="gate_decision", name=name, version=version)
    out = []
    for e in events:
        try:
            out.append(GateDecision.model_validate({k: v for k, v in e.payload.items()}))
        except pydantic.ValidationError:  # a hand-recorded verdict, not a decision record: see the docstring
            continue
    return out
