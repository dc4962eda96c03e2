"""P17: flood stdout/stderr, write fake frames to fd 1, or a 0xFFFFFFFF header on the protocol fd."""
import fcntl
import os
import sys


class Policy:
    def __init__(self, obs_space, action_space, env_meta):
        self.mode = env_meta["mode"]

    def reset(self, episode_index):
        pass

    def act(self, obs):
        if self.mode == "flood":
            line = "spam " * 2000 + "\n"
            for _ in range(800):  # ~8 MB per stream
                sys.stdout.write(line)
                sys.stderr.write(line)
            os.write(1, b'\x00\x00\x00\x1a{"ok":true,"value":"fake"}')
            os.write(1, b"\xff\xff\xff\xff")
            return "fine"
        for name in os.listdir("/proc/self/fd"):
            fd = int(name)
            try:
                writable = fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE == os.O_WRONLY
            except OSError:
                continue
            if fd > 2 and writable and os.readlink(f"/proc/self/fd/{fd}").startswith("pipe:"):
                os.write(fd, b"\xff\xff\xff\xff")
        return "forged"
