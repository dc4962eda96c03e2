"""P27: return a list nested 800 levels deep from act(). The host once kept it as the
step's action and pickling it for the feedback writer raised RecursionError: HTTP 500,
episodes charged, no feedback."""


def _deep(depth):
    value = 0
    for _ in range(depth):
        value = [value]
    return value


DEEP = _deep(800)


class Policy:
    def __init__(self, obs_space, action_space, env_meta):
        pass

    def reset(self, episode_index):
        pass

    def act(self, obs):
        return DEEP
