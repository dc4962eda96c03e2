"""Road-mask following for pixel driving (an RGB image observation, steer/gas/brake action).

Road pixels are the low-saturation mid-grey ones; the controller steers toward the
road centroid in a band of rows ahead of the car and holds a tuned throttle that
eases off in curves. Keyed by schema: an `Image` observation with three channels and
a three-dimensional Box action whose first dimension is symmetric (steering).
"""
from __future__ import annotations

from ole.agents.builtin.control import action_size
from ole.agents.builtin.mechanism import Mechanism, Param



def road_mask(obs_space: dict, action_space: dict) -> Mechanism | None:
    shape = obs_space.get("shape") or []
    if obs_space.get("type") != "Image" or len(shape) != 3 or shape[2] != 3:
        return None
    if action_space.get("type") != "Box" or action_size(action_space) != 3:
        return None
    return Mechanism("road_mask", "road_mask", (
        Param("grey_spread", (20.0,), 8.0, 1.0, 80.0, "mask"),
        Param("grey_low", (80.0,), 15.0, 0.0, 200.0, "mask"),
        Param("grey_high", (140.0,), 15.0, 50.0, 255.0, "mask"),
        Param("band_top", (0.55,), 0.1, 0.0, 0.95, "mask"),
        Param("band_bottom", (0.75,), 0.1, 0.05, 1.0, "mask"),
        Param("k_p", (1.5,), 0.5, -10.0, 10.0, "steer"),
        Param("k_d", (1.0,), 0.5, -10.0, 10.0, "steer"),
        Param("gas", (0.3,), 0.1, 0.0, 1.0, "speed"),
        Param("ease", (0.5,), 0.2, 0.0, 1.0, "speed"),
        Param("brake", (0.0,), 0.1, 0.0, 1.0, "speed"),
        Param("brake_turn", (0.8,), 0.1, 0.0, 1.0, "speed"),
    ), "RGB image with steer/gas/brake: follow the grey road mask")
