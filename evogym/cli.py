"""`evogym` command line: serve | run | check | envs | data make | report | suite.

Errors print one line (message and hint) and exit 2; `--debug` shows the traceback.
Everything a command could refuse (env id, profile, bind address, port) is checked
before a run directory is created, so a refused command writes nothing.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from evogym import PROTOCOL_VERSION, __version__
from evogym.cliparser import Parser, noun
from evogym.errors import EvogymError
from evogym.sandbox import Limits
from evogym.sandbox.isolation import DEFAULT_ISOLATION, ISOLATIONS


def _limits(args) -> Limits:
    from evogym.pools import profile
    base = Limits(act_wall_s=profile(args.profile).act_wall_s)
    return Limits(**{**base.__dict__, **{k: v for k, v in (
        ("init_wall_s", args.init_wall_s), ("episode_wall_s", args.episode_wall_s),
        ("act_wall_s", args.act_wall_s), ("memory_bytes", args.memory_mb and args.memory_mb << 20)) if v}})


def _add_run_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--env", required=True, help="env id, e.g. gym/acrobot or gymnasium/<registered id>")
    p.add_argument("--run-dir", required=True, type=Path, help="run directory (created; resumable)")
    p.add_argument("--profile", default="quick", help="paper | bench | quick | strict (default quick)")
    p.add_argument("--budget", type=int, help="episode budget (default: the profile's)")
    p.add_argument("--max-per-submit", type=int, help="cap episodes per submit (default: the profile's)")
    p.add_argument("--max-submissions", type=int, help="cap charged submits (default: the profile's; strict 128)")
    p.add_argument("--episode-pool-size", type=int,
                   help="train episode ids the agent may choose from, 0..N-1 (default: the profile's; strict 128)")
    p.add_argument("--max-candidates", type=int,
                   help="most submissions a v3 finish may name for validation (default: the profile's; strict 1)")
    p.add_argument("--program", type=Path,
                   help="starting program: a folder holding policy.py, copied into an empty workspace/system/ "
                        "(default: empty; with --session, the baseline program)")
    p.add_argument("--pool-seed", type=int, default=0, help="case-pool seed (0 = the paper's pools)")
    p.add_argument("--model", default="unknown", help="identity label of the agent/model (recorded in run.json)")
    p.add_argument("--data-dir", help="data files <slug>/{train,valid,heldout}.json (default: built-in pools)")
    p.add_argument("--isolation", default=DEFAULT_ISOLATION, choices=ISOLATIONS,
                   help="policy sandbox; `none` is an unsafe plain subprocess and must be asked for")
    p.add_argument("--init-wall-s", type=float, help="wall-clock limit for policy import + __init__")
    p.add_argument("--episode-wall-s", type=float, help="wall-clock limit per episode")
    p.add_argument("--act-wall-s", type=float, help="wall-clock limit per act()/reset() call (default: the profile's)")
    p.add_argument("--memory-mb", type=int, help="memory limit of the policy process")
    p.add_argument("--jobs", type=int, default=0, help="worker processes for hidden evaluation (0 = cores)")
    p.add_argument("--no-early-finish", action="store_true", help="refuse /finish until the budget is spent")
    p.add_argument("--bind", default="127.0.0.1", help="loopback address to bind")
    p.add_argument("--port", type=int, default=0, help="port (0 = ephemeral)")
    p.add_argument("--token-file", type=Path,
                   help="file (mode 0600) holding the token every request must carry; default: a new random "
                        "token, in <run-dir>/control/ (the agent gets it in its environment, never in argv)")
    p.add_argument("--token", help=argparse.SUPPRESS)  # refused: see _token
    p.add_argument("--session", action="store_true",
                   help="also serve agent-session/v3 on a 0600 Unix socket (EVOPOLICYGYM_SESSION_SOCKET); the run "
                        "then stays open until the agent finishes (it names its candidates), exits, or SIGTERM")
    p.add_argument("--eval-cache", type=Path, default=None,
                   help="folder of hidden-evaluation results shared with other runs (identical program, "
                        "env_meta, seeds and code give the identical result; default: none)")
    p.add_argument("--no-prestart", action="store_true",
                   help="start each submit's sandbox when the submit arrives instead of ahead of it "
                        "(the slower path before pre-started sandboxes; for benchmarks)")


def _open_host(args):
    """(host, listening socket, credential): the socket and the token first, so a busy port, a
    non-loopback address or a bad token file is refused before `Host` creates the run directory."""
    from evogym.credential import Credential
    from evogym.host import Host, make_config
    from evogym.server import listen
    token = _token(args)
    config = make_config(args.env, args.profile, budget=args.budget, pool_seed=args.pool_seed,
                         isolation=args.isolation, limits=_limits(args), finalize_jobs=args.jobs,
                         max_per_submit=args.max_per_submit, allow_early_finish=not args.no_early_finish,
                         data_dir=args.data_dir, model=args.model,
                         agent_timeout_s=getattr(args, "agent_timeout", None), max_submissions=args.max_submissions,
                         max_candidates=args.max_candidates, pool_size=args.episode_pool_size)
    if args.program is not None:  # refused before the run directory exists, as every other flag
        from evogym.program import program_problem
        problem = program_problem(args.program)
        if problem is not None:
            raise EvogymError(f"--program {args.program}: {problem}", hint="name a folder holding policy.py")
    sock = listen(args.bind, args.port)
    try:
        host = Host(args.run_dir, config, prestart=not args.no_prestart, auto_finalize=not args.session,
                    eval_cache=args.eval_cache, program=args.program)
        return host, sock, Credential.create(host.run.control, token)
    except BaseException:
        sock.close()
        raise


def _token(args) -> str | None:
    """The token of --token-file, or None for a new random one; checked before anything is
    written. `--token` is refused: a value in argv is readable by every local user."""
    from evogym.credential import read_token_file
    if args.token is not None:
        raise EvogymError("--token puts the run's credential in the command line, where every local user can "
                          "read it (/proc/PID/cmdline)", hint="use --token-file FILE (mode 0600), or leave it out "
                                                              "and the host makes a random token")
    return read_token_file(args.token_file) if args.token_file else None


def agent_env(url: str, workspace: Path, credential=None) -> dict:
    """Environment variables an agent receives (names as the reference, plus the credential's)."""
    env = {"EVOPOLICYGYM_API": url, "EVOPOLICYGYM_INFO_URL": f"{url}/info",
           "EVOPOLICYGYM_TASK_URL": f"{url}/task", "EVOPOLICYGYM_SUBMIT_URL": f"{url}/submit",
           "EVOPOLICYGYM_FINISH_URL": f"{url}/finish", "EVOPOLICYGYM_WORKSPACE": str(workspace),
           "EVOPOLICYGYM_SYSTEM": str(workspace / "system"), "EVOPOLICYGYM_FEEDBACK": str(workspace / "feedback"),
           "EVOPOLICYGYM_AGENTS": str(workspace / "AGENTS.md"), "EVOPOLICYGYM_PROTOCOL": PROTOCOL_VERSION}
    if credential is not None:
        env.update(credential.agent_env())
    return env


def _gateway(args, host):
    """The agent-session/v3 socket when --session is given, else None."""
    if not args.session:
        return None
    from evogym.session import Gateway
    return Gateway(host).start()


SIGNAL_POLL_S = 0.1
"""How often `evogym serve` looks for a SIGTERM its handler recorded (the longest a signal waits)."""


def _stack_dumps() -> None:
    """`kill -USR1 <host pid>` writes every thread's stack to stderr (the host log under a
    harness): how a host that seems stuck is diagnosed without stopping it."""
    import faulthandler
    try:  # fd 2 itself: sys.stderr may be another object for a moment (an env package's import)
        faulthandler.register(signal.SIGUSR1, file=2, all_threads=True, chain=False)
    except (OSError, ValueError, RuntimeError):  # a diagnostic: never a reason for the host not to start
        pass


def cmd_serve(args) -> int:
    from evogym.progress import RunWatcher
    from evogym.server import Server
    host, sock, credential = _open_host(args)
    server = Server(host, args.bind, args.port, credential, sock=sock).start()
    gateway = _gateway(args, host)
    # before the ready line: a harness may send SIGTERM as soon as it has read it, and the
    # default action would end the run unscored. The handler only records the signal: it runs
    # between two bytecodes of the main thread, and start_finalize takes locks (a second SIGTERM
    # inside the first one's start_finalize deadlocked the host on its own lock)
    terminated: list[int] = []
    signal.signal(signal.SIGTERM, lambda signum, _frame: terminated.append(signum))
    _stack_dumps()
    print(json.dumps({"url": server.url, "workspace": str(host.run.workspace), "run_dir": str(host.run.root),
                      "token_file": str(server.credential.token_file),
                      "auth_header_file": str(server.credential.header_file),
                      "session_socket": str(gateway.path) if gateway else None}), flush=True)
    # progress only for a person at a terminal: harnesses read stdout and keep stderr as a log
    watcher = RunWatcher(host.run.root, host.config.budget).start() if sys.stderr.isatty() else None
    try:
        while not host.done.wait(SIGNAL_POLL_S):
            if terminated:
                host.start_finalize("sigterm")  # idempotent: later signals change nothing
    except KeyboardInterrupt:
        host.start_finalize("interrupt")
        host.done.wait()
    finally:
        if watcher is not None:
            watcher.stop()
    server.stop()
    if gateway is not None:
        gateway.stop()
    host.close()
    return 0 if host.finalization["status"] == "done" else 1


def cmd_run(args) -> int:
    from evogym.progress import RunWatcher
    from evogym.server import Server
    if not args.command:
        raise EvogymError("no agent command given", hint="evogym run --env ... --run-dir ... -- CMD ARGS")
    command = _absolute_paths(args.command)  # read here, before the agent starts in the workspace
    host, sock, credential = _open_host(args)
    server = Server(host, args.bind, args.port, credential, sock=sock).start()
    gateway = _gateway(args, host)
    _stack_dumps()
    ws = host.run.workspace
    env = {**os.environ, **agent_env(server.url, ws, server.credential), **(gateway.agent_env() if gateway else {})}
    agent_log = host.run.logs / "agent.log"
    log = open(agent_log, "ab")
    watcher = RunWatcher(host.run.root, host.config.budget, enabled=not args.quiet)
    watcher.line(f"evogym run {host.config.env} in {host.run.root}; agent output goes to {agent_log}")
    watcher.start()
    terminated: list[int] = []  # as in cmd_serve: the handler only records the signal
    signal.signal(signal.SIGTERM, lambda signum, _frame: terminated.append(signum))
    try:
        proc = subprocess.Popen(command, cwd=ws, env=env, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
        stopped = _wait_agent(proc, args.agent_timeout, terminated)
        host.run.event("agent.exit", code=proc.returncode, **({"stopped": stopped} if stopped else {}))
        host.agent_outcome = {"returncode": proc.returncode, "timed_out": stopped == "timeout",
                              "budget_spent": host.judge.state.remaining == 0}
        if stopped in ("sigterm", "interrupt"):
            watcher.line(f"{'SIGTERM' if stopped == 'sigterm' else 'interrupted'}: the agent was stopped; "
                         "finalizing the run with what it submitted")
        elif proc.returncode:
            watcher.line(f"agent exited {proc.returncode}: {_last_line(agent_log)} (full log: {agent_log})")
        host.start_finalize(stopped if stopped in ("sigterm", "interrupt") else "agent_exit")
        host.done.wait()
    finally:
        watcher.stop()
        server.stop()
        if gateway is not None:
            gateway.stop()
        host.close()
        log.close()
    doc = json.loads(host.run.run_json.read_text())
    print(json.dumps({"run_dir": str(host.run.root), "status": doc["outcome"]["status"],
                      "final_score": doc["outcome"]["final_score"],
                      "normalized_score": doc["outcome"].get("normalized_score"),
                      "agent_exit": proc.returncode, "agent_log": str(agent_log)}))
    if proc.returncode and not (doc["outcome"].get("auxiliary") or {}).get("n_submits"):
        # the score is the untouched starting policy's: report it, but never as a successful run
        print(f"evogym: error: the agent exited {proc.returncode} and submitted nothing, so the score is the "
              f"starting policy's (hint: see {agent_log})", file=sys.stderr)
        return 1
    return 0 if doc["outcome"]["status"] != "error" else 1


def _absolute_paths(argv: list[str]) -> list[str]:
    """The agent command with the paths it names relative to this directory made absolute: it runs in
    the run's workspace, where `my_agent.py` or `.venv/bin/python` would name nothing. An argument is a
    path when it exists here (the program only when it has a `/`: a bare name is looked up on PATH)."""
    def absolute(i: int, arg: str) -> str:
        if arg.startswith("-") or os.path.isabs(arg) or (i == 0 and "/" not in arg) or not os.path.exists(arg):
            return arg
        return os.path.abspath(arg)
    return [absolute(i, a) for i, a in enumerate(argv)]


AGENT_STOP_GRACE_S = 5.0
"""How long a stopped agent's process group has between SIGTERM and SIGKILL."""


def _wait_agent(proc: subprocess.Popen, timeout: float | None, terminated: list[int]) -> str | None:
    """Wait for the agent to exit. Stopped (its whole process group: it runs in its own
    session) at the agent timeout (SIGKILL: "timeout"), or when this process gets SIGTERM or
    Ctrl-C (SIGTERM, then SIGKILL after AGENT_STOP_GRACE_S: "sigterm" / "interrupt"), so the
    run is finalized with what was submitted and no agent outlives it. None: it exited."""
    import time
    deadline = None if timeout is None else time.monotonic() + timeout
    reason = None
    try:
        while proc.poll() is None and reason is None:
            if terminated:
                reason = "sigterm"
            elif deadline is not None and time.monotonic() >= deadline:
                reason = "timeout"
            else:
                try:
                    proc.wait(timeout=SIGNAL_POLL_S)
                except subprocess.TimeoutExpired:
                    pass
    except KeyboardInterrupt:
        reason = "interrupt"
    if reason is None:
        return None
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL if reason == "timeout" else signal.SIGTERM)
    try:
        proc.wait(timeout=0 if reason == "timeout" else AGENT_STOP_GRACE_S)
    except subprocess.TimeoutExpired:
        pass
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)  # what the agent left in its group, or the agent itself
    proc.wait()
    return reason


