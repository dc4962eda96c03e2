"""P20: sys.exit(0), os._exit(0) or SIGSEGV through ctypes at step 3."""
import ctypes
import os
import sys


class Policy:
    def __init__(self, obs_space, action_space, env_meta):
        self.mode = env_meta["mode"]
        self.steps = 0

    def reset(self, episode_index):
        self.steps = 0

    def act(self, obs):
        self.steps += 1
        if self.steps == 3:
            if self.mode == "exit":
                sys.exit(0)
            if self.mode == "_exit":
                os._exit(0)
            if self.mode == "segv":
                ctypes.string_at(0)
        return self.steps
