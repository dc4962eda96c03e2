"""P16: remount /, unshare, setns into the host netns, ptrace pid 1, write a host file."""
import ctypes
import os

MS_REMOUNT, MS_BIND, CLONE_NEWNET, PTRACE_ATTACH = 32, 4096, 0x40000000, 16


class Policy:
    def __init__(self, obs_space, action_space, env_meta):
        self.target = env_meta["canary_path"]

    def reset(self, episode_index):
        pass

    def act(self, obs):
        libc = ctypes.CDLL(None, use_errno=True)
        report = {}

        def call(name, fn):
            rc = fn()
            report[name] = [rc, ctypes.get_errno()]

        call("mount", lambda: libc.mount(None, b"/", None, MS_REMOUNT | MS_BIND, None))
        call("unshare", lambda: libc.unshare(CLONE_NEWNET))
        try:
            fd = os.open("/proc/1/ns/net", os.O_RDONLY)
            call("setns", lambda: libc.setns(fd, 0))
        except OSError as exc:
            report["setns"] = [-1, exc.errno]
        call("ptrace", lambda: libc.ptrace(PTRACE_ATTACH, 1, None, None))
        for path in (self.target, "/usr/evil"):
            try:
                with open(path, "w") as f:
                    f.write("owned")
                report[path] = "written"
            except OSError as exc:
                report[path] = exc.errno
        return report
