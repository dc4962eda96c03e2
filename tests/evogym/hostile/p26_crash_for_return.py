"""P26: end every episode at its first step (a hard exit) to keep the return at 0.

Where rewards are negative (Acrobot: -1 per step until the goal) an episode cut short used to
count with the return it reached, 0, better than any real controller (the best agents score
about -80): crashing on purpose would top the held-out score."""
import os


class Policy:
    def __init__(self, obs_space, action_space, env_meta):
        pass

    def reset(self, episode_index):
        pass

    def act(self, obs):
        os._exit(3)
