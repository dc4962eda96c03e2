"""Reading a submit's feedback tree as the Loop Policy's Observation component allows.

The agent reads `summary.json` (only the allowed fields), the trajectories of the
worst `worst_k_episodes` episodes (their last `trajectory_window` steps), and, when
`read_stdout`, the episodes' stdout/stderr; everything read is capped at
`max_context_chars`. Two diagnoses come out of the trajectories: actuator saturation
(continuous actions pinned at a bound) and stalling (the observation stops changing);
the windows themselves are kept as arrays (`Sample`) for the layout inference of
`ole.agents.builtin.layout`.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ole.agents import trajectory
from ole.loop_policy import LoopPolicy

SATURATION_LEVEL = 0.98
"""|action| at or above this (for actions in [-1, 1]) counts as saturated."""
STALL_TOLERANCE = 1e-6
"""Max per-step observation change that counts as a stall."""
WARNING_WORDS = ("Warning", "Traceback", "nan", "overflow")
"""Policy output that marks a program as numerically unhealthy."""
MIN_DIAGNOSIS_STEPS = 10
"""Fewer inspected steps than this give no saturation/stall diagnosis (too little evidence)."""
MIN_SAMPLE_STEPS = 3
"""A shorter window gives no sample (a failing episode of a survival task may be that short)."""
OUTPUT_LINES = 200
"""Last lines of an episode's stdout/stderr that are read."""


@dataclass(frozen=True)
class Digest:
    """What the agent learned from one submit."""

    summary: dict
    saturation: float
    """Share of inspected continuous action components at a bound."""
    stalled: bool
    """Some inspected episode ended with a constant observation."""
    unhealthy_output: bool
    """The policy's stdout/stderr carried warnings (only when read_stdout)."""
    text_sha256: str
    """Hash of all feedback text read (the trace's observation digest)."""
    samples: tuple["Sample", ...] = ()
    """The inspected trajectory windows as arrays (flat numeric observations only)."""


@dataclass(frozen=True)
class Sample:
    """One inspected trajectory window: observations, actions and rewards step by step."""

    obs: np.ndarray
    """(T, n) flat observations."""
    actions: np.ndarray
    """(T, m) flat actions (a Discrete action as one column)."""
    rewards: np.ndarray
    """(T,) step rewards."""


def _summary(lp: LoopPolicy, path: Path, fallback: dict) -> dict:
    raw = json.loads(path.read_text()) if path.is_file() else fallback
    keep = set(lp.observation.summary_fields)
    return {k: v for k, v in raw.items() if k in keep}


def _worst(summary_all: dict, k: int) -> list[int]:
    returns = summary_all.get("returns") or []
    order = sorted(range(len(returns)), key=lambda i: (returns[i] is None, returns[i] if returns[i] is not None else 0))
    return order[:k]


def _tail_lines(path: Path, window: int, budget: int) -> list[str]:
    if not path.is_file() or window == 0 or budget <= 0:
        return []
    return trajectory.within(path.read_text(errors="replace").splitlines()[-window:], budget)


def _sample(lines: list[str]) -> Sample | None:
    """The window as arrays, when every step has a flat numeric observation and action."""
    obs, acts, rews = [], [], []
    for line in lines:
        try:
            step = json.loads(line)
        except json.JSONDecodeError:
            continue
        o, a = trajectory.flat_numbers(step.get("obs")), trajectory.flat_numbers(step.get("action"))
        r = step.get("reward")
        if o is None or a is None or not isinstance(r, (int, float)):
            return None
        obs.append(o)
        acts.append(a)
        rews.append(float(r))
    if len(obs) < MIN_SAMPLE_STEPS or len({len(o) for o in obs}) != 1 or len({len(a) for a in acts}) != 1:
        return None
    return Sample(np.asarray(obs, float), np.asarray(acts, float), np.asarray(rews, float))


def _diagnose(lines: list[str]) -> tuple[list[float], bool]:
    sat: list[float] = []
    obs_prev, stall = None, False
    for line in lines:
        try:
            step = json.loads(line)
        except json.JSONDecodeError:
            continue
        action = step.get("action")
        if isinstance(action, list) and action and all(isinstance(a, (int, float)) for a in action):
            sat.extend(float(abs(a) >= SATURATION_LEVEL) for a in action)
        obs = step.get("obs")
        if isinstance(obs, list) and obs_prev is not None and len(obs) == len(obs_prev):
            try:
                stall = float(np.max(np.abs(np.asarray(obs, float) - np.asarray(obs_prev, float)))) < STALL_TOLERANCE
            except (TypeError, ValueError):
                stall = False
        obs_prev = obs if isinstance(obs, list) else obs_prev
    return sat, stall


def read_submit(lp: LoopPolicy, submit_dir: Path, answer_summary: dict) -> Digest:
    """Digest one `feedback/submit_NNN/` folder under the observation settings."""
    obs = lp.observation
    summary_path = submit_dir / "summary.json"
    full = json.loads(summary_path.read_text()) if summary_path.is_file() else answer_summary
    summary = _summary(lp, summary_path, answer_summary)
    budget = obs.max_context_chars - len(json.dumps(summary))
    texts: list[str] = [json.dumps(summary, sort_keys=True)]
    sat: list[float] = []
    samples: list[Sample] = []
    stalled = unhealthy = False
    first = full.get("first_global_episode")
    for local in _worst(full, obs.worst_k_episodes):
        ep = submit_dir / "episodes" / f"ep_{(first or 0) + local:03d}"
        lines = trajectory.tail_lines(ep, obs.trajectory_window, budget)
        budget -= sum(len(line) for line in lines)
        texts.extend(lines)
        s, stall = _diagnose(lines)
        sample = _sample(lines)
        if sample is not None:
            samples.append(sample)
        sat.extend(s)
        stalled = stalled or stall
        if obs.read_stdout:
            for name in ("stdout.txt", "stderr.txt"):
                out = "\n".join(_tail_lines(ep / name, OUTPUT_LINES, budget))
                budget -= len(out)
                texts.append(out)
                unhealthy = unhealthy or any(w in out for w in WARNING_WORDS)
    digest = hashlib.sha256("\n".join(texts).encode()).hexdigest()
    steps = sum(1 for t in texts[1:] if t.startswith("{"))
    if steps < MIN_DIAGNOSIS_STEPS:
        sat, stalled = [], False
    return Digest(summary, float(np.mean(sat)) if sat else 0.0, stalled, unhealthy, "sha256:" + digest,
                  tuple(samples))
