"""P9: write a 10 GB file into /tmp and into the policy folder."""
import os


class Policy:
    def __init__(self, obs_space, action_space, env_meta):
        pass

    def reset(self, episode_index):
        pass

    def act(self, obs):
        report = {}
        chunk = b"x" * (1 << 20)
        for path in ("/tmp/big", "/policy/big"):
            written = 0
            try:
                fd = os.open(path, os.O_CREAT | os.O_WRONLY)
                while written < 10 << 30:
                    written += os.write(fd, chunk)
                report[path] = {"written": written}
            except OSError as exc:
                report[path] = {"written": written, "errno": exc.errno}
        return report
