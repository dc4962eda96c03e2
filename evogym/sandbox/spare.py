"""Sandboxes started ahead for the next submits: the fixed start-up cost off the request's path.

Starting a policy sandbox costs far more than most submits' episodes: bubblewrap's
namespaces and mounts, a fresh interpreter, the worker's rlimits and seccomp filter,
and `import numpy` (~130-150 ms of CPU; 0.25-0.45 s of wall time on the loaded 2-core
project machine; `experiments/results/submit_latency.md`). `Spare` does all of that
ahead of time, on its own thread: when the host opens, and right before each submit's
episodes, it tops up to `DEPTH` sandboxes brought up to "worker waiting for its start
request", each with an empty staging directory bound read-only at `/policy`. A submit
takes the oldest, copies its snapshot into that directory (which is renamed into place
as `checkpoints/submit_NNN`, so the bound directory *is* the checkpoint) and sends start.

What still holds, because a spare is an ordinary `PolicyProcess` launched early:
one fresh process, namespace set, private `/tmp` and cgroup per submit (a spare serves
exactly one submit and is never reused: P19); the same argv, limits and environment as
a cold start; nothing of the policy's is read before start(); the bound directory is
the submit's own checkpoint and nothing else. What differs: the worker has imported
`numpy` (and the numpy/scipy modules the previous checkpoint imports) before the
policy's code runs, as the in-process reference host always had. Where a snapshot
could shadow one of the modules that preload added (a top-level `random.py`, a
`numpy/` directory), the submit starts cold instead, so such a policy sees exactly
what it saw before.

Threads: bubblewrap's `--die-with-parent` ties a sandbox to the thread that forked it,
so every spare is launched by this keeper's long-lived thread, which also reaps the
sandboxes that submits are done with (`retire`), off the request's path.
"""
from __future__ import annotations

import ast
import collections
import os
import queue
import shutil
import threading
from concurrent.futures import Future
from pathlib import Path

from evogym import pyast
from evogym.sandbox.process import Limits, PolicyProcess

__all__ = ["Spare", "predict_preload", "shadowed"]

STAGE_PREFIX = ".spare-"
STAGE_SUFFIX = ".tmp"
"""Staging directories are `.spare-<hex>.tmp` beside the checkpoints: the start-up sweep of
the run directory removes them after a crash, and no reader matches `submit_*`."""
ALWAYS_PRELOAD = ("numpy",)
"""Imported by every spare: the import nearly every policy makes."""
MAX_PRELOAD = 16
"""Most modules one spare preloads (the worker caps it too)."""
PRELOAD_ROOTS = ("numpy", "scipy")
"""Packages whose modules a spare may preload (the worker's `PRELOADABLE`)."""
DEPTH = 2
"""Spares kept started (or starting). Two, so a submit sent the moment the last answer
arrived still finds one up: one start-up (0.25-0.45 s under load) can take longer than a
1-episode submit (median spare wait 60 ms with one, 1-episode Acrobot back to back;
experiments/results/submit_latency.md). Each waiting spare holds ~35 MB (an idle
interpreter with numpy)."""
JOIN_S = 10.0
"""How long close() waits for the keeper thread to kill and reap what it holds."""


