"""Traces: τ = (task, bundle version + hash, history, outcome) — OLE §III-B, Eq. (4).

A trace is written only after the host has scored the run (`run.json` with a final
score), so every outcome in `traces/` is verified by the host, never by the agent's
own report. The archive is append-only: one JSON file per trace, written atomically
(temp + fsync + rename + directory fsync); an existing id is never overwritten.

A file that no longer parses as a trace (truncated by a full disk, edited by hand) degrades
only itself: `get` raises `DamagedTrace` naming the file, iteration skips it and remembers it
(`skipped`), `damaged()` lists every one, and `ole fsck` reports them and moves them to
`<archive>/quarantine/` (`quarantine`), out of the archive's way.

With PostgreSQL storage the archive is a table of the database instead
(`ole.storage.traces.PgTraceArchive`, same interface: `Archive`); `ole.storage.traces.open_archive`
picks the one the storage setting names, and every place that archives or reads traces opens it so.
"""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path, PurePath
from typing import Any, Final, Iterator, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ole.errors import IntegrityError, NotFound, ValidationError

SCHEMA_VERSION: Final = "1"
QUARANTINE_DIR = "quarantine"
"""Where `TraceArchive.quarantine` moves damaged trace files (below the archive root)."""
EditKind = Literal["synthesis", "tuning", "none", "revert"]


