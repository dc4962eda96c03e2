"""A symbolic grid map with BFS planning and mission-text subgoals, for grid worlds.

Keyed by schema: a Dict observation with a `k×k×3` symbolic `image` (object, colour,
state per cell of an egocentric view), a `direction` and a `mission` string, with a
small discrete action set. The program integrates the egocentric views into a map
by dead reckoning, parses the mission ("pick up the blue ball", "get to the goal",
"open the red door"), and plans turn-aware shortest paths to the cheapest subgoal:
the target if known; a locked door's key (or boxes that may hold it); a frontier priced
by the unknown cells it reveals. Objects blocking a path are picked up and put aside.
Every parameter prices a choice, so tuning changes which subgoal and path are taken.
"""
from __future__ import annotations

from ole.agents.builtin.mechanism import Mechanism, Param



def grid_bfs(obs_space: dict, action_space: dict) -> Mechanism | None:
    spaces = obs_space.get("spaces", {}) if obs_space.get("type") == "Dict" else {}
    image = spaces.get("image", {})
    shape = image.get("shape") or []
    if not ({"image", "direction", "mission"} <= set(spaces)) or len(shape) != 3 or shape[2] != 3:
        return None
    if action_space.get("type") != "Discrete" or int(action_space["n"]) < 6:
        return None
    return Mechanism("grid_bfs", "grid_bfs", (
        Param("turn_cost", (1.0,), 0.3, 0.1, 5.0, "plan"),
        Param("door_cost", (1.0,), 1.0, 0.0, 50.0, "plan"),
        Param("obj_cost", (8.0,), 4.0, 1.0, 100.0, "plan"),
        Param("info", (1.0,), 0.5, 0.0, 20.0, "explore"),
        Param("reach", (4.0,), 1.0, 1.0, 7.0, "explore"),
        Param("explore_bias", (20.0,), 3.0, -50.0, 50.0, "explore"),
        Param("box_bias", (0.0,), 3.0, -50.0, 50.0, "explore"),
        Param("loop_limit", (6.0,), 3.0, 1.0, 100.0, "escape"),
        Param("jitter", (0.3,), 0.2, 0.0, 1.0, "escape"),
    ), "symbolic egocentric grid with mission text: map, turn-aware planning, priced mission subgoals")
