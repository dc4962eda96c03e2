"""Road-mask following for pixel driving (an RGB image observation, steer/gas/brake action).

Road pixels are the low-saturation mid-grey ones; the controller steers toward the
road centroid in a band of rows ahead of the car and holds a tuned throttle that
eases off in curves. Keyed by schema: an `Image` observation with three channels and
a three-dimensional Box action whose first dimension is symmetric (steering).
"""
from __future__ import annotations

from ole.agents.builtin.control import action_size
from ole.agents.builtin.mechanism import Mechanism, Param

ROAD = '''
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
'''


def road_mask(obs_space: dict, action_space: dict) -> Mechanism | None:
    shape = obs_space.get("shape") or []
    if obs_space.get("type") != "Image" or len(shape) != 3 or shape[2] != 3:
        return None
    if action_space.get("type") != "Box" or action_size(action_space) != 3:
        return None
    return Mechanism("road_mask", ROAD, (
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
