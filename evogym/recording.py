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
import os
import pickle
import subprocess
import sys
import threading
from concurrent.futures import CancelledError, Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

INITIAL_ROWS = 256
"""Rows allocated for an episode's observations at first; doubled when full (a 27 MB
CarRacing episode is allocated only if it runs that long)."""
HELPER_EXIT_S = 5.0
"""How long shutdown waits for the formatter helper to exit after its stdin closed."""
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


_MUTABLE = frozenset({np.ndarray, dict, list})


def _copy_info(info: dict) -> dict:
    """A copy that later steps of the env cannot change (arrays and containers copied)."""
    out = dict(info)
    if not _MUTABLE.isdisjoint(map(type, out.values())):
        for key, value in out.items():
            if type(value) in _MUTABLE:
                out[key] = value.copy()
    return out


ACTION_VALUES = 4096
"""Most values (numbers, strings, containers) of one recorded action, unless the action space
itself has more: beyond it the trajectory keeps a one-line description instead (issue 18: a
10^6-float answer per step made 40 MB of trajectory and 695 MB of host memory in 8 steps)."""
ACTION_DEPTH = 32
"""Deepest nesting of a recorded action (a list nested 800 deep made pickling it for the
formatter raise RecursionError); real action spaces nest a few levels."""
ACTION_TEXT = 4096
"""Most characters of text in one recorded action."""
_SCALARS = frozenset({int, float, bool, type(None)})
ACTION_INT_BITS = 64
"""Widest integer a recorded action keeps (int64/uint64, the widest any action space holds): a
list of 3,900 integers of 4,200 digits each made 16 MB of JSON per step, 328 MB of trajectory
and 1.2 GB of host memory in 20 steps."""
_INT_BOUND = 1 << ACTION_INT_BITS


def _wide(value) -> bool:
    return type(value) is int and not -_INT_BOUND < value < _INT_BOUND


def kept_action(raw, limit: int = ACTION_VALUES):
    """`raw` itself when it is within the recording limits, else a description of it (a string
    the trajectory shows in place of the action: what the policy returned and why it is not
    kept). The common answers (an int, a short list of numbers, a small array) cost one check."""
    kind = type(raw)
    if kind in _SCALARS:
        return raw if not _wide(raw) else _not_kept(raw, f"an integer of {raw.bit_length()} bits", limit)
    if kind is list and len(raw) <= limit and _SCALARS.issuperset(map(type, raw)) and not any(map(_wide, raw)):
        return raw
    if kind is np.ndarray:
        if raw.size <= limit and raw.dtype.kind in "biuf":
            return raw
        return _not_kept(raw, f"an array of shape {raw.shape} ({raw.dtype})", limit)
    if kind is str:
        return raw if len(raw) <= ACTION_TEXT else _not_kept(raw, f"a string of {len(raw)} characters", limit)
    over = _over_limits(raw, limit)
    return raw if over is None else _not_kept(raw, over, limit)


def _over_limits(raw, limit: int) -> str | None:
    """Why `raw` exceeds the limits (a bounded walk: it stops at the first excess), or None."""
    stack, values, text = [(raw, 1)], 0, 0
    while stack:
        value, depth = stack.pop()
        values += 1
        if values > limit:
            return f"a value of more than {limit} elements"
        if depth > ACTION_DEPTH:
            return f"a value nested more than {ACTION_DEPTH} levels deep"
        kind = type(value)
        if kind is int and _wide(value):
            return f"an integer of {value.bit_length()} bits"
        if kind is str:
            text += len(value)
            if text > ACTION_TEXT:
                return f"a value with more than {ACTION_TEXT} characters of text"
        elif kind is list or kind is tuple:
            stack.extend((v, depth + 1) for v in value[:limit + 1])
        elif kind is dict:
            stack.extend((k, depth + 1) for k in list(value)[:limit + 1])
            stack.extend((v, depth + 1) for v in list(value.values())[:limit + 1])
        elif kind is np.ndarray:
            values += value.size
            if values > limit:
                return f"a value of more than {limit} elements"
        elif kind not in _SCALARS and not isinstance(value, np.generic):
            return f"a {kind.__name__}"
    return None


def _not_kept(raw, what: str, limit: int) -> str:
    return (f"<not recorded: act() returned {what}; a recorded action holds at most {limit} values, "
            f"{ACTION_DEPTH} levels, {ACTION_TEXT} characters of text and integers of {ACTION_INT_BITS} bits>")


