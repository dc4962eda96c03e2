"""Central pattern generator: one sine per actuator plus scalar-gain state feedback.

A template of the OLE built-in agent, rendered by `ole.agents.builtin.mechanism.render`.
"""
import math

import numpy as np

from ole.agents.builtin.programs.prelude import ActionCodec, flat, scale_of  # inline

P: dict = {}  # params


class Policy:
    """Central pattern generator: one sine per actuator plus scalar-gain state feedback."""

    def __init__(self, obs_space, action_space, env_meta):
        self.codec = ActionCodec(action_space)
        self.obs_space = obs_space
        self.t = 0
        self.proj = None

    def reset(self, episode_index):
        self.t = 0

    def act(self, obs):
        x = flat(obs)
        if self.proj is None:
            rng = np.random.default_rng(0)
            self.proj = rng.normal(0.0, 1.0 / math.sqrt(max(1, x.size)), (self.codec.dim, x.size))
            self.scale = scale_of(self.obs_space, x.size)
        z = np.clip(x / self.scale, -5.0, 5.0)
        d = self.codec.dim
        phase = 2.0 * math.pi * P["freq"][0] * self.t + np.asarray(P["phase"])[:d]
        u = np.asarray(P["amp"])[:d] * np.sin(phase) + np.asarray(P["bias"])[:d]
        u = u + P["fb"][0] * np.tanh(self.proj @ z)
        self.t += 1
        return self.codec.box(u)
