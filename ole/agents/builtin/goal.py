"""Staged goal-directed controllers for goal-conditioned Dict observations.

Keyed by schema: a Dict with `achieved_goal`, `desired_goal` and `observation`.
Effector position = the first `len(goal)` entries of `observation` (the usual
layout of goal-conditioned robotics observations); the object = `achieved_goal`;
the last goal coordinate is height. Vehicle goals (a goal with heading cos/sin and
a two-dimensional action) get a steer/throttle controller instead.
"""
from __future__ import annotations

from ole.agents.builtin.control import action_size
from ole.agents.builtin.mechanism import Mechanism, Param

EFFECTOR_COMMON = '''
def parts(obs):
    g = np.asarray([num(v) for v in obs["desired_goal"]], dtype=float)
    a = np.asarray([num(v) for v in obs["achieved_goal"]], dtype=float)
    o = np.asarray([num(v) for v in obs["observation"]], dtype=float)
    return np.nan_to_num(o[: g.size]), np.nan_to_num(a), np.nan_to_num(g)


def move(codec, e, target, grip):
    u = np.zeros(codec.dim)
    k = min(codec.dim, e.size)
    u[:k] = np.clip(P["gain"][0] * (target - e)[:k], -1.0, 1.0)
    if codec.dim > e.size:
        u[e.size] = grip
    return codec.box(u)
'''

PUSH = EFFECTOR_COMMON + '''

class Policy:
    """Push: get behind the object on the goal line, descend, push through to the goal."""

    def __init__(self, obs_space, action_space, env_meta):
        self.codec = ActionCodec(action_space)

    def reset(self, episode_index):
        pass

    def act(self, obs):
        e, o, g = parts(obs)
        d = g - o
        d[-1] = 0.0
        dist = float(np.linalg.norm(d))
        if np.allclose(e, o, atol=1e-6) or dist < P["done"][0]:
            return move(self.codec, e, g if np.allclose(e, o, atol=1e-6) else e, -1.0)
        dn = d / dist
        behind = o - dn * P["offset"][0]
        rel = e - o
        along = float(rel[:-1] @ dn[:-1])
        lateral = float(np.linalg.norm(rel[:-1] - along * dn[:-1]))
        if along < 0 and lateral < P["tol"][0] and abs(rel[-1]) < P["ztol"][0]:
            target = o + dn * min(P["push"][0], dist)
            target[-1] = o[-1]
        elif np.linalg.norm((e - behind)[:-1]) > P["tol"][0]:
            target = behind.copy()
            target[-1] = o[-1] + P["hover"][0]
            if e[-1] < o[-1] + 0.5 * P["hover"][0] and np.linalg.norm(rel[:-1]) < 2 * P["offset"][0]:
                target = e.copy()
                target[-1] = o[-1] + P["hover"][0]
        else:
            target = behind.copy()
            target[-1] = o[-1]
        return move(self.codec, e, target, -1.0)
'''

PICK = EFFECTOR_COMMON + '''

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
'''

VEHICLE = '''
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
'''


def _goal_dims(obs_space: dict) -> tuple[int, int] | None:
    spaces = obs_space.get("spaces", {}) if obs_space.get("type") == "Dict" else {}
    if not {"achieved_goal", "desired_goal", "observation"} <= set(spaces):
        return None
    g = spaces["desired_goal"].get("shape") or [0]
    o = spaces["observation"].get("shape") or [0]
    return int(g[0]), int(o[0])


def goal_push(obs_space: dict, action_space: dict) -> Mechanism | None:
    dims = _goal_dims(obs_space)
    if dims is None or action_space.get("type") != "Box" or action_size(action_space) < dims[0]:
        return None
    return Mechanism("goal_push", PUSH, (
        Param("gain", (10.0,), 4.0, 0.5, 100, "move"),
        Param("offset", (0.06,), 0.02, 0.0, 0.5, "stage"),
        Param("tol", (0.02,), 0.01, 0.002, 0.2, "stage"),
        Param("ztol", (0.02,), 0.01, 0.002, 0.2, "stage"),
        Param("hover", (0.06,), 0.02, 0.0, 0.5, "stage"),
        Param("push", (0.05,), 0.02, -0.2, 0.5, "stage"),
        Param("done", (0.025,), 0.01, 0.0, 0.2, "stage"),
    ), "goal-conditioned Dict with an effector: staged push along the goal line")


def goal_pick(obs_space: dict, action_space: dict) -> Mechanism | None:
    dims = _goal_dims(obs_space)
    if dims is None or action_space.get("type") != "Box" or action_size(action_space) <= dims[0]:
        return None
    return Mechanism("goal_pick", PICK, (
        Param("gain", (10.0,), 4.0, 0.5, 100, "move"),
        Param("tol", (0.01,), 0.005, 0.001, 0.2, "stage"),
        Param("ztol", (0.01,), 0.005, 0.001, 0.2, "stage"),
        Param("hover", (0.05,), 0.02, 0.0, 0.5, "stage"),
        Param("hold", (0.03,), 0.01, 0.005, 0.3, "stage"),
        Param("close_steps", (3.0,), 1.0, 1.0, 20.0, "grip"),
        Param("open_sign", (1.0,), 1.0, -1.0, 1.0, "grip"),
    ), "goal-conditioned Dict with an effector and a gripper: staged pick and place")


def goal_vehicle(obs_space: dict, action_space: dict) -> Mechanism | None:
    dims = _goal_dims(obs_space)
    if dims is None or dims[0] < 6 or action_space.get("type") != "Box" or action_size(action_space) != 2:
        return None
    return Mechanism("goal_vehicle", VEHICLE, (
        Param("k_dist", (5.0,), 2.0, 0.0, 100, "speed"),
        Param("vmax", (0.5,), 0.2, 0.01, 5.0, "speed"),
        Param("k_speed", (2.0,), 1.0, 0.0, 50, "speed"),
        Param("k_bearing", (1.0,), 0.5, -10, 10, "steer"),
        Param("k_heading", (1.0,), 0.5, -10, 10, "steer"),
        Param("near", (0.05,), 0.03, 0.001, 1.0, "steer"),
        Param("reverse_bias", (0.3,), 0.2, -1.0, 1.0, "speed"),
    ), "goal pose with heading and two continuous controls: steer/throttle to the goal")