class EpisodeRecorder:
    """Collects one episode's steps; `data()` hands them over for writing."""

    __slots__ = ("obs", "steps", "capacity", "action_limit")

    def __init__(self, capacity: int, action_limit: int = ACTION_VALUES) -> None:
        self.obs: ObsStore | DictObsStore | None = None
        self.steps: list[tuple] = []
        self.capacity = capacity
        self.action_limit = action_limit
        """Most values of a recorded action (`kept_action`): ACTION_VALUES, or the action
        space's size where that is larger."""

    def add(self, obs, raw, reward: float, terminated, truncated, info: dict, invalid: bool) -> None:
        """Record step t: `obs` is what the policy saw, `raw` its answer as it arrived (or its
        description, beyond the recording limits: `kept_action`)."""
        raw = kept_action(raw, self.action_limit)
        # typed Any: the inlined common case reaches into an ObsStore by its `buf` (a DictObsStore has none)
        store: Any = self.obs
        if store is None:
            store = self.obs = DictObsStore(self.capacity, obs) if type(obs) is dict else ObsStore(self.capacity)
        buf: Any = getattr(store, "buf", None)
        n = store.n if buf is not None else -1
        if 0 <= n < len(buf) and type(obs) is np.ndarray and obs.dtype is buf.dtype and obs.shape == buf.shape[1:]:
            buf[n] = obs  # the common case, inlined: one row copy
            store.n = n + 1
        else:
            store.add(obs)
        self.steps.append((raw, reward, terminated, truncated, _copy_info(info) if info else _EMPTY_INFO, invalid))


@dataclass
class EpisodeData:
    """Everything one episode directory is made from (picklable)."""

    observations: object = field(default_factory=list)
    """`ObsStore.values()` / `DictObsStore.values()`, or [] for an episode without steps."""
    steps: list = field(default_factory=list)
    """(raw action, reward, terminated, truncated, info, action_invalid) per step."""
    stdout: str = ""
    stderr: str = ""
    errors: list = field(default_factory=list)
    """JSON lines of error.txt."""
    stdout_dropped: int = 0
    """stdout bytes the sandbox's output cap dropped already (counted in the file's note)."""
    stderr_dropped: int = 0
    """stderr bytes the sandbox's output cap dropped already."""


