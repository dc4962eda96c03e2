"""`ole evolve --mode offline|online`: evolve the champion's loop policy; `ole evolve ls`: past evolves.

With no other arguments, offline mode runs the embedded default (`ole.evolve.DEFAULT_SUITE`):
the built-in agent and the built-in proposer, searched at 32 episodes per run (quick
profile) with staged evaluation of 12 candidates per generation; the search's gains are split
into env scopes, each ablated to the changes that carry it and gated at budgets 32 and 128 with
an adaptive sample, so one run may release several scope champions, each bounded by what its
gate sampled. The cost estimate (runs, episodes, wall time) is printed before anything runs;
`--estimate-only` prints only that. Progress goes to stderr; the summary (or --json) to stdout.

Every flag can also be given in a YAML file, `--config FILE`, under the flag's name with `_`
(`gate_pools: [201, 202]`); a flag on the command line wins over the file. The evolve writes
its resolved settings to WORKDIR/evolve.yaml: `ole evolve --config WORKDIR/evolve.yaml` resumes
it (stored evaluations are not spent again), and `ole evolve ls` lists the evolves of the
registry with their outcome. The Python API runs the same: `ole.evolve(mode="offline", ...)`.
"""
from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from ole.cli.common import ListArg, Output, agent_command, inline, leaf, seed_int, table
from ole.errors import ValidationError
from ole.vocab import HOSTS

if TYPE_CHECKING:
    from ole.api import EvolveResult
    from ole.cost import CostMeter
    from ole.evolve.config import EvolveConfig
    from ole.evolves import EvolveSettings

