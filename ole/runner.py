"""Run one task: start `evogym serve`, let an agent work it, read the verified outcome.

`run_task` is the only way OLE runs a task. It reads the bundle once, at the task
boundary (`resolve_bundle`: an explicit `NAME[@VERSION]`, refused when its scope does not
admit the task unless forced, or `Registry.select` — the most specific champion whose
scope matches, after pending releases are activated; a release never switches a running
task), records that choice and its reason with the trace, starts the
host in its own process (forked from a warm template, `evogym.warm`, or a fresh
interpreter: `start_host`), hands the agent only the protocol URL and the workspace, and
after finalization copies the outcome from the host's `run.json`. Only a scored
run enters the trace archive. Arguments are plain picklable values and the function
keeps no global state, so evolution workers can call it in other processes. The
host subprocess is always stopped, also on KeyboardInterrupt.
"""
from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

from evogym.sandbox.isolation import DEFAULT_ISOLATION
from ole.agents import get_agent
from ole.agents.base import AgentContext, AgentResult
from ole.agents.client import Credential, HostClient, HostError, forget_credential, remember_credential
from ole.bundle import Bundle, TaskContext, format_ref, parse_ref
from ole.chosen import ChosenVersion, chosen_by
from ole.errors import OleError
from ole.registry import DEFAULT_CHANNEL, Registry
from ole.registry.records import Selection
from ole.registry.scopes import context_for, explicit
from ole.trace import (Iteration, Outcome, RunCondition, TaskContract, TaskSpec, Trace,
                       run_json_digest, utc_now)

HOST_START_TIMEOUT_S = 300.0
"""Longest wait for `evogym serve` to print its ready line (env import, pool files)."""
HOST_FINALIZE_TIMEOUT_S = 7200.0
"""Longest wait for the host to finish hidden validation + held-out and exit before it is stopped."""
HOST_KILL_GRACE_S = 10.0
"""Between SIGTERM and SIGKILL when the host must be stopped."""
HOST_EXIT_GRACE_S = 60.0
"""How long a host that has written its run.json may take to exit before it is stopped."""
RUN_JSON_POLL_S = 0.02
"""How often the runner looks for the host's run.json while it finalizes (a stat call)."""


class RunnerError(OleError):
    """The host could not be started or did not produce a run.json."""

    exit_code = 1


def resolve_bundle(registry: Registry, bundle_ref: str | None, channel: str, ctx: TaskContext, *,
                   force: bool = False) -> Selection:
    """The bundle for the task `ctx`, chosen at its boundary, with the reason.

    An explicit `bundle_ref` whose applicability does not admit the task raises `OutOfScope`
    unless `force` (then `Selection.forced` is set and the runner records it); without a ref,
    `Registry.select(channel, ctx)` activates pending releases and routes to the most
    specific matching champion.
    """
    if bundle_ref:
        return explicit(registry.get(bundle_ref), ctx, force=force)
    return registry.select(channel, ctx)


def contract(task: TaskSpec, bundle, episodes: int) -> TaskContract:
    """The executable task contract g = (d, U, M, S, V, β) recorded with every run."""
    b = bundle.loop_policy.budget
    return TaskContract(
        objective=f"write workspace/system/policy.py (class Policy) maximizing the held-out mean return on {task.env}",
        permitted_actions=("GET /info", "GET /task", "POST /submit", "POST /finish",
                           "read and write workspace files (system/, feedback/ read-only)"),
        metrics=("held-out mean return (final_score)", "normalized score", "episodes used", "submits",
                 "agent wall time", "LLM calls, tokens, USD"),
        evidence_sources=("feedback/submit_NNN/summary.json", "feedback/submit_NNN/episodes/*",
                          "GET /info state", "GET /task brief"),
        verification="host finalization: hidden validation selects a checkpoint, hidden held-out pool scores it",
        resource_budget={"episodes": float(episodes), "wall_time_s": b.wall_time_s,
                         "llm_calls": float(b.max_llm_calls), "tokens": float(b.max_tokens), "usd": b.max_usd})


def _serve_command(task: TaskSpec, run_dir: Path, isolation: str, extra: tuple[str, ...]) -> list[str]:
    cmd = [sys.executable, "-m", "evogym.cli", "serve", "--env", task.env, "--run-dir", str(run_dir),
           "--profile", task.profile, "--pool-seed", str(task.pool_seed), "--isolation", isolation]
    if task.budget is not None:
        cmd += ["--budget", str(task.budget)]
    return cmd + list(extra)