class Formatter:
    """Makes episode files, in a helper process when there is a spare core.

    `submit(data)` returns `PendingFiles` at once; the files are made meanwhile. The
    helper is a plain child process (`python -m evogym.recording`, pickles over its
    stdin/stdout, trusted: it runs our code on our data) started once per host process
    and reused; one thread talks to it, so episodes are formatted in order while the
    caller keeps stepping. A core is spare only beyond the two a submit keeps busy (the
    host stepping the env and the policy's worker answering, or spinning for, the next
    act): with fewer than `min_cores`, or if the helper cannot be started or dies, the
    files are made in this process when the caller asks for them (after the episodes).
    A lost helper costs time, never feedback.

    Measured on 2 cores (`experiments/bench_host_overhead.py`'s submit): formatting
    beside the stepping took a core from the host or the worker at every episode end —
    and made the worker's spin see a full machine and block — so 64 Acrobot episodes
    took 1.39 s that way and 1.25 s with the files made after them (16 HalfCheetah
    episodes 1.32 s vs 1.12 s), their formatting (0.11-0.19 s) included; `share` then makes
    them on both cores (the 64 Acrobot episodes' wait 118 -> 84 ms).
    """

    _lock = threading.Lock()
    _thread: ThreadPoolExecutor | None = None
    _proc: subprocess.Popen | None = None
    min_cores = 3
    """Usable cores at which episode files are made beside the stepping (host, policy worker,
    helper: one each)."""

    @classmethod
    def parallel(cls) -> bool:
        """Whether files are made beside the stepping (see `min_cores`)."""
        return _cores() >= cls.min_cores

    _warming: Future | None = None

    @classmethod
    def prewarm(cls) -> None:
        """Start the helper now (in the background) so the first submit does not wait for it
        (with two cores it is there for `share`)."""
        if _cores() > 1:
            cls._warming = cls._executor().submit(cls._warm)

    @classmethod
    def ready(cls) -> None:
        """Wait until a prewarm started by `prewarm` has finished (benchmarks: a running host)."""
        if cls._warming is not None:
            cls._warming.result()

    @classmethod
    def _warm(cls) -> None:
        proc = cls._helper()
        try:
            _send(proc.stdin, None)  # no episode: the helper's imports are done when it answers
            _receive(proc.stdout)
        except (OSError, EOFError, pickle.UnpicklingError):
            _stop(proc)
            cls._proc = None  # the next episode starts a new helper (or is made in-process)

    @classmethod
    def submit(cls, data: EpisodeData, directory: Path) -> "PendingFiles":
        """Make the episode's files and write them into `directory` (which must not exist yet)."""
        if data.steps and cls.parallel():
            return PendingFiles(data, directory, cls._executor().submit(cls._round_trip, data, directory))
        return PendingFiles(data, directory, None)

    @classmethod
    def share(cls, pending: list[PendingFiles]) -> None:
        """Once the episodes are over: hand every second file set still to be made to the helper,
        so it and the caller (asking for the rest in order) make them side by side. Where the
        stepping left no core for the helper (below `min_cores`) the files wait for this; with
        one core there is nobody to share with."""
        if _cores() < 2:
            return
        deferred = [p for p in pending if p.future is None and p.data.steps]
        for p in deferred[1::2]:
            p.future = cls._executor().submit(cls._round_trip, p.data, p.directory)

    @classmethod
    def shutdown(cls) -> None:
        with cls._lock:
            thread, cls._thread = cls._thread, None
            proc, cls._proc = cls._proc, None
        if thread is not None:
            thread.shutdown(wait=False, cancel_futures=True)
        if proc is not None:
            _stop(proc)

    @classmethod
    def _executor(cls) -> ThreadPoolExecutor:
        with cls._lock:
            if cls._thread is None:
                cls._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="evogym-formatter")
                atexit.register(cls.shutdown)
            return cls._thread

    @classmethod
    def _helper(cls) -> subprocess.Popen:
        """The running helper (started here, on the formatter thread)."""
        if cls._proc is None or cls._proc.poll() is not None:
            source = str(Path(__file__).resolve().parents[1])  # evogym importable even when not installed
            env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [source, os.environ.get("PYTHONPATH")]))}
            cls._proc = subprocess.Popen([sys.executable, "-m", "evogym.recording"], stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, close_fds=True, env=env)
        return cls._proc

    @classmethod
    def _round_trip(cls, data: EpisodeData, directory: Path) -> list[str]:
        proc = cls._helper()
        try:
            _send(proc.stdin, (data, str(directory)))
            names = _receive(proc.stdout)
        except (OSError, EOFError, pickle.PickleError, RecursionError, MemoryError):
            names = None  # a lost helper or data it cannot carry: the files are made here instead
        if not isinstance(names, list):
            _stop(proc)
            cls._proc = None
            return _write_episode(data, directory)
        return names


class PendingFiles:
    """The files of one episode, being made; `result()` waits until they are written and
    returns their names."""

    __slots__ = ("data", "directory", "future")

    def __init__(self, data: EpisodeData, directory: Path, future: Future | None) -> None:
        self.data, self.directory, self.future = data, directory, future

    def result(self) -> list[str]:
        if self.future is not None:
            try:
                return self.future.result()
            except CancelledError:  # the formatter thread was shut down (interpreter exit)
                pass
        return _write_episode(self.data, self.directory)


def _cores() -> int:
    """Cores this process may run on."""
    return len(os.sched_getaffinity(0))


def _write_episode(data: EpisodeData, directory: Path) -> list[str]:
    from evogym.feedback import episode_files, write_episode

    return write_episode(episode_files(data), Path(directory))


def _send(stream, obj) -> None:
    blob = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(len(blob).to_bytes(8, "little") + blob)
    stream.flush()


def _receive(stream):
    head = stream.read(8)
    if len(head) < 8:
        raise EOFError("the formatter closed its output")
    size = int.from_bytes(head, "little")
    blob = stream.read(size)
    if len(blob) < size:
        raise EOFError("the formatter closed its output")
    return pickle.loads(blob)


def _stop(proc: subprocess.Popen) -> None:
    try:
        if proc.stdin is not None:
            proc.stdin.close()
    except OSError:
        pass
    try:
        proc.wait(HELPER_EXIT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _serve() -> None:
    """The helper's loop: (EpisodeData, directory) in, the episode's files written there and
    their names out, until the host closes stdin."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the host's Ctrl-C is the host's to handle
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    import evogym.feedback  # noqa: F401 - the imports a first episode would otherwise wait for
    while True:
        try:
            job = _receive(stdin)
        except EOFError:
            return
        answer: list[str] | str
        try:
            answer = [] if job is None else _write_episode(*job)
        except OSError as exc:  # the tree was aborted meanwhile; the host decides what that means
            answer = f"{type(exc).__name__}: {exc}"
        _send(stdout, answer)


if __name__ == "__main__":
    _serve()
