"""The feedback tree an agent reads: `feedback/submit_NNN/...`, written atomically.

Single files are written to a temporary name in the same directory, fsynced and
renamed; a submit's directory is assembled under a hidden temporary name and renamed
into place as a whole (its summary fsynced first, its episode files right after, off
the request: `DURABLE_NOW`), so an agent never sees a half-written submit (invariants F1–F9 of
the spec: summary present for every recorded submit, episode dirs contiguous and
numbered by budget used, trajectory line count = episode length, external
observations row count = episode length, errors as JSON lines).
"""
from __future__ import annotations

import io
import json
import os
import queue
import shutil
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Iterable

import numpy as np

from evogym.durable import atomic_write, fsync_dir
from evogym.spaces import to_jsonable

SCHEMA_VERSION = "0.1"
EXTERNAL_THRESHOLD_BYTES = 4096
"""An episode's stacked observations above this size go to observations.npy/.npz (reference §3.5)."""
OUTPUT_CAP_BYTES = 64 * 1024
"""stdout.txt / stderr.txt / error text kept per episode; the rest is replaced by a note."""


FSYNC_BATCH = 64
"""Files one `fsync_all` call syncs at once (and so holds open)."""
_fsync_pool: ThreadPoolExecutor | None = None
_fsync_lock = threading.Lock()


