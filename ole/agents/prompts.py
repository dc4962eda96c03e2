"""Prompts for the LLM coding agent, rendered from the loop policy and workspace feedback.

Rendering is deterministic: the same loop policy, task text and feedback files give
byte-identical prompts (no clocks, no wall times, no paths of this machine), which is
what lets a recorded run replay offline by request hash. Timing fields of
`summary.json` are never shown for that reason.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ole.agents import trajectory
from ole.lessons import LessonStore
from ole.loop_policy import LoopPolicy, Observation

OBS_PREVIEW_ITEMS = 12
"""An observation with more numbers than this is shown as its first items plus its length."""
STREAM_CHARS = 600
"""Policy stdout/stderr shown per inspected episode."""
ERRORS_CHARS = 1500
"""errors.txt text shown for a failed submit."""
TASK_CHARS = 12000
"""The `/task` text is cut here."""
LESSONS_SHOWN = 5
"""Cross-task lessons put in a prompt."""
_PATH = re.compile(r'File "(?:[^"]*/)?([^/"]+)"')

_FORMATS = {
    "file": "Answer with the complete new `policy.py` in one ```python block.",
    "function": ("Change exactly one function or method. Answer with a unified diff against the current "
                 "program in one ```diff block (@@ hunks with exact context lines), or with the full file "
                 "in a ```python block where only that one function differs."),
    "parameters": ("Change numeric constants only; keep every statement, name and structure as it is. Answer "
                   "with a unified diff in one ```diff block, or the full file in a ```python block."),
}
_PHASE_RULES = {
    "synthesis": ("Phase: synthesis. Propose a program built on a mechanism (a control structure) that has not "
                  "been tried yet. Start the answer with a line `Mechanism: <short name>`."),
    "tuning": "Phase: tuning. Improve the current program within the edit unit below; keep its mechanism.",
    "recovery": "Phase: recovery. The last submit failed. Fix the cause shown in the feedback.",
}


@dataclass(frozen=True)
class Turn:
    """Everything one user prompt shows; built by the agent from its state and the loop policy."""

    phase: str
    granularity: str
    program: str | None
    feedback: str
    step_size: float
    remaining_episodes: int
    tried_mechanisms: tuple[str, ...] = ()
    best: tuple[tuple[str, float, int], ...] = ()
    """Top-k kept programs: (mechanism, score, submit id)."""
    edit_log: tuple[str, ...] = ()
    lessons: tuple[str, ...] = ()
    bold: bool = False
    """Plateau with on_plateau=widen_search: ask for larger changes."""
    extra: tuple[str, ...] = field(default_factory=tuple)


def system_prompt(task_text: str, info: dict[str, Any], policy: LoopPolicy) -> str:
    """The fixed part of every request: role, policy contract, hard rules and the env brief."""
    meta = info.get("env_meta", {})
    lines = [
        "You write and improve a Python control policy for an EvoPolicyGym task.",
        "The host runs your `policy.py` in a sandbox on hidden episodes; your score is the mean return.",
        "Contract: `policy.py` defines a top-level `class Policy` with `__init__(self, obs_space, action_space,"
        " env_meta)`, `reset(self, episode_index)` and `act(self, obs)` returning one valid action.",
        "Observations are JSON values (lists, dicts, numbers; non-finite floats as the strings 'inf'/'nan').",
        "Imports: the Python standard library, numpy and scipy only; no subprocesses, sockets or files outside"
        " the program. Never simulate the environment locally; all evidence comes from submitted episodes.",
        f"Env: {meta.get('env', '?')}; max episode steps {meta.get('max_episode_steps', '?')}.",
        "Action space: " + json.dumps(meta.get("action_space", {}), sort_keys=True),
        "Observation space: " + _short_json(meta.get("obs_space", {}), 1200),
    ]
    if policy.verification.static_checks:
        lines.append("Every program is parsed and import-checked before it is submitted; a failing one is sent back.")
    lines += ["", "# Task brief", task_text[:TASK_CHARS]]
    return "\n".join(lines)


def user_prompt(turn: Turn) -> str:
    """One planning step: phase rules, memory, the program to edit, feedback and the answer format."""
    parts = [_PHASE_RULES.get(turn.phase, _PHASE_RULES["tuning"])]
    if turn.phase == "synthesis" and turn.tried_mechanisms:
        parts.append("Mechanisms tried so far (do not repeat): " + ", ".join(turn.tried_mechanisms))
    if turn.phase == "tuning":
        scale = turn.step_size * (2.0 if turn.bold else 1.0)
        parts.append(f"Step size: change constants by about {scale:g} of their magnitude"
                     + (" (progress has plateaued: make bolder changes)." if turn.bold else "."))
    parts.append(f"Episodes left in the budget: {turn.remaining_episodes}.")
    parts += list(turn.extra)
    if turn.best:
        parts.append("## Best programs so far\n" + "\n".join(
            f"- submit {sid}: score {score:.4g} ({mech})" for mech, score, sid in turn.best))
    if turn.edit_log:
        parts.append("## Recent edits (oldest first)\n" + "\n".join(f"- {e}" for e in turn.edit_log))
    if turn.lessons:
        parts.append("## Lessons from earlier tasks\n" + "\n".join(f"- {s}" for s in turn.lessons))
    if turn.program is not None:
        parts.append("## Current program (policy.py)\n```python\n" + turn.program.rstrip() + "\n```")
    if turn.feedback:
        parts.append("## Feedback from the host\n" + turn.feedback)
    fmt = "file" if turn.phase == "synthesis" or turn.program is None else turn.granularity
    parts.append("## Answer format\n" + _FORMATS[fmt])
    return "\n\n".join(parts)


def lesson_lines(store: LessonStore, sig: str) -> tuple[str, ...]:
    """What the prompt says of earlier tasks with the same interface signature (`memory.carry_lessons`):
    the last `LESSONS_SHOWN` lessons, then the mechanisms that won most often."""
    same = [les for les in store.all() if les.signature == sig][-LESSONS_SHOWN:]
    ranking = store.ranking(sig)
    lines = [f"{les.env}: mechanism `{les.mechanism}` was best (train score {les.score:.4g})" for les in same]
    if ranking:
        lines.append("mechanisms that won most often on this interface: " + ", ".join(ranking[:LESSONS_SHOWN]))
    return tuple(lines)


def repair_prompt(reason: str, granularity: str, has_program: bool) -> str:
    """Sent after an unusable answer; names the exact problem and restates the format."""
    fmt = _FORMATS[granularity if has_program else "file"]
    return f"Your answer could not be used: {reason}.\n{fmt}"


# ---- observation: feedback files -> compressed text -------------------------------------------
def render_feedback(submit_dir: Path, obs: Observation) -> str:
    """Text of one submit's feedback, filtered by `summary_fields` and cut at `max_context_chars`."""
    summary = _read_json(submit_dir / "summary.json") or {}
    shown = {k: summary.get(k) for k in obs.summary_fields if k in summary}
    parts = [f"### submit {summary.get('submit_index', '?')}", _short_json(shown, 4000)]
    status = summary.get("status")
    if status not in (None, "ok") and (submit_dir / "errors.txt").is_file():
        parts.append("errors:\n" + _errors_text(submit_dir / "errors.txt"))
    for local in worst_episodes(summary, obs):
        parts.append(_episode_text(submit_dir, local, summary, obs))
    text = "\n".join(p for p in parts if p)
    if len(text) > obs.max_context_chars:
        cut = f"\n... (feedback cut at {obs.max_context_chars} chars)"
        text = text[:max(0, obs.max_context_chars - len(cut))] + cut
    return text


