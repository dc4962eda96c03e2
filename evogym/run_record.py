"""EvoPolicyGym main's run record (`run-record/v8`), written beside our `run.json`.

Everything upstream-shaped lives under `<run>/record/` so nothing collides with our layout
(upstream's own `validation/` and `assessment/` folders at the run's root would, and its
agents check that they do not exist before the run ends):

```
record/run.json                   evopolicygym/run-record/v8 (paths in it relative to the run)
record/events.jsonl               upstream's event vocabulary (run-event/v1): submissions, finish
record/validation/report.json     evopolicygym/validation-report/v2
record/assessment/report.json     evopolicygym/assessment-report/v2
record/initial/program/           the starting program (`evogym.program.seed_workspace`)
```

Projections of what the host decided, never decisions of their own: finalization computes
the candidates, scores and selection once (`evogym.finalize`), and this module renders them.
Where our run differs from upstream's (the splits are ours, a run the agent did not finish is
still scored, feedback is never evicted), the record says what happened here; the
differences are listed in docs/protocol-deviations.md.
"""
from __future__ import annotations

import json
import shutil
import threading
import time
from pathlib import Path
from typing import Any

from evogym.durable import SUMMARY_MAX_BYTES, read_regular
from evogym.feedback import atomic_write_json
from evogym.feedback_v2 import Publications

RECORD = "record"
SCHEMA = "evopolicygym/run-record/v8"
EVENT_SCHEMA = "evopolicygym/run-event/v1"
VALIDATION_SCHEMA = "evopolicygym/validation-report/v2"
ASSESSMENT_SCHEMA = "evopolicygym/assessment-report/v2"
PRIMARY_METRIC = "mean_return"


class Journal:
    """`record/events.jsonl`: one JSON line per event, upstream's names and fields (scalars only)."""

    def __init__(self, run_root: Path) -> None:
        self.path = Path(run_root) / RECORD / "events.jsonl"
        self._lock = threading.Lock()

    def event(self, name: str, **fields: Any) -> None:
        row = {"schema": EVENT_SCHEMA, "time_unix_ns": time.time_ns(), "monotonic_ns": time.monotonic_ns(),
               "event": name, **fields}
        with self._lock:
            self.path.parent.mkdir(exist_ok=True)
            with open(self.path, "a", encoding="utf-8") as f:
                f.write(json.dumps(row, allow_nan=False, separators=(",", ":"), sort_keys=True) + "\n")


def keep_initial(run_root: Path, program: Path) -> None:
    """A copy of the starting program, `record/initial/program/` (kept once: a resumed run keeps the first)."""
    dst = Path(run_root) / RECORD / "initial" / "program"
    if not dst.exists():
        shutil.copytree(program, dst, ignore=shutil.ignore_patterns("__pycache__"))


def terminal_reason(doc: dict, reason: str | None, agent: dict | None) -> str:
    """Upstream's `terminal_reason` for what ended this run: the agent finished (`finish`),
    its host failed (`assessment_failed`), else how the agent ended (an agent that failed, or
    one that exited, after spending the budget or not)."""
    if doc["outcome"]["status"] == "error":
        return "assessment_failed"
    if reason == "finish":
        return "finished"
    if agent and (agent.get("returncode") not in (0, None) or agent.get("timed_out")) or reason in ("sigterm",
                                                                                                    "interrupt"):
        return "agent_failed"
    return "budget_exhausted" if reason == "budget" or agent and agent.get("budget_spent") else "agent_exited"


def submissions(run) -> list[dict]:
    """The published submits as upstream lists them, from our summaries and checkpoints."""
    published = Publications.recover(run.feedback)
    out = []
    for ordinal, index in enumerate(published.indices, 1):
        name = run.submit_name(index)
        summary = _read(run.feedback / name / "summary.json")
        metrics = _read(run.checkpoints / name / "metrics.json")
        v2 = _read(run.feedback / "submissions" / f"submission-{ordinal:06d}" / "feedback.json")
        out.append({"submission_id": f"submission-{ordinal:06d}", "program_digest": metrics.get("tree_hash"),
                    "episode_indices": summary.get("env_instances"), "episodes_used": summary.get("n_episodes"),
                    "episodes_remaining": summary.get("remaining_budget"),
                    "score": v2["score"] if "score" in v2 else summary.get("mean_return"),
                    "record": f"checkpoints/{name}"})
    return out


