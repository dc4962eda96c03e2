"""Cross-task lessons: which mechanism worked for which observation/action signature.

An append-only JSON Lines file; one line per finished task, written with a single
`write` + `fsync` under `O_APPEND` so concurrent workers never interleave partial
lines. Readers rank mechanisms by how often they were a task's best, breaking ties
by recency. The built-in agent reads and writes lessons only when the Loop Policy's
`memory.carry_lessons` is set.
"""
from __future__ import annotations

import json
import os
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path

from ole.trace import utc_now

MAX_LINE_BYTES = 4096
"""Longest lesson line accepted (keeps O_APPEND writes atomic on local filesystems)."""


@dataclass(frozen=True)
class Lesson:
    """One task's finding."""

    signature: str
    """Observation/action signature, e.g. `obs=Box[6]|act=Discrete(3)`."""
    mechanism: str
    """Mechanism of the best program."""
    env: str
    """Env slug the lesson came from (informational; lessons apply by signature)."""
    score: float
    """The agent's own best train score with that mechanism."""
    created_at: str = ""


def signature(obs_space: dict, action_space: dict) -> str:
    """A stable, coarse key for a task's interface (no bounds, no env name)."""

    def key(s: dict) -> str:
        kind = s.get("type", "?")
        if kind == "Discrete":
            return f"Discrete({s.get('n')})"
        if kind == "Dict":
            return "Dict{" + ",".join(f"{k}:{key(v)}" for k, v in sorted(s.get("spaces", {}).items())) + "}"
        if "shape" in s:
            return f"{kind}{list(s['shape'])}"
        return kind

    return f"obs={key(obs_space)}|act={key(action_space)}"


class LessonStore:
    """The lessons file (created on first write)."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)

    def add(self, lesson: Lesson) -> None:
        record = asdict(lesson)
        record["created_at"] = record["created_at"] or utc_now()
        line = (json.dumps(record, sort_keys=True) + "\n").encode()
        if len(line) > MAX_LINE_BYTES:
            raise ValueError(f"lesson line is {len(line)} bytes, limit {MAX_LINE_BYTES}")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line)
            os.fsync(fd)
        finally:
            os.close(fd)

    def all(self) -> list[Lesson]:
        if not self.path.is_file():
            return []
        out = []
        for line in self.path.read_text().splitlines():
            try:
                out.append(Lesson(**json.loads(line)))
            except (json.JSONDecodeError, TypeError):
                continue  # a torn last line from a crashed writer is skipped, never fatal
        return out

    def ranking(self, sig: str) -> list[str]:
        """Mechanisms that won on this signature, most frequent (then most recent) first."""
        matching = [les for les in self.all() if les.signature == sig]
        counts = Counter(les.mechanism for les in matching)
        last = {les.mechanism: i for i, les in enumerate(matching)}
        return sorted(counts, key=lambda m: (-counts[m], -last[m]))
