"""Reach with a planar chain: Jacobian-transpose torques that pull the tip along the goal distance.

A template of the OLE built-in agent, rendered by `ole.agents.builtin.mechanism.render`.
Joint angles arrive as (cos, sin) pairs at `P["pairs"]` (relative angles, base first),
their rates at `P["rates"]`, and the vector between tip and goal at `P["err"]`, which
`P["sign"]` turns into the direction toward the goal. For link lengths `P["links"]` the
tip moves by J dq, so tau = kp * J^T (goal direction) - kd * rate pulls the tip toward the
goal without knowing the arm's dynamics; torques are clipped at `amp`.
"""
import math

import numpy as np

from ole.agents.builtin.programs.prelude import ActionCodec, flat  # inline

P: dict = {}  # params


class Policy:
    """Jacobian-transpose reaching with rate damping."""

    def __init__(self, obs_space, action_space, env_meta):
        self.codec = ActionCodec(action_space)

    def reset(self, episode_index):
        pass

    def torques(self, x):
        pairs = [int(i) for i in P["pairs"]]
        n = len(pairs) // 2
        links = np.asarray(P["links"])[:n]
        absolute = np.cumsum([math.atan2(x[pairs[2 * k + 1]], x[pairs[2 * k]]) for k in range(n)])
        towards = P["sign"][0] * x[[int(i) for i in P["err"]]][:2]
        tau = np.zeros(n)
        for j in range(n):
            dx = -np.sum(links[j:] * np.sin(absolute[j:]))
            dy = np.sum(links[j:] * np.cos(absolute[j:]))
            tau[j] = P["kp"][0] * (dx * towards[0] + dy * towards[1])
        tau -= P["kd"][0] * x[[int(i) for i in P["rates"]]][:n]
        return np.clip(tau, -P["amp"][0], P["amp"][0])

    def act(self, obs):
        return self.codec.box(self.torques(flat(obs)))