HOST_STARTS = ("warm", "cold")
"""How `run_bundle` starts its host: `warm` forks it from this process's template (`evogym.warm`:
imports and sandbox probe paid once per process, hidden evaluation on forked workers); `cold`
starts a fresh `evogym serve` interpreter (the path before; also taken when the template cannot
be reached). Both run the same `evogym serve` code on the same arguments."""


def start_host(cmd: list[str], stderr, env_id: str, how: str = "warm"):
    """The host process of one run (`cmd` = `_serve_command(...)`): a `subprocess.Popen`, or the
    `evogym.warm.WarmHost` that stands in for one (pid = process group, text `stdout`, `wait`/`poll`)."""
    if how not in HOST_STARTS:
        raise RunnerError(f"unknown host start {how!r}; expected one of {list(HOST_STARTS)}", hint="pass warm")
    if how == "warm":
        from evogym.warm import HostLauncher
        try:
            return HostLauncher.shared().spawn(cmd[3:], stderr, env_id=env_id)
        except OSError:  # the template is gone or cannot start: a cold host runs the same code
            pass
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=stderr, text=True, start_new_session=True)


def _read_ready_line(proc: subprocess.Popen, timeout_s: float, stderr_path: Path) -> dict:
    box: dict = {}

    def read() -> None:
        assert proc.stdout is not None  # started with stdout=PIPE
        box["line"] = proc.stdout.readline()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(timeout_s)
    line = box.get("line", "")
    if not line:
        try:
            code = proc.wait(HOST_KILL_GRACE_S)
        except subprocess.TimeoutExpired:
            code = None
        said = stderr_path.read_text(errors="replace").strip().splitlines() if stderr_path.is_file() else []
        if code is not None and said:
            message, _, hint = said[-1].removeprefix("evogym: error: ").partition(" (hint: ")
            hint = f"{hint.removesuffix(')')}; full log: {stderr_path}" if hint else f"full log: {stderr_path}"
            raise RunnerError(f"`evogym serve` failed (exit {code}): {message}", hint=hint)
        raise RunnerError(f"`evogym serve` printed no ready line within {timeout_s:.0f} s",
                          hint=f"see {stderr_path}")
    try:
        return json.loads(line)
    except json.JSONDecodeError as err:
        raise RunnerError(f"`evogym serve` ready line is not JSON: {line[:200]!r}",
                          hint=f"see {stderr_path}") from err


def _await_run_json(proc, run_json: Path, timeout_s: float) -> bool:
    """Wait until the host has written `run_json` or exited; True when run.json is there.

    Finalization writes run.json atomically as its last step; after it the host only shuts
    down (HTTP server, episode formatter, interpreter exit: 0.7-1.1 s per run at load ~12 on the
    project machine, `experiments/results/evolve_profile.md`), which need not delay the trace.
    """
    deadline = time.monotonic() + timeout_s
    while not run_json.is_file():
        if proc.poll() is not None:
            return run_json.is_file()
        if time.monotonic() > deadline:
            raise subprocess.TimeoutExpired(getattr(proc, "args", "evogym serve"), timeout_s)
        time.sleep(RUN_JSON_POLL_S)
    return True


def _reap_later(proc) -> None:
    """Let a host that has written its run.json finish exiting off the caller's path; stopped
    (`_stop`) if it is still there HOST_EXIT_GRACE_S later."""
    def reap() -> None:
        try:
            proc.wait(HOST_EXIT_GRACE_S)
        except subprocess.TimeoutExpired:
            _stop(proc)
    threading.Thread(target=reap, name="host-reaper", daemon=True).start()


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(HOST_KILL_GRACE_S)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()


def _outcome(doc: dict, history: list[Iteration], result: AgentResult, wall: float) -> Outcome:
    out = doc.get("outcome", {})
    aux = out.get("auxiliary") or {}
    best = out.get("best_submit_index")
    vals = out.get("val_scores") or {}
    return Outcome(
        status=out.get("status", "error"), final_score=out.get("final_score"),
        normalized_score=out.get("normalized_score"),
        best_val_score=vals.get(str(best)) if best is not None else None, best_submit_index=best,
        episodes_used=int(aux.get("episodes_used", sum(i.episodes_charged for i in history))),
        n_submits=int(aux.get("n_submits", sum(1 for i in history if i.submit_id is not None))),
        wall_s=round(wall, 3), llm_calls=result.usage.llm_calls, tokens=result.usage.tokens,
        usd=result.usage.usd, finish_reason=result.finish_reason)


