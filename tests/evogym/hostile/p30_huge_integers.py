"""P30: answer with 3,900 integers of 4,200 digits each (about 16 MB of JSON, under Python's
4,300-digit parsing limit and the 4,096-value recording limit). Recorded as returned, 20 steps
made 328 MB of trajectory and 1.2 GB of host memory (re-encoding each step took ~0.9 s of host CPU)."""

BIG = 10 ** 4200


class Policy:
    def __init__(self, obs_space, action_space, env_meta):
        self.big = [BIG] * 3900

    def reset(self, episode_index):
        pass

    def act(self, obs):
        return self.big
