"""Push: get behind the object on the goal line, descend, push through to the goal.

A template of the OLE built-in agent, rendered by `ole.agents.builtin.mechanism.render`.
"""
import numpy as np

from ole.agents.builtin.programs.effector import move, parts  # inline
from ole.agents.builtin.programs.prelude import ActionCodec  # inline

P: dict = {}  # params


class Policy:
    """Push: get behind the object on the goal line, descend, push it onto the goal, slowing near it.

    The effector aims where it must stand when the object sits on the goal (`offset` behind
    the goal on the object-goal line); the stroke slows in proportion to the remaining
    distance below `slow`, so the object is not flung past the goal. Off the line it goes
    around: up to `hover` above the object, over to the point behind it, and down.
    """

    def __init__(self, obs_space, action_space, env_meta):
        self.codec = ActionCodec(action_space)

    def reset(self, episode_index):
        pass

    def act(self, obs):
        e, o, g = parts(obs)
        if np.allclose(e, o, atol=1e-6):
            return move(self.codec, e, g, -1.0)  # no object: the goal is for the effector itself
        d = g - o
        d[-1] = 0.0
        dist = float(np.linalg.norm(d))
        if dist < P["done"][0]:
            return move(self.codec, e, e, -1.0)
        dn = d / dist
        rel = e - o
        along = float(rel[:-1] @ dn[:-1])
        lateral = float(np.linalg.norm(rel[:-1] - along * dn[:-1]))
        behind = o - dn * P["offset"][0]
        if along < -0.5 * P["offset"][0] and lateral < P["tol"][0] and abs(rel[-1]) < P["ztol"][0]:
            target = g - dn * P["offset"][0]
            target[-1] = o[-1]
            scale = min(1.0, dist / max(P["slow"][0], 1e-6))
            return move(self.codec, e, e + scale * (target - e), -1.0)
        if np.linalg.norm((e - behind)[:-1]) > P["tol"][0]:
            target = behind.copy()
            target[-1] = o[-1] + P["hover"][0]
            if e[-1] < o[-1] + 0.5 * P["hover"][0] and np.linalg.norm(rel[:-1]) < 2 * P["offset"][0]:
                target = e.copy()  # close beside the object: go up before moving over it
                target[-1] = o[-1] + P["hover"][0]
            return move(self.codec, e, target, -1.0)
        target = behind.copy()
        target[-1] = o[-1]
        return move(self.codec, e, target, -1.0)