def options_for(condition: RunCondition, extra: dict | None = None) -> dict:
    """Constructor options of the condition's host agent: the model (llm), the command line (command).

    The run condition is the one route by which these reach an agent, so a paired comparison
    that shares the condition shares the model and the command line too.
    """
    options = dict(extra or {})
    if condition.host == "llm" and condition.model:
        options.setdefault("model", condition.model)
    if condition.host == "command" and condition.command:
        options.setdefault("command", list(condition.command))
    return options


def _num(v: float | None) -> str:
    return "-" if v is None else f"{v:.4g}"


def work_agent(agent_name: str, options: dict, ctx: AgentContext) -> AgentResult:
    """Let the agent work; an agent-side failure is a recorded result (`finish_reason="error"`), not a raise."""
    try:
        return get_agent(agent_name, **options).work(ctx)
    except (HostError, OSError, ValueError, RuntimeError) as err:
        (ctx.log_dir / "agent_error.txt").write_text(f"{type(err).__name__}: {err}\n")
        return AgentResult(finish_reason="error", extras={"error": "agent_error.txt"})


def launch_agent(chosen: ChosenVersion, task: TaskSpec, condition: RunCondition, *, url: str, workspace: Path,
                 log_dir: Path, record: Callable[[Iteration], None], progress: Callable[[str], None] | None = None,
                 lessons_path: str | Path | None = None, agent_options: dict | None = None) -> tuple[AgentResult, float]:
    """Let the condition's agent work the task served at `url` under the chosen bundle.

    Returns the agent's result and its wall seconds. The one place an agent is started: runs the
    runner hosts itself and tasks of an outside harness (`ole agent work`) start it the same way.
    """
    ctx = AgentContext(url=url, workspace=Path(workspace), bundle=chosen.bundle, task=task, condition=condition,
                       log_dir=Path(log_dir), record=record, progress=progress or (lambda line: None),
                       lessons_path=Path(lessons_path) if lessons_path else None)
    t0 = time.monotonic()
    result = work_agent(condition.host, options_for(condition, agent_options), ctx)
    return result, time.monotonic() - t0


def run_id_for(task: TaskSpec, ref: str, seed: int) -> str:
    """A fresh run id: `<env-slug>-<NAME@VERSION>-s<seed>-<utc stamp>-<random hex>` (the trace id too)."""
    name, version = parse_ref(ref)
    if version is None:
        raise RunnerError(f"bundle ref {ref!r} needs a version", hint="e.g. coder@1")
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S")
    slug = "".join(c if c.isalnum() or c in "._-" else "_" for c in task.env)
    return f"{slug}-{format_ref(name, version)}-s{seed}-{stamp}-{secrets.token_hex(3)}"


def run_task(task: TaskSpec, bundle_ref: str | None, agent: str, condition: RunCondition, *,
             root: str | Path | None = None, runs_dir: str | Path = "runs", traces_dir: str | Path = "traces",
             agent_options: dict | None = None, channel: str = DEFAULT_CHANNEL,
             lessons_path: str | Path | None = None, isolation: str = DEFAULT_ISOLATION,
             serve_args: tuple[str, ...] = (), progress: Callable[[str], None] | None = None,
             force: bool = False) -> Trace:
    """Work one task with one agent under one bundle; returns the trace (archived when scored).

    The bundle is read from the registry once, here, at the task boundary (`resolve_bundle`;
    `force` runs an explicit bundle outside its scope). `agent` must be the condition's host
    kind. `trace.verified` says whether it entered `traces_dir`; `trace.run_dir` is the host
    run; `trace.selection` says which bundle was chosen and why.
    """
    if agent != condition.host:
        raise RunnerError(f"agent {agent!r} differs from the run condition's host {condition.host!r}",
                          hint="the run condition names the agent kind; pass the same")
    task_ctx = context_for(task, condition)
    with Registry(root) as registry:
        selection = resolve_bundle(registry, bundle_ref, channel, task_ctx, force=force)
    if progress is not None:
        progress(f"bundle {selection.ref}{' (FORCED outside its scope)' if selection.forced else ''}: "
                 f"{selection.reason}")
    trace = run_version(task, chosen_by(selection), condition, runs_dir=runs_dir, agent_options=agent_options,
                        lessons_path=lessons_path, isolation=isolation, serve_args=serve_args, progress=progress)
    if trace.verified:
        from ole.storage.traces import open_archive
        with open_archive(traces_dir) as archive:  # files, or the database `$OLE_STORAGE` names
            archive.append(trace)
    return trace