class _Record(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class TaskSpec(_Record):
    """Which benchmark task was worked: an EvoPolicyGym run."""

    env: str
    """Env slug, e.g. `gym/acrobot`."""
    profile: str = "quick"
    """Host run profile (`paper`, `bench`, `quick`)."""
    budget: int | None = None
    """Episode budget override; None = the profile's budget."""
    pool_seed: int = 0
    """Seed of the case pools (0 = the paper's pools); other seeds give disjoint task instances."""


class RunCondition(_Record):
    """The controlled run condition z: what must be identical in a paired comparison."""

    host: str
    """Host agent kind: `builtin`, `llm` or `command`."""
    seed: int = Field(0, ge=0)
    """Agent seed (the agent's own randomness; >= 0, as every random generator seeded with it needs)."""
    model: str | None = None
    """Model string for LLM agents; None for agents without a model."""
    command: tuple[str, ...] | None = None
    """Command line of a `command` agent (argv, run in the workspace); None for the other agents.
    Part of the condition because a paired comparison must run the same external agent."""


class TaskContract(_Record):
    """The executable task contract g = (d, U, M, S, V, β) recorded with the run (OLE Eq. 1)."""

    objective: str
    """d: what the agent must produce."""
    permitted_actions: tuple[str, ...]
    """U: what the agent may do."""
    metrics: tuple[str, ...]
    """M: how progress, quality and cost are measured."""
    evidence_sources: tuple[str, ...]
    """S: which sources may support a judgment."""
    verification: str
    """V: how the outcome is verified (the hidden held-out score)."""
    resource_budget: dict[str, float]
    """β: upper bounds (episodes, wall seconds, LLM calls, tokens, dollars)."""


SubmitRole = Literal["candidate", "retest", "reference", "retry", "confirm"]
"""Why a submit was made: `candidate` scores a new program; `retest` re-scores an apparent
improvement on other episodes; `reference` re-scores the incumbent on those same episodes;
`retry` resubmits after a failure verdict; `confirm` re-runs a kept program (confirmation)."""


class SelectionRecord(_Record):
    """Which bundle the task got at its boundary, and why (`ole.scopes.Selection.record`)."""

    ref: str
    """`NAME@VERSION` of the bundle the task ran under."""
    scope: str
    """Scope key it was chosen for (`general`, or e.g. `families=minigrid`); for an explicit
    bundle, that bundle's own scope."""
    reason: str
    """One sentence: why this bundle (routing) or that it was named explicitly."""
    forced: bool = False
    """True when an explicit bundle whose scope excludes the task was run with `--force`."""
    channel: str | None = None
    """Channel routed on; null for an explicitly named bundle."""


class Iteration(_Record):
    """One agent iteration: what it observed, what it did, what the host answered."""

    index: int
    """0-based iteration number."""
    phase: str
    """Loop phase the agent was in (synthesis, tuning, confirmation, recovery, ...)."""
    observation_digest: str
    """sha256 of the feedback text the agent read before acting."""
    edit_kind: EditKind
    """Edit classification by AST topology hash: synthesis (structure changed), tuning (constants only), none, revert."""
    diff_lines: int = 0
    """Changed lines in `system/` relative to the previous submit."""
    mechanism: str | None = None
    """Mechanism (program family) of the submitted program, if the agent knows it."""
    submitted_indices: tuple[int, ...] = ()
    """Train episode ids in the submit."""
    submit_id: int | None = None
    """Host submit index; None if nothing was submitted."""
    verdict: str | None = None
    """Host verdict (`ok`, `import_error`, ...)."""
    returns: tuple[float, ...] | None = None
    """Per-episode train returns from the feedback."""
    mean_return: float | None = None
    """Mean train return of the submit (None on failure)."""
    episodes_charged: int = 0
    """Budget charged by this submit."""
    wall_s: float = 0.0
    """Wall seconds this iteration took."""
    llm_calls: int = 0
    """LLM calls made in this iteration."""
    tokens: int = 0
    """LLM tokens used in this iteration."""
    usd: float = 0.0
    """LLM spend in this iteration."""
    note: str = ""
    """One line of agent reasoning (why this action)."""
    role: SubmitRole | None = None
    """Why this submit was made (see `SubmitRole`); None when the agent does not say."""
    base_submit: int | None = None
    """Submit id of the program this one was derived from (the agent's reference program when
    it made the edit: the incumbent, or the program it chose to go on from). None for a program
    written from scratch, or when the agent does not say. Evidence uses it to tell a regression
    that was built on from one that was merely sampled and dropped."""
    search_round: int | None = None
    """0-based round (generation) of the parametric search a tuning candidate belongs to; None
    outside tuning or when the agent does not say. Rounds whose candidates were all scored are
    the search's completed generations."""


class RunSpend(_Record):
    """What one run spent besides episodes: the measured agent wall time and the LLM usage.

    Shared by the trace's outcome and the evaluation store's `ole.paired.RunResult`, so a
    measured duration has one name everywhere (`wall_s`, as in `Iteration.wall_s`). The loop
    policy's *limit* keeps its own name (`budget.wall_time_s`, a bundle field).
    """

    wall_s: float
    """Agent wall time in seconds."""
    llm_calls: int = 0
    """LLM calls made."""
    tokens: int = 0
    """LLM tokens used."""
    usd: float = 0.0
    """LLM spend in US dollars."""


class Outcome(RunSpend):
    """The run outcome, copied from the host's `run.json` plus agent-side costs (`RunSpend`)."""

    status: Literal["completed", "no_ok_submit", "error"]
    """Host run status."""
    final_score: float | None
    """Raw held-out mean return (the paper's score)."""
    normalized_score: float | None
    """clip((R-random)/(expert-random), 0, 1.2)*100 where anchors exist."""
    best_val_score: float | None
    """Validation score of the selected checkpoint."""
    best_submit_index: int | None
    """Selected checkpoint."""
    episodes_used: int
    """Train episodes charged."""
    n_submits: int
    """Submits that reached the host."""
    finish_reason: str = ""
    """Why the agent stopped (budget_spent, finished_early, wall_time, llm_cap, error)."""

    @model_validator(mode="before")
    @classmethod
    def _old_wall_name(cls, data: object) -> object:
        """Traces written before the rename call the measured wall time `wall_time_s`."""
        if isinstance(data, dict) and "wall_time_s" in data and "wall_s" not in data:
            data = {("wall_s" if k == "wall_time_s" else k): v for k, v in data.items()}
        return data


class Trace(_Record):
    """A verified, attributable run: the unit of evidence for evolution."""

    schema_version: Literal["1"] = SCHEMA_VERSION
    """Trace schema version."""
    trace_id: str
    """Stable id: the host run id, `<env-slug>-<bundle>@<version>-s<seed>-<utc stamp>-<hex>`
    (`ole.runner.run_id_for`)."""
    created_at: str
    """UTC ISO-8601 time the trace was archived."""
    task: TaskSpec
    """The task worked."""
    condition: RunCondition
    """The controlled run condition."""
    contract: TaskContract
    """The task contract recorded with the run."""
    bundle_name: str
    """Bundle name."""
    bundle_version: int
    """Registered bundle version (stable index v(i))."""
    bundle_hash: str
    """Content hash of the bundle used."""
    history: tuple[Iteration, ...]
    """The interaction history H_i."""
    outcome: Outcome
    """The verified outcome y_i."""
    run_dir: str
    """Host run directory (relative to the traces root's parent when possible)."""
    run_json_sha256: str
    """sha256 of the host's run.json the outcome was copied from."""
    verified: bool = True
    """True when the outcome was read from a scored host run.json (only these enter the archive)."""
    extras: dict[str, str] = Field(default_factory=dict)
    """Host-agent specific pointers (LLM call log, command agent stdout/stderr files)."""
    selection: SelectionRecord | None = None
    """How the bundle was chosen at the task boundary; null in traces written before scoped routing."""

    @property
    def host_recorded(self) -> bool:
        """True when the outcome is the host's own: scored (`verified`), or a failure the host wrote
        in its run.json (no ok submit, an error). Decisions that name a failed run keep its trace."""
        return self.verified or (self.outcome.status != "completed" and self.run_json_sha256.startswith("sha256:"))


def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class Archive(Protocol):
    """What every trace archive offers (`TraceArchive`: a folder of files; `ole.storage.traces.PgTraceArchive`:
    a table of a PostgreSQL database). A damaged trace is named by its *location*: the file, or
    `<schema>/<id>.json` for a row (`.stem` is the id either way)."""

    root: Path
    """The archive folder it was opened for (with PostgreSQL, only its name is used: `trace_schema`)."""

    @property
    def where(self) -> str:
        """The archive in messages: the folder, or the schema and the database (no password)."""

    @property
    def skipped(self) -> Sequence[tuple[PurePath, str]]:
        """Damaged traces (location, why) the last iteration skipped."""

    def append(self, trace: Trace) -> PurePath: ...
    def ids(self) -> list[str]: ...
    def __contains__(self, trace_id: object) -> bool: ...
    def get(self, trace_id: str) -> Trace: ...
    def __iter__(self) -> Iterator[Trace]: ...
    def select(self, *, env: str | None = None, bundle_hash: str | None = None) -> list[Trace]: ...
    def damaged(self) -> Sequence[tuple[PurePath, str]]: ...
    def quarantine(self, path: PurePath) -> PurePath: ...
    def exists(self) -> bool: ...
    def integrity_check(self) -> str: ...
    def dump(self) -> dict[str, bytes]: ...
    def load(self, contents: dict[str, bytes]) -> None: ...
    def close(self) -> None: ...
    def __enter__(self) -> Archive: ...
    def __exit__(self, *exc: object) -> None: ...


class TraceExists(ValidationError):
    """The archive already holds a trace of this id: trace ids are immutable, a trace is never overwritten."""

    def __init__(self, trace_id: str) -> None:
        super().__init__(f"trace {trace_id} already archived", hint="trace ids are immutable")


def trace_text(trace: Trace) -> str:
    """The text a trace is archived as (both backends store exactly this, so copies are byte-identical)."""
    return trace.model_dump_json(indent=2) + "\n"


def is_trace_id(trace_id: str) -> bool:
    """Whether `trace_id` can name a trace of an archive: a file name, never a path or a hidden file."""
    return bool(trace_id) and "/" not in trace_id and "\0" not in trace_id and not trace_id.startswith(".")


def refuse_unrecorded(trace: Trace) -> None:
    """Only host-recorded traces enter an archive (either backend), under an id that can name one."""
    if not trace.host_recorded:
        raise ValidationError("only traces whose outcome the host recorded enter the archive",
                              hint="finalize the run first")
    if not is_trace_id(trace.trace_id):
        raise ValidationError(f"trace id {trace.trace_id!r} cannot name an archived trace",
                              hint="a trace id is a file name: no `/`, not empty, not starting with `.`")


class TraceArchive:
    """Append-only archive of host-recorded traces (scored, or failures a decision names) under a root
    folder (default `traces/`)."""

    def __init__(self, root: Path | str) -> None:
        self.root = Path(root)
        self.skipped: list[tuple[Path, str]] = []
        """Damaged files (file, why) the last iteration skipped."""

    @property
    def where(self) -> str:
        return str(self.root)

    def __enter__(self) -> TraceArchive:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Nothing to release (`Archive` protocol: a database archive closes its connection)."""

    def append(self, trace: Trace) -> Path:
        """Write a trace atomically; refuses traces whose outcome the host did not record, and existing ids
        (`TraceExists`).

        A host-recorded failure enters too (a decision that paired it names it); it is never
        evidence: everything that reads evidence takes `verified` traces only.
        """
        refuse_unrecorded(trace)
        return self._write(trace.trace_id, trace_text(trace).encode())

    def _write(self, trace_id: str, data: bytes) -> Path:
        """Write `data` as `<trace_id>.json` (temp + fsync + link + directory fsync); never over a file."""
        self.root.mkdir(parents=True, exist_ok=True)
        path = self.root / f"{trace_id}.json"
        if path.exists():
            raise TraceExists(trace_id)
        fd, tmp = tempfile.mkstemp(dir=self.root, prefix=".tmp-", suffix=".json")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            try:
                os.link(tmp, path)  # fails if the id appeared meanwhile: never overwrite
            except FileExistsError:
                raise TraceExists(trace_id) from None
        finally:
            os.unlink(tmp)
        dfd = os.open(self.root, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
        return path

    def ids(self) -> list[str]:
        if not self.root.is_dir():
            return []
        return sorted(p.stem for p in self.root.glob("*.json") if not p.name.startswith("."))

    def __contains__(self, trace_id: object) -> bool:
        return isinstance(trace_id, str) and is_trace_id(trace_id) and (self.root / f"{trace_id}.json").is_file()

    def exists(self) -> bool:
        """Whether the archive folder is there."""
        return self.root.is_dir()

    def get(self, trace_id: str) -> Trace:
        """The trace `trace_id`; `NotFound` (with close ids) or `DamagedTrace` (naming the file). An id is
        a file name of the archive, never a path: `../elsewhere` read a file outside it."""
        if trace_id not in self:
            raise not_found(trace_id, self)
        return load_trace(self.root / f"{trace_id}.json")

    def __iter__(self) -> Iterator[Trace]:
        """Every readable trace in id order; damaged files are skipped and listed in `skipped`."""
        self.skipped = []
        for trace_id in self.ids():
            try:
                yield self.get(trace_id)
            except DamagedTrace as exc:
                self.skipped.append((Path(exc.path), exc.why))

    def select(self, *, env: str | None = None, bundle_hash: str | None = None) -> list[Trace]:
        """Readable traces of `env` and/or `bundle_hash` (damaged ones skipped, see `skipped`)."""
        return [t for t in self if (env is None or t.task.env == env)
                and (bundle_hash is None or t.bundle_hash == bundle_hash)]

    def damaged(self) -> list[tuple[Path, str]]:
        """(file, why) for every archived file that does not load as a trace."""
        out = []
        for trace_id in self.ids():
            try:
                self.get(trace_id)
            except DamagedTrace as exc:
                out.append((Path(exc.path), exc.why))
        return out

    def quarantine(self, path: PurePath) -> Path:
        """Move a damaged trace file to `<root>/quarantine/` (never over another); returns where it went."""
        folder = self.root / QUARANTINE_DIR
        folder.mkdir(exist_ok=True)
        target = folder / path.name
        n = 1
        while target.exists():
            target, n = folder / f"{path.stem}.{n}{path.suffix}", n + 1
        os.replace(path, target)
        return target

    def integrity_check(self) -> str:
        """`ok`: a folder has no append-only machinery to lose (`Archive` protocol)."""
        return "ok"

    def dump(self) -> dict[str, bytes]:
        """Trace id -> the file's bytes, for every trace (`ole storage migrate`)."""
        return {trace_id: (self.root / f"{trace_id}.json").read_bytes() for trace_id in self.ids()}

    def load(self, contents: dict[str, bytes]) -> None:
        """Write every trace of `contents` (id -> bytes, as `dump` gives) into this archive, which must hold
        none; each file atomically, byte for byte (a copy interrupted midway is found by comparing dumps)."""
        if self.ids():
            raise ValidationError(f"the trace archive {self.where} already holds traces: a copy goes into an "
                                  "empty one", hint="name a new, empty archive folder")
        bad = [t for t in contents if not is_trace_id(t)]
        if bad:
            raise ValidationError(f"{len(bad)} trace id(s) cannot name a file: {bad[0]!r}", hint="nothing was copied")
        for trace_id, data in sorted(contents.items()):
            self._write(trace_id, data)


def not_found(trace_id: str, archive: Archive) -> NotFound:
    """`NotFound` for `trace_id` in `archive`, suggesting close ids."""
    import difflib
    close = difflib.get_close_matches(trace_id, archive.ids(), n=3)
    return NotFound(f"no trace {trace_id!r} in {archive.where}",
                    hint=f"did you mean {close[0]!r}?" if close else "see `ole trace ls`")


class DamagedTrace(IntegrityError):
    """An archived trace that does not load (bad JSON, schema errors); names its file (or database row)."""

    def __init__(self, path: PurePath, why: str, *, kind: str = "file",
                 hint: str = "`ole fsck` lists damaged traces and moves them to quarantine/") -> None:
        super().__init__(f"trace {kind} {path} is damaged: {why}", hint=hint)
        self.path, self.why = path, why


def load_trace(path: Path) -> Trace:
    """Read one trace file; `DamagedTrace` (one line: the file and its first error) when it does not load."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise DamagedTrace(Path(path), f"unreadable: {exc.strerror or exc}") from None
    return parse_trace(data, Path(path))


def parse_trace(data: bytes | str, where: PurePath, **damage: Any) -> Trace:
    """The trace in `data`; `DamagedTrace(where, first error, **damage)` when it is not one."""
    import pydantic
    try:
        return Trace.model_validate_json(data)
    except pydantic.ValidationError as exc:
        first = exc.errors()[0]
        at = ".".join(str(p) for p in first["loc"])
        more = f" (+{exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
        raise DamagedTrace(where, f"{at + ': ' if at else ''}{first['msg']}{more}", **damage) from None


def run_json_digest(path: Path) -> str:
    return "sha256:" + hashlib.sha256(Path(path).read_bytes()).hexdigest()


def dumps(trace: Trace) -> str:
    return json.dumps(trace.model_dump(mode="json"), sort_keys=True)
