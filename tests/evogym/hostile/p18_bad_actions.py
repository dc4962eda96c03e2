"""P18: return NaN/inf, a 10^6-element list (over the frame limit), a 10^4-deep list, or a plain object."""


def _deep(depth):
    value = 0
    for _ in range(depth):
        value = [value]
    return value


class Policy:
    def __init__(self, obs_space, action_space, env_meta):
        pass

    def reset(self, episode_index):
        pass

    def act(self, obs):
        return {
            "nan": lambda: float("nan"),
            "inf": lambda: [1.0, float("inf"), float("-inf")],
            "huge": lambda: [0.5] * 10**6,
            "deep": lambda: _deep(10**4),
            "object": lambda: object(),
            "fine": lambda: [0.25, 1],
        }[obs]()
