"""Online evolution beside any harness: one `ole agent work --online` process = one stream task.

The harness (`evogym run`, `evogym suite run --jobs N`, the reference's command adapter, a
user's own loop) starts the agent inside a task's workspace with the `EVOPOLICYGYM_*`
variables. `work_task` turns that into one ask/tell of the shared online engine
(`ole.evolve.online`): at the task boundary it takes the channel's champion (activating what
was released since), the agent works the task under that bundle only, the run is finalized,
and the trace is built from the host's own `run.json` — found beside the workspace, read only
once the host reports the run finalized, and checked against the host's `/info`, never the
agent's account of itself. The trace is archived in the workspace and told to the engine,
which may then monitor, propose, gate and release; the harness's next task boundary (in this
or any other process) sees the result.

The pool seed in `run.json` lets OLE rerun the identical task (for monitoring after an
activation) only when the run used a known profile with the generated pools; otherwise the
task is recorded with profile `external` and never rerun. The agent itself never reads
`run.json`: only this driver does, after the run is over.
"""
from __future__ import annotations

import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from evogym.sandbox.isolation import DEFAULT_ISOLATION
from ole.agents.client import HostClient, HostError
from ole.errors import ValidationError
from ole.evolve.online import EXTERNAL_PROFILE, OnlineConfig, OnlineEvolution
from ole.runner import RunnerError, launch_agent, run_id_for, trace_from_run_json
from ole.trace import Iteration, RunCondition, TaskSpec, Trace

if TYPE_CHECKING:
    from ole.evolve.config import EvolveConfig
    from ole.gate import GateConfig
    from ole.proposers import Proposer
    from ole.registry import Registry

RUN_JSON_WAIT_S = 60.0
"""After the host reports the run finalized, how long to wait for its run.json to appear."""


def host_task(doc: dict, info: dict, workspace: Path) -> TaskSpec:
    """The task as the host recorded it in run.json, checked against its `/info`.

    Reproducible runs (a known profile and the generated pools for the recorded pool seed, no
    per-submit override) keep their profile; any other run gets profile `external`.
    """
    from evogym.errors import EvogymError
    from evogym.pools import PROFILES, pools_for
    env, budget = doc.get("env"), (doc.get("experiment_dimensions") or {}).get("episode_budget")
    if env != info["env_meta"].get("env") or budget != info.get("episode_budget"):
        raise RunnerError(f"run.json beside {workspace} describes env {env!r} budget {budget}, but the host serves "
                          f"{info['env_meta'].get('env')!r} budget {info.get('episode_budget')}",
                          hint="the workspace is not the host's run; run `ole agent work` inside the harness")
    budget = int(info["episode_budget"])  # equal to run.json's (checked just above)
    dims = doc.get("experiment_dimensions") or {}
    pool_seed, name = int(dims.get("pool_seed") or 0), str(doc.get("profile") or "")
    task = TaskSpec(env=env, profile=name if name in PROFILES else EXTERNAL_PROFILE, budget=budget, pool_seed=pool_seed)
    if task.profile == EXTERNAL_PROFILE:
        return task
    prof = PROFILES[name]
    versions = doc.get("versions") or {}
    try:
        hashes = pools_for(env, prof, pool_seed).hashes
    except EvogymError:
        return task.model_copy(update={"profile": EXTERNAL_PROFILE})
    same_pools = all(versions.get(k) == (v if v.startswith("sha256:") else f"sha256:{v}") for k, v in hashes.items())
    same_sizes = (dims.get("valid_size"), dims.get("heldout_size"),
                  dims.get("max_episodes_per_submit")) == (prof.valid, prof.heldout,
                                                           min(prof.max_per_submit or budget, budget))
    return task if same_pools and same_sizes else task.model_copy(update={"profile": EXTERNAL_PROFILE})


