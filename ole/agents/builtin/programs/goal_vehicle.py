"""Vehicle to a goal pose: approach along the goal heading, slow down, align, stop on the spot.

A template of the OLE built-in agent, rendered by `ole.agents.builtin.mechanism.render`.
Goal entries are (x, y, vx, vy, cos h, sin h), in the observation's own units. The car
steers (pure pursuit on the bearing) at an approach point `pre` before the goal along the
goal heading, which slides onto the goal as the lateral offset to the goal line shrinks,
so it arrives aligned instead of circling a point inside its turning circle. The wanted
speed falls with the distance (it decelerates into the spot); a target far behind the car
is reached in reverse.
"""
import math

import numpy as np

from ole.agents.builtin.programs.prelude import ActionCodec, num  # inline

P: dict = {}  # params


class Policy:
    """Approach-point pursuit with distance-scheduled speed and reversing."""

    def __init__(self, obs_space, action_space, env_meta):
        self.codec = ActionCodec(action_space)

    def reset(self, episode_index):
        pass

    def waypoint(self, a, g):
        """The approach point: `pre` before the goal along its heading, less as the car nears the goal line."""
        gc, gs = g[4], g[5]
        dx, dy = g[0] - a[0], g[1] - a[1]
        lateral = abs(-dx * gs + dy * gc)
        pre = P["pre"][0] * min(1.0, lateral / max(P["lat_scale"][0], 1e-6))
        return g[0] - gc * pre, g[1] - gs * pre

    def act(self, obs):
        a = np.nan_to_num(np.asarray([num(v) for v in obs["achieved_goal"]], dtype=float))
        g = np.nan_to_num(np.asarray([num(v) for v in obs["desired_goal"]], dtype=float))
        c, s = a[4], a[5]
        wx, wy = self.waypoint(a, g)
        dx, dy = wx - a[0], wy - a[1]
        fwd = dx * c + dy * s
        side = -dx * s + dy * c
        dist = math.hypot(dx, dy)
        speed = a[2] * c + a[3] * s
        direction = 1.0 if fwd >= -P["reverse"][0] * dist else -1.0
        want = direction * min(P["vmax"][0], P["k_dist"][0] * dist)
        accel = P["k_speed"][0] * (want - speed)
        bearing = math.atan2(side, abs(fwd) + 1e-9)
        steer = P["k_steer"][0] * bearing * direction
        return self.codec.box([float(np.clip(accel, -1.0, 1.0)), float(np.clip(steer, -1.0, 1.0))])
