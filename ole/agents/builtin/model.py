"""A data-informed linear-quadratic regulator: the affine program, started from a model of the task.

From the trajectories the agent read it fits linear dynamics x' = A x + B u + c (ridge
least squares over the observed transitions) and a cost: the reward's quadratic fit when
the reward explains itself that way, else "stay near where episodes start" (a survival
task rewards every step alive and says nothing quadratic). The discrete Riccati equation
then gives the gain K, and the affine program starts at u = -K (x - x*) instead of at
zero. Only the data the Observation component lets the agent read goes in, so how much
trajectory it reads decides whether (and how well) this candidate exists.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import scipy.linalg

from ole.agents.builtin.control import action_size, obs_vector_size
from ole.agents.builtin.feedback import Sample
from ole.agents.builtin.mechanism import Mechanism, Param

MIN_TRANSITIONS = 20
"""Fewer observed transitions than this fit nothing."""
MAX_STATE = 32
"""Larger observations are not modelled (too few transitions to fit them)."""
RIDGE = 1e-3
"""Ridge weight of the dynamics fit (relative to the data scale)."""
REWARD_FIT = 0.5
"""R^2 the quadratic reward fit needs before its weights are used as the cost."""
CONTROL_COST = 0.1
"""Control weight relative to the state cost (normalized action units)."""


def _transitions(samples: Sequence[Sample], n: int, m: int) -> tuple[np.ndarray, ...] | None:
    xs, us, ys, rs = [], [], [], []
    for s in samples:
        if s.obs.shape[1] != n or s.actions.shape[1] != m or len(s.obs) < 3:
            continue
        xs.append(s.obs[:-1])
        us.append(s.actions[:-1])
        ys.append(s.obs[1:])
        rs.append(s.rewards[:-1])
    if not xs:
        return None
    return tuple(np.concatenate(a) for a in (xs, us, ys, rs))


def _normalized(u: np.ndarray, action_space: dict) -> np.ndarray:
    low, high = np.asarray(action_space.get("low"), float), np.asarray(action_space.get("high"), float)
    low = np.where(np.isfinite(low), low, -1.0)
    high = np.where(np.isfinite(high), high, 1.0)
    return np.clip((u - (high + low) / 2) / np.maximum((high - low) / 2, 1e-9), -1.0, 1.0)


def lqr_gain(samples: Sequence[Sample], obs_space: dict,
             action_space: dict) -> tuple[np.ndarray, np.ndarray] | None:
    """(K, x*) of the fitted regulator in observation units and normalized actions, or None."""
    n, m = obs_vector_size(obs_space), action_size(action_space)
    if action_space.get("type") != "Box" or n is None or n > MAX_STATE or not isinstance(action_space.get("low"), list):
        return None
    data = _transitions(samples, n, m)
    if data is None or len(data[0]) < MIN_TRANSITIONS:
        return None
    x, u, y, r = data
    u = _normalized(u, action_space)
    if np.min(np.std(u, axis=0)) < 1e-3:
        return None  # the actions never varied: their effect cannot be told
    scale = np.maximum(np.std(x, axis=0), 1e-6)
    xn, yn = x / scale, y / scale
    z = np.hstack([xn, u, np.ones((len(xn), 1))])
    w = np.linalg.solve(z.T @ z + RIDGE * len(z) * np.eye(z.shape[1]), z.T @ yn)
    a, b = w[:n].T, w[n:n + m].T
    q, target = _cost(xn, r)
    try:
        p = scipy.linalg.solve_discrete_are(a, b, np.diag(q), CONTROL_COST * np.eye(m))
        k = np.linalg.solve(CONTROL_COST * np.eye(m) + b.T @ p @ b, b.T @ p @ a)
    except (np.linalg.LinAlgError, ValueError):
        return None
    if not np.all(np.isfinite(k)) or np.max(np.abs(np.linalg.eigvals(a - b @ k))) > 1.0 + 1e-6:
        return None
    return k / scale, target * scale


def _cost(xn: np.ndarray, r: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Diagonal state cost and target, in normalized units."""
    n = xn.shape[1]
    if np.std(r) > 1e-9:
        design = np.hstack([xn ** 2, xn, np.ones((len(xn), 1))])
        coef, *_ = np.linalg.lstsq(design, r, rcond=None)
        fit = 1.0 - float(np.sum((r - design @ coef) ** 2) / np.sum((r - r.mean()) ** 2))
        quad, lin = coef[:n], coef[n:2 * n]
        if fit > REWARD_FIT and np.any(quad < 0):
            q = np.clip(-quad, 0.0, None) + 1e-6
            target = np.where(quad < 0, -lin / (2 * np.where(quad < 0, quad, -1.0)), 0.0)
            return q / q.max(), target
    return np.ones(n), xn[: max(1, len(xn) // 10)].mean(axis=0)


def lqr_affine(obs_space: dict, action_space: dict, samples: Sequence[Sample]) -> Mechanism | None:
    """The affine program started at the fitted regulator (tuning moves it from there)."""
    found = lqr_gain(samples, obs_space, action_space)
    if found is None:
        return None
    k, target = found
    m, n = k.shape
    from ole.agents.builtin.control import affine_scale
    scale = affine_scale(obs_space, n)
    weights = (-k * scale).reshape(-1)
    bias = k @ target
    spread = float(np.mean(np.abs(weights))) + 1e-3
    return Mechanism("lqr_affine", "affine", (
        Param("W", tuple(float(v) for v in weights), 0.3 * spread, -1e4, 1e4, "act"),
        Param("b", tuple(float(v) for v in bias), 0.3 * (float(np.mean(np.abs(bias))) + 0.1), -1e4, 1e4, "bias"),
    ), "a linear model and cost fitted to the trajectories read: affine feedback started at the LQR gain")