def fsync_all(fds) -> None:
    """fsync every fd, all at once from a thread pool; returns when each is on disk.

    The same guarantee as fsyncing them one by one, but the filesystem's journal commits
    concurrent fsyncs together: 13 small files took 58 ms one by one and 8 ms at once on the
    loaded project machine (ext4; experiments/results/submit_latency.md)."""
    global _fsync_pool
    fds = list(fds)
    if len(fds) <= 1:
        for fd in fds:
            os.fsync(fd)
        return
    with _fsync_lock:
        if _fsync_pool is None:
            _fsync_pool = ThreadPoolExecutor(max_workers=FSYNC_BATCH // 4, thread_name_prefix="evogym-fsync")
    list(_fsync_pool.map(os.fsync, fds))


def atomic_write_bytes(path: Path, data: bytes, *, durable_now: bool = True) -> None:
    """temp + fsync + rename + directory fsync (`evogym.durable.atomic_write`): old or new, never torn.

    `durable_now=False` renames first and fsyncs in the background (`flush_syncs` waits):
    for files a crash of the host alone cannot tear (the page cache survives it) and that
    nothing reads before `flush_syncs` (finalize) would need them on disk."""
    path = Path(path)
    atomic_write(path, data, durable=durable_now)
    if not durable_now:
        _syncer().put((path.parent, [path.name]))


def atomic_write_json(path: Path, obj, *, pretty: bool = True, durable_now: bool = True) -> None:
    text = json.dumps(obj, indent=2 if pretty else None, sort_keys=True, allow_nan=False)
    atomic_write_bytes(path, (text + "\n").encode("utf-8"), durable_now=durable_now)


def cap_text(text: str, cap: int = OUTPUT_CAP_BYTES, dropped: int = 0) -> str:
    """`text` cut to `cap` bytes, with one note counting every byte not shown: the ones cut
    here plus `dropped`, those an earlier cap (the sandbox's output pipe) already dropped.
    The note is added after the cut, so it is never cut itself (issue 18: a 600 MB flood was
    reported as "[truncated 40 bytes]" when a second cap cut the first note off). The result is
    always valid UTF-8: JSON lines holding it never carry a lone-surrogate escape strict parsers refuse."""
    data = text.encode("utf-8", "replace")  # a lone surrogate (from a policy's message) becomes "?": valid UTF-8
    if len(data) <= cap:
        clean = data.decode("utf-8")
        return clean + f"\n[truncated {dropped} bytes]" if dropped else clean
    kept = data[:cap].decode("utf-8", "ignore")
    return kept + f"\n[truncated {dropped + len(data) - len(kept.encode('utf-8'))} bytes]\n"


def error_line(category: str, message: str, timestamp: str, traceback: str | None = None, **extra) -> str:
    row = {"category": category, "message": cap_text(message, 8192), "schema_version": SCHEMA_VERSION,
           "timestamp": timestamp, "traceback": cap_text(traceback) if traceback else None}
    row.update(extra)
    return json.dumps(row, sort_keys=True, allow_nan=False)


def _compact(arr: np.ndarray) -> np.ndarray:
    if arr.dtype.kind in "iub" and arr.size and arr.min() >= 0 and arr.max() <= 255:
        return arr.astype(np.uint8)
    if arr.dtype.kind == "f":
        return arr.astype(np.float64)
    return arr


def _stack(values) -> np.ndarray | None:
    try:
        arr = np.asarray(values)
    except (ValueError, TypeError):
        return None
    if arr.dtype == object:
        return None
    return _compact(arr) if arr.dtype.kind in "iubf" else arr


def externalize(observations) -> tuple[str, bytes] | None:
    """Return (filename, bytes) when the episode's observations are stored outside the trajectory.

    `observations` is a recording (`recording.ObsStore.values()`: an array with one row
    per step, or a list; `DictObsStore.values()`: {key: column}, or a list of dicts).
    Rule of the reference (size, not obs_storage): a fixed-shape numeric stack over
    4096 bytes -> observations.npy; a dict whose keys each stack and together exceed
    4096 bytes -> observations.npz (one array per key). Otherwise None (inline).
    """
    if isinstance(observations, dict):
        columns = observations
    elif len(observations) and isinstance(observations[0], dict):
        keys = list(observations[0])
        if not all(isinstance(o, dict) and list(o) == keys for o in observations):
            return None
        columns = {k: [o[k] for o in observations] for k in keys}
    else:
        columns = None
    if columns is not None:
        if not len(next(iter(columns.values()), [])):
            return None
        stacked = {k: _stack(col) for k, col in columns.items()}
        arrays = {k: a for k, a in stacked.items() if a is not None}
        if len(arrays) < len(stacked):
            return None
        if sum(a.nbytes for a in arrays.values()) <= EXTERNAL_THRESHOLD_BYTES:
            return None
        buf = io.BytesIO()
        np.savez_compressed(buf, allow_pickle=True, **arrays)  # numpy's default, named: a key cannot take its place
        return "observations.npz", buf.getvalue()
    if not len(observations):
        return None
    arr = _stack(observations)
    if arr is None or arr.dtype.kind not in "iubf" or arr.nbytes <= EXTERNAL_THRESHOLD_BYTES:
        return None
    buf = io.BytesIO()
    np.save(buf, arr)
    return "observations.npy", buf.getvalue()


def _observation_rows(observations, n: int) -> list:
    """The `obs` field of each trajectory row (inline storage): `to_jsonable` per step."""
    if isinstance(observations, dict):
        columns = [(str(k), to_jsonable(col) if isinstance(col, np.ndarray) else [to_jsonable(v) for v in col])
                   for k, col in observations.items()]
        return [{k: col[t] for k, col in columns} for t in range(n)]
    if isinstance(observations, np.ndarray):
        return to_jsonable(observations)
    return [to_jsonable(o) for o in observations]


def storage(observations: list) -> str:
    """The `obs_storage` an agent is told, for a max-length episode's observations.

    `external` when `externalize` would move such an episode's observations to
    observations.npy/.npz, else `inline`. The same rule as the writer, applied to the
    longest episode, so `inline` is a promise (never a file) and `external` a possibility
    (a short episode may stay inline; then `obs` is in each trajectory line).
    """
    return "external" if externalize(observations) is not None else "inline"


def episode_files(ep, with_observations: bool = True) -> dict[str, bytes]:
    """Files of one episode directory, from a `recording.EpisodeData` (made once per episode)."""
    files: dict[str, bytes] = {}
    external = externalize(ep.observations) if with_observations else None
    obs_rows = None if external is not None else _observation_rows(ep.observations, len(ep.steps))
    lines = []
    dumps = _ROW_ENCODER.encode
    for t, (raw, reward, term, trunc, info, invalid) in enumerate(ep.steps):
        row_info = to_jsonable(dict(info))
        row_info["steps"] = t + 1
        if invalid:
            row_info["action_invalid"] = True
        lines.append(dumps({"t": t, "obs": None if obs_rows is None else obs_rows[t], "action": to_jsonable(raw),
                            "reward": reward, "terminated": bool(term), "truncated": bool(trunc),
                            "info": row_info}))
    files["trajectory.jsonl"] = ("\n".join(lines) + ("\n" if lines else "")).encode()
    files["stdout.txt"] = cap_text(ep.stdout, dropped=ep.stdout_dropped).encode()
    files["stderr.txt"] = cap_text(ep.stderr, dropped=ep.stderr_dropped).encode()
    if ep.errors:
        files["error.txt"] = ("\n".join(ep.errors) + "\n").encode()
    if external is not None:
        files[external[0]] = external[1]
    return files


def minimal_episode_files(ep, exc: BaseException, timestamp: str) -> dict[str, bytes]:
    """An episode's files when `episode_files` failed on its recording: one trajectory line per
    step with its reward and flags (no observation, no action, no info), the captured output,
    and error.txt with the reason added (category `protocol_error`, as the episode's data was
    not what the host can write)."""
    note = f"<not recorded: the feedback writer failed on this episode: {type(exc).__name__}>"
    lines = [_ROW_ENCODER.encode({"t": t, "obs": None, "action": note, "reward": float(step[1]),
                                  "terminated": bool(step[2]), "truncated": bool(step[3]),
                                  "info": {"steps": t + 1}}) for t, step in enumerate(ep.steps)]
    errors = [*ep.errors, error_line("protocol_error", f"protocol_error: the episode's observations, actions "
                                     f"and info could not be written: {type(exc).__name__}: {exc}"[:2000],
                                     timestamp)]
    return {"trajectory.jsonl": ("\n".join(lines) + ("\n" if lines else "")).encode(),
            "stdout.txt": cap_text(ep.stdout, dropped=ep.stdout_dropped).encode(),
            "stderr.txt": cap_text(ep.stderr, dropped=ep.stderr_dropped).encode(),
            "error.txt": ("\n".join(errors) + "\n").encode()}


_ROW_ENCODER = json.JSONEncoder(allow_nan=False)
"""`json.dumps(row, allow_nan=False)` without building an encoder per row."""


DURABLE_NOW = frozenset({"summary.json", "errors.txt"})
"""Files of a tree fsynced before it is renamed into place: the budget is recomputed from
summaries on resume. The episode files are fsynced right after, off the request
(`_syncer`): 256 fsyncs cost a 64-episode submit 0.22 s here, and until a machine
crash (not a host crash: the page cache survives that) nothing can tell the difference."""


def write_episode(files: dict[str, bytes], directory: Path) -> list[str]:
    """Write one episode's files into `directory` (created; its parent must exist, so a
    tree aborted meanwhile is not recreated), unsynced; returns their names."""
    directory.mkdir(exist_ok=True)
    for name, data in files.items():
        with open(directory / name, "wb") as f:
            f.write(data)
    return list(files)


class PartialTree:
    """A feedback directory assembled under a hidden name next to `target` (episode files
    may be written into `tmp` by the formatter meanwhile); `commit` renames it into place
    as a whole, `abort` removes it. Half-written ones left by a crash are swept at start."""

    def __init__(self, target: Path) -> None:
        self.target = Path(target)
        self.tmp = Path(tempfile.mkdtemp(dir=self.target.parent, prefix=f".{self.target.name}."))
        self.later: list[str] = []

    def written(self, rels: list[str]) -> None:
        """Files someone else wrote below `tmp` (relative paths), to be fsynced after the commit."""
        self.later.extend(rels)

    def commit(self, files: dict[str, bytes]) -> None:
        """Write the remaining files (`DURABLE_NOW` ones fsynced, together with the
        directory: `fsync_all`), rename into place."""
        durable = []
        try:
            try:
                for rel, data in files.items():
                    path = self.tmp / rel
                    path.parent.mkdir(parents=True, exist_ok=True)
                    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)
                    with open(fd, "wb", closefd=rel not in DURABLE_NOW) as f:
                        f.write(data)
                    if rel in DURABLE_NOW:
                        durable.append(fd)
                    else:
                        self.later.append(rel)
                durable.append(os.open(self.tmp, os.O_RDONLY))
                fsync_all(durable)
            finally:
                for fd in durable:
                    os.close(fd)
            os.rename(self.tmp, self.target)
        except BaseException:
            self.abort()
            raise
        fsync_dir(self.target.parent)
        if self.later:
            _syncer().put((self.target, self.later))

    def abort(self) -> None:
        shutil.rmtree(self.tmp, ignore_errors=True)


