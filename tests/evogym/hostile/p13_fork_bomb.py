"""P13: a fork bomb; threads must still work."""
import os
import threading


class Policy:
    def __init__(self, obs_space, action_space, env_meta):
        pass

    def reset(self, episode_index):
        pass

    def act(self, obs):
        box = []
        worker = threading.Thread(target=lambda: box.append("thread ran"))
        worker.start()
        worker.join()
        forks = 0
        try:
            while True:
                if os.fork() == 0:
                    continue  # a child keeps forking too
                forks += 1
        except OSError as exc:
            return {"forks": forks, "errno": exc.errno, "thread": box}