def write(host, doc: dict, validation: list[dict], assessment: dict | None) -> None:
    """The v8 record of a finalized run and its two reports. `validation`: per candidate, in
    the order compared, `index`, `score`, `episodes`, `policy_failures`, `digest`;
    `assessment`: `index`, `score`, `episodes`, `policy_failures`, `digest` of the selected one."""
    run, config = host.run, host.config
    root = run.root / RECORD
    root.mkdir(exist_ok=True)
    ids = {index: f"submission-{n:06d}" for n, index in enumerate(Publications.recover(run.feedback).indices, 1)}
    best = doc["outcome"].get("best_submit_index")
    if validation:
        atomic_write_json(_report_path(root, "validation"), {
            "schema": VALIDATION_SCHEMA, "split": "valid", "episodes_per_candidate": config.valid_size,
            "primary_metric": PRIMARY_METRIC, "score_direction": "maximize",
            "candidates": [{"submission_id": ids.get(c["index"]), "program_digest": c["digest"], "score": c["score"],
                            "episodes": c["episodes"], "policy_failures": c["policy_failures"],
                            "feedback_content": {"mean_return": c["score"], "episodes": c["episodes"],
                                                 "policy_failures": c["policy_failures"]}} for c in validation],
            "selected_submission_id": ids.get(best) if best is not None else None})
    if assessment is not None:
        atomic_write_json(_report_path(root, "assessment"), {
            "schema": ASSESSMENT_SCHEMA, "submission_id": ids.get(assessment["index"]),
            "program_digest": assessment["digest"], "split": "heldout", "episodes": assessment["episodes"],
            "primary_metric": PRIMARY_METRIC, "score_direction": "maximize", "score": assessment["score"],
            "policy_failures": assessment["policy_failures"],
            "feedback_content": {"mean_return": assessment["score"], "episodes": assessment["episodes"],
                                 "policy_failures": assessment["policy_failures"]}})
    agent = getattr(host, "agent_outcome", None)
    initial = root / "initial" / "program"
    atomic_write_json(root / "run.json", {
        "schema": SCHEMA, "library_version": f"evogym {__import__('evogym').__version__}",
        "benchmark": {"id": config.env, "environment": {
            "digest": "sha256:" + host.pools.hashes["data_train_hash"].removeprefix("sha256:"), "parameters": {}}},
        "initial_program": {"digest": _tree_digest(initial), "record": f"{RECORD}/initial/program"}
        if initial.is_dir() else None,
        "workspace": {"root": "workspace", "program": "workspace/program", "analysis": None,
                      "feedback": "workspace/feedback"},
        "skills": [], "events": f"{RECORD}/events.jsonl", "config": doc["config"],
        "training_episode_pool": {"size": config.n_env_instances, "episode_derivation": "evogym/pools/v0.1.0",
                                  "policy_seed_derivation": None},
        "agent": {"invocation": None, "stdout": "logs/agent.log" if agent else None, "stderr": None,
                  "timed_out": bool(agent and agent.get("timed_out")), "stopped_after_terminal": False,
                  "start_failed": bool(agent and agent.get("start_failed")),
                  "returncode": agent.get("returncode") if agent else None},
        "terminal_reason": terminal_reason(doc, host.finalization.get("reason"), agent),
        "final_submission_id": ids.get(best) if best is not None else None,
        "candidate_submission_ids": [ids[i] for i in (host.named_candidates or ()) if i in ids]
        if host.named_candidates else [ids[c["index"]] for c in validation if c["index"] in ids],
        "validation": {"report": f"{RECORD}/validation/report.json"} if validation else None,
        "assessment": {"report": f"{RECORD}/assessment/report.json"} if assessment is not None else None,
        "submissions": submissions(run)})


def _report_path(root: Path, kind: str) -> Path:
    (root / kind).mkdir(exist_ok=True)
    return root / kind / "report.json"


def _tree_digest(folder: Path) -> str:
    """The digest a checkpoint of this tree would carry (`metrics.json` `tree_hash`)."""
    from evogym.code_metrics import code_metrics
    return str(code_metrics(folder)["tree_hash"])


def _read(path: Path) -> dict:
    """A JSON object the run's files hold, or {}: feedback/ is the agent's, so only a bounded regular
    file is read (`evogym.durable.read_regular`)."""
    try:
        value = json.loads(read_regular(path, SUMMARY_MAX_BYTES))
    except (OSError, ValueError, RecursionError):
        return {}
    return value if isinstance(value, dict) else {}