def predict_preload(code_dir: Path | None) -> tuple[str, ...]:
    """What the next submit's policy will likely import, from the last checkpoint's source:
    `ALWAYS_PRELOAD` plus its static numpy/scipy imports (the agent's code, never any
    state of a policy process)."""
    names = list(ALWAYS_PRELOAD)
    if code_dir is not None:
        for path in sorted(Path(code_dir).rglob("*.py")):
            try:
                tree = pyast.parse(path.read_bytes())
            except (OSError, SyntaxError, ValueError, RecursionError, MemoryError):
                continue
            for node in ast.walk(tree):
                if isinstance(node, ast.Import):
                    names += [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names.append(node.module)
                    names += [f"{node.module}.{a.name}" for a in node.names if node.module == "scipy"]
    keep = [n for n in dict.fromkeys(names) if n.split(".")[0] in PRELOAD_ROOTS]
    return tuple(keep[:MAX_PRELOAD])


def shadowed(code_dir: Path, modules) -> list[str]:
    """Top-level entries of a snapshot that could be imported under one of `modules`
    (any file or directory named `<module>` or `<module>.<anything>`)."""
    wanted = set(modules)
    return sorted(e.name for e in os.scandir(code_dir) if e.name.split(".")[0] in wanted)


class Spare:
    """Keeps one sandbox started ahead of the submit that will use it (see module doc).

    `refill()` tops up to `depth` spares in the background; `take()` hands over the oldest
    (waiting for it if still starting) or returns None, and the caller starts cold;
    `retire(proc)` kills a used or unused sandbox at once and reaps it on the keeper
    thread; `close()` ends everything. Used from one request thread at a time (the
    judge's lock), except close(), which any thread may call.
    """

    def __init__(self, stage_parent: Path, isolation: str, limits: Limits, depth: int = DEPTH) -> None:
        self.stage_parent = Path(stage_parent)
        self.isolation, self.limits, self.depth = isolation, limits, depth
        self.counts = {"prepared": 0, "taken": 0, "failed": 0, "died_idle": 0}
        """How spares fared: started, handed to a submit, failed to start, found dead at take."""
        self.last_failure: str | None = None
        self.preload = True
        """Whether spares preload; a failed start turns it off (a memory limit too small for
        numpy is the one failure seen), and a second failure turns spares off (`disabled`)."""
        self.disabled = False
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._slots: collections.deque[Future] = collections.deque()
        self._preparing: PolicyProcess | None = None
        self._closed = False
        self._thread = threading.Thread(target=self._serve, name="evogym-spare", daemon=True)
        self._thread.start()

    # -- the request thread ------------------------------------------------------------

    def refill(self, source: Path | None = None, wanted: int | None = None) -> None:
        """Start spares in the background until `depth` (at most `wanted`: the submits the
        budget still allows) are waiting or starting; they preload what `source` (the
        latest checkpoint, read on the keeper thread) imports (`predict_preload`)."""
        target = self.depth if wanted is None else max(0, min(self.depth, wanted))
        with self._lock:
            while not (self._closed or self.disabled) and len(self._slots) < target:
                future: Future[PolicyProcess | None] = Future()
                self._slots.append(future)
                self._jobs.put(("prepare", future, source))

    def keep(self, n: int, source: Path | None = None) -> None:
        """Keep `n` spares waiting or starting: the newest beyond `n` are discarded, and more
        start (in the background) up to `n`. The run's last use: when no submit can come, a
        host keeps one for its held-out evaluation (`evogym.finalize`)."""
        with self._lock:
            extra = [self._slots.pop() for _ in range(max(0, len(self._slots) - n))]
            for future in extra:
                self._jobs.put(("discard", future))
        self.refill(source, n)

    def take(self) -> PolicyProcess | None:
        """The waiting spare (after its start-up, if that is still running), or None.

        Waiting is never slower than a cold start, which would do the same work from
        the beginning; prepare()'s own init deadline bounds it."""
        with self._lock:
            future = self._slots.popleft() if self._slots else None
        if future is None:
            return None
        try:
            proc = future.result(timeout=self.depth * (self.limits.init_wall_s + JOIN_S))
        except TimeoutError:  # the keeper is stuck: start cold, and retire the spare if it ever comes
            future.add_done_callback(self._retire_late)
            return None
        if proc is None:
            return None
        if not proc.alive():
            self.counts["died_idle"] += 1
            self.retire(proc)
            return None
        self.counts["taken"] += 1
        return proc

    def waiting(self, timeout: float | None = None) -> PolicyProcess | None:
        """The spare the next take() gets, once it is up, left in place (None: no spare, or
        it failed). For benchmarks and tests that must know a spare is ready."""
        with self._lock:
            future = self._slots[0] if self._slots else None
        return None if future is None else future.result(timeout)

    def settle(self, timeout: float | None = None) -> None:
        """Wait until every spare asked for so far has finished starting (up or failed). For
        benchmarks that time a submit made after the agent thought long enough."""
        with self._lock:
            futures = list(self._slots)
        for future in futures:
            future.result(timeout)

    def retire(self, proc: PolicyProcess) -> None:
        """SIGKILL `proc` now; reap it, remove its cgroups and (if never used) its staging
        directory on the keeper thread. Idempotent."""
        proc.interrupt()
        with self._lock:
            if not self._closed:
                self._jobs.put(("close", proc))
                return
        self._close(proc)  # the keeper is gone: clean up here

    def _retire_late(self, future: Future[PolicyProcess | None]) -> None:
        """A spare that came up after take() gave up waiting for it: retired unused."""
        proc = future.result()
        if proc is not None:
            self.retire(proc)

    def close(self) -> None:
        """Kill the waiting or starting spare and everything being reaped; idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            futures, self._slots = list(self._slots), collections.deque()
            starting = self._preparing
        if starting is not None:
            starting.interrupt()
        for future in futures:
            self._jobs.put(("discard", future))
        self._jobs.put(("stop",))
        self._thread.join(JOIN_S)

    # -- the keeper thread -------------------------------------------------------------

    def _serve(self) -> None:
        while True:
            job = self._jobs.get()
            if job[0] == "stop":
                return
            if job[0] == "prepare":
                _, future, source = job
                try:
                    future.set_result(self._prepare(source))
                except BaseException:  # never leave take() waiting
                    future.set_result(None)
                    raise
                continue
            proc = job[1] if job[0] == "close" else job[1].result()
            if proc is not None:
                self._close(proc)

    def _prepare(self, source: Path | None) -> PolicyProcess | None:
        with self._lock:
            if self._closed:
                return None
        stage = self.stage_parent / f"{STAGE_PREFIX}{os.urandom(8).hex()}{STAGE_SUFFIX}"
        proc = None
        try:
            stage.mkdir()
            proc = PolicyProcess(stage, isolation=self.isolation, limits=self.limits)
            with self._lock:
                self._preparing = proc
                closed = self._closed
            result = None if closed else proc.prepare(predict_preload(source) if self.preload else ())
            failure = None if result is None or result.ok else f"{result.category}: {result.message}"
        except Exception as exc:  # noqa: BLE001 - a host fault: the cold start reports it
            failure = f"{type(exc).__name__}: {exc}"
        finally:
            with self._lock:
                self._preparing = None
                closed = self._closed
        if failure is None and not closed:
            self.counts["prepared"] += 1
            return proc
        if failure is not None:
            self.counts["failed"] += 1
            self.last_failure = failure
            self.disabled, self.preload = not self.preload, False
        if proc is not None:
            self._close(proc)
        else:
            shutil.rmtree(stage, ignore_errors=True)
        return None

    def _close(self, proc: PolicyProcess) -> None:
        proc.close()
        stage = proc.code_dir
        if stage.parent == self.stage_parent.resolve() and stage.name.startswith(STAGE_PREFIX) \
                and stage.name.endswith(STAGE_SUFFIX):
            shutil.rmtree(stage, ignore_errors=True)  # never used: still the empty staging dir
