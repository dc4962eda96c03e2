"""Vehicle to a goal pose: speed from the goal distance (reverse when it lies behind), steer at it.

A template of the OLE built-in agent, rendered by `ole.agents.builtin.mechanism.render`.
"""
import math

import numpy as np

from ole.agents.builtin.programs.prelude import ActionCodec, num  # inline

P: dict = {}  # params


class Policy:
    """Vehicle to a goal pose: speed from the goal distance (reverse when it lies behind), steer at it."""

    def __init__(self, obs_space, action_space, env_meta):
        self.codec = ActionCodec(action_space)

    def reset(self, episode_index):
        pass

    def act(self, obs):
        a = np.nan_to_num(np.asarray([num(v) for v in obs["achieved_goal"]], dtype=float))
        g = np.nan_to_num(np.asarray([num(v) for v in obs["desired_goal"]], dtype=float))
        c, s = a[4], a[5]
        dx, dy = g[0] - a[0], g[1] - a[1]
        fwd = dx * c + dy * s
        lat = -dx * s + dy * c
        speed = a[2] * c + a[3] * s
        dist = math.hypot(dx, dy)
        direction = 1.0 if fwd >= -P["reverse_bias"][0] * dist else -1.0
        want = direction * float(np.clip(P["k_dist"][0] * dist, 0.0, P["vmax"][0]))
        accel = P["k_speed"][0] * (want - speed)
        heading_err = math.atan2(g[5] * c - g[4] * s, g[4] * c + g[5] * s)
        bearing = math.atan2(lat, abs(fwd) + 1e-6)
        near = math.exp(-dist / max(P["near"][0], 1e-6))
        steer = P["k_bearing"][0] * bearing * (1.0 - near) + P["k_heading"][0] * heading_err * near
        if want < 0:
            steer = -steer
        return self.codec.box([accel, steer])