def run_bundle(task: TaskSpec, ref: str, bundle: Bundle, condition: RunCondition, **options: Any) -> Trace:
    """`run_version` for a caller holding a bare ref and bundle (no selection to record)."""
    return run_version(task, ChosenVersion(ref=ref, bundle=bundle), condition, **options)


def run_version(task: TaskSpec, chosen: ChosenVersion, condition: RunCondition, *,
                runs_dir: str | Path = "runs", agent_options: dict | None = None,
                lessons_path: str | Path | None = None, isolation: str = DEFAULT_ISOLATION,
                serve_args: tuple[str, ...] = (), progress: Callable[[str], None] | None = None,
                host_start: str = "warm") -> Trace:
    """Work one task under a version the caller already holds (no registry access); archives nothing.

    The trace records the version's ref, hash and selection. Used by `run_task` and by evaluation
    workers (`ole.jobs.run_job`), which get the version with their job (and judge scopes
    themselves: nothing is refused here). `host_start`: `warm` or `cold` (`HOST_STARTS`).
    """
    run_id = run_id_for(task, chosen.ref, condition.seed)
    base = Path(runs_dir) / run_id
    (base / "agent").mkdir(parents=True, exist_ok=True)
    say = progress or (lambda line: None)
    history: list[Iteration] = []
    ready: dict = {}
    scored = False
    with open(base / "host.stderr", "wb") as err:
        label = ("--model", f"{condition.host}:{condition.model}" if condition.model else condition.host)
        proc = start_host(_serve_command(task, base / "host", isolation, (*label, *serve_args)), err, task.env,
                          host_start)
        try:
            ready = _read_ready_line(proc, HOST_START_TIMEOUT_S, base / "host.stderr")
            say(f"host ready at {ready['url']} ({task.env}, profile {task.profile})")
            # the run's token, from the 0600 file the host named (never argv): every client of
            # this process for that URL sends it, a command agent gets it in its environment
            remember_credential(ready["url"], Credential.from_file(ready["token_file"], ready.get("auth_header_file")))
            client = HostClient(ready["url"])
            budget = int(client.info()["episode_budget"])
            result, wall = launch_agent(chosen, task, condition, url=ready["url"], workspace=Path(ready["workspace"]),
                                        log_dir=base / "agent", record=history.append, progress=say,
                                        lessons_path=lessons_path, agent_options=agent_options)
            client.close_run()
            say("finalizing (hidden validation and held-out evaluation)")
            scored = _await_run_json(proc, Path(ready["run_dir"]) / "run.json", HOST_FINALIZE_TIMEOUT_S)
        finally:
            if scored:
                _reap_later(proc)
            else:
                _stop(proc)
            if ready:
                forget_credential(ready["url"])
    run_json = Path(ready["run_dir"]) / "run.json"
    if not run_json.is_file():
        raise RunnerError(f"the host wrote no run.json in {run_json.parent}", hint="see host.stderr")
    trace = trace_from_run_json(run_json, run_id=run_id, task=task, condition=condition, chosen=chosen,
                                budget=budget, history=history, result=result, wall=wall, extras_dir=base / "agent")
    o = trace.outcome
    say(f"outcome {o.status}: held-out mean return {_num(o.final_score)}, normalized score {_num(o.normalized_score)}")
    return trace


def trace_from_run_json(run_json: Path, *, run_id: str, task: TaskSpec, condition: RunCondition,
                        chosen: ChosenVersion, budget: int, history: list[Iteration], result: AgentResult,
                        wall: float, extras_dir: Path) -> Trace:
    """The trace of a finalized run: the outcome from the host's run.json, the history from the agent,
    the version (ref, hash, selection) from `chosen`.

    Only a `completed` run with a final score is `verified` (and may enter the archive); the
    digest of the run.json it was read from is recorded with it.
    """
    doc = json.loads(Path(run_json).read_text())
    outcome = _outcome(doc, history, result, wall)
    return Trace(trace_id=run_id, created_at=utc_now(), task=task, condition=condition,
                 contract=contract(task, chosen.bundle, budget), bundle_name=chosen.name,
                 bundle_version=chosen.version, bundle_hash=chosen.content_hash, history=tuple(history),
                 outcome=outcome, run_dir=str(Path(run_json).parent), run_json_sha256=run_json_digest(run_json),
                 verified=outcome.status == "completed" and outcome.final_score is not None,
                 extras={k: str(Path(extras_dir) / v) for k, v in result.extras.items()},
                 selection=chosen.selection)
