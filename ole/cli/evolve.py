"""`ole evolve --mode offline|online`: evolve the champion's loop policy.

With no other arguments, offline mode runs the embedded default (`ole.evolve.DEFAULT_SUITE`):
the built-in agent and the built-in proposer, searched at 32 episodes per run (quick
profile) with staged evaluation of 12 candidates per generation; the search's gains are split
into env scopes, each ablated to the changes that carry it and gated at budgets 32 and 128 with
an adaptive sample, so one run may release several scope champions, each bounded by what its
gate sampled. The cost estimate (runs, episodes, wall time) is printed before anything runs;
`--estimate-only` prints only that. Re-running the same command resumes: stored evaluations are
not spent again. Progress goes to stderr; the summary (or --json) to stdout.
"""
from __future__ import annotations

import argparse
import sys

import pydantic
from pathlib import Path

from ole.cli.common import (Output, agent_command, check_could_write, check_model, check_proposer, check_task_names,
                            check_writable, leaf, ListArg, open_registry, seed_int)
from ole.cost import CostCaps, CostMeter, estimate
from ole.errors import ValidationError
from ole.evolve import DEFAULT_SUITE, EvolveConfig, Suite, open_engine
from ole.gate import ci_text
from ole.jobs import EXECUTIONS
from ole.registry import DEFAULT_CHANNEL


SUITE = Suite()
CFG = EvolveConfig()


def check_flags(args: argparse.Namespace, cfg: EvolveConfig) -> None:
    """Refuse caller mistakes before the estimate is printed or anything is written.

    `--estimate-only` must fail on the same flags a real run would fail on, so every
    name and file given on the command line is resolved here: env slugs, the profile,
    the gate config, `scripted:`/`replay:` files, and the online stream settings.
    """
    from ole.gate import load_config
    _one_mode(args)
    check_task_names(cfg.suite.envs, cfg.suite.profile)
    if args.gate_config is not None:
        load_config(args.gate_config)
    if cfg.suite.host == "llm" and not cfg.suite.model:
        raise ValidationError("--host llm needs --model", hint="e.g. --model openai/gpt-4o-mini or replay:FILE")
    check_proposer("--proposer", args.proposer)
    if args.track is not None:
        from ole.extras import check
        check(args.track, f"--track {args.track}")
    elif args.track_uri is not None:
        raise ValidationError("--track-uri names where --track logs", hint="add --track mlflow, or drop --track-uri")
    check_model("--model", cfg.suite.model if cfg.suite.host == "llm" else None)
    if args.mode == "online":
        _online_config(args)


OFFLINE_ONLY = ("population", "generations", "eta", "screen", "max_scopes")
"""Search flags online mode never reads (its challengers are proposed one at a time, one scope each)."""
ONLINE_ONLY = ("tasks", "every_k")
ONLINE_DEFAULTS = {"tasks": 6, "every_k": 3}


def _one_mode(args: argparse.Namespace) -> None:
    """A flag the chosen mode does not read is refused, never silently ignored (one meaning per
    setting); then the online stream settings get their defaults."""
    unused = OFFLINE_ONLY if args.mode == "online" else ONLINE_ONLY
    given = [f"--{name.replace('_', '-')}" for name in unused if getattr(args, name, None) is not None]
    if given:
        other = "offline" if args.mode == "online" else "online"
        raise ValidationError(f"{', '.join(given)} only appl{'y' if len(given) > 1 else 'ies'} to --mode {other}; --mode {args.mode} would ignore "
                              f"{'them' if len(given) > 1 else 'it'}", hint=f"drop {' '.join(given)}")
    for name, default in ONLINE_DEFAULTS.items():
        if getattr(args, name, None) is None:
            setattr(args, name, default)


def _online_config(args: argparse.Namespace):
    from ole.evolve.online import OnlineConfig
    replaced_flags(args)
    try:
        return OnlineConfig(tasks=args.tasks, every_k=args.every_k)
    except pydantic.ValidationError as exc:
        first = exc.errors()[0]
        flag = "--" + str(first["loc"][0]).replace("_", "-")
        raise ValidationError(f"bad {flag}: {first['msg']} (got {first.get('input')!r})",
                              hint="see `ole evolve --help`") from None


