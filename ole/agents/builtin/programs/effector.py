"""Effector helpers for goal-conditioned Dict observations (effector, object, goal).

Effector position = the first `len(goal)` entries of `observation` (the usual layout of
goal-conditioned robotics observations); the object = `achieved_goal`; the last goal
coordinate is height. Inlined into the programs that import it.
"""
import numpy as np

from ole.agents.builtin.programs.prelude import num  # inline

P: dict = {}  # params


def parts(obs):
    g = np.asarray([num(v) for v in obs["desired_goal"]], dtype=float)
    a = np.asarray([num(v) for v in obs["achieved_goal"]], dtype=float)
    o = np.asarray([num(v) for v in obs["observation"]], dtype=float)
    return np.nan_to_num(o[: g.size]), np.nan_to_num(a), np.nan_to_num(g)


def move(codec, e, target, grip):
    u = np.zeros(codec.dim)
    k = min(codec.dim, e.size)
    u[:k] = np.clip(P["gain"][0] * (target - e)[:k], -1.0, 1.0)
    if codec.dim > e.size:
        u[e.size] = grip
    return codec.box(u)