EXAMPLE = "ole evolve --mode offline --host command -- python my_agent.py"
LS_SEARCH = "runs"
"""Where `ole evolve ls` looks for workdirs by default (`ole evolve` writes `runs/evolve-MODE`)."""


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add `ole evolve`."""
    from ole.evolve.config import DEFAULT_SUITE, DEFAULT_TRANSFER, EvolveConfig, Suite
    from ole.evolves import ONLINE_DEFAULTS
    from ole.jobs import EXECUTIONS
    from ole.registry.records import DEFAULT_CHANNEL
    suite, cfg = Suite(), EvolveConfig()
    p = leaf(subparsers, "evolve", evolve, "evolve the champion offline (archive search) or online (task stream); "
             "`evolve ls` lists past evolves",
             description=__doc__)
    p.add_argument("--mode", choices=("offline", "online"), default=None, help="evolution mode (required here or "
                   "in --config)")
    p.add_argument("--config", default=None, metavar="FILE",
                   help="YAML of these settings under their flag names (e.g. WORKDIR/evolve.yaml, which resumes "
                        "that evolve); a flag given here wins over the file")
    g = p.add_argument_group("tasks")
    g.add_argument("--envs", "--env", action=ListArg, dest="envs", default=None, metavar="ENV",
                   help=f"env slugs, `--envs a b` or `--envs a,b` (default: {' '.join(DEFAULT_SUITE)})")
    g.add_argument("--profile", default=None,
                   help=f"host run profile: paper, bench, quick or strict (default: {suite.profile})")
    g.add_argument("--budget", type=int, default=None, help=f"episode budget per run (default: {suite.budget})")
    g.add_argument("--search-pools", action=ListArg, item=int, default=None, metavar="SEED",
                   help=f"pool seeds the proposer sees (default: {_csv(cfg.search_pools)})")
    g.add_argument("--gate-pools", action=ListArg, item=int, default=None, metavar="SEED",
                   help=f"pool seeds of the gate (default: {_csv(cfg.gate_pools)})")
    g.add_argument("--gate-budgets", action=ListArg, item=int, default=None, metavar="N",
                   help=f"episode budgets of every gate instance; a release covers their band "
                        f"(default: {_csv(cfg.gate_budgets)})")
    g.add_argument("--transfer-envs", action=ListArg, default=None, metavar="ENV",
                   help="envs held out from the search on which a released change is paired with the champion, "
                        "so its release may widen to the task features they support; `--transfer-envs none` for "
                        "none (offline; default: " + " ".join(DEFAULT_TRANSFER) + " less the search envs)")
    g.add_argument("--transfer-pools", action=ListArg, item=int, default=None, metavar="SEED",
                   help=f"pool seeds of the transfer sample (offline; default: {_csv(cfg.transfer_pools)})")
    g.add_argument("--agent-seeds", action=ListArg, item=seed_int, default=None, metavar="SEED",
                   help=f"agent seeds (default: {_csv(cfg.agent_seeds)})")
    g.add_argument("--host", choices=HOSTS, default=None,
                   help="host agent (default: builtin); `command` runs the command line after `--`")
    g.add_argument("--model", default=None, help="model string of the LLM agent")
    s = p.add_argument_group("search")
    s.add_argument("--population", type=int, default=None,
                   help=f"candidates per generation (default: {cfg.population})")
    s.add_argument("--generations", type=int, default=None, help=f"offline generations (default: {cfg.generations})")
    s.add_argument("--seed", type=seed_int, default=None, help=f"proposer seed (default: {cfg.seed})")
    s.add_argument("--eta", type=int, default=None,
                   help=f"staged evaluation: keep the best 1/eta of the candidates per rung (default: {cfg.eta})")
    s.add_argument("--screen", type=int, default=None,
                   help="staged evaluation: search instances of the first rung (default: one pool of every env)")
    s.add_argument("--max-scopes", type=int, default=None,
                   help=f"most env scopes gated (and released) per run (default: {cfg.max_scopes})")
    s.add_argument("--no-ablation", action="store_true",
                   help="gate candidates as proposed (default: cut each to the changes that carry its gain)")
    s.add_argument("--proposer", default=None,
                   help="builtin (evidence-guided; the default), random or tpe (black-box baselines over the same "
                        "space), or an LLM model string (`scripted:FILE`, `replay:FILE` or a litellm model)")
    s.add_argument("--gate-config", default=None, help="gate YAML (default: the packaged ole/gate.yaml)")
    s.add_argument("--channel", default=None, help=f"release channel (default: {DEFAULT_CHANNEL})")
    o = p.add_argument_group("online")
    o.add_argument("--tasks", type=int, default=None, help=f"stream length (default: {ONLINE_DEFAULTS['tasks']})")
    o.add_argument("--every-k", type=int, default=None,
                   help=f"a challenger every k tasks (default: {ONLINE_DEFAULTS['every_k']})")
    o.add_argument("--gate-on", choices=("stream", "pools"), default=None,
                   help="gate a round's challenger on the stream's next tasks, the stream's own runs the champion "
                        "side (one rerun per pair), or on the gate pools, both sides run (default: "
                        f"{ONLINE_DEFAULTS['gate_on']})")
    replaced_online_flags(o)
    r = p.add_argument_group("resources")
    r.add_argument("--executor", choices=("local", "ray"), default=None, help="where runs execute (default: local)")
    r.add_argument("--address", default=None, help="Ray cluster address (--executor ray)")
    r.add_argument("--workers", type=int, default=None, help=f"parallel runs (default: {cfg.workers})")
    r.add_argument("--execution", choices=EXECUTIONS, default=None,
                   help="how runs execute, never what they compute: fast (the default: warm hosts, "
                        "hidden-evaluation results shared across runs, longest runs first) or baseline (a fresh "
                        "host per run, nothing shared, jobs in listed order: to measure what fast saves)")
    r.add_argument("--workdir", default=None, help="resume store and host runs (default: runs/evolve-MODE)")
    r.add_argument("--traces", default=None, help="trace archive (default: traces)")
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


def register_ls(subparsers: argparse._SubParsersAction) -> None:
    """Add `ole evolve ls` alone (what `ole evolve ls` loads: no engine import)."""
    from ole.cli.common import noun
    verbs = noun(subparsers, "evolve", "past evolves of this registry (`ole evolve --help` for evolving)")
    p = leaf(verbs, "ls", ls, "list the evolves of this registry root with their outcome")
    p.add_argument("--in", dest="search", action="append", default=None, metavar="DIR",
                   help=f"a workdir, or a folder of workdirs, to look in (repeatable; default: {LS_SEARCH}/)")


def _csv(values: Iterable[object]) -> str:
    return ",".join(str(v) for v in values)


# ----- flags -> settings ------------------------------------------------------------------------

FLAG_SETTINGS = ("mode", "envs", "profile", "budget", "search_pools", "gate_pools", "gate_budgets", "transfer_envs",
                 "transfer_pools", "agent_seeds",
                 "host", "model", "population", "generations", "seed", "eta", "screen", "max_scopes", "proposer",
                 "gate_config", "channel", "tasks", "every_k", "gate_on", "executor", "address", "workers", "execution",
                 "workdir", "traces", "max_episodes", "max_wall_s", "max_tokens", "max_usd", "track", "track_uri")
"""Settings read from the flag of the same name (`ablate`, `command` and `root` are read apart)."""


def settings_from(args: argparse.Namespace) -> "EvolveSettings":
    """The evolve's settings: the --config file's, with every flag given on the line over them."""
    from ole.evolves import EvolveSettings, load_settings
    replaced_flags(args)
    base = load_settings(args.config) if args.config else EvolveSettings()
    given: dict[str, Any] = {k: getattr(args, k) for k in FLAG_SETTINGS if getattr(args, k, None) is not None}
    if "envs" in given:
        given["envs"] = tuple(given["envs"])
    if "transfer_envs" in given:
        given["transfer_envs"] = tuple(e for e in given["transfer_envs"] if e != "none")
    if args.no_ablation:
        given["ablate"] = False
    host = given.get("host") or base.host or "builtin"
    trailing = list(getattr(args, "command", None) or [])
    if trailing or (host == "command" and base.command is None):
        given["command"] = agent_command(host, trailing, example=EXAMPLE)
    elif base.command is not None:  # the file's command line: relative paths are the caller's, as on the line
        given["command"] = agent_command(host, ["--", *base.command], example=EXAMPLE)
    root = getattr(args, "root", None)
    if root is not None:
        given["root"] = root
    return EvolveSettings(**given).over(base)


REPLACED_FLAGS = {"monitor": "--monitor", "rollback_tau": "--rollback-tau"}
"""Online flags of the fixed-threshold monitor, replaced by the gate config's `analysis` section."""


