"""`ole agent work`: an OLE host agent as a plain command for any harness.

Any harness that launches an agent command inside a workspace with the EvoPolicyGym
environment variables (`evogym run`, `evogym suite run`, the reference's `command`
adapter) can run the built-in or LLM agent under a bundle this way. The agent works
only through `EVOPOLICYGYM_API` (with the run's token from `EVOPOLICYGYM_TOKEN`) and
`EVOPOLICYGYM_WORKSPACE`; its iterations go to `iterations.jsonl` in its log folder (outside
the workspace), and how its bundle was chosen to `selection.json` there.

Nothing the harness hands over is trusted: the host URL must be a loopback http(s) URL (the
run's token goes nowhere else), every request has a deadline (`ole.agents.hostio`), a token
or task file must be a bounded regular file, the socket must be a listening Unix socket, and
the workspace must already exist and look like a run's (`system/` and `feedback/` folders;
it is never created). A refusal, or an agent that stopped on an error, exits non-zero and
says why on stderr.

When the harness gives an agent-session/v3 socket instead (`EVOPOLICYGYM_SESSION_SOCKET`,
as `evogym run --session` and EvoPolicyGym main's runners do), the agent speaks v3: the task
text is `TASK.md` in the workspace (or `$EVOPOLICYGYM_TASK_FILE`), and before exiting it
finishes the session naming its best ok submissions.

Without `--online` no trace is archived: the harness owns the outcome. With `--online`
each task is one task of an online evolution stream kept in `--workdir`:

    evogym suite run --jobs 2 --profile quick --budget 16 \\
      --agent "ole agent work --online --every-k 2 --workdir $PWD/runs/online"

the task takes the channel's champion at its boundary, its verified trace (from the
host's run.json) is archived and told to the engine, and every k finished tasks of the
stream a challenger is gated on instances the proposer never saw. A release is staged: from
the next task boundary it takes a share of the in-scope tasks as a canary, each rerun by the
control on the identical task, and an anytime-valid sequential test on those pairs promotes it
to every task or rolls it back (the gate config's `analysis` section; docs/evolution.md).
"""
from __future__ import annotations

import argparse
import json
import os
import stat
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from evogym.sandbox.isolation import DEFAULT_ISOLATION, ISOLATIONS
from ole.cli.common import (ListArg, Output, agent_command, check_model, check_proposer, leaf, noun, open_registry,
                            seed_int)
from ole.errors import OleError, ValidationError
from ole.evolves import ONLINE_DEFAULTS
from ole.trace import RunCondition, TaskSpec
from ole.vocab import HOSTS

if TYPE_CHECKING:
    from ole.agents.base import AgentResult
    from ole.evolve.config import EvolveConfig
    from ole.evolve.online import OnlineConfig
    from ole.trace import Iteration

WORKSPACE_DIRS = ("system", "feedback")
"""Folders every run workspace has (evogym's `rundir.py` makes them before the agent starts); a
folder without them is not worked: `ole agent work` once wrote `system/policy.py` anywhere."""


