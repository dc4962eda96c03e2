"""Steer to the centroid of grey (road) pixels in a band ahead; throttle eases in curves.

A template of the OLE built-in agent, rendered by `ole.agents.builtin.mechanism.render`.
"""
import numpy as np

from ole.agents.builtin.programs.prelude import ActionCodec  # inline

P: dict = {}  # params


class Policy:
    """Steer to the centroid of grey (road) pixels in a band ahead; throttle eases in curves."""

    def __init__(self, obs_space, action_space, env_meta):
        self.codec = ActionCodec(action_space)
        self.prev = 0.0
        self.t = 0

    def reset(self, episode_index):
        self.prev = 0.0
        self.t = 0

    def act(self, obs):
        img = np.asarray(obs, dtype=float)
        h, w = img.shape[0], img.shape[1]
        spread = img.max(axis=2) - img.min(axis=2)
        level = img.mean(axis=2)
        road = (spread < P["grey_spread"][0]) & (level > P["grey_low"][0]) & (level < P["grey_high"][0])
        top = int(np.clip(P["band_top"][0], 0.0, 0.95) * h)
        bottom = int(np.clip(P["band_bottom"][0], 0.05, 1.0) * h)
        band = road[min(top, bottom - 1):bottom]
        cols = np.nonzero(band)[1]
        err = 0.0 if cols.size == 0 else (cols.mean() - (w - 1) / 2.0) / (w / 2.0)
        steer = P["k_p"][0] * err + P["k_d"][0] * (err - self.prev)
        self.prev = err
        self.t += 1
        steer = float(np.clip(steer, -1.0, 1.0))
        gas = P["gas"][0] * (1.0 - P["ease"][0] * abs(steer))
        brake = P["brake"][0] if abs(steer) > P["brake_turn"][0] else 0.0
        u = [steer, 2.0 * float(np.clip(gas, 0.0, 1.0)) - 1.0, 2.0 * brake - 1.0]
        return self.codec.box(u)