def finalized_run_json(client: HostClient, workspace: Path) -> tuple[Path, dict, dict]:
    """Finish the run if the agent left it open, wait for the host's finalization, read its run.json."""
    info = client.info()
    if not info["state"]["is_finalized"] and client.finish() != 200:
        raise RunnerError("the run is still open and the host refused POST /finish",
                          hint="let the agent spend the budget (the host finalizes at 0), or allow early finish")
    info = client.wait_finalized()
    path = Path(workspace).resolve().parent / "run.json"
    deadline = time.monotonic() + RUN_JSON_WAIT_S
    while not path.is_file():
        if time.monotonic() > deadline:
            raise RunnerError(f"the host reports the run finalized but wrote no {path}",
                              hint="is this harness's run directory layout `<run>/workspace` + `<run>/run.json`?")
        time.sleep(0.2)
    return path, json.loads(path.read_text()), info


def work_task(evo: OnlineEvolution, *, url: str, workspace: Path, condition: RunCondition, log_dir: Path,
              progress: Callable[[str], None] = lambda line: None) -> Trace:
    """Work the harness's task as one stream task: boundary, agent, verified trace, tell. Returns the trace."""
    from ole.registry.scopes import task_context
    client = HostClient(url)
    info = client.info()
    ctx = task_context(info["env_meta"]["env"], condition.host, int(info["episode_budget"]), condition.model)
    a = evo.ask(condition=condition, ctx=ctx)
    progress(f"task boundary: {a.chosen.ref} (scope {a.scope}) works this task ({info['env_meta'].get('env')})")
    history: list[Iteration] = []

    def record(it: Iteration) -> None:
        history.append(it)
        with open(log_dir / "iterations.jsonl", "a", encoding="utf-8") as f:
            f.write(it.model_dump_json() + "\n")

    brief = TaskSpec(env=info["env_meta"]["env"], profile=EXTERNAL_PROFILE, budget=info["episode_budget"])
    result, wall = launch_agent(a.chosen, brief, condition, url=url, workspace=Path(workspace), log_dir=log_dir,
                                record=record, progress=progress)
    try:
        run_json, doc, _ = finalized_run_json(client, workspace)
    except (HostError, RunnerError):
        evo.abandon()  # the task produced no verified outcome: nothing to tell
        raise
    task = host_task(doc, info, Path(workspace))
    trace = trace_from_run_json(run_json, run_id=run_id_for(task, a.chosen.ref, condition.seed), task=task,
                                condition=condition, chosen=a.chosen, budget=int(info["episode_budget"]),
                                history=history, result=result, wall=wall, extras_dir=log_dir)
    if trace.host_recorded:  # a failed stream task too: a monitor pair or a round may name it
        evo.e.archive.append(trace)
    o = trace.outcome
    progress(f"outcome {o.status}: final score {o.final_score} (from the host's run.json); telling the engine")
    evo.tell(trace)
    return trace


def open_stream(*, registry: Registry, workdir: Path, cfg: EvolveConfig, online: OnlineConfig, gate: GateConfig,
                proposer: Proposer, isolation: str = DEFAULT_ISOLATION,
                progress: Callable[[str], None] = lambda line: None) -> OnlineEvolution:
    """The online engine over a stream workspace shared by every task of the harness.

    The workspace fingerprint holds the gate suite, pools, seeds, gate config, proposer and the
    stream settings, so every process of one stream must be started with the same flags.
    """
    from ole.evolve.engine import open_engine
    from ole.executors import LocalExecutor
    from ole.jobs import run_job
    driver = {"mode": "online-harness", **online.model_dump(mode="json", exclude={"tasks", "stream_pool_base"})}
    engine = open_engine(registry=registry, workdir=workdir, traces_root=workdir / "traces", cfg=cfg,
                         evaluate=run_job, proposer=proposer, gate=gate, executor=LocalExecutor(cfg.workers),
                         isolation=isolation, progress=progress, driver=driver)
    return OnlineEvolution(engine, cfg, online, external=True)


def check_workdir(path: str) -> Path:
    """The stream's workspace: absolute, because the harness runs the agent inside each task's workspace."""
    p = Path(path).expanduser()
    if not p.is_absolute():
        raise ValidationError(f"--workdir {path!r} is relative, but the harness runs the agent in each task's "
                              "workspace", hint="pass an absolute path, e.g. --workdir \"$PWD/runs/online\"")
    return p
