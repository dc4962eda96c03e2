"""Timing hooks for `experiments/evolve_profile.py`, loaded by every Python process of a profiled run.

`evolve_profile.py` puts this folder first on PYTHONPATH and names a log file in
`EVOLVE_PROFILE_LOG`, so the `ole evolve` driver, its executor workers, every `evogym serve`
host and the host's hidden-evaluation workers import this module at start-up (the
sandboxed policy does not: its interpreter runs with `-I -S` and an empty environment).
It wraps a fixed list of functions right after their module is first imported and appends
one JSON line per call to the log (O_APPEND, one write per line, so processes do not
interleave). The same hooks serve any code tree that has these names, which is how an old
commit and the current tree are profiled alike; a name a tree lacks is skipped.

Nothing here changes what a wrapped function does or returns.
"""
from __future__ import annotations

import atexit
import functools
import importlib.abc
import importlib.machinery
import json
import os
import sys
import threading
import time

LOG = os.environ.get("EVOLVE_PROFILE_LOG")
_local = threading.local()
_totals: dict[str, list[float]] = {}


def emit(ev: str, **fields) -> None:
    """Append one record (wall-clock seconds since the epoch, pid) to the log."""
    if not LOG:
        return
    line = json.dumps({"ev": ev, "pid": os.getpid(), **fields}, default=str) + "\n"
    fd = os.open(LOG, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def _process_start() -> float | None:
    """Epoch seconds at which this process was created (fork or exec), from /proc."""
    try:
        with open("/proc/self/stat") as f:
            ticks = int(f.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/stat") as f:
            btime = next(int(line.split()[1]) for line in f if line.startswith("btime"))
        return btime + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, StopIteration):
        return None


def _acc() -> dict:
    if not hasattr(_local, "acc"):
        _local.acc = {"act_s": 0.0, "act_n": 0, "step_s": 0.0, "step_n": 0}
    return _local.acc


# ----- wrappers -------------------------------------------------------------------------------
def timed(name: str, describe=lambda args, kwargs, out: {}):
    """A decorator factory: one `name` record per call with t0, t1 and `describe(...)`'s fields."""
    def wrap(fn):
        @functools.wraps(fn)
        def inner(*args, **kwargs):
            t0 = time.time()
            out = fn(*args, **kwargs)
            try:
                fields = describe(args, kwargs, out)
            except Exception as exc:  # noqa: BLE001 - a description must never break the profiled call
                fields = {"describe_error": repr(exc)}
            emit(name, t0=t0, t1=time.time(), **fields)
            return out
        inner.__profiled__ = True
        return inner
    return wrap


def totalled(key: str):
    """Count and sum the wall time of calls (driver bookkeeping: registry, store), flushed at exit."""
    def wrap(fn):
        @functools.wraps(fn)
        def inner(*args, **kwargs):
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                slot = _totals.setdefault(key, [0, 0.0])
                slot[0] += 1
                slot[1] += time.perf_counter() - t0
        inner.__profiled__ = True
        return inner
    return wrap


@atexit.register
def _flush_totals() -> None:
    if _totals:
        emit("totals", t1=time.time(), totals={k: {"n": v[0], "s": v[1]} for k, v in _totals.items()})


def _job(args, kwargs, out):
    job = args[0] if args else kwargs["job"]
    return {"env": job.task.env, "pool": job.task.pool_seed, "ref": job.bundle_ref, "budget": job.task.budget,
            "run_dir": getattr(out, "run_dir", None)}


def _episodes_call(fn):
    @functools.wraps(fn)
    def inner(job, *args, **kwargs):
        acc = _acc()
        before = dict(acc)
        t0 = time.time()
        out = fn(job, *args, **kwargs)
        emit("episodes", t0=t0, t1=time.time(), code_dir=job.code_dir, n=len(job.seeds), record=job.record,
             start_s=out.start_s, episodes_s=out.episodes_s, failures=out.failures,
             **{k: acc[k] - before[k] for k in acc})
        return out
    inner.__profiled__ = True
    return inner


def _act(fn):
    @functools.wraps(fn)
    def inner(self, obs):
        t0 = time.perf_counter()
        try:
            return fn(self, obs)
        finally:
            acc = _acc()
            acc["act_s"] += time.perf_counter() - t0
            acc["act_n"] += 1
    inner.__profiled__ = True
    return inner


def _make_env(fn):
    @functools.wraps(fn)
    def inner(*args, **kwargs):
        env = fn(*args, **kwargs)
        step = env.step

        def timed_step(action):
            t0 = time.perf_counter()
            try:
                return step(action)
            finally:
                acc = _acc()
                acc["step_s"] += time.perf_counter() - t0
                acc["step_n"] += 1
        env.step = timed_step
        return env
    inner.__profiled__ = True
    return inner


def _evaluate_hook(fn):
    @functools.wraps(fn)
    def inner(jobs, *args, **kwargs):
        t0 = time.time()
        out = fn(jobs, *args, **kwargs)
        emit("hidden", t0=t0, t1=time.time(), n_jobs=len(jobs), episodes=sum(len(j.seeds) for j in jobs),
             seeds=len(jobs[0].seeds) if jobs else 0, code_dir=jobs[0].code_dir if jobs else None)
        return out
    inner.__profiled__ = True
    return inner


def _methods(cls, prefix: str) -> None:
    for name, value in list(vars(cls).items()):
        if not name.startswith("_") and callable(value) and not getattr(value, "__profiled__", False):
            setattr(cls, name, totalled(f"{prefix}.{name}")(value))


def _patch_attr(owner, name: str, make) -> None:
    fn = getattr(owner, name, None)
    if fn is not None and not getattr(fn, "__profiled__", False):
        setattr(owner, name, make(fn))


def _patch(module) -> None:
    name = module.__name__
    if name == "ole.jobs":
        _patch_attr(module, "run_job", timed("run_job", _job))
    elif name == "ole.runner":
        _patch_attr(module, "run_version", timed("run_bundle", lambda a, k, out: {
            "run_dir": out.run_dir, "env": out.task.env, "wall_agent": out.outcome.wall_s}))
        _patch_attr(module, "_read_ready_line", timed("ready", lambda a, k, out: {"run_dir": out.get("run_dir"),
                                                                                  "url": out.get("url")}))
        _patch_attr(module, "work_agent", timed("agent", lambda a, k, out: {"workspace": str(a[2].workspace)}))
        _patch_attr(module, "trace_from_run_json", timed("read_run_json", lambda a, k, out: {"run_dir": out.run_dir}))
    elif name == "ole.agents.client":
        _patch_attr(module.HostClient, "submit", timed("submit", lambda a, k, out: {"url": a[0].url}))
    elif name == "evogym.host":
        _patch_attr(module.Host, "__init__", timed("host_init", lambda a, k, out: {"run_dir": str(a[0].run.root)}))
    elif name == "evogym.finalize":
        _patch_attr(module, "finalize", timed("finalize", lambda a, k, out: {"run_dir": str(a[0].run.root)}))
        _patch_attr(module, "_evaluate", _evaluate_hook)
        _patch_attr(module, "_evaluate_here", _evaluate_hook)  # the held-out job, in the host's process
    elif name == "evogym.rollout":
        _patch_attr(module, "run_episodes", _episodes_call)
    elif name == "evogym.sandbox.process":
        _patch_attr(module.PolicyProcess, "act", _act)
    elif name == "evogym.envs":
        _patch_attr(module, "make_env", _make_env)
    elif name == "ole.registry":
        _methods(module.Registry, "registry")
    elif name == "ole.evolve.store":
        _methods(module.EvaluationStore, "store")
    elif name == "ole.paired":
        _patch_attr(module.PairedEvaluation, "_keep", totalled("archive._keep"))
        _patch_attr(module.PairedEvaluation, "run", timed("batch", lambda a, k, out: {"results": len(out)}))


PATCHED = {"ole.jobs", "ole.runner", "ole.agents.client", "evogym.host", "evogym.finalize", "evogym.rollout",
           "evogym.sandbox.process", "evogym.envs", "ole.registry", "ole.evolve.store", "ole.paired"}


class _Loader(importlib.abc.Loader):
    def __init__(self, inner) -> None:
        self.inner = inner

    def create_module(self, spec):
        return self.inner.create_module(spec)

    def exec_module(self, module) -> None:
        self.inner.exec_module(module)
        _patch(module)


class _Finder(importlib.abc.MetaPathFinder):
    """Finds nothing itself: wraps the loader of the modules in PATCHED."""

    def find_spec(self, fullname, path, target=None):
        if fullname not in PATCHED:
            return None
        for finder in sys.meta_path:
            if finder is self:
                continue
            spec = finder.find_spec(fullname, path, target) if hasattr(finder, "find_spec") else None
            if spec is not None and spec.loader is not None:
                spec.loader = _Loader(spec.loader)
                return spec
        return None


if LOG:
    sys.meta_path.insert(0, _Finder())
    emit("proc", t_created=_process_start(), t_site=time.time(), ppid=os.getppid(), argv=sys.argv[:4],
         exe=sys.executable)
    if hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=lambda: emit("proc", t_created=_process_start(), t_site=time.time(),
                                                        ppid=os.getppid(), argv=["<fork>"], exe=sys.executable))
