"""A benchmark run on disk: layout, configuration, budget state, events.

```
<run_dir>/
  run.json                 written once, at close (atomic)
  config.json              the run's public configuration (no seeds)
  events.jsonl             host events (never seeds; hidden means are fine: outside the workspace)
  workspace/AGENTS.md      the contract for any agent
  workspace/system/        agent-writable policy code
  workspace/feedback/      submit_NNN/ trees (read-only for the agent by convention)
  checkpoints/submit_NNN/  snapshot of system/ for every charged submit, + metrics.json (reference fields)
  code_metrics/submit_NNN.json  our structural code metrics of that checkpoint (branches, topology hash, ...)
  logs/                    server log
```
Case pools never enter the run directory: the host holds them in memory, loaded
from evogym's data files. A run directory is resumable: budget used and the next
submit index are recomputed from the feedback summaries on open.
"""
from __future__ import annotations

import json
import os
import threading
from dataclasses import asdict, dataclass, field
from importlib import resources
from pathlib import Path

from evogym import PROTOCOL_VERSION
from evogym.durable import SUMMARY_MAX_BYTES, read_regular
from evogym.errors import ConfigError
from evogym.feedback import atomic_write_json, sweep_temporaries
from evogym.rollout import utc_stamp
from evogym.sandbox import Limits
from evogym.sandbox.isolation import DEFAULT_ISOLATION

AGENTS_MD = "AGENTS.md"


@dataclass(frozen=True)
class RunConfig:
    """Public configuration of a run (what `/info` may show, plus where things live)."""

    env: str
    profile: str
    budget: int
    min_per_submit: int
    max_per_submit: int
    n_env_instances: int
    valid_size: int
    heldout_size: int
    pool_seed: int = 0
    isolation: str = DEFAULT_ISOLATION
    limits: Limits = field(default_factory=Limits)
    finalize_jobs: int = 0
    """Worker processes for hidden evaluation; 0 = one per core (at most 8)."""
    allow_early_finish: bool = True
    """POST /finish finalizes before the budget is spent (extension; off reproduces the paper)."""
    model: str = "unknown"
    """Identity label of the agent/model working the run (recorded in run.json, as the reference's --model)."""
    data_dir: str | None = None
    """Folder of data files (`<slug>/{train,valid,heldout}.json`); None = the built-in generated pools."""
    max_steps: int | None = None
    """Episode step cap override (smoke runs only; reported as max_episode_steps); None = the env's."""
    max_submissions: int | None = None
    """Most charged submits (agent-session/v3 `max_submissions`); None = as many as the budget allows."""
    max_candidates: int | None = None
    """Most candidates hidden validation compares: the ones the agent names when it finishes
    (agent-session/v3), else the latest ok submits; None = every ok submit (v0.1.0)."""
    agent_timeout_s: float | None = None
    """Wall-clock limit of the agent `evogym run` launches (`--agent-timeout`); None = none
    (recorded in run.json as `agent_timeout_seconds`)."""

    def to_json(self) -> dict:
        data = asdict(self)
        data["limits"] = asdict(self.limits)
        return data

    @classmethod
    def from_json(cls, data: dict) -> "RunConfig":
        data = dict(data)
        data["limits"] = Limits(**data["limits"])
        return cls(**data)

    @property
    def finish_budget_policy(self) -> str:
        """`allow_early_finish` in agent-session/v3's words."""
        return "allow_early" if self.allow_early_finish else "require_budget_exhaustion"


def agents_md_text() -> str:
    return resources.files("evogym").joinpath("AGENTS.md").read_text(encoding="utf-8")


class RunDir:
    """Paths of one run plus the append-only event log."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root).resolve()
        self.workspace = self.root / "workspace"
        self.system = self.workspace / "system"
        self.feedback = self.workspace / "feedback"
        self.checkpoints = self.root / "checkpoints"
        self.code_metrics = self.root / "code_metrics"
        self.logs = self.root / "logs"
        self.control = self.root / "control"
        """0700: the run's credential files and the agent-session socket (`evogym.credential`)."""
        self.run_json = self.root / "run.json"
        self.config_json = self.root / "config.json"
        self.events_path = self.root / "events.jsonl"
        self._events_lock = threading.Lock()

    def create(self, config: RunConfig) -> None:
        if self.run_json.exists():
            raise ConfigError(f"run {self.root} is already closed (run.json exists)",
                              hint="use a new --run-dir")
        for d in (self.system, self.feedback, self.checkpoints, self.code_metrics, self.logs):
            d.mkdir(parents=True, exist_ok=True)
        if self.config_json.exists():
            # fields added since the run was created take their defaults
            old = RunConfig.from_json(json.loads(self.config_json.read_text())).to_json()
            if old != config.to_json():
                raise ConfigError(f"run dir {self.root} holds a run with another configuration",
                                  hint="resume it with the same flags, or use a new --run-dir")
        else:
            atomic_write_json(self.config_json, config.to_json())
        agents = self.workspace / AGENTS_MD
        if not agents.exists():
            agents.write_text(agents_md_text(), encoding="utf-8")
        sweep_temporaries(self.feedback)
        sweep_temporaries(self.checkpoints)

    def submit_name(self, index: int) -> str:
        return f"submit_{index:03d}"

    def event(self, name: str, /, *, durable: bool = True, **fields) -> None:
        """Append one event; `durable` ones are fsynced before this returns (a charge must be
        on disk before the submit runs); the others only reach the page cache."""
        row = {"timestamp": utc_stamp(), "event": name, **fields}
        line = json.dumps(row, sort_keys=True, default=str) + "\n"
        with self._events_lock, open(self.events_path, "a", encoding="utf-8") as f:
            f.write(line)
            if durable:
                f.flush()
                os.fsync(f.fileno())


@dataclass
class BudgetState:
    """Budget and submit counters, recomputed from feedback on open (resume)."""

    budget: int
    used: int = 0
    n_submits: int = 0
    next_index: int = 0
    charged: int = 0
    """Submits that were charged (ran), for `RunConfig.max_submissions`."""

    @property
    def remaining(self) -> int:
        return self.budget - self.used

    @classmethod
    def recover(cls, run: RunDir, budget: int) -> "BudgetState":
        state = cls(budget)
        indexes = []
        for d in run.feedback.glob("submit_*"):
            if d.name[7:].isdigit():
                indexes.append(int(d.name[7:]))
                # bounded and non-blocking: a FIFO or a huge file the agent left there fails the
                # recovery loudly instead of hanging it
                summary = json.loads(read_regular(d / "summary.json", SUMMARY_MAX_BYTES))
                state.used += int(summary.get("n_episodes") or 0)
                state.charged += bool(summary.get("n_episodes"))
        for d in run.checkpoints.glob("submit_*"):
            if d.name[7:].isdigit():
                indexes.append(int(d.name[7:]))
        if indexes:
            state.next_index = max(indexes) + 1
            state.n_submits = state.next_index
        return state


PROTOCOL = PROTOCOL_VERSION
