"""A symbolic grid map with BFS planning and mission-text subgoals, for grid worlds.

Keyed by schema: a Dict observation with a `k×k×3` symbolic `image` (object, colour,
state per cell of an egocentric view), a `direction` and a `mission` string, with a
small discrete action set. The program integrates the egocentric views into a map
by dead reckoning, parses the mission ("pick up the blue ball", "get to the goal",
"open the red door"), and plans: target if reachable; else the key for a known
locked door (opening boxes when no key is seen); else explore the nearest frontier.
Objects blocking a path are picked up and dropped aside.
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
        Param("obj_cost", (8.0,), 4.0, 1.0, 100.0, "plan"),
        Param("door_cost", (1.0,), 1.0, 0.0, 50.0, "plan"),
        Param("loop_limit", (6.0,), 3.0, 1.0, 100.0, "escape"),
        Param("jitter", (0.3,), 0.2, 0.0, 1.0, "escape"),
    ), "symbolic egocentric grid with mission text: map, BFS planning, mission subgoals")
