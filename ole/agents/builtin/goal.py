"""Staged goal-directed controllers for goal-conditioned Dict observations.

Keyed by schema: a Dict with `achieved_goal`, `desired_goal` and `observation`.
Effector position = the first `len(goal)` entries of `observation` (the usual
layout of goal-conditioned robotics observations); the object = `achieved_goal`;
the last goal coordinate is height. Vehicle goals (a goal with heading cos/sin and
a two-dimensional action) get an approach-point steer/throttle controller instead;
its default gains are in the observation's units and were set on highway parking, the
one task of this schema we could try (tuning adapts them).
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
        Param("gain", (30.0,), 8.0, 0.5, 100, "move"),
        Param("offset", (0.06,), 0.02, 0.0, 0.5, "stage"),
        Param("tol", (0.02,), 0.01, 0.002, 0.2, "stage"),
        Param("ztol", (0.02,), 0.01, 0.002, 0.2, "stage"),
        Param("hover", (0.06,), 0.02, 0.0, 0.5, "stage"),
        Param("slow", (0.1,), 0.03, 0.001, 1.0, "stage"),
        Param("done", (0.02,), 0.01, 0.0, 0.2, "stage"),
    ), "goal-conditioned Dict with an effector: staged push along the goal line")


def goal_pick(obs_space: dict, action_space: dict) -> Mechanism | None:
    dims = _goal_dims(obs_space)
    if dims is None or action_space.get("type") != "Box" or action_size(action_space) <= dims[0]:
        return None
    return Mechanism("goal_pick", "goal_pick", (
        Param("gain", (30.0,), 8.0, 0.5, 100, "move"),
        Param("tol", (0.015,), 0.005, 0.001, 0.2, "stage"),
        Param("ztol", (0.02,), 0.005, 0.001, 0.2, "stage"),
        Param("hover", (0.05,), 0.02, 0.0, 0.5, "stage"),
        Param("funnel", (0.04,), 0.01, 0.001, 0.5, "stage"),
        Param("hold", (0.03,), 0.01, 0.005, 0.3, "stage"),
        Param("close_steps", (2.0,), 1.0, 1.0, 20.0, "grip"),
        Param("open_sign", (1.0,), 1.0, -1.0, 1.0, "grip"),
    ), "goal-conditioned Dict with an effector and a gripper: staged pick and place")


def goal_vehicle(obs_space: dict, action_space: dict) -> Mechanism | None:
    dims = _goal_dims(obs_space)
    if dims is None or dims[0] < 6 or action_space.get("type") != "Box" or action_size(action_space) != 2:
        return None
    return Mechanism("goal_vehicle", "goal_vehicle", (
        Param("pre", (0.06,), 0.02, 0.0, 1.0, "path"),
        Param("lat_scale", (0.03,), 0.01, 0.001, 1.0, "path"),
        Param("reverse", (0.3,), 0.2, -1.0, 1.0, "path"),
        Param("vmax", (1.0,), 0.3, 0.01, 5.0, "speed"),
        Param("k_dist", (16.0,), 5.0, 0.0, 200.0, "speed"),
        Param("k_speed", (5.0,), 2.0, 0.0, 50.0, "speed"),
        Param("k_steer", (2.0,), 0.6, -10.0, 10.0, "steer"),
    ), "goal pose with heading and two continuous controls: approach-point pursuit, slow down, align")