class AgentStopped(OleError):
    """The agent stopped on an error (the host failed, the command exited non-zero)."""

    exit_code = 1


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add `ole agent work`."""
    verbs = noun(subparsers, "agent", "run a host agent inside an external harness's workspace")
    p = leaf(verbs, "work", work, "work the task at $EVOPOLICYGYM_API with a host agent under a bundle",
             description=__doc__)
    p.add_argument("--agent", default="builtin", choices=HOSTS,
                   help="host agent (`command`: the command line after `--`, briefed by the loop policy)")
    p.add_argument("--bundle", metavar="NAME[@VERSION]",
                   help="bundle (default: the channel's most specific champion whose scope matches the task)")
    p.add_argument("--force", action="store_true",
                   help="run --bundle even where its applicability excludes the task (recorded in selection.json)")
    p.add_argument("--channel", default="default", help="channel whose champion works the task (default: default)")
    p.add_argument("--model", help="model string (llm agent)")
    p.add_argument("--seed", type=seed_int, default=0, help="agent seed")
    p.add_argument("--log-dir", help="agent log folder (default: a temporary folder, removed when the agent ends "
                   "well and kept when it fails)")
    c = p.add_argument_group("the command agent's containment (docs/sandbox.md, \"The command agent\")")
    c.add_argument("--agent-isolation", choices=ISOLATIONS, default="bwrap",
                   help="bwrap (default): a sandbox that sees only this run; none: no sandbox (only the "
                        "environment allowlist), for machines without bubblewrap")
    c.add_argument("--agent-network", action="store_true",
                   help="share the machine's network with the agent (e.g. for a model provider); without it the "
                        "agent reaches only this run's API")
    c.add_argument("--agent-read", action="append", default=[], metavar="PATH",
                   help="a further file or folder the agent may read (read-only; repeatable)")
    c.add_argument("--agent-env", action="append", default=[], metavar="NAME",
                   help="a further variable of this environment the agent gets, e.g. ANTHROPIC_API_KEY (repeatable)")
    o = p.add_argument_group("online evolution beside the harness (--online)")
    o.add_argument("--online", action="store_true", help="archive this task's verified trace and evolve the channel")
    o.add_argument("--every-k", type=int, default=ONLINE_DEFAULTS["every_k"],
                   help=f"a proposal round after every k finished tasks (default {ONLINE_DEFAULTS['every_k']})")
    o.add_argument("--gate-on", choices=("stream", "pools"), default=ONLINE_DEFAULTS["gate_on"],
                   help="gate a round's challenger on the stream's next tasks that the host can rerun, the "
                        "stream's own runs the champion side (one rerun per pair; a window of external tasks "
                        "falls back to the pools), or on the gate pools (default %(default)s)")
    from ole.cli.evolve import replaced_online_flags
    replaced_online_flags(o)
    o.add_argument("--recent", type=int, default=ONLINE_DEFAULTS["recent"],
                   help=f"recent stream traces the proposer reads (default {ONLINE_DEFAULTS['recent']})")
    o.add_argument("--workdir", help="absolute stream workspace: store, traces, gate runs "
                   "(default: $OLE_ONLINE_WORKDIR, else ~/.local/state/ole/online-CHANNEL)")
    o.add_argument("--gate-envs", action=ListArg, metavar="ENV",
                   help="envs of the gate instances, `a b` or `a,b` (default: the evolve default suite)")
    o.add_argument("--gate-pools", action=ListArg, item=int, metavar="SEED",
                   help="pool seeds of the gate instances (default 201 202 203 204)")
    o.add_argument("--scope-pools", action=ListArg, item=int, metavar="SEED",
                   help="pool seeds of a round's scoped gate (a challenger that gains on some envs only is gated "
                        "again for those env ids on these pools; default 209-214; `--scope-pools ''`: none)")
    o.add_argument("--gate-budget", type=int,
                   help="episode budget of the gate's suite (default 32)")
    o.add_argument("--gate-budgets", action=ListArg, item=int, metavar="N",
                   help="budgets every gate instance is run at (default: --gate-budget only); a release covers "
                        "only the band its gate sampled, so stream tasks at other budgets keep the parent")
    o.add_argument("--gate-profile", help="host profile of the gate runs (default quick)")
    o.add_argument("--gate-config", help="gate YAML (default: ole/gate.yaml)")
    o.add_argument("--proposer", default="builtin", help="builtin, or an LLM model string (see `ole evolve`)")
    o.add_argument("--evolve-seed", type=int, default=0, help="proposer seed (default 0)")
    o.add_argument("--isolation", default=DEFAULT_ISOLATION, choices=ISOLATIONS, help="sandbox of OLE's own gate runs")
    o.add_argument("--workers", type=int, default=1, help="parallel gate runs of a round (default 1)")
    p.add_argument("command", nargs=argparse.REMAINDER, metavar="-- CMD ...",
                   help="the command agent's command line (with --agent command), after `--`")


def _env(name: str) -> str:
    value = os.environ.get(name)
    if not value:
        raise ValidationError(f"${name} is not set", hint="run this inside a harness, e.g. "
                              "`evogym run --env gym/acrobot --run-dir R -- ole agent work`")
    return value


def _log_dir(args: argparse.Namespace) -> Path:
    log_dir = Path(args.log_dir) if args.log_dir else Path(tempfile.mkdtemp(prefix="ole-agent-"))
    log_dir.mkdir(parents=True, exist_ok=True)
    return log_dir


def _drop_temporary(args: argparse.Namespace, log_dir: Path) -> str | None:
    """The log folder to report: a temporary one (no --log-dir) is removed once the agent ended well
    (a failure keeps it: the error names it); a folder the user named is kept."""
    if args.log_dir:
        return str(log_dir)
    import shutil
    shutil.rmtree(log_dir, ignore_errors=True)
    return None


def _host_url() -> str:
    """The host to work: agent-session/v3 when the harness gives a session socket
    (`EVOPOLICYGYM_SESSION_SOCKET`, as EvoPolicyGym main's runners do), else v0.1.0 HTTP on a
    loopback URL. Checked before any work: the socket listens, the token file is a small file."""
    from urllib.parse import urlsplit

    from ole.agents.client import SESSION_SCHEME, SessionClient, is_loopback, session_url_from_env
    session = session_url_from_env()
    if session:
        SessionClient(session.removeprefix(SESSION_SCHEME)).check()
        return session
    url = _env("EVOPOLICYGYM_API")
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - a bad port raises here
    except ValueError:
        parts = None
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValidationError(f"EVOPOLICYGYM_API={url!r} is not an http(s) URL of a host",
                              hint="the harness sets it, e.g. http://127.0.0.1:PORT")
    if not is_loopback(url):
        raise ValidationError(f"EVOPOLICYGYM_API={url!r} is not a loopback URL: the run's token is sent only to "
                              "this machine (localhost, 127.0.0.0/8, ::1)",
                              hint="run the agent on the host's machine (an SSH tunnel for a remote host)")
    token_file = os.environ.get("EVOPOLICYGYM_TOKEN_FILE")
    if token_file and not os.environ.get("EVOPOLICYGYM_TOKEN"):
        from ole.agents.client import Credential, HostError
        try:
            Credential.from_file(token_file)
        except HostError as err:
            raise ValidationError(f"EVOPOLICYGYM_TOKEN_FILE={token_file!r} is not a readable file of a token: "
                                  f"{err.message}", hint="the harness names the run's token file (its ready "
                                  "line's token_file)") from None
    return url


def _workspace() -> Path:
    """`EVOPOLICYGYM_WORKSPACE`, once it is known to be an existing run workspace (never created)."""
    raw = _env("EVOPOLICYGYM_WORKSPACE")
    path = Path(raw)
    if not path.is_dir():
        raise ValidationError(f"EVOPOLICYGYM_WORKSPACE={raw!r} is not an existing folder (it is never created)",
                              hint="the harness names the run's workspace")
    missing = [name for name in WORKSPACE_DIRS if not stat.S_ISDIR(_lstat_mode(path / name))]
    if missing:
        raise ValidationError(f"EVOPOLICYGYM_WORKSPACE={raw!r} is not a run workspace: it has no "
                              f"{' or '.join(m + '/' for m in missing)} folder", hint="the harness names the run's "
                              "workspace, which its host made with system/ and feedback/ (not links)")
    return path.resolve()


def _lstat_mode(path: Path) -> int:
    try:
        return os.lstat(path).st_mode
    except OSError:
        return 0


def _containment(args: argparse.Namespace) -> dict:
    """The command agent's `sandbox` option from the flags ({} when all are defaults); the flags
    are refused for any other agent (they would do nothing)."""
    given = args.agent_isolation != "bwrap" or args.agent_network or args.agent_read or args.agent_env
    if not given:
        return {}
    if args.agent != "command":
        raise ValidationError("--agent-isolation/--agent-network/--agent-read/--agent-env contain the command agent "
                              f"only, not {args.agent!r}", hint="drop them, or use --agent command")
    from ole.agents.sandbox import AgentSandbox
    try:
        return {"sandbox": AgentSandbox(isolation=args.agent_isolation, network=args.agent_network,
                                        read_only=tuple(args.agent_read), env=tuple(args.agent_env))}
    except ValueError as exc:
        raise ValidationError(str(exc), hint="see `ole agent work --help`") from None


def _stopped(result: AgentResult, log_dir: Path, lines: list[str]) -> AgentStopped:
    """Why the agent stopped on an error, from what it left: its error file or extras, the command's
    exit, or its last progress line."""
    why = result.extras.get("error") if result.extras.get("error") != "agent_error.txt" else None
    if (log_dir / "agent_error.txt").is_file():  # what `ole.runner.work_agent` caught
        why = (log_dir / "agent_error.txt").read_text(errors="replace")[:500].strip()
    exit_doc = log_dir / "command.exit.json"
    if why is None and exit_doc.is_file():
        why = f"the command exited with {json.loads(exit_doc.read_text()).get('exit_code')} (its stderr: " \
              f"{log_dir / 'command.stderr.txt'})"
    why = why or (lines[-1] if lines else "no reason recorded")
    return AgentStopped(f"the agent stopped on an error: {why}", hint=f"its logs are in {log_dir}")


def work(args: argparse.Namespace) -> Output:
    """Work the task until the run is finalized or the agent stops; prints why it stopped."""
    url = _host_url()
    workspace = _workspace()
    if args.agent == "llm" and not args.model:
        raise ValidationError("--agent llm needs --model", hint="e.g. --model replay:calls.jsonl")
    check_model("--model", args.model if args.agent == "llm" else None)  # a missing extra: refused before work
    if args.online:
        check_proposer("--proposer", args.proposer)
    command = agent_command(args.agent, args.command, example="ole agent work --agent command -- python my_agent.py")
    condition = RunCondition(host=args.agent, seed=args.seed, model=args.model, command=command)
    options = _containment(args)
    if args.online:
        if options:
            raise ValidationError("--agent-isolation/--agent-network/--agent-read/--agent-env apply without --online",
                                  hint="an online stream runs the command agent in its default sandbox")
        return _work_online(args, url, workspace, condition)
    from ole.agents.client import SESSION_SCHEME, HostClient, HostError
    from ole.chosen import chosen_by
    from ole.runner import launch_agent, resolve_bundle
    from ole.registry.scopes import task_context
    if args.force and not args.bundle:
        raise ValidationError("--force only applies to an explicit --bundle",
                              hint="without --bundle the registry picks a bundle whose scope matches the task")
    info = HostClient(url).info()
    task_ctx = task_context(info["env_meta"]["env"], args.agent, int(info["episode_budget"]), args.model)
    with open_registry(args) as registry:
        selection = resolve_bundle(registry, args.bundle, args.channel, task_ctx, force=args.force)
    chosen = chosen_by(selection)
    log_dir = _log_dir(args)
    (log_dir / "selection.json").write_text(selection.record().model_dump_json(indent=2) + "\n")
    iterations = log_dir / "iterations.jsonl"

    def record(it: Iteration) -> None:
        with open(iterations, "a", encoding="utf-8") as f:
            f.write(it.model_dump_json() + "\n")

    task = TaskSpec(env=info["env_meta"]["env"], profile="external", budget=info["episode_budget"])
    lines: list[str] = []
    result, _ = launch_agent(chosen, task, condition, url=url, workspace=workspace, log_dir=log_dir, record=record,
                             progress=lines.append, agent_options=options)
    if url.startswith(SESSION_SCHEME):  # v3 agents must finish before they exit: name the best ok submits
        try:
            HostClient(url).finish()
        except HostError as err:
            if result.finish_reason != "error":
                raise
            lines.append(f"finish failed too: {err.message}")
    if result.finish_reason == "error":
        raise _stopped(result, log_dir, lines)
    data = {"finish_reason": result.finish_reason, "log_dir": _drop_temporary(args, log_dir), "bundle": chosen.ref,
            "scope": selection.scope, "forced": selection.forced}
    return Output(data, json.dumps(data))


def _say(line: str) -> None:
    print(f"[ole online] {line}", file=sys.stderr, flush=True)


def _stream_config(args: argparse.Namespace, condition: RunCondition) -> tuple[EvolveConfig, OnlineConfig]:
    """EvolveConfig (gate suite, pools, seeds) and OnlineConfig from the flags; bad values exit 2."""
    import pydantic

    from ole.evolve.config import EvolveConfig, Suite
    from ole.evolve.online import OnlineConfig
    from ole.cli.evolve import replaced_flags
    replaced_flags(args)
    given = lambda **kw: {k: v for k, v in kw.items() if v is not None}  # noqa: E731
    envs = tuple(args.gate_envs) if args.gate_envs else None
    try:
        suite = Suite(**given(envs=envs, profile=args.gate_profile, budget=args.gate_budget), host=condition.host,
                      model=condition.model, command=condition.command)
        from evogym.pools import profile
        gate_budget = suite.budget or profile(suite.profile).budget
        cfg = EvolveConfig(**given(gate_pools=args.gate_pools), suite=suite, agent_seeds=(condition.seed,),
                           seed=args.evolve_seed, channel=args.channel, workers=args.workers,
                           gate_budgets=tuple(args.gate_budgets or (gate_budget,)))
        online = OnlineConfig(**given(scope_pools=None if args.scope_pools is None else tuple(args.scope_pools)),
                              every_k=args.every_k, recent=args.recent, gate_on=args.gate_on)
    except pydantic.ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(x) for x in first["loc"]) or "config"
        raise ValidationError(f"bad --online flags: {where}: {first['msg'].removeprefix('Value error, ')}",
                              hint="see `ole agent work --help`") from None
    return cfg, online


def _work_online(args: argparse.Namespace, url: str, workspace: Path, condition: RunCondition) -> Output:
    from ole.agents.client import SESSION_SCHEME
    from ole.evolve.harness import check_workdir, open_stream, work_task
    if url.startswith(SESSION_SCHEME):
        raise ValidationError("--online needs the host's run.json after finalization, which agent-session/v3 "
                              "never shows its agent", hint="drop --online, or run the task over HTTP")
    if args.bundle or args.force:
        raise ValidationError("--bundle fixes the bundle, --online takes the channel's champion at each task "
                              "boundary", hint="drop --bundle/--force, or drop --online")
    default = os.environ.get("OLE_ONLINE_WORKDIR") or str(Path("~/.local/state/ole").expanduser()
                                                          / f"online-{args.channel}")
    workdir = check_workdir(args.workdir or default)
    cfg, online = _stream_config(args, condition)
    from ole.api import make_proposer
    from ole.gate import load_config
    with open_registry(args) as registry:
        evo = open_stream(registry=registry, workdir=workdir, cfg=cfg, online=online,
                          gate=load_config(args.gate_config), proposer=make_proposer(args.proposer, workdir, cfg),
                          isolation=args.isolation, progress=_say)
        log_dir = _log_dir(args)
        try:
            trace = work_task(evo, url=url, workspace=workspace, condition=condition, log_dir=log_dir,
                              progress=_say)
        finally:
            evo.close()
        _drop_temporary(args, log_dir)
        data = {"trace_id": trace.trace_id, "bundle": f"{trace.bundle_name}@{trace.bundle_version}",
                "status": trace.outcome.status, "final_score": trace.outcome.final_score,
                "archived": trace.verified, "stream_tasks": evo.index, "workdir": str(workdir),
                "active": registry.champion(args.channel).ref,
                "decisions": [{"challenger": d.challenger, "verdict": d.verdict} for d in evo.events.decisions],
                "releases": evo.events.releases,
                "rollbacks": [{"bundle": ref, "mean_r": r} for _, ref, r in evo.events.rollbacks],
                "promotions": [{"bundle": ref, "mean_r": r} for _, ref, r in evo.events.promotions]}
    return Output(data, json.dumps(data))
