"""P28: answer every step with 10^6 floats (8 MB, within the 16 MiB frame). Recorded as
returned, 8 steps made 40 MB of trajectory and 695 MB of host and formatter memory; at the
frame limit over 500 steps that is ~5 GB of file per episode."""
import numpy as np

HUGE = np.full(10**6, 0.5)


class Policy:
    def __init__(self, obs_space, action_space, env_meta):
        pass

    def reset(self, episode_index):
        pass

    def act(self, obs):
        return HUGE
