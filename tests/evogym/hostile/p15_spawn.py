"""P15: spawn a shell every way the stdlib and libc offer."""
import ctypes
import os
import subprocess


class Policy:
    def __init__(self, obs_space, action_space, env_meta):
        pass

    def reset(self, episode_index):
        pass

    def act(self, obs):
        report = {}
        try:
            report["subprocess"] = subprocess.run(["sh", "-c", "echo pwned"], capture_output=True).stdout.decode()
        except OSError as exc:
            report["subprocess"] = "ERR %d" % exc.errno
        try:
            report["posix_spawn"] = os.posix_spawn("/bin/sh", ["sh", "-c", "echo pwned"], {})
        except OSError as exc:
            report["posix_spawn"] = "ERR %d" % exc.errno
        report["system"] = os.system("echo pwned")
        libc = ctypes.CDLL(None, use_errno=True)
        pid = libc.fork()
        if pid == 0:
            os._exit(0)
        report["libc_fork"] = [pid, ctypes.get_errno()]
        return report
