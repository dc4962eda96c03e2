"""Affine feedback u = W z + b on bound-normalized observations.

A template of the OLE built-in agent, rendered by `ole.agents.builtin.mechanism.render`.
"""
import numpy as np

from ole.agents.builtin.programs.prelude import ActionCodec, flat, scale_of  # inline

P: dict = {}  # params


class Policy:
    """Affine feedback u = W z + b on bound-normalized observations."""

    def __init__(self, obs_space, action_space, env_meta):
        self.codec = ActionCodec(action_space)
        self.obs_space = obs_space
        self.scale = None

    def reset(self, episode_index):
        pass

    def act(self, obs):
        x = flat(obs)
        if self.scale is None:
            s = scale_of(self.obs_space, x.size)
            self.scale = s if s.size == x.size else np.ones(x.size)
        z = np.clip(x / self.scale, -5.0, 5.0)
        w = np.asarray(P["W"]).reshape(self.codec.dim, -1)
        n = min(w.shape[1], z.size)
        u = w[:, :n] @ z[:n] + np.asarray(P["b"])
        if self.codec.kind == "Discrete":
            return self.codec.choice(int(np.argmax(u)))
        return self.codec.box(np.tanh(u))