def _last_line(path: Path) -> str:
    """The agent's last non-empty output line (what it died saying), at most 300 characters."""
    try:
        lines = [ln for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return "(no output)"
    return lines[-1][:300] if lines else "(no output)"


def cmd_data_make(args) -> int:
    from evogym import envs, pools
    slug = envs.resolve(args.env).slug  # an unknown env is refused before anything is written
    paths = pools.write_data(args.out, slug, pool_seed=args.pool_seed)
    print(json.dumps({"written": [str(p) for p in paths.values()]}))
    return 0


def cmd_report(args) -> int:
    from evogym.report import report, write_html
    if args.html:
        print(write_html(args.run_dir, args.out))
        return 0
    print(report(args.run_dir, as_json=args.json))
    return 0


def cmd_envs(args) -> int:
    from evogym import catalog
    rows = catalog.catalog(args.env)
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        print(catalog.table(rows))
        if not args.env:
            print("\nCore16 shown; any registered Gymnasium id also works as gymnasium/<id> "
                  "(e.g. `evogym envs gymnasium/CartPole-v1`).")
    return 0


def cmd_check(args) -> int:
    from evogym.check import check_policy
    system = Path(args.system or os.environ.get("EVOPOLICYGYM_SYSTEM") or "system")
    env = args.env or _env_from_api()
    result = check_policy(system, env, isolation=args.isolation)
    if args.json:
        print(json.dumps(result.to_json(), indent=2))
    else:
        for step, verdict, detail in result.steps:
            print(f"{'ok  ' if verdict == 'ok' else 'FAIL'} {step}" + (f": {detail}" if detail and verdict == "ok"
                                                                          else f": {verdict}: {detail}" if detail
                                                                          else ""))
        print(f"{system}: {'a submit would run its episodes' if result.ok else 'a submit would fail'} "
              f"({result.env}; nothing was submitted, no budget spent)")
    return 0 if result.ok else 1


def _env_from_api() -> str:
    """The env of the run an agent works (`$EVOPOLICYGYM_API`), read from the free `/info`."""
    import urllib.request
    api = os.environ.get("EVOPOLICYGYM_API")
    if not api:
        raise EvogymError("which env? pass --env ENV", hint="inside a run workspace $EVOPOLICYGYM_API supplies it")
    headers = {"X-Evogym-Token": os.environ["EVOPOLICYGYM_TOKEN"]} if os.environ.get("EVOPOLICYGYM_TOKEN") else {}
    try:
        with urllib.request.urlopen(urllib.request.Request(f"{api}/info", headers=headers), timeout=10) as r:
            return json.loads(r.read())["env_meta"]["env"]
    except (OSError, ValueError, KeyError) as exc:
        raise EvogymError(f"cannot read the env from {api}/info: {exc}", hint="pass --env ENV") from None


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="evogym", description="EvoPolicyGym benchmark host (sandboxed).")
    parser.add_argument("--version", action="version", version=f"evogym {__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    parser.set_defaults(func=None, help_parser=parser)
    sub = parser.add_subparsers(dest="command_name", metavar="COMMAND")
    p = sub.add_parser("serve", help="serve one run until it is finalized")
    _add_run_args(p)
    p.set_defaults(func=cmd_serve)
    p = sub.add_parser("run", help="serve a run and launch an agent command in its workspace")
    _add_run_args(p)
    p.add_argument("--agent-timeout", type=float, default=None, help="kill the agent after this many seconds")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    p.add_argument("command", nargs=argparse.REMAINDER,
                   help="-- CMD ARGS (the agent; it runs in the workspace, so the relative paths it names that "
                        "exist here are made absolute)")
    p.set_defaults(func=cmd_run)
    p = sub.add_parser("check", help="the checks a submit would apply to system/, without spending budget")
    p.add_argument("system", nargs="?", help="policy folder (default: $EVOPOLICYGYM_SYSTEM, else ./system)")
    p.add_argument("--env", help="env id (default: the env of $EVOPOLICYGYM_API)")
    p.add_argument("--isolation", default=DEFAULT_ISOLATION, choices=ISOLATIONS,
                   help=f"sandbox (default {DEFAULT_ISOLATION})")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_check)
    p = sub.add_parser("envs", help="env ids with family, step limit, anchors and spaces")
    p.add_argument("env", nargs="*", help="only these ids (default: Core16)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_envs)
    dsub = noun(sub, "data", "case pools", dest="data_verb", func=None)
    d = dsub.add_parser("make", help="write train/valid/heldout files for an env")
    d.add_argument("--env", required=True)
    d.add_argument("--out", required=True, type=Path)
    d.add_argument("--pool-seed", type=int, default=0)
    d.set_defaults(func=cmd_data_make)
    p = sub.add_parser("report", help="summarize a finished run (text, --json, or --html)")
    p.add_argument("run_dir", type=Path)
    p.add_argument("--json", action="store_true")
    p.add_argument("--html", action="store_true", help="write a self-contained HTML page (curve, submits, edits)")
    p.add_argument("--out", type=Path, help="HTML file (default: RUN_DIR/report.html)")
    p.set_defaults(func=cmd_report)
    from evogym import suite
    suite.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse printed its one line (or --help)
        return int(exc.code or 0)
    if args.func is None:  # bare `evogym` or `evogym NOUN`: show what can follow
        args.help_parser.print_help()
        return 0
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
