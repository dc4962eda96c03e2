"""Per-step recording of submit episodes, kept off the stepping loop.

While an episode runs the host only stores what it must keep: the observation the
policy saw, copied into a preallocated array (one per key for dict observations; a
plain list when the observation has no fixed numeric shape), and one tuple per step
of (raw action, reward, terminated, truncated, info, action_invalid). Nothing is
converted or formatted per step. `EpisodeData` is the picklable result; its files
(`feedback.episode_files`) are made once per episode, by `Formatter` in a helper
process when this machine has a spare core, so the JSON of one episode is written
while the next one steps.
"""
from __future__ import annotations

import atexit
import multiprocessing
import os
import threading
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field

import numpy as np

INITIAL_ROWS = 256
"""Rows allocated for an episode's observations at first; doubled when full (a 27 MB
CarRacing episode is allocated only if it runs that long)."""
_EMPTY_INFO: dict = {}


class ObsStore:
    """Observations of one episode: a growing array while they share one numeric shape
    and dtype, else a list of the observations themselves."""

    __slots__ = ("buf", "n", "items", "capacity")

    def __init__(self, capacity: int) -> None:
        self.buf: np.ndarray | None = None
        self.n = 0
        self.items: list | None = None
        self.capacity = capacity

    def add(self, obs) -> None:
        buf = self.buf
        if buf is not None and type(obs) is np.ndarray and obs.shape == buf.shape[1:] and obs.dtype == buf.dtype:
            n = self.n
            if n == len(buf):
                buf = self.buf = np.concatenate([buf, np.empty_like(buf)])
            buf[n] = obs
            self.n = n + 1
            return
        if buf is None and self.items is None and _fixed_numeric(obs):
            self.buf = np.empty((min(self.capacity, INITIAL_ROWS), *obs.shape), dtype=obs.dtype)
            self.add(obs)
            return
        if self.items is None:  # the shape or type changed: keep everything as a list from here
            self.items = [buf[i].copy() for i in range(self.n)] if buf is not None else []
            self.buf = None
        self.items.append(obs.copy() if type(obs) is np.ndarray else obs)

    def values(self) -> np.ndarray | list:
        """The stacked array (rows = steps) or the list of observations."""
        if self.items is not None:
            return self.items
        if self.buf is None:
            return []
        return self.buf[:self.n]


def _fixed_numeric(obs) -> bool:
    return type(obs) is np.ndarray and obs.dtype.kind in "biuf" and obs.size > 0


class DictObsStore:
    """Dict observations: one `ObsStore` per key while every step has the same keys."""

    __slots__ = ("keys", "stores", "fallback")

    def __init__(self, capacity: int, first: dict) -> None:
        self.keys = tuple(first)
        self.stores = [ObsStore(capacity) for _ in self.keys]
        self.fallback: list | None = None

    def add(self, obs) -> None:
        if self.fallback is None and type(obs) is dict and tuple(obs) == self.keys:
            for store, value in zip(self.stores, obs.values()):
                store.add(value)
            return
        if self.fallback is None:
            self.fallback = self.rows()
        self.fallback.append(_copy_obs(obs))

    def rows(self) -> list[dict]:
        columns = [s.values() for s in self.stores]
        n = len(columns[0]) if columns else 0
        return [{k: col[i] for k, col in zip(self.keys, columns)} for i in range(n)]

    def values(self) -> dict | list:
        """{key: stacked values} while the keys held, else the list of dicts."""
        if self.fallback is not None:
            return self.fallback
        return {k: s.values() for k, s in zip(self.keys, self.stores)}


def _copy_obs(obs):
    if type(obs) is np.ndarray:
        return obs.copy()
    if type(obs) is dict:
        return {k: _copy_obs(v) for k, v in obs.items()}
    return obs


def _copy_info(info: dict) -> dict:
    """A copy that later steps of the env cannot change (arrays and containers copied)."""
    if not info:
        return _EMPTY_INFO
    out = {}
    for key, value in info.items():
        t = type(value)
        out[key] = value.copy() if t is np.ndarray or t is dict or t is list else value
    return out


class EpisodeRecorder:
    """Collects one episode's steps; `data()` hands them over for writing."""

    __slots__ = ("obs", "steps", "capacity")

    def __init__(self, capacity: int) -> None:
        self.obs: ObsStore | DictObsStore | None = None
        self.steps: list[tuple] = []
        self.capacity = capacity

    def add(self, obs, raw, reward: float, terminated, truncated, info: dict, invalid: bool) -> None:
        """Record step t: `obs` is what the policy saw, `raw` its answer as it arrived."""
        store = self.obs
        if store is None:
            store = self.obs = DictObsStore(self.capacity, obs) if type(obs) is dict else ObsStore(self.capacity)
        store.add(obs)
        self.steps.append((raw, reward, terminated, truncated, _copy_info(info), invalid))


@dataclass
class EpisodeData:
    """Everything one episode directory is made from (picklable)."""

    observations: object = None
    """`ObsStore.values()` / `DictObsStore.values()`, or [] for an episode without steps."""
    steps: list = field(default_factory=list)
    """(raw action, reward, terminated, truncated, info, action_invalid) per step."""
    stdout: str = ""
    stderr: str = ""
    errors: list = field(default_factory=list)
    """JSON lines of error.txt."""


class Formatter:
    """Makes episode files, in a helper process when there is a spare core.

    `submit(data)` returns a Future of {file name: bytes}. The helper is started once
    per host process and reused; a machine with one usable core formats inline.
    """

    _lock = threading.Lock()
    _pool: ProcessPoolExecutor | None = None

    @classmethod
    def parallel(cls) -> bool:
        return len(os.sched_getaffinity(0)) > 1

    @classmethod
    def prewarm(cls) -> None:
        """Start the helper now (in the background) so the first submit does not wait for it."""
        if cls.parallel():
            cls._executor().submit(int)

    @classmethod
    def _executor(cls) -> ProcessPoolExecutor:
        with cls._lock:
            if cls._pool is None:
                from evogym.rollout import die_with_parent

                cls._pool = ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("forkserver"),
                                                initializer=die_with_parent)
                atexit.register(cls.shutdown)
            return cls._pool

    @classmethod
    def shutdown(cls) -> None:
        with cls._lock:
            pool, cls._pool = cls._pool, None
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)

    @classmethod
    def submit(cls, data: EpisodeData) -> "PendingFiles":
        future = None
        if data.steps and cls.parallel():
            try:
                future = cls._executor().submit(_episode_files, data)
            except RuntimeError:  # the pool broke or shut down (interpreter exit): format here
                cls.shutdown()
        return PendingFiles(data, future)


class PendingFiles:
    """The files of one episode, being made; `result()` waits (or makes them here if the
    helper process died: a lost helper costs time, never feedback)."""

    __slots__ = ("data", "future")

    def __init__(self, data: EpisodeData, future: Future | None) -> None:
        self.data, self.future = data, future

    def result(self) -> dict[str, bytes]:
        if self.future is not None:
            try:
                return self.future.result()
            except BrokenProcessPool:
                Formatter.shutdown()
        return _episode_files(self.data)


def _episode_files(data: EpisodeData) -> dict[str, bytes]:
    from evogym.feedback import episode_files

    return episode_files(data)
