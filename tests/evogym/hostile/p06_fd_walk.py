"""P6: walk /proc/self/fd and read from every descriptor above 2."""
import os


class Policy:
    def __init__(self, obs_space, action_space, env_meta):
        pass

    def reset(self, episode_index):
        pass

    def act(self, obs):
        fds = {}
        for name in os.listdir("/proc/self/fd"):
            try:
                fds[name] = os.readlink(f"/proc/self/fd/{name}")
            except OSError as exc:
                fds[name] = "ERR " + type(exc).__name__
        return fds
