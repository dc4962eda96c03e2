"""`ole agent work`: an OLE host agent as a plain command for any harness.

Any harness that launches an agent command inside a workspace with the EvoPolicyGym
environment variables (`evogym run`, `evogym suite run`, the reference's `command`
adapter) can run the built-in or LLM agent under a bundle this way. The agent works
only through `EVOPOLICYGYM_API` and `EVOPOLICYGYM_WORKSPACE`; its iterations go to
`iterations.jsonl` in its log folder (outside the workspace), and how its bundle was
chosen to `selection.json` there. No trace is archived: the harness, not the agent, owns
the verified outcome.
"""
from __future__ import annotations

import argparse
import json
import os
import tempfile
from pathlib import Path

from ole.cli.common import Output, leaf, noun, open_registry
from ole.errors import ValidationError
from ole.trace import RunCondition, TaskSpec


def register(subparsers) -> None:
    """Add `ole agent work`."""
    verbs = noun(subparsers, "agent", "run a host agent inside an external harness's workspace")
    p = leaf(verbs, "work", work, "work the task at $EVOPOLICYGYM_API with a host agent under a bundle")
    p.add_argument("--agent", default="builtin", choices=("builtin", "llm"), help="host agent")
    p.add_argument("--bundle", metavar="NAME[@VERSION]",
                   help="bundle (default: the channel's most specific champion whose scope matches the task)")
    p.add_argument("--force", action="store_true",
                   help="run --bundle even where its applicability excludes the task (recorded in selection.json)")
    p.add_argument("--channel", default="default", help="channel whose champion is used without --bundle")
    p.add_argument("--model", help="model string (llm agent)")
    p.add_argument("--seed", type=int, default=0, help="agent seed")
    p.add_argument("--log-dir", help="agent log folder (default: a new temporary folder)")


def _env(name: str) -> str:
    value = os.environ.get(name)
    if not value:
        raise ValidationError(f"${name} is not set", hint="run this inside a harness, e.g. "
                              "`evogym run --env gym/acrobot --run-dir R -- ole agent work`")
    return value


def work(args: argparse.Namespace) -> Output:
    """Work the task until the run is finalized or the agent stops; prints why it stopped."""
    from ole.agents import get_agent
    from ole.agents.base import AgentContext
    from ole.agents.client import HostClient
    from ole.runner import resolve_bundle
    from ole.scopes import task_context
    url, workspace = _env("EVOPOLICYGYM_API"), Path(_env("EVOPOLICYGYM_WORKSPACE"))
    if args.agent == "llm" and not args.model:
        raise ValidationError("--agent llm needs --model", hint="e.g. --model replay:calls.jsonl")
    if args.force and not args.bundle:
        raise ValidationError("--force only applies to an explicit --bundle",
                              hint="without --bundle the registry picks a bundle whose scope matches the task")
    info = HostClient(url).info()
    task_ctx = task_context(info["env_meta"]["env"], args.agent, int(info["episode_budget"]), args.model)
    with open_registry(args) as registry:
        chosen = resolve_bundle(registry, args.bundle, args.channel, task_ctx, force=args.force)
    registered = chosen.bundle
    log_dir = Path(args.log_dir) if args.log_dir else Path(tempfile.mkdtemp(prefix="ole-agent-"))
    log_dir.mkdir(parents=True, exist_ok=True)
    (log_dir / "selection.json").write_text(chosen.record().model_dump_json(indent=2) + "\n")
    iterations = log_dir / "iterations.jsonl"

    def record(it) -> None:
        with open(iterations, "a", encoding="utf-8") as f:
            f.write(it.model_dump_json() + "\n")

    task = TaskSpec(env=info["env_meta"]["env"], profile="external", budget=info["episode_budget"])
    ctx = AgentContext(url=url, workspace=workspace, bundle=registered.bundle, task=task,
                       condition=RunCondition(host=args.agent, seed=args.seed, model=args.model),
                       log_dir=log_dir, record=record)
    options = {"model": args.model} if args.agent == "llm" else {}
    result = get_agent(args.agent, **options).work(ctx)
    data = {"finish_reason": result.finish_reason, "log_dir": str(log_dir), "bundle": registered.ref,
            "scope": chosen.scope, "forced": chosen.forced}
    return Output(data, json.dumps(data))
