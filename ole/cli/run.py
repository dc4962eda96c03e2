"""`ole run`: work one task (or a suite) with a host agent under a bundle.

    ole run --env gym/acrobot --agent builtin --profile quick
    ole run --suite core16 --bundle coder@1 --profile bench --seed 0

Without --bundle each task gets the most specific champion of --channel whose scope
(applicability) matches it; an explicit --bundle outside its scope is refused unless
--force is given, and the forcing is recorded in the trace.

Progress goes to stderr; the result lines (trace id, scores) to stdout.
"""
from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from ole.cli.common import (ListArg, Output, agent_command, check_llm_file, check_model, check_task_names,
                            check_writable, leaf, seed_int, table)
from ole.errors import ValidationError
from ole.vocab import HOSTS

if TYPE_CHECKING:
    from ole.trace import RunCondition

DEFAULT_LESSONS = ".ole/lessons.jsonl"
"""Cross-task lessons file used by the built-in agent (relative to the working directory)."""
PROFILES_HELP = "paper, bench, quick or strict"
"""The host profiles (`evogym.pools.PROFILES`, whose import is too slow for a parser: a test keeps them equal)."""


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add `ole run`."""
    from evogym.sandbox.isolation import DEFAULT_ISOLATION, ISOLATIONS
    from ole.registry.records import DEFAULT_CHANNEL
    p = leaf(subparsers, "run", run, "work a task (or a suite) with a host agent; prints the trace id")
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--env", "--envs", action=ListArg, dest="env", metavar="ENV",
                       help="env slugs: `--env a b`, `--env a,b` or `--env a --env b`")
    where.add_argument("--suite", choices=("core16",), help="run every env of a suite")
    p.add_argument("--bundle", metavar="NAME[@VERSION]",
                   help="bundle (default: the channel's most specific champion whose scope matches the task)")
    p.add_argument("--force", action="store_true",
                   help="run --bundle even where its applicability excludes the task (recorded in the trace)")
    p.add_argument("--channel", default=DEFAULT_CHANNEL, help="channel whose champion is used without --bundle")
    p.add_argument("--agent", default="builtin", choices=HOSTS, help="host agent")
    p.add_argument("--model", help="model string (llm agent)")
    p.add_argument("--agent-command", metavar="CMD", help="shell command (command agent)")
    p.add_argument("--seed", type=seed_int, default=0, help="agent seed (default 0)")
    p.add_argument("--profile", default="quick", help=f"host profile: {PROFILES_HELP} (default quick)")
    p.add_argument("--budget", type=int, help="episode budget override")
    p.add_argument("--pool-seed", type=int, default=0, help="case-pool seed (0 = the paper's pools)")
    p.add_argument("--isolation", default=DEFAULT_ISOLATION, choices=ISOLATIONS, help="policy sandbox of the host")
    p.add_argument("--runs-dir", default="runs", help="where host runs and agent logs go (default runs/)")
    p.add_argument("--traces-dir", default="traces", help="trace archive (default traces/)")
    lessons = p.add_mutually_exclusive_group()
    lessons.add_argument("--lessons", default=DEFAULT_LESSONS,
                         help="cross-task lessons file the built-in agent reads and extends, so runs in one folder "
                              "depend on earlier ones (default %(default)s)")
    lessons.add_argument("--no-lessons", action="store_true",
                         help="read and write no lessons file: the run depends on no earlier run")
    p.add_argument("--quiet", action="store_true", help="no progress lines")
    p.add_argument("command", nargs=argparse.REMAINDER, metavar="-- CMD ...",
                   help="the command agent's command line (with --agent command), after `--`")


def _envs(args: argparse.Namespace) -> list[str]:
    if args.suite:
        from evogym.envs import CORE16
        return list(CORE16)
    envs = list(args.env)
    if not envs or any(not e.strip() for e in envs):
        raise ValidationError("--env needs an env id, e.g. gym/acrobot", hint="`evogym envs` lists them")
    return envs


def _condition(args: argparse.Namespace) -> "RunCondition":
    """The run condition from the flags: agent kind, seed, model (llm), command line (command)."""
    if args.agent == "llm" and not args.model:
        raise ValidationError("--agent llm needs --model", hint="e.g. --model openai/gpt-4o-mini")
    check_llm_file("--model", args.model)
    check_model("--model", args.model if args.agent == "llm" else None)
    from ole.trace import RunCondition
    command = agent_command(args.agent, args.command, args.agent_command,
                            example="ole run --env gym/acrobot --agent command -- python my_agent.py")
    return RunCondition(host=args.agent, seed=args.seed, model=args.model, command=command)


def _check_scopes(args: argparse.Namespace, envs: list[str], condition: RunCondition) -> None:
    """Before any run starts: an explicit --bundle must apply to every task (unless --force),
    and the channel must exist; --force without --bundle would do nothing."""
    from ole.cli.common import open_registry
    from ole.registry.scopes import context_for, explicit
    from ole.trace import TaskSpec
    if args.force and not args.bundle:
        raise ValidationError("--force only applies to an explicit --bundle",
                              hint="without --bundle the registry picks a bundle whose scope matches the task")
    with open_registry(args) as registry:
        if not args.bundle:
            registry.require_channel(args.channel)
            return
        bundle = registry.get(args.bundle)
        for env in envs:
            task = TaskSpec(env=env, profile=args.profile, budget=args.budget, pool_seed=args.pool_seed)
            explicit(bundle, context_for(task, condition), force=args.force)


def run(args: argparse.Namespace) -> Output:
    """Run the task(s); each verified run's trace enters the archive."""
    from ole import api
    from ole.trace import TaskSpec
    condition = _condition(args)
    envs = _envs(args)
    check_task_names(envs, args.profile)  # before a run folder exists: a typo writes nothing
    if args.budget is not None and args.budget < 1:
        raise ValidationError(f"--budget must be at least 1, got {args.budget}", hint="omit it for the profile's")
    _check_scopes(args, envs, condition)
    for flag, folder in (("--runs-dir", args.runs_dir), ("--traces-dir", args.traces_dir)):
        check_writable(flag, folder)
    say = (lambda line: None) if args.quiet else (lambda line: print(line, file=sys.stderr, flush=True))
    lessons = None if args.no_lessons else args.lessons
    read = _lessons_before(lessons)
    if read:
        say(f"lessons: {read} from {lessons} (earlier runs in this folder) may steer the built-in agent; "
            "--no-lessons runs without them")
    rows, data = [["env", "status", "final", "normalized", "trace"]], []
    for n, env in enumerate(envs, 1):
        say(f"== {env} ({n}/{len(envs)})")
        task = TaskSpec(env=env, profile=args.profile, budget=args.budget, pool_seed=args.pool_seed)
        trace = api.run(task, bundle=args.bundle, condition=condition, root=getattr(args, "root", None),
                        runs_dir=args.runs_dir, traces_dir=args.traces_dir, channel=args.channel, lessons=lessons,
                        isolation=args.isolation, progress=say, force=args.force)
        o, chosen = trace.outcome, trace.selection
        assert chosen is not None, "run_task records the selection with every trace"
        data.append({"env": env, "trace_id": trace.trace_id, "archived": trace.verified, "status": o.status,
                     "bundle": chosen.ref, "scope": chosen.scope, "forced": chosen.forced, "why": chosen.reason,
                     "final_score": o.final_score, "normalized_score": o.normalized_score,
                     "episodes_used": o.episodes_used, "n_submits": o.n_submits, "run_dir": trace.run_dir,
                     "lessons_read": read, "lessons": lessons})
        rows.append([env, o.status, _num(o.final_score), _num(o.normalized_score),
                     trace.trace_id if trace.verified else "(not scored: no trace)"])
    archived = [str(d["trace_id"]) for d in data if d["archived"]]
    hint = f"\nnext: `{_trace_show(args, archived[0])}`" if archived else ""
    note = (f"\nlessons: this run read {read} lessons from {lessons} written by earlier runs here "
            "(--no-lessons for a run that depends on none)" if read else "")
    failed = any(not d["archived"] for d in data)
    return Output(data if len(data) > 1 else data[0], table(rows) + note + hint, exit_code=1 if failed else 0)


def _lessons_before(path: str | None) -> int:
    """Lessons already in the file before the run (0 without a file): they steer the built-in agent."""
    if path is None:
        return 0
    from ole.lessons import LessonStore
    return len(LessonStore(path).all())


def _trace_show(args: argparse.Namespace, trace_id: str) -> str:
    """The command that shows the trace, in the archive this run wrote (`--traces-dir` unless the default)."""
    words = ["ole", "trace", "show", trace_id]
    if Path(args.traces_dir) != Path("traces"):
        words += ["--traces-dir", str(args.traces_dir)]
    return shlex.join(words)


def _num(v: float | None) -> str:
    return "-" if v is None else f"{v:.4g}"
