"""Pick and place: hover over the object, descend open, close, carry to the goal.

A template of the OLE built-in agent, rendered by `ole.agents.builtin.mechanism.render`.
"""
import numpy as np

from ole.agents.builtin.programs.effector import move, parts  # inline
from ole.agents.builtin.programs.prelude import ActionCodec  # inline

P: dict = {}  # params


class Policy:
    """Pick and place: descend onto the object through a funnel, close, carry it (not the hand) to the goal."""

    def __init__(self, obs_space, action_space, env_meta):
        self.codec = ActionCodec(action_space)
        self.closed = 0

    def reset(self, episode_index):
        self.closed = 0

    def act(self, obs):
        e, o, g = parts(obs)
        sign = 1.0 if P["open_sign"][0] >= 0 else -1.0
        if np.allclose(e, o, atol=1e-6):
            return move(self.codec, e, g, sign)  # no object: the goal is for the effector itself
        rel = o - e
        near = float(np.linalg.norm(rel)) < P["hold"][0]
        if near and self.closed >= P["close_steps"][0]:
            return move(self.codec, e, g - rel, -sign)  # carry: put the object, not the hand, on the goal
        if near and self.closed > 0:
            self.closed += 1
            return move(self.codec, e, o, -sign)
        self.closed = 0
        xy = float(np.linalg.norm(rel[:-1]))
        if xy < P["tol"][0] and abs(rel[-1]) < P["ztol"][0]:
            self.closed = 1
            return move(self.codec, e, o, -sign)
        target = o.copy()
        target[-1] = o[-1] + P["hover"][0] * min(1.0, xy / max(P["funnel"][0], 1e-6))
        return move(self.codec, e, target, sign)
