"""Swing a pendulum up by energy shaping, then catch and hold it with a PD law.

A template of the OLE built-in agent, rendered by `ole.agents.builtin.mechanism.render`.
The angle arrives as a (cos, sin) pair at observation entries `P["pair"]` and its rate at
`P["vel"]`; `P["up"]` is the cosine of the upright position (+1 or -1). Far from upright,
the torque pumps energy toward the upright rest energy (u ~ -(E - E_up) * rate); within
`switch` of upright (in cosine) a PD law on the angle error takes over.
"""
import math

import numpy as np

from ole.agents.builtin.programs.prelude import ActionCodec, flat  # inline

P: dict = {}  # params


class Policy:
    """Energy-shaping swing-up with a PD catch near upright."""

    def __init__(self, obs_space, action_space, env_meta):
        self.codec = ActionCodec(action_space)

    def reset(self, episode_index):
        pass

    def torque(self, x):
        """Normalized torque in [-1, 1] for the flattened observation x."""
        ci, si = int(P["pair"][0]), int(P["pair"][1])
        up = P["up"][0]
        c, s, w = up * x[ci], up * x[si], x[int(P["vel"][0])]
        energy = 0.5 * w * w + P["wpot"][0] * (c - 1.0)
        if c > P["switch"][0]:
            angle = math.atan2(s, c)
            u = -P["kp"][0] * angle - P["kd"][0] * w
        else:
            u = -P["ke"][0] * energy * w
        return float(np.clip(u, -1.0, 1.0)) * P["amp"][0]

    def act(self, obs):
        u = self.torque(flat(obs))
        if self.codec.kind == "Discrete":
            if abs(u) <= P["dead"][0]:
                return self.codec.choice(self.codec.n // 2)
            return self.codec.choice(self.codec.n - 1 if u > 0 else 0)
        return self.codec.box(np.full(self.codec.dim, u))
