"""Hidden-evaluation results shared across runs: identical work is done once.

Finalization validates every distinct `ok` program on the validation seeds and scores the
selected one on the held-out seeds. Runs that share pools submit identical programs again
and again — the champion and a challenger of a paired evaluation on the same task, twelve
challengers screened on the same instance — and a finalize already shares one evaluation
among identical trees of one run (`finalize`). `EvalCache` extends exactly that sharing
across runs: a hidden batch whose every input is identical has the identical result.

The key is a sha256 over everything that determines a batch's returns: the env slug, the
seeds, the `env_meta` the policy receives, the limits, the isolation and step cap, every
byte of every file the policy can read at `/policy` (the checkpoint), the evogym source,
the Python version and the simulator and array package versions. Seeds appear only inside
that hash; the cache holds returns and lengths, never a seed, a pool or a path. Only clean
batches are kept (the policy started and no episode failed): a failure can depend on the
machine's load (a deadline), a return of a completed episode cannot.

The cache is trusted-side state: the host reads and writes it, the folder belongs to the
driver that runs the hosts (`ole.jobs` puts it beside the run directories), and nothing of it
reaches an agent or a policy. Writes are atomic (temp + rename); concurrent hosts coordinate
per key with `flock`, so a batch another host is computing right now is waited for instead
of run twice (`evaluate`).
"""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import platform
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict
from functools import cache
from importlib import metadata
from pathlib import Path

from evogym.durable import atomic_write
from evogym.rollout import BatchResult, EpisodeJob, EpisodeResult

SCHEMA_VERSION = 1
"""Bumped when the key or the stored record changes: old entries are then never read."""
PACKAGES = ("gymnasium", "mujoco", "box2d", "minigrid", "highway-env", "gymnasium-robotics", "numpy", "scipy",
            "pygame-ce")
"""Distributions whose version can change a return (simulators; numpy and scipy also in the sandbox)."""


@cache
def environment_digest() -> str:
    """sha256 of the evogym source (every `.py`, path + bytes), Python and PACKAGES versions (once per process)."""
    h = hashlib.sha256(f"python {platform.python_version()} {platform.machine()}\0".encode())
    for name in PACKAGES:
        try:
            h.update(f"{name} {metadata.version(name)}\0".encode())
        except metadata.PackageNotFoundError:
            h.update(f"{name} -\0".encode())
    root = Path(__file__).resolve().parent
    for path in sorted(root.rglob("*.py")):
        h.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


def tree_digest(code_dir: str | Path) -> str:
    """sha256 over (relative path, bytes) of every regular file under the checkpoint, in path order.

    Everything the sandboxed policy can read at `/policy`, the host's `metrics.json` included
    (a function of the tree). A symlink or special file makes the tree uncacheable (None would
    be ambiguous, so it raises ValueError and the caller runs the batch).
    """
    root = Path(code_dir)
    h = hashlib.sha256()
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        dirnames.sort()
        for name in sorted(filenames):
            path = Path(dirpath) / name
            if path.is_symlink() or not path.is_file():
                raise ValueError(f"{path} is not a regular file")
            h.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
        for name in dirnames:
            if (Path(dirpath) / name).is_symlink():
                raise ValueError(f"{Path(dirpath) / name} is a symlink")
    return h.hexdigest()


