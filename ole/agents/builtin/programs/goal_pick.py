"""Pick and place: hover over the object, descend open, close, carry to the goal.

A template of the OLE built-in agent, rendered by `ole.agents.builtin.mechanism.render`.
"""
import numpy as np

from ole.agents.builtin.programs.effector import move, parts  # inline
from ole.agents.builtin.programs.prelude import ActionCodec  # inline

P: dict = {}  # params


class Policy:
    """Pick and place: hover over the object, descend open, close, carry to the goal."""

    def __init__(self, obs_space, action_space, env_meta):
        self.codec = ActionCodec(action_space)
        self.closed = 0

    def reset(self, episode_index):
        self.closed = 0

    def act(self, obs):
        e, o, g = parts(obs)
        sign = 1.0 if P["open_sign"][0] >= 0 else -1.0
        if np.allclose(e, o, atol=1e-6):
            return move(self.codec, e, g, sign)
        rel = o - e
        held = self.closed >= P["close_steps"][0] and np.linalg.norm(rel) < P["hold"][0]
        if held:
            return move(self.codec, e, g, -sign)
        if np.linalg.norm(rel[:-1]) > P["tol"][0]:
            self.closed = 0
            target = o.copy()
            target[-1] = max(e[-1], o[-1] + P["hover"][0])
            return move(self.codec, e, target, sign)
        if rel[-1] < -P["ztol"][0] and self.closed == 0:
            return move(self.codec, e, o, sign)
        self.closed += 1
        return move(self.codec, e, o, -sign)
