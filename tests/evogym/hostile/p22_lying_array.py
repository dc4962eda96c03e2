"""P22: return objects that pose as arrays: a fake `__array_interface__` pointing at
address 0, a buffer whose format lies, a property that raises, a huge 0-stride view."""
import numpy as np


class FakeArray:
    __array_interface__ = {"shape": (1 << 20,), "typestr": "<f8", "data": (0, True), "version": 3}


class Raising:
    @property
    def __array_interface__(self):
        raise RuntimeError("no")


class Policy:
    def __init__(self, obs_space, action_space, env_meta):
        pass

    def reset(self, episode_index):
        pass

    def act(self, obs):
        return {
            "fake": lambda: FakeArray(),
            "raising": lambda: Raising(),
            "broadcast": lambda: np.broadcast_to(np.zeros(1), (1 << 40,)),
            "record": lambda: np.zeros(2, dtype=[("a", "<f8"), ("b", "<i4")]),
            "bigendian": lambda: np.array([0.5, 1.5], dtype=">f8"),
            "object": lambda: np.array([object(), 1], dtype=object),
        }[obs]()
