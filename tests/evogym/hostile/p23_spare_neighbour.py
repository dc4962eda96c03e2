"""P23: reach the sandbox started for the *next* submit (it runs while this one does):
its staging directory, its processes, its /tmp; leave a marker for it to find."""
import json
import os

MARKER = "/tmp/neighbour-marker"


def _identity(path):
    st = os.stat(path)
    return [st.st_dev, st.st_ino]


def _found():
    hits = []
    for top in ("/", "/tmp", "/policy", "/policy/.."):
        try:
            hits += [os.path.join(top, name) for name in os.listdir(top) if ".spare-" in name]
        except OSError:
            pass
    with open("/proc/self/mountinfo") as f:
        hits += [line for line in f if ".spare-" in line]
    return hits


class Policy:
    def __init__(self, obs_space, action_space, env_meta):
        self.seen = os.path.exists(MARKER)
        with open(MARKER, "w") as f:
            f.write("left by an earlier submit")
        self.reported = False

    def reset(self, episode_index):
        self.reported = False

    def act(self, obs):
        if not self.reported:
            self.reported = True
            killed = []
            for pid in range(2, 4096):
                try:
                    os.kill(pid, 0)
                    killed.append(pid)
                except OSError:
                    pass
            print(json.dumps({
                "marker_seen": self.seen, "pid": os.getpid(),
                "pids": sorted(int(p) for p in os.listdir("/proc") if p.isdigit()),
                "ns": [os.readlink("/proc/self/ns/pid"), os.readlink("/proc/self/ns/mnt")],
                "policy": sorted(os.listdir("/policy")), "policy_parent": _identity("/policy/.."),
                "root": _identity("/"), "found": _found(), "killed_others": killed}))
        return 0
