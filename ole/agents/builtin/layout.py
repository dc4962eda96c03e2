"""What the entries of a vector observation are, learned from the trajectories the agent read.

Bounds often say nothing (MuJoCo observations are unbounded), but the trajectories of the
worst episodes do: two entries whose squares always sum to one are the cosine and sine
of an angle; the entry that moves with that angle's increments is its rate; a block of
two or three entries whose length the reward falls with is a distance to a goal. How
much of this the agent can see is what the Observation component allows (how many
episodes, how many steps, how many characters), so those fields decide which
data-driven mechanisms the library can offer.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ole.agents.builtin.feedback import Sample

UNIT_TOLERANCE = 1e-3
"""Largest |c^2 + s^2 - 1| over every inspected step for (c, s) to count as an angle."""
RATE_CORRELATION = 0.8
"""Correlation between an angle's increments and an entry for that entry to be its rate."""
ERROR_FIT = 0.9
"""R^2 of reward ~ a * |block| + b * |action|^2 + c needed to call a block a goal distance."""
MIN_STEPS = 20
"""Fewer inspected steps than this infer nothing."""


@dataclass(frozen=True)
class Layout:
    """The observation structure found in the inspected trajectories."""

    pairs: tuple[tuple[int, int], ...] = ()
    """(cos, sin) index pairs of angles."""
    rates: tuple[int | None, ...] = ()
    """Per pair, the entry holding the angle's rate (None when none matched)."""
    error: tuple[int, ...] = ()
    """Entries of a goal-distance vector: the reward falls with their length."""
    steps: int = 0
    """Inspected steps the layout rests on."""
    error_scale: float = 0.0
    """95th percentile of the goal distance's length over the inspected steps (0 without one)."""


def infer(samples: Sequence[Sample]) -> Layout:
    """The layout of the flat observations in `samples` (empty when there is too little data)."""
    samples = [s for s in samples if s.obs.ndim == 2 and len(s.obs) >= 2]
    widths = {s.obs.shape[1] for s in samples}
    steps = sum(len(s.obs) for s in samples)
    if len(widths) != 1 or steps < MIN_STEPS:
        return Layout(steps=steps)
    pairs, rates = _angles(samples)
    used = {i for p in pairs for i in p} | {r for r in rates if r is not None}
    error = _error_block(samples, used)
    scale = 0.0
    if error:
        x = np.concatenate([s.obs for s in samples])
        scale = float(np.percentile(np.linalg.norm(x[:, error], axis=1), 95))
    return Layout(tuple(pairs), tuple(rates), error, steps, scale)


def _angles(samples: Sequence[Sample]) -> tuple[list[tuple[int, int]], list[int | None]]:
    x = np.concatenate([s.obs for s in samples])
    n = x.shape[1]
    moving = np.ptp(x, axis=0) > 1e-6
    candidates = [(i, j) for i in range(n) for j in range(i + 1, n)
                  if moving[i] or moving[j]]
    pairs: list[tuple[int, int]] = []
    taken: set[int] = set()
    for i, j in candidates:
        if i in taken or j in taken:
            continue
        if np.max(np.abs(x[:, i] ** 2 + x[:, j] ** 2 - 1.0)) < UNIT_TOLERANCE:
            pairs.append((i, j))
            taken |= {i, j}
    ordered, rates = [], []
    for i, j in pairs:
        rate, sign = _rate(samples, i, j, taken)
        ordered.append((i, j) if sign >= 0 else (j, i))
        rates.append(rate)
    return ordered, rates


def _rate(samples: Sequence[Sample], c: int, s: int, exclude: set[int]) -> tuple[int | None, float]:
    """The entry that moves with the angle atan2(s, c), and the sign of that relation."""
    inc, vals = [], []
    for sample in samples:
        theta = np.unwrap(np.arctan2(sample.obs[:, s], sample.obs[:, c]))
        inc.append(np.diff(theta))
        vals.append(sample.obs[:-1])
    d, v = np.concatenate(inc), np.concatenate(vals)
    if d.size < 3 or np.std(d) < 1e-9:
        return None, 1.0
    best, best_corr = None, 0.0
    for k in range(v.shape[1]):
        if k in exclude or np.std(v[:, k]) < 1e-9:
            continue
        corr = float(np.corrcoef(d, v[:, k])[0, 1])
        if abs(corr) > abs(best_corr):
            best, best_corr = k, corr
    if best is None or abs(best_corr) < RATE_CORRELATION:
        return None, 1.0
    return best, float(np.sign(best_corr))


def _error_block(samples: Sequence[Sample], exclude: set[int]) -> tuple[int, ...]:
    """The 2- or 3-entry block whose length best explains the reward (with an action-cost term)."""
    x = np.concatenate([s.obs for s in samples])
    u = np.concatenate([s.actions for s in samples])
    r = np.concatenate([s.rewards for s in samples])
    if np.std(r) < 1e-9:
        return ()
    n = x.shape[1]
    best: tuple[int, ...] = ()
    best_fit = ERROR_FIT
    for width in (2, 3):
        for start in range(n - width + 1):
            block = tuple(range(start, start + width))
            if exclude & set(block) or np.ptp(x[:, block]) < 1e-9:
                continue
            dist = np.linalg.norm(x[:, block], axis=1)
            design = np.column_stack([dist, (u ** 2).sum(axis=1), np.ones(len(r))])
            coef, *_ = np.linalg.lstsq(design, r, rcond=None)
            fit = 1.0 - float(np.sum((r - design @ coef) ** 2) / np.sum((r - r.mean()) ** 2))
            if coef[0] < 0 and fit > best_fit:
                best, best_fit = block, fit
    return best
