"""Energy pumping: push along the velocity features (build momentum), shaped by angles.

A template of the OLE built-in agent, rendered by `ole.agents.builtin.mechanism.render`.
"""
import math

import numpy as np

from ole.agents.builtin.programs.prelude import ActionCodec, bounds, flat, scale_of  # inline

P: dict = {}  # params


class Policy:
    """Energy pumping: push along the velocity features (build momentum), shaped by angles.

    Velocity features are the non-angle dimensions (angles arrive as cos/sin pairs);
    without angle pairs, the second half of the features (positions come first).
    """

    def __init__(self, obs_space, action_space, env_meta):
        self.codec = ActionCodec(action_space)
        self.obs_space = obs_space
        self.vel = None

    def reset(self, episode_index):
        pass

    def layout(self, x):
        low, high = bounds(self.obs_space, x.size)
        unit = (np.abs(low + 1.0) < 1e-6) & (np.abs(high - 1.0) < 1e-6)
        trig = [i for i in range(x.size) if unit[i]]
        trig = trig[: len(trig) // 2 * 2]
        rest = [i for i in range(x.size) if i not in trig]
        if not trig:
            rest = rest[len(rest) // 2:] if len(rest) > 1 else rest
        self.vel, self.trig = rest, trig
        self.scale = scale_of(self.obs_space, x.size)

    def act(self, obs):
        x = flat(obs)
        if self.vel is None:
            self.layout(x)
        v = x[self.vel] / self.scale[self.vel]
        w = np.asarray(P["w"])[: len(self.vel)]
        s = float(w @ v[: w.size])
        if self.trig:
            angles = x[self.trig]
            c = np.asarray(P["c"])[: angles.size]
            s += float(c @ angles[: c.size])
        u = math.tanh(P["gain"][0] * (s + P["bias"][0])) * P["amp"][0]
        if self.codec.kind == "Discrete":
            if abs(u) <= P["dead"][0]:
                return self.codec.choice(self.codec.n // 2)
            return self.codec.choice(self.codec.n - 1 if u > 0 else 0)
        return self.codec.box(np.full(self.codec.dim, u))
