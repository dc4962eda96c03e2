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
    return Mechanism("goal_push", "goal_push", (
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
    return Mechanism("goal_pick", "goal_pick", (
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
    return Mechanism("goal_vehicle", "goal_vehicle", (
        Param("k_dist", (5.0,), 2.0, 0.0, 100, "speed"),
        Param("vmax", (0.5,), 0.2, 0.01, 5.0, "speed"),
        Param("k_speed", (2.0,), 1.0, 0.0, 50, "speed"),
        Param("k_bearing", (1.0,), 0.5, -10, 10, "steer"),
        Param("k_heading", (1.0,), 0.5, -10, 10, "steer"),
        Param("near", (0.05,), 0.03, 0.001, 1.0, "steer"),
        Param("reverse_bias", (0.3,), 0.2, -1.0, 1.0, "speed"),
    ), "goal pose with heading and two continuous controls: steer/throttle to the goal")
