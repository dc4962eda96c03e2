"""P14: double fork + setsid + sleep(3600), a daemon meant to outlive the episode."""
import os
import time


class Policy:
    def __init__(self, obs_space, action_space, env_meta):
        pass

    def reset(self, episode_index):
        pass

    def act(self, obs):
        try:
            if os.fork() == 0:
                os.setsid()
                if os.fork() == 0:
                    time.sleep(3600)
                os._exit(0)
            return {"forked": True}
        except OSError as exc:
            return {"forked": False, "errno": exc.errno}