def job_key(job: EpisodeJob) -> str:
    """The cache key of a hidden batch: every input that determines its returns, hashed."""
    doc = {"schema": SCHEMA_VERSION, "env": job.slug, "seeds": list(job.seeds), "meta": job.policy_env_meta,
           "limits": asdict(job.limits), "isolation": job.isolation, "max_steps": job.max_steps,
           "record": job.record, "tree": tree_digest(job.code_dir), "environment": environment_digest()}
    return hashlib.sha256(json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def clean(batch: BatchResult) -> bool:
    """A batch whose result does not depend on the machine: it started and no episode failed."""
    return batch.start_failure is None and bool(batch.episodes) and batch.failures == 0


class EvalCache:
    """A folder of hidden-batch results: `<root>/<key[:2]>/<key>.json` (+ `.lock`)."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True, mode=0o700)

    def _path(self, key: str, suffix: str) -> Path:
        return self.root / key[:2] / f"{key}{suffix}"

    def get(self, key: str) -> BatchResult | None:
        """The stored batch (returns and lengths), or None."""
        try:
            doc = json.loads(self._path(key, ".json").read_text())
        except (OSError, ValueError):
            return None
        if doc.get("schema_version") != SCHEMA_VERSION or len(doc["returns"]) != len(doc["lengths"]):
            return None
        return BatchResult(None, [EpisodeResult(ret=float(r), length=int(n))
                                  for r, n in zip(doc["returns"], doc["lengths"])])

    def put(self, key: str, batch: BatchResult) -> bool:
        """Store a clean batch (atomically; an existing entry is kept); False when it is not clean."""
        if not clean(batch):
            return False
        path = self._path(key, ".json")
        path.parent.mkdir(exist_ok=True, mode=0o700)
        doc = {"schema_version": SCHEMA_VERSION, "returns": [e.ret for e in batch.episodes],
               "lengths": [e.length for e in batch.episodes]}
        atomic_write(path, json.dumps(doc), durable=False)
        return True

    @contextlib.contextmanager
    def claim(self, key: str, *, wait: bool) -> Iterator[bool]:
        """Hold the key's lock while computing it; yields False (without waiting) when another
        process holds it and `wait` is false. The kernel drops the lock if the holder dies."""
        path = self._path(key, ".lock")
        path.parent.mkdir(exist_ok=True, mode=0o700)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
            except BlockingIOError:
                yield False
                return
            yield True
        finally:
            os.close(fd)


Evaluate = Callable[[list[EpisodeJob]], list[BatchResult]]


def evaluate(jobs: Sequence[EpisodeJob], run: Evaluate, cache: EvalCache | None
             ) -> tuple[list[BatchResult], list[str]]:
    """Results of `jobs` in order, and per job where it came from: `run`, `hit`, `stored`.

    Without a cache every job is run (`run`). With one: stored batches are read; the rest are
    claimed and run together (`stored` when the result was clean and kept); a batch another
    host holds the claim on is waited for after this host's own work (never while holding a
    claim, so two hosts cannot wait on each other) and read, or run here if that host stored
    nothing. A job whose checkpoint cannot be keyed is simply run.
    """
    if cache is None:
        return run(list(jobs)), ["run"] * len(jobs)
    results: dict[int, BatchResult] = {}
    source = ["run"] * len(jobs)
    keys: list[str | None] = []
    for job in jobs:
        try:
            keys.append(job_key(job))
        except (OSError, ValueError):
            keys.append(None)
    mine: list[int] = []
    later: list[tuple[int, str]] = []
    with contextlib.ExitStack() as claims:
        for i, key in enumerate(keys):
            if key is not None and (hit := cache.get(key)) is not None:
                results[i], source[i] = hit, "hit"
            elif key is None or claims.enter_context(cache.claim(key, wait=False)):
                if key is not None and (hit := cache.get(key)) is not None:  # stored just before the claim
                    results[i], source[i] = hit, "hit"
                else:
                    mine.append(i)
            else:
                later.append((i, key))
        for i, batch in zip(mine, run([jobs[i] for i in mine]) if mine else []):
            results[i] = batch
            key = keys[i]
            if key is not None and cache.put(key, batch):
                source[i] = "stored"
    for i, key in later:
        with cache.claim(key, wait=True):
            hit = cache.get(key)
            if hit is not None:
                results[i], source[i] = hit, "hit"
            else:
                results[i] = run([jobs[i]])[0]
                if cache.put(key, results[i]):
                    source[i] = "stored"
    return [results[i] for i in range(len(jobs))], source
