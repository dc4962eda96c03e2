"""Evaluation jobs: one bundle works one task under one run condition, wherever a worker runs it.

A job is a picklable value that carries the chosen version itself (`ole.chosen.ChosenVersion`),
so a worker (a local process, a Ray task on another machine) needs no registry: it runs the task
through `ole.runner.run_version` under exactly the bundle the driver chose and returns the trace.
Workers write nothing that the driver reads back: the driver stores the result and
archives the trace (`ole.paired.PairedEvaluation`), so a worker that dies after finishing
its run, and is retried, cannot leave a second copy behind.
"""
from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict

from evogym.sandbox.isolation import DEFAULT_ISOLATION, Isolation
from ole.bundle import Bundle
from ole.chosen import ChosenVersion
from ole.trace import RunCondition, TaskSpec, Trace

EVAL_CACHE_DIR = ".eval-cache"
"""Folder under a job's `runs_root` where its hosts share hidden-evaluation results (`evogym.evalcache`):
every run under one runs root (an evolution's champion and challengers on the same pools) validates
an identical program on identical seeds once. It sits beside the run directories, never inside a
workspace, and holds hashes, returns and lengths only."""
EXECUTIONS = ("fast", "baseline")
"""How a job's run is executed — never what it computes (same inputs, same run.json outcome:
`tests/ole/test_runner.py`, `experiments/evolve_profile.py` compares whole evolves):

- `fast` (default): the host is forked from the worker's warm template (`evogym.warm`), hidden
  evaluation results are shared by every run under one runs root (`EVAL_CACHE_DIR`), and a batch
  starts its longest runs first (`ole.paired.longest_first`);
- `baseline`: how runs were executed before issue 21 made them cheap — a fresh `evogym serve`
  process per run, nothing shared between runs, jobs started in the order the driver listed them.
  Kept so the saving can be measured on the same decision, side by side, and to rule the fast
  path in or out when a run misbehaves. The host's own per-submit changes (the shared-memory
  policy transport, prestarted sandboxes, reused static checks) are not switchable: for those,
  `experiments/run_fixed_cost.py` and `make bench` compare against older commits directly."""
HOST_FAULT_RETRIES = 2
"""Extra attempts of a run whose host failed (not the agent: that is a recorded result). Under load
the host can exit between finalization and the runner's last poll (seen once in ~200 runs on 2 cores)."""


class EvalJob(BaseModel):
    """One evaluation run: a chosen version works a task under a condition. Picklable, Ray-ready."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    chosen: ChosenVersion
    """The version to run (ref, bundle, selection): the worker runs this copy and never looks the
    ref up; the trace records its ref, hash and selection."""
    task: TaskSpec
    """The task to work."""
    condition: RunCondition
    """The run condition (agent kind, seed, model, command line)."""
    runs_root: str
    """Folder under which the host run directory is created (on the worker's machine)."""
    isolation: Isolation = DEFAULT_ISOLATION
    """Sandbox isolation of the policy process."""
    execution: Literal["fast", "baseline"] = "fast"
    """How the run is executed (`EXECUTIONS`); never changes its result."""

    @property
    def bundle_ref(self) -> str:
        """Registered ref of the bundle (`name@version`)."""
        return self.chosen.ref

    @property
    def bundle(self) -> Bundle:
        """The bundle the job runs."""
        return self.chosen.bundle

    @property
    def bundle_hash(self) -> str:
        """Content hash of the bundle (the store key's first part)."""
        return self.chosen.content_hash


def run_job(job: EvalJob) -> Trace:
    """The default evaluation: one real benchmark run through `ole.runner` (top-level, picklable).

    A host fault (`RunnerError`, `HostError`) is retried up to HOST_FAULT_RETRIES times with a
    fresh run directory; the last fault propagates. The trace is returned, not archived.
    """
    from ole.agents.client import HostError
    from ole.runner import RunnerError, run_version

    fast = job.execution == "fast"
    serve_args = ("--eval-cache", str(Path(job.runs_root) / EVAL_CACHE_DIR)) if fast else ()

    def attempt() -> Trace:
        return run_version(job.task, job.chosen, job.condition, runs_dir=job.runs_root, isolation=job.isolation,
                           serve_args=serve_args, host_start="warm" if fast else "cold")
    for _ in range(HOST_FAULT_RETRIES):
        try:
            return attempt()
        except (RunnerError, HostError):
            continue
    return attempt()