def write_tree(target: Path, files: dict[str, bytes]) -> None:
    """Write {relative path: bytes} as a new directory `target`, atomically as a whole."""
    PartialTree(target).commit(files)


_SYNC_QUEUE: "queue.Queue | None" = None
_SYNC_LOCK = threading.Lock()


def _syncer() -> "queue.Queue":
    """The queue of the background thread that fsyncs trees' remaining files (and dirs)."""
    global _SYNC_QUEUE
    with _SYNC_LOCK:
        if _SYNC_QUEUE is None:
            _SYNC_QUEUE = queue.Queue()
            threading.Thread(target=_sync_forever, args=(_SYNC_QUEUE,), name="evogym-fsync", daemon=True).start()
        return _SYNC_QUEUE


def _sync_forever(jobs: "queue.Queue") -> None:
    while True:
        target, rels = jobs.get()
        dirs: set[Path] = set()
        for rel in rels:
            path = target / rel
            try:
                fd = os.open(path, os.O_RDONLY)
            except OSError:  # the run directory was removed meanwhile: nothing left to make durable
                continue
            try:
                os.fsync(fd)
            except OSError:
                pass
            finally:
                os.close(fd)
            dirs.update(p for p in path.parents if p != target and target in p.parents)
        for d in [*sorted(dirs, key=lambda d: -len(d.parts)), target]:
            try:
                fsync_dir(d)
            except OSError:
                pass
        jobs.task_done()


def flush_syncs() -> None:
    """Wait until every tree written so far is fully fsynced (tests, orderly shutdown)."""
    if _SYNC_QUEUE is not None:
        _SYNC_QUEUE.join()


def sweep_temporaries(root: Path) -> int:
    """Remove half-written temporaries left by a crash (names starting with '.' and containing '.tmp' or a mkdtemp suffix)."""
    removed = 0
    for path in Path(root).rglob(".*"):
        if path.name.startswith(".submit_") or path.name.endswith(".tmp"):
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)
            removed += 1
    return removed


def summary_stats(returns: Iterable[float], lengths: Iterable[int]) -> dict:
    rs = [float(r) for r in returns]
    ls = [int(n) for n in lengths]
    if not rs:
        return {"returns": None, "mean_return": None, "std_return": None, "min_return": None,
                "max_return": None, "episode_lengths": None, "mean_episode_length": None}
    arr = np.asarray(rs, dtype=np.float64)
    return {"returns": rs, "mean_return": float(arr.mean()), "std_return": float(arr.std()),
            "min_return": float(arr.min()), "max_return": float(arr.max()),
            "episode_lengths": ls, "mean_episode_length": float(np.mean(ls))}
