"""Threshold rules over a kinematics table (row 0 = ego, column 0 = presence).

A template of the OLE built-in agent, rendered by `ole.agents.builtin.mechanism.render`.
"""
import numpy as np

from ole.agents.builtin.programs.prelude import ActionCodec, num  # inline

P: dict = {}  # params


class Policy:
    """Threshold rules over a kinematics table (row 0 = ego, column 0 = presence)."""

    def __init__(self, obs_space, action_space, env_meta):
        self.codec = ActionCodec(action_space)

    def reset(self, episode_index):
        pass

    def act(self, obs):
        t = np.asarray([[num(v) for v in row] for row in obs], dtype=float)
        t = np.nan_to_num(t)
        ego, others = t[0], t[1:]
        present = others[others[:, 0] > 0.5] if others.shape[1] > 0 else others
        near = np.inf
        ahead = np.inf
        if len(present) and t.shape[1] >= 3:
            rel = present[:, 1:3] - (ego[1:3] if P["absolute"][0] > 0.5 else 0.0)
            dist = np.hypot(rel[:, 0], rel[:, 1])
            near = float(dist.min())
            front = rel[:, 0] > 0
            lane = np.abs(rel[:, 1]) < P["lane_width"][0]
            if np.any(front & lane):
                ahead = float(rel[front & lane, 0].min())
        speed = float(np.hypot(ego[3], ego[4])) if t.shape[1] >= 5 else 0.0
        if near < P["near"][0] or ahead < P["gap"][0]:
            return self.codec.choice(int(round(P["a_danger"][0])))
        if speed < P["slow"][0]:
            return self.codec.choice(int(round(P["a_slow"][0])))
        return self.codec.choice(int(round(P["a_cruise"][0])))