def replaced_online_flags(group: argparse._ArgumentGroup) -> None:
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


def planned_envs(cfg: EvolveConfig, mode: str, tasks: int, every_k: int, monitor: int,
                 max_pairs: int | None = None) -> list[tuple[str, int | None]]:
    """`ole.evolves.planned_runs`: one (env slug, budget) per planned run."""
    from ole.evolves import planned_runs
    return planned_runs(cfg, mode, tasks, every_k, monitor, max_pairs)


# ----- the command ------------------------------------------------------------------------------

class _Progress:
    """Progress lines on stderr; on a terminal also a bar over the estimated episodes, with ETA.

    The bar follows the engine's cost meter (episodes charged so far), so it moves with each
    finished run whatever the driver is doing; `close` sets it to what was spent (an evolve that
    gates nothing spends less than the estimate, which counts the gates: the bar ends there, full,
    instead of stopping short). Without a terminal only the lines appear.
    """

    def __init__(self, episodes: int | None = None, stream: TextIO | None = None) -> None:
        from evogym.progress import Progress
        self.bar = Progress(episodes, "evolve", unit="episode", stream=stream) if episodes else None
        self.stream = stream
        self.meter: CostMeter | None = None

    def __call__(self, line: str) -> None:
        if self.bar is None:
            print(line, file=self.stream or sys.stderr, flush=True)
            return
        self.bar.line(line)
        self._follow()

    def _follow(self) -> None:
        if self.bar is not None and self.meter is not None:
            self.bar.set(self.meter.episodes)

    def close(self, finished: bool = False) -> None:
        """Stop the bar; `finished` (the evolve ended normally) first sets its total to what was spent."""
        if self.bar is None:
            return
        self._follow()
        bar = self.bar.bar
        if finished and bar is not None:
            bar.total = self.bar.done
            bar.refresh()
        self.bar.close()


def evolve(args: argparse.Namespace) -> Output:
    """Run offline or online evolution and summarize what was released and why."""
    from ole import api
    settings = settings_from(args)
    plan = api.plan_evolve(settings, writing=not args.estimate_only)
    for line in api.estimate_lines(plan):
        print(line, file=sys.stderr, flush=True)
    if args.estimate_only:
        return Output({"estimate": plan.estimate.model_dump()}, "")
    from ole.cli.common import open_registry
    args.root = settings.root
    progress = _Progress(plan.estimate.episodes)
    try:
        with open_registry(args) as registry:
            result = api.run_evolve(plan, registry=registry, progress=progress,
                                    on_start=lambda engine: setattr(progress, "meter", engine.meter))
    except BaseException:
        progress.close()
        raise
    progress.close(finished=True)
    channel = plan.cfg.channel
    if plan.mode == "online":
        return Output(result.summary, "\n".join([_online_text(result.summary), *_hints(args, channel)]))
    text = "\n".join([_summary(result, channel), *_hints(args, channel)])
    if result.failure:
        return Output(result.summary, text + f"\nerror: {result.failure} (hint: check --proposer and its credentials)", 1)
    return Output(result.summary, text)


