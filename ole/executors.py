"""Where evaluation jobs run: local processes by default, Ray as an optional extra.

A job is a picklable value and the evaluation function a top-level function, so the
same (function, job) gives the same trace wherever it runs; the executor only decides
where. Results come back as they complete, so the caller can store each one at once
(an interrupted batch loses at most the runs in flight). Only the driver writes to
the registry; executors never do.

Measured on the project machine (`experiments/results/paired_scaling.md`): plain processes
scale ~1.9× on 2 cores; Ray runs the same jobs after a start of several seconds, so `local`
is the default and Ray is for spreading a batch over machines.
"""
from __future__ import annotations

import abc
import signal
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from typing import Any, TypeVar

from evogym.mpcontext import forkserver
from ole.errors import OleError, ValidationError

J = TypeVar("J")
R = TypeVar("R")
EXECUTORS = ("local", "ray")
MAX_WORKERS = 64
"""Upper bound on parallel workers of one executor (each job starts a host and a sandbox)."""


class ExecutorUnavailable(OleError):
    """The requested executor cannot start here (an optional extra is missing)."""


class Executor(abc.ABC):
    """Runs `fn(job)` for every job and yields `(index, result)` as each completes."""

    kind: str = "executor"
    workers: int = 1

    @abc.abstractmethod
    def run(self, fn: Callable[[J], R], jobs: Sequence[J]) -> Iterator[tuple[int, R]]:
        """Yield (job index, result) in completion order; a job's exception propagates."""

    def map(self, fn: Callable[[J], R], jobs: Sequence[J]) -> list[R]:
        """All results in job order."""
        out: dict[int, R] = dict(self.run(fn, jobs))
        return [out[i] for i in range(len(jobs))]

    def close(self) -> None:
        """Release workers; idempotent."""

    def __enter__(self) -> "Executor":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class LocalExecutor(Executor):
    """Serial in this process for one worker; a forkserver process pool otherwise."""

    kind = "local"

    def __init__(self, workers: int = 1) -> None:
        if not 1 <= workers <= MAX_WORKERS:
            raise ValidationError(f"workers must be 1..{MAX_WORKERS}, got {workers}", hint="pass --workers 2")
        self.workers = workers
        self._pool: ProcessPoolExecutor | None = None

    def run(self, fn: Callable[[J], R], jobs: Sequence[J]) -> Iterator[tuple[int, R]]:
        if self.workers == 1 or len(jobs) <= 1:
            for i, job in enumerate(jobs):
                yield i, fn(job)
            return
        if self._pool is None:
            ctx = forkserver()
            self._pool = ProcessPoolExecutor(max_workers=self.workers, mp_context=ctx,
                                             initializer=_interruptible_worker)
        pending: dict[Future, int] = {self._pool.submit(fn, job): i for i, job in enumerate(jobs)}
        try:
            while pending:
                done, _ = wait(pending, return_when=FIRST_COMPLETED)
                for fut in sorted(done, key=lambda f: pending[f]):
                    yield pending.pop(fut), fut.result()
        except BaseException:  # interrupted or abandoned: stop the runs in flight, not only the queue
            for fut in pending:
                fut.cancel()
            self._interrupt_workers()
            raise
        finally:
            for fut in pending:
                fut.cancel()

    def _interrupt_workers(self) -> None:
        """SIGTERM each live worker; inside, that is a KeyboardInterrupt, so its runner stops its host."""
        for proc in list(getattr(self._pool, "_processes", {}).values()):
            if proc.is_alive():
                proc.terminate()

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None


def _raise_interrupt(signum, frame) -> None:
    raise KeyboardInterrupt


def _interruptible_worker() -> None:
    """Pool-worker initializer: SIGTERM (sent by `_interrupt_workers`) takes the Ctrl-C path."""
    signal.signal(signal.SIGTERM, _raise_interrupt)


def _ray() -> Any:
    try:
        import ray  # noqa: PLC0415 — optional extra, imported only when asked for
    except ImportError:
        from ole.extras import install_hint
        raise ExecutorUnavailable("the Ray executor needs the `ray` package, which is not installed",
                                  hint=install_hint("ray")) from None
    return ray


RAY_TASK_RETRIES = 3
"""Attempts Ray makes after a worker process died mid-job (killed, OOM, lost node). A job is a pure
value and its worker writes nothing the driver reads, so a retry cannot double-count: the driver
receives exactly one result per job. An exception raised by the job itself is not retried."""
RAY_OBJECT_STORE_BYTES = 256 << 20
"""Object store of a local Ray started here: jobs and traces are small, and the default (30% of RAM)
would take memory the hosts and sandboxes need."""


class RayExecutor(Executor):
    """Jobs as Ray tasks, on a local Ray started here, an already initialized Ray, or a cluster at `address`.

    One CPU per job (each job runs one host and its sandboxed policy processes). Interrupting
    a batch cancels its tasks; inside a task that is a KeyboardInterrupt, so its runner stops
    its host as on Ctrl-C.
    """

    kind = "ray"

    def __init__(self, workers: int = 1, address: str | None = None) -> None:
        self.ray = _ray()
        self.workers = workers
        self._started = False
        if not self.ray.is_initialized():
            kwargs: dict[str, Any] = ({"address": address} if address else
                                      {"num_cpus": workers, "object_store_memory": RAY_OBJECT_STORE_BYTES})
            self.ray.init(include_dashboard=False, log_to_driver=False, **kwargs)
            self._started = True

    def run(self, fn: Callable[[J], R], jobs: Sequence[J]) -> Iterator[tuple[int, R]]:
        remote = self.ray.remote(num_cpus=1, max_retries=RAY_TASK_RETRIES, retry_exceptions=False)(fn)
        pending = {remote.remote(job): i for i, job in enumerate(jobs)}
        try:
            while pending:
                done, _ = self.ray.wait(list(pending), num_returns=1)
                for ref in done:
                    yield pending.pop(ref), self.ray.get(ref)
        finally:  # interrupted or abandoned: stop the runs in flight, not only the queue
            for ref in pending:
                self.ray.cancel(ref)

    def close(self) -> None:
        if self._started:
            self.ray.shutdown()
            self._started = False


def make_executor(kind: str = "local", *, workers: int = 1, address: str | None = None) -> Executor:
    """The executor named on the command line (`--executor local|ray [--address ...]`)."""
    if kind == "local":
        if address:
            raise ValidationError("--address applies to --executor ray only", hint="drop --address")
        return LocalExecutor(workers)
    if kind == "ray":
        return RayExecutor(workers, address)
    raise ValidationError(f"unknown executor {kind!r}; expected one of {list(EXECUTORS)}",
                          hint="pass --executor local or --executor ray")