REPLACED_FLAGS = {"monitor": "--monitor", "rollback_tau": "--rollback-tau"}
"""Online flags of the fixed-threshold monitor, replaced by the gate config's `analysis` section."""


def replaced_online_flags(group) -> None:
    """Accept the old monitor flags only to refuse them with the next step (never silently ignored)."""
    for dest, flag in REPLACED_FLAGS.items():
        group.add_argument(flag, dest=dest, default=None, help=argparse.SUPPRESS)


def replaced_flags(args: argparse.Namespace) -> None:
    """Refuse `--monitor` / `--rollback-tau`: monitoring is the gate config's `analysis` section now."""
    given = [flag for dest, flag in REPLACED_FLAGS.items() if getattr(args, dest, None) is not None]
    if given:
        raise ValidationError(f"{' and '.join(given)} no longer exist: a release is now staged and monitored by an "
                              "anytime-valid sequential test configured in the gate config's `analysis` section",
                              hint="copy ole/gate.yaml, edit `analysis:` (exposure, alpha_rollback, deadline, ...) "
                                   "and pass --gate-config FILE")


def _csv(values) -> str:
    return ",".join(str(v) for v in values)


def register(subparsers) -> None:
    """Add `ole evolve`."""
    p = leaf(subparsers, "evolve", evolve, "evolve the champion offline (archive search) or online (task stream)",
             description=__doc__)
    p.add_argument("--mode", choices=("offline", "online"), required=True, help="evolution mode")
    g = p.add_argument_group("tasks")
    g.add_argument("--envs", "--env", action=ListArg, dest="envs", default=None, metavar="ENV",
                   help=f"env slugs, `--envs a b` or `--envs a,b` (default: {' '.join(DEFAULT_SUITE)})")
    g.add_argument("--profile", default=None, help=f"host run profile (default: {SUITE.profile})")
    g.add_argument("--budget", type=int, default=None, help=f"episode budget per run (default: {SUITE.budget})")
    g.add_argument("--search-pools", action=ListArg, item=int, default=None, metavar="SEED", help=f"pool seeds the proposer sees (default: {_csv(CFG.search_pools)})")
    g.add_argument("--gate-pools", action=ListArg, item=int, default=None, metavar="SEED", help=f"pool seeds of the gate (default: {_csv(CFG.gate_pools)})")
    g.add_argument("--gate-budgets", action=ListArg, item=int, default=None, metavar="N",
                   help=f"episode budgets of every gate instance; a release covers their band "
                        f"(default: {_csv(CFG.gate_budgets)})")
    g.add_argument("--agent-seeds", action=ListArg, item=seed_int, default=None, metavar="SEED", help=f"agent seeds (default: {_csv(CFG.agent_seeds)})")
    g.add_argument("--host", choices=("builtin", "llm", "command"), default=None,
                   help="host agent (default: builtin); `command` runs the command line after `--`")
    g.add_argument("--model", default=None, help="model string of the LLM agent")
    s = p.add_argument_group("search")
    s.add_argument("--population", type=int, default=None, help=f"candidates per generation (default: {CFG.population})")
    s.add_argument("--generations", type=int, default=None, help=f"offline generations (default: {CFG.generations})")
    s.add_argument("--seed", type=seed_int, default=None, help=f"proposer seed (default: {CFG.seed})")
    s.add_argument("--eta", type=int, default=None,
                   help=f"staged evaluation: keep the best 1/eta of the candidates per rung (default: {CFG.eta})")
    s.add_argument("--screen", type=int, default=None,
                   help="staged evaluation: search instances of the first rung (default: one pool of every env)")
    s.add_argument("--max-scopes", type=int, default=None,
                   help=f"most env scopes gated (and released) per run (default: {CFG.max_scopes})")
    s.add_argument("--no-ablation", action="store_true",
                   help="gate candidates as proposed (default: cut each to the changes that carry its gain)")
    s.add_argument("--proposer", default="builtin",
                   help="builtin (evidence-guided), random or tpe (black-box baselines over the same space), "
                        "or an LLM model string (`scripted:FILE`, `replay:FILE` or a litellm model)")
    s.add_argument("--gate-config", default=None, help="gate YAML (default: ole/gate.yaml)")
    s.add_argument("--channel", default=None, help=f"release channel (default: {DEFAULT_CHANNEL})")
    o = p.add_argument_group("online")
    o.add_argument("--tasks", type=int, default=None, help=f"stream length (default: {ONLINE_DEFAULTS['tasks']})")
    o.add_argument("--every-k", type=int, default=None,
                   help=f"a challenger every k tasks (default: {ONLINE_DEFAULTS['every_k']})")
    replaced_online_flags(o)
    r = p.add_argument_group("resources")
    r.add_argument("--executor", choices=("local", "ray"), default="local", help="where runs execute")
    r.add_argument("--address", default=None, help="Ray cluster address (--executor ray)")
    r.add_argument("--workers", type=int, default=None, help=f"parallel runs (default: {CFG.workers})")
    r.add_argument("--execution", choices=EXECUTIONS, default=EXECUTIONS[0],
                   help="how runs execute, never what they compute: fast (warm hosts, hidden-evaluation results "
                        "shared across runs, longest runs first) or baseline (a fresh host per run, nothing shared, "
                        "jobs in listed order: the execution before issue 21, to measure the saving)")
    r.add_argument("--workdir", default=None, help="resume store and host runs (default: runs/evolve-MODE)")
    r.add_argument("--traces", default="traces", help="trace archive (default: %(default)s)")
    r.add_argument("--max-episodes", type=int, default=None, help="cap on charged episodes")
    r.add_argument("--max-wall-s", type=float, default=None, help="cap on wall seconds")
    r.add_argument("--max-tokens", type=int, default=None, help="cap on LLM tokens")
    r.add_argument("--max-usd", type=float, default=None, help="cap on LLM dollars")
    r.add_argument("--estimate-only", action="store_true", help="print the cost estimate and stop")
    t = p.add_argument_group("tracking (ole.tracking)")
    t.add_argument("--track", choices=("mlflow",), default=None,
                   help="log this evolve as one MLflow run: params, per-generation and gate metrics, bundles, "
                        "the report (the `mlflow` extra)")
    t.add_argument("--track-uri", default=None, metavar="URI",
                   help="MLflow tracking URI (default: $MLFLOW_TRACKING_URI, else a local file store ./mlruns)")
    p.add_argument("command", nargs=argparse.REMAINDER, metavar="-- CMD ...",
                   help="the command agent's command line (with --host command), after `--`")