def worst_episodes(summary: dict[str, Any], obs: Observation) -> list[int]:
    """Local indices of the episodes to inspect: lowest returns when returns are read, else the first ones."""
    n = int(summary.get("n_episodes") or 0)
    k = min(obs.worst_k_episodes, n)
    returns = summary.get("returns") if "returns" in obs.summary_fields else None
    if k == 0:
        return []
    if isinstance(returns, list) and len(returns) == n:
        return sorted(range(n), key=lambda i: (returns[i], i))[:k]
    return list(range(k))


def _episode_text(submit_dir: Path, local: int, summary: dict[str, Any], obs: Observation) -> str:
    dirs = sorted((submit_dir / "episodes").glob("ep_*"), key=lambda p: int(p.name[3:]) if p.name[3:].isdigit() else 0)
    if local >= len(dirs):
        return ""
    ep = dirs[local]
    returns = summary.get("returns") if "returns" in obs.summary_fields else None
    head = f"#### episode {local}" + (f" (return {returns[local]:.4g})" if isinstance(returns, list)
                                      and local < len(returns) and isinstance(returns[local], (int, float)) else "")
    parts = [head]
    if obs.trajectory_window > 0:
        parts.append(_trajectory_tail(ep, obs.trajectory_window))
    if (ep / "error.txt").is_file():
        parts.append("error: " + _errors_text(ep / "error.txt")[:STREAM_CHARS])
    if obs.read_stdout:
        for name in ("stdout.txt", "stderr.txt"):
            text = (ep / name).read_text(errors="replace")[-STREAM_CHARS:] if (ep / name).is_file() else ""
            if text.strip():
                parts.append(f"{name}: {text.strip()}")
    return "\n".join(parts)


def _errors_text(path: Path) -> str:
    """Error lines without timestamps and with file paths cut to their base name (prompts must be replayable)."""
    out = []
    for line in path.read_text(errors="replace").splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            out.append(_PATH.sub(r'File "\1"', line))
            continue
        if not isinstance(row, dict):
            continue
        out.append(str(row.get("message") or row.get("category") or "error"))
        if row.get("traceback"):
            out.append(_PATH.sub(r'File "\1"', str(row["traceback"])).rstrip())
    return "\n".join(out)[:ERRORS_CHARS]


def _trajectory_tail(episode_dir: Path, window: int) -> str:
    path = episode_dir / trajectory.TRAJECTORY
    if not path.is_file():
        return "(no trajectory)"
    with path.open(errors="replace") as lines:
        total = sum(1 for _ in lines)
    out = [f"last {min(window, total)} of {total} steps (t obs -> action reward):"]
    for line in trajectory.tail_lines(episode_dir, window):
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        flags = " END" if row.get("terminated") or row.get("truncated") else ""
        out.append(f"t={row.get('t')} {_compact(row.get('obs'))} -> {_compact(row.get('action'))} "
                   f"r={_num(row.get('reward'))}{flags}")
    return "\n".join(out)


def _compact(value: Any) -> str:
    if value is None:
        return "(external)"
    flat = trajectory.flat_numbers(value)
    if flat is None:
        return _short_json(value, 160)
    shown = ",".join(_num(v) for v in flat[:OBS_PREVIEW_ITEMS])
    more = f",...({len(flat)} values)" if len(flat) > OBS_PREVIEW_ITEMS else ""
    return f"[{shown}{more}]" if isinstance(value, (list, tuple)) else shown


def _num(v: Any) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def _short_json(value: Any, limit: int) -> str:
    text = json.dumps(value, sort_keys=True, default=str)
    return text if len(text) <= limit else text[:limit] + "..."


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None
