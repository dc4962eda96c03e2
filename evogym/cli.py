"""`evogym` command line: serve | run | data make | report | suite.

Errors print one line (message and hint) and exit 2; `--debug` shows the traceback.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from evogym import PROTOCOL_VERSION, __version__
from evogym.errors import EvogymError
from evogym.sandbox import Limits


def _limits(args) -> Limits:
    from evogym.pools import profile
    base = Limits(act_wall_s=profile(args.profile).act_wall_s)
    return Limits(**{**base.__dict__, **{k: v for k, v in (
        ("init_wall_s", args.init_wall_s), ("episode_wall_s", args.episode_wall_s),
        ("act_wall_s", args.act_wall_s), ("memory_bytes", args.memory_mb and args.memory_mb << 20)) if v}})


def _add_run_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--env", required=True, help="env id, e.g. gym/acrobot or gymnasium/<registered id>")
    p.add_argument("--run-dir", required=True, type=Path, help="run directory (created; resumable)")
    p.add_argument("--profile", default="quick", help="paper | bench | quick (default quick)")
    p.add_argument("--budget", type=int, help="episode budget (default: the profile's)")
    p.add_argument("--max-per-submit", type=int, help="cap episodes per submit (default: the profile's)")
    p.add_argument("--pool-seed", type=int, default=0, help="case-pool seed (0 = the paper's pools)")
    p.add_argument("--model", default="unknown", help="identity label of the agent/model (recorded in run.json)")
    p.add_argument("--data-dir", help="data files <slug>/{train,valid,heldout}.json (default: built-in pools)")
    p.add_argument("--isolation", default="bwrap", choices=["bwrap", "none"],
                   help="policy sandbox; `none` is an unsafe plain subprocess and must be asked for")
    p.add_argument("--init-wall-s", type=float, help="wall-clock limit for policy import + __init__")
    p.add_argument("--episode-wall-s", type=float, help="wall-clock limit per episode")
    p.add_argument("--act-wall-s", type=float, help="wall-clock limit per act()/reset() call (default: the profile's)")
    p.add_argument("--memory-mb", type=int, help="memory limit of the policy process")
    p.add_argument("--jobs", type=int, default=0, help="worker processes for hidden evaluation (0 = cores)")
    p.add_argument("--no-early-finish", action="store_true", help="refuse /finish until the budget is spent")
    p.add_argument("--bind", default="127.0.0.1", help="loopback address to bind")
    p.add_argument("--port", type=int, default=0, help="port (0 = ephemeral)")
    p.add_argument("--token", help="require this token (header X-Evogym-Token) on every request")


def _open_host(args):
    from evogym.host import Host, make_config
    config = make_config(args.env, args.profile, budget=args.budget, pool_seed=args.pool_seed,
                         isolation=args.isolation, limits=_limits(args), finalize_jobs=args.jobs,
                         max_per_submit=args.max_per_submit, allow_early_finish=not args.no_early_finish,
                         data_dir=args.data_dir, model=args.model)
    return Host(args.run_dir, config)


def agent_env(url: str, workspace: Path, token: str | None = None) -> dict:
    """Environment variables an agent receives (names as the reference)."""
    env = {"EVOPOLICYGYM_API": url, "EVOPOLICYGYM_INFO_URL": f"{url}/info",
           "EVOPOLICYGYM_TASK_URL": f"{url}/task", "EVOPOLICYGYM_SUBMIT_URL": f"{url}/submit",
           "EVOPOLICYGYM_FINISH_URL": f"{url}/finish", "EVOPOLICYGYM_WORKSPACE": str(workspace),
           "EVOPOLICYGYM_SYSTEM": str(workspace / "system"), "EVOPOLICYGYM_FEEDBACK": str(workspace / "feedback"),
           "EVOPOLICYGYM_AGENTS": str(workspace / "AGENTS.md"), "EVOPOLICYGYM_PROTOCOL": PROTOCOL_VERSION}
    if token:
        env["EVOPOLICYGYM_TOKEN"] = token
    return env


def cmd_serve(args) -> int:
    from evogym.server import Server
    host = _open_host(args)
    server = Server(host, args.bind, args.port, args.token).start()
    print(json.dumps({"url": server.url, "workspace": str(host.run.workspace), "run_dir": str(host.run.root)}),
          flush=True)
    signal.signal(signal.SIGTERM, lambda *_: host.start_finalize("sigterm"))
    try:
        host.done.wait()
    except KeyboardInterrupt:
        host.start_finalize("interrupt")
        host.done.wait()
    server.stop()
    return 0 if host.finalization["status"] == "done" else 1


def cmd_run(args) -> int:
    from evogym.server import Server
    if not args.command:
        raise EvogymError("no agent command given", hint="evogym run --env ... --run-dir ... -- CMD ARGS")
    host = _open_host(args)
    server = Server(host, args.bind, args.port, args.token).start()
    ws = host.run.workspace
    env = {**os.environ, **agent_env(server.url, ws, args.token)}
    log = open(host.run.logs / "agent.log", "ab")
    try:
        proc = subprocess.Popen(args.command, cwd=ws, env=env, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
        try:
            proc.wait(timeout=args.agent_timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        host.run.event("agent.exit", code=proc.returncode)
        host.start_finalize("agent_exit")
        host.done.wait()
    finally:
        server.stop()
        log.close()
    doc = json.loads(host.run.run_json.read_text())
    print(json.dumps({"run_dir": str(host.run.root), "status": doc["outcome"]["status"],
                      "final_score": doc["outcome"]["final_score"],
                      "normalized_score": doc["outcome"].get("normalized_score"),
                      "agent_exit": proc.returncode}))
    return 0 if doc["outcome"]["status"] != "error" else 1


def cmd_data_make(args) -> int:
    from evogym import pools
    paths = pools.write_data(args.out, args.env, pool_seed=args.pool_seed)
    print(json.dumps({"written": [str(p) for p in paths.values()]}))
    return 0


def cmd_report(args) -> int:
    from evogym.report import report
    print(report(args.run_dir, as_json=args.json))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="evogym", description="EvoPolicyGym benchmark host (sandboxed).")
    parser.add_argument("--version", action="version", version=f"evogym {__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("serve", help="serve one run until it is finalized")
    _add_run_args(p)
    p.set_defaults(func=cmd_serve)
    p = sub.add_parser("run", help="serve a run and launch an agent command in its workspace")
    _add_run_args(p)
    p.add_argument("--agent-timeout", type=float, default=None, help="kill the agent after this many seconds")
    p.add_argument("command", nargs=argparse.REMAINDER, help="-- CMD ARGS (the agent)")
    p.set_defaults(func=cmd_run)
    p = sub.add_parser("data", help="case pools")
    dsub = p.add_subparsers(dest="data_cmd", required=True)
    d = dsub.add_parser("make", help="write train/valid/heldout files for an env")
    d.add_argument("--env", required=True)
    d.add_argument("--out", required=True, type=Path)
    d.add_argument("--pool-seed", type=int, default=0)
    d.set_defaults(func=cmd_data_make)
    p = sub.add_parser("report", help="summarize a finished run")
    p.add_argument("run_dir", type=Path)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_report)
    from evogym import suite
    suite.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "command", None) and args.command[:1] == ["--"]:
        args.command = args.command[1:]
    try:
        return args.func(args)
    except EvogymError as exc:
        if args.debug:
            raise
        print(f"evogym: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