def config_from(args: argparse.Namespace) -> EvolveConfig:
    """The EvolveConfig from the flags; a flag left out keeps the config's default."""
    def given(**kw) -> dict:
        return {k: v for k, v in kw.items() if v is not None}
    envs = tuple(args.envs) if args.envs else None
    command = agent_command(args.host or "builtin", getattr(args, "command", None),
                            example="ole evolve --mode offline --host command -- python my_agent.py")
    try:
        suite = Suite(**given(envs=envs, profile=args.profile, budget=args.budget, host=args.host, model=args.model,
                              command=command))
        caps = CostCaps(episodes=args.max_episodes, wall_s=args.max_wall_s, tokens=args.max_tokens,
                        usd=args.max_usd)
        return EvolveConfig(suite=suite, caps=caps, **given(
            search_pools=args.search_pools, gate_pools=args.gate_pools, agent_seeds=args.agent_seeds,
            population=args.population, generations=args.generations, seed=args.seed, channel=args.channel,
            workers=args.workers, eta=args.eta, screen=args.screen, gate_budgets=args.gate_budgets,
            max_scopes=args.max_scopes, ablate=False if args.no_ablation else None))
    except pydantic.ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "config"
        raise ValidationError(f"bad evolve flags: {where}: {first['msg'].removeprefix('Value error, ')}",
                              hint="see `ole evolve --help`") from None