def _online_text(data: dict) -> str:
    lines = [f"online: {data['tasks']} tasks worked; active now {data['active']}"]
    lines += [f"  gate: {d['challenger']} -> {d['verdict']} (mean r {d['mean_r']:+.3f})" for d in data["decisions"]]
    lines += [f"  rollback after task {r['task']}: {r['bundle']} (monitored clipped mean r {r['mean_r']:+.3f})"
              for r in data["rollbacks"]]
    lines += [f"  promoted after task {r['task']}: {r['bundle']} (monitored clipped mean r {r['mean_r']:+.3f})"
              for r in data["promotions"]]
    return "\n".join(lines)


def _summary(result: "EvolveResult", channel: str) -> str:
    from ole.cli.common import decision_lines
    from ole.gate import ci_text
    data = result.summary
    screened = data.get("screened") or {}
    deepest = max(screened.values(), default=0)
    lines = [f"offline: champion {data['champion']}; {len(data['candidates'])} candidates registered "
             f"({data['rejected_proposals']} proposals rejected), "
             f"{sum(v == deepest for v in screened.values())} evaluated on every search instance; "
             f"retained {', '.join(data['retained']) or 'none'}"]
    if data["stopped"]:
        lines.append(f"stopped early: {data['stopped']}")
    if not data["gates"] and not data["stopped"]:
        lines.append(f"no env gained in the search: nothing gated, the champion {data['champion']} stays everywhere")
    for info, d in zip(data["gates"], result.decisions):
        s = d.stats
        lines.append(f"scope {', '.join(info['envs'])}: gate on {s.n_pairs} unseen pairs: {info['final']} "
                     f"(from {info['source']}) -> " + decision_lines(d)[0])
        lines += decision_lines(d)[1:]
        lines += ["  changed: " + "; ".join(info["changes"])] if info["changes"] else []
        if info["final"] in result.released:
            lines.append(f"  released and activated {info['final']} on channel `{channel}` for scope "
                         f"`{info['released_scope']}` (bounded by what the gate sampled): gain mean r "
                         f"{s.mean_r:+.3f} ({ci_text(s)})")
        else:
            lines.append(f"  not released: {', '.join(info['envs'])} keep {data['champion']}")
    sp = data["spent"]
    lines.append(f"spent: {sp['episodes']} episodes, {sp['wall_s'] / 60:.1f} min")
    return "\n".join(lines)


def _hints(args: argparse.Namespace, channel: str) -> list[str]:
    from ole.cli.common import next_command as ole
    return [f"inspect: `{ole(args, 'lineage', 'show')}`, `{ole(args, 'champion', 'history')}`, "
            f"`{ole(args, 'bundle', 'show', 'NAME@VERSION')}`, `{ole(args, 'evolve', 'ls')}`",
            f"roll back: `{ole(args, 'rollback', '--channel', channel, '--reason', '...')}` (active from the next task)"]


def ls(args: argparse.Namespace) -> Output:
    """The evolves whose settings name this registry root (`WORKDIR/evolve.yaml`), oldest first, with
    their outcome: finished, stopped at a cost cap, or unfinished (running, interrupted or failed)."""
    from ole.evolves import list_evolves
    from ole.roots import choose
    root = choose(getattr(args, "root", None)).path
    search = [Path(d) for d in (args.search or [LS_SEARCH])]
    for d in args.search or ():
        if not Path(d).is_dir():
            raise ValidationError(f"--in {d} is not a directory", hint="name an evolve's --workdir or the folder holding it")
    entries, skipped = list_evolves(root, search)
    data = {"root": str(root), "evolves": [e.model_dump(mode="json") for e in entries], "skipped": skipped}
    if not entries:
        where = ", ".join(map(str, search))
        return Output(data, f"no evolve of {root} in {where} (hint: `ole evolve --mode offline`; --in DIR for "
                            "another --workdir)" + "".join(f"\n  skipped {inline(s)}" for s in skipped))
    rows = [["workdir", "mode", "envs", "started (UTC)", "status", "released", "gates"]]
    rows += [[e.workdir, e.mode, ",".join(x.split("/")[-1] for x in e.envs), e.started_at[:19].replace("T", " "),
              e.status, ",".join(e.released) or "-", "; ".join(e.verdicts) or "-"] for e in entries]
    text = table(rows) + "\nresume one: ole evolve --config WORKDIR/evolve.yaml"
    return Output(data, text + "".join(f"\n  skipped {inline(s)}" for s in skipped))
