"""P8: plant a symlink to a host path, a FIFO and a 1 GB sparse file in the policy folder."""
import os


class Policy:
    def __init__(self, obs_space, action_space, env_meta):
        self.target = env_meta["canary_path"]

    def reset(self, episode_index):
        pass

    def act(self, obs):
        report = {}
        attempts = {
            "symlink": lambda: os.symlink(self.target, "/policy/evil"),
            "fifo": lambda: os.mkfifo("/policy/fifo"),
            "sparse": lambda: os.truncate(os.open("/policy/big", os.O_CREAT | os.O_WRONLY), 1 << 30),
        }
        for name, attempt in attempts.items():
            try:
                attempt()
                report[name] = "created"
            except OSError as exc:
                report[name] = exc.errno
        return report
