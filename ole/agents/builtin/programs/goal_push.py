"""Push: get behind the object on the goal line, descend, push through to the goal.

A template of the OLE built-in agent, rendered by `ole.agents.builtin.mechanism.render`.
"""
import numpy as np

from ole.agents.builtin.programs.effector import move, parts  # inline
from ole.agents.builtin.programs.prelude import ActionCodec  # inline

P: dict = {}  # params


class Policy:
    """Push: get behind the object on the goal line, descend, push through to the goal."""

    def __init__(self, obs_space, action_space, env_meta):
        self.codec = ActionCodec(action_space)

    def reset(self, episode_index):
        pass

    def act(self, obs):
        e, o, g = parts(obs)
        d = g - o
        d[-1] = 0.0
        dist = float(np.linalg.norm(d))
        if np.allclose(e, o, atol=1e-6) or dist < P["done"][0]:
            return move(self.codec, e, g if np.allclose(e, o, atol=1e-6) else e, -1.0)
        dn = d / dist
        behind = o - dn * P["offset"][0]
        rel = e - o
        along = float(rel[:-1] @ dn[:-1])
        lateral = float(np.linalg.norm(rel[:-1] - along * dn[:-1]))
        if along < 0 and lateral < P["tol"][0] and abs(rel[-1]) < P["ztol"][0]:
            target = o + dn * min(P["push"][0], dist)
            target[-1] = o[-1]
        elif np.linalg.norm((e - behind)[:-1]) > P["tol"][0]:
            target = behind.copy()
            target[-1] = o[-1] + P["hover"][0]
            if e[-1] < o[-1] + 0.5 * P["hover"][0] and np.linalg.norm(rel[:-1]) < 2 * P["offset"][0]:
                target = e.copy()
                target[-1] = o[-1] + P["hover"][0]
        else:
            target = behind.copy()
            target[-1] = o[-1]
        return move(self.codec, e, target, -1.0)