def planned_envs(cfg: EvolveConfig, mode: str, tasks: int, every_k: int, monitor: int, max_pairs: int | None = None
                 ) -> list[tuple[str, int | None]]:
    """One (env slug, budget) per planned run (no cache hits assumed beyond the champion's).

    Offline: the champion on every search instance; per generation, each rung's surviving
    candidates on that rung's new instances; the gate's champion on every gate instance the
    adaptive sample may add (up to `max_pairs`, at every gate budget) and each of up to
    `max_scopes` gated candidates on its share (one env each when the search splits by env).
    Ablation is not counted (it depends on how many fields a candidate moved). An estimate, not a bound.
    """
    def runs_of(instances) -> list[tuple[str, int | None]]:
        return [(t.env, t.budget) for t, _ in instances]
    search = runs_of(cfg.suite.instances(cfg.search_pools, cfg.agent_seeds))
    looks = cfg.gate_looks()
    first = runs_of(looks[0])
    gate = (first + runs_of([i for look in looks[1:] for i in look]))[: max(max_pairs or 0, len(first))]
    if mode == "offline":
        runs, alive, prev = list(search), cfg.population, 0
        for n in cfg.rungs():
            runs += search[prev:n] * alive * cfg.generations
            alive, prev = max(1, -(-alive // cfg.eta)), n
        scopes = min(cfg.max_scopes, len(cfg.suite.envs))
        return runs + gate + gate[: -(-len(gate) * scopes // len(cfg.suite.envs))]
    stream = [(cfg.suite.envs[i % len(cfg.suite.envs)], cfg.suite.budget) for i in range(tasks)]
    return stream + gate * (1 + tasks // every_k) + stream[:monitor]


def _proposer(spec: str, workdir: Path, cfg: EvolveConfig):
    from ole.proposers.builtin import BuiltinProposer
    if spec == "builtin":
        return BuiltinProposer(host=cfg.suite.host)
    if spec in ("random", "tpe"):
        from ole.proposers.baselines import RandomProposer, TPEProposer
        return (RandomProposer if spec == "random" else TPEProposer)(host=cfg.suite.host, seed=cfg.seed)
    from ole.llm import LLMClient
    from ole.proposers.llm import LLMProposer
    return LLMProposer(LLMClient.from_model_string(spec, log_path=workdir / "proposer-calls.jsonl"))


class _Progress:
    """Progress lines on stderr; on a terminal also a bar over the estimated episodes, with ETA.

    The bar follows the engine's cost meter (episodes charged so far), so it moves with
    each finished run whatever the driver is doing; without a terminal only the lines appear.
    """

    def __init__(self, episodes: int | None = None) -> None:
        from evogym.progress import Progress
        self.bar = Progress(episodes, "evolve", unit="episode") if episodes else None
        self.meter: CostMeter | None = None

    def __call__(self, line: str) -> None:
        if self.bar is None:
            print(line, file=sys.stderr, flush=True)
            return
        self.bar.line(line)
        if self.meter is not None:
            self.bar.set(self.meter.episodes)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


_progress = _Progress()


def evolve(args: argparse.Namespace) -> Output:
    """Run offline or online evolution and summarize what was released and why."""
    from ole.executors import make_executor
    from ole.gate import load_config
    from ole.jobs import run_job
    cfg = config_from(args)
    check_flags(args, cfg)
    workdir = Path(args.workdir or f"runs/evolve-{args.mode}")
    gate = load_config(args.gate_config)
    monitored = -(-args.tasks * int(gate.analysis.exposure * 1000) // 1000)  # the canary's share of the stream
    runs = planned_envs(cfg, args.mode, args.tasks, args.every_k, monitored, gate.max_pairs)
    est = estimate(runs, budget=cfg.suite.budget or 32, workers=cfg.workers, llm_agent=cfg.suite.host == "llm",
                   proposals=cfg.population * cfg.generations, llm_proposer=args.proposer != "builtin")
    if not args.estimate_only:  # before anything is printed or run: a run must be able to keep its results
        check_writable("--workdir", workdir)
        check_writable("--traces", args.traces)
    else:  # the estimate refuses what the run would, writing nothing
        check_could_write("--workdir", workdir)
        check_could_write("--traces", args.traces)
    _progress(f"ole evolve --mode {args.mode}: envs {', '.join(cfg.suite.envs)}; estimate (ablation runs not counted):")
    for line in est.lines(cfg.caps):
        _progress("  " + line)
    if args.estimate_only:
        return Output({"estimate": est.model_dump()}, "")
    progress = _Progress(est.episodes)
    with open_registry(args) as registry, make_executor(args.executor, workers=cfg.workers,
                                                        address=args.address) as executor, \
            _track(args, cfg, registry) as tracker:
        engine = open_engine(registry=registry, workdir=workdir, traces_root=Path(args.traces), cfg=cfg,
                             evaluate=run_job, proposer=_proposer(args.proposer, workdir, cfg), gate=gate,
                             executor=executor, progress=progress, driver=_driver(args),
                             execution=args.execution)
        progress.meter = engine.meter
        try:
            if args.mode == "offline":
                output = _offline(engine, cfg, registry, est)
            else:
                output = _online(engine, cfg, registry, args, est)
        finally:
            progress.close()
        if tracker is not None:  # ole.tracking: metrics and artifacts of this evolve
            from ole.tracking import record_evolve
            assert isinstance(output.data, dict), "an evolve's output data is its JSON summary"
            record_evolve(tracker, registry, output.data, [workdir])
        return output


def _track(args: argparse.Namespace, cfg: EvolveConfig, registry):
    """The `--track` run around the evolve (a no-op context without `--track`)."""
    from ole.distribution import version
    from ole.tracking import track
    params = {"mode": args.mode, "proposer": args.proposer, "executor": args.executor,
              "config": cfg.model_dump(mode="json"), **({"online": _driver(args)} if args.mode == "online" else {})}
    return track(args.track, uri=args.track_uri, mode=args.mode, envs=cfg.suite.envs, params=params,
                 tags={"ole.version": version(), "ole.registry": str(registry.root), "ole.channel": cfg.channel})


def _driver(args: argparse.Namespace) -> dict:
    """The mode's own settings, part of the workspace fingerprint (a resume must use the same)."""
    if args.mode == "offline":
        return {"mode": "offline"}
    return {"mode": "online", "tasks": args.tasks, "every_k": args.every_k}


def _offline(engine, cfg, registry, est) -> Output:
    from ole.bundle import diff_bundles
    from ole.evolve.offline import OfflineEvolution
    champ = registry.champion(cfg.channel)
    report = OfflineEvolution(engine, cfg, champ.ref, champ.bundle).run()
    if report.released:
        registry.activate_pending(cfg.channel)  # no task is in flight offline: this is a task boundary
    gates = []
    for g in report.gates:
        d = g.decision
        changes = [f"{c.component}.{c.field}: {c.old!r} -> {c.new!r}"
                   for c in diff_bundles(champ.bundle, registry.get(g.final).bundle) if c.component != "applicability"]
        scope = _released_scope(registry, g.final) if g.released else None
        gates.append({"source": g.source, "final": g.final, "envs": g.envs, "search_gains": g.gains,
                      "verdict": d.verdict, "reasons": list(d.reasons), "gain": _gain(d), "changes": changes,
                      "bound": d.bound, "released_scope": scope, "coverage": d.evidence().describe(),
                      "ablation": d.ablation.model_dump(mode="json") if d.ablation else None})
    first = gates[0] if gates else None
    data = {"mode": "offline", "champion": report.champion, "candidates": [c.ref for c in report.candidates],
            "retained": report.retained, "gates": gates, "released": report.released,
            "final": first["final"] if first else None, "verdict": first["verdict"] if first else None,
            "screened": report.screened, "stopped": report.stopped,
            "rejected_proposals": len(engine.rejections), "spent": engine.meter.summary(),
            "estimate": est.model_dump(), "config": cfg.model_dump(mode="json")}
    failed = [p.rejection for p in engine.rejections if (p.rejection or "").startswith("LLM call failed")]
    if failed and len(failed) == len(engine.rejections) and not report.candidates:  # the proposer never answered
        return Output(data, _summary(data, report, cfg.channel) + f"\nerror: all {len(failed)} proposals failed "
                      f"before a candidate existed: {failed[0]} (hint: check --proposer and its credentials)", 1)
    return Output(data, _summary(data, report, cfg.channel))


def _released_scope(registry, ref: str) -> str | None:
    """The scope key the release of `ref` took (bounded by its gate's evidence)."""
    releases = [e for e in registry.events(kind="release") if e.ref == ref]
    return releases[-1].payload.get("scope") if releases else None


def _gain(d) -> dict:
    """The gate's measured gain: mean r, its interval with the true level, pairs and looks."""
    s = d.stats
    return {"mean_r": s.mean_r, "ci_low": s.ci_low, "ci_high": s.ci_high, "ci_level": s.ci_level,
            "n_pairs": s.n_pairs, "p_value": s.p_value, "alpha": d.alpha_applied, "looks": len(d.looks)}


def _online(engine, cfg, registry, args, est) -> Output:
    from ole.evolve.online import OnlineEvolution, engine_worker, run_stream
    online = _online_config(args)
    evo = OnlineEvolution(engine, cfg, online)
    events = run_stream(evo, engine_worker(engine))
    data = {"mode": "online", "tasks": len(events.worked), "releases": events.releases,
            "rollbacks": [{"task": i, "bundle": ref, "mean_r": r} for i, ref, r in events.rollbacks],
            "promotions": [{"task": i, "bundle": ref, "mean_r": r} for i, ref, r in events.promotions],
            "decisions": [{"challenger": d.challenger, "verdict": d.verdict, "mean_r": d.stats.mean_r}
                          for d in events.decisions],
            "active": registry.champion(cfg.channel).ref, "spent": engine.meter.summary(), "estimate": est.model_dump()}
    lines = [f"online: {data['tasks']} tasks worked; active now {data['active']}"]
    lines += [f"  gate: {d['challenger']} -> {d['verdict']} (mean r {d['mean_r']:+.3f})" for d in data["decisions"]]
    lines += [f"  rollback after task {r['task']}: {r['bundle']} (monitored clipped mean r {r['mean_r']:+.3f})"
              for r in data["rollbacks"]]
    lines += [f"  promoted after task {r['task']}: {r['bundle']} (monitored clipped mean r {r['mean_r']:+.3f})"
              for r in data["promotions"]]
    lines += _hints(cfg.channel)
    return Output(data, "\n".join(lines))


def _summary(data: dict, report, channel: str) -> str:
    screened = data.get("screened") or {}
    deepest = max(screened.values(), default=0)
    lines = [f"offline: champion {data['champion']}; {len(data['candidates'])} candidates registered "
             f"({data['rejected_proposals']} proposals rejected), "
             f"{sum(v == deepest for v in screened.values())} evaluated on every search instance; "
             f"retained {', '.join(data['retained']) or 'none'}"]
    if data["stopped"]:
        lines.append(f"stopped early: {data['stopped']}")
    if not report.gates and not data["stopped"]:
        lines.append(f"no env gained in the search: nothing gated, the champion {data['champion']} stays everywhere")
    for g, info in zip(report.gates, data["gates"]):
        d, s = g.decision, g.decision.stats
        looks = f", {len(d.looks)} looks" if len(d.looks) > 1 else ""
        alpha = d.alpha_applied if d.alpha_applied is not None else d.config.alpha
        lines.append(f"scope {', '.join(g.envs)}: gate on {s.n_pairs} unseen pairs{looks}: {g.final} "
                     f"(from {g.source}) -> {d.verdict.upper()} (mean r {s.mean_r:+.3f}, {ci_text(s)}, "
                     f"win rate {s.win_rate:.2f}, p={s.p_value:.4f} at alpha {alpha:.4g}, worst r {s.worst_r:+.3f})")
        lines += [f"  {c.name:<8} {'ok' if c.passed else 'FAILED: ' + '; '.join(c.reasons)}" for c in d.criteria]
        lines.append(f"  covered: {info['coverage']}")
        if d.ablation is not None and d.ablation.steps:
            lines.append(f"  {d.ablation.describe()}")
        lines += ["  changed: " + "; ".join(info["changes"])] if info["changes"] else []
        if g.released:
            lines.append(f"  released and activated {g.final} on channel `{channel}` for scope "
                         f"`{info['released_scope']}` (bounded by what the gate sampled): gain mean r "
                         f"{s.mean_r:+.3f} ({ci_text(s)})")
        else:
            lines.append(f"  not released: {', '.join(g.envs)} keep {data['champion']}")
    sp = data["spent"]
    lines.append(f"spent: {sp['episodes']} episodes, {sp['wall_s'] / 60:.1f} min")
    return "\n".join(lines + _hints(channel))


def _hints(channel: str) -> list[str]:
    return ["inspect: `ole lineage show`, `ole champion history`, `ole bundle show NAME@VERSION`",
            f"roll back: `ole rollback --channel {channel} --reason \"...\"` (active from the next task)"]
