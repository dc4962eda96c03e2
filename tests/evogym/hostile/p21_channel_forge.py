"""P21: attack the host through the shared-memory channel: announce an oversized reply,
forge a reply with a category the worker may not report, claim an array shape whose
size overflows, scribble the reply area from a thread while the host reads it, flood
the wake pipe, and try to shrink the memory under the host (a SIGBUS there would kill
the trusted process)."""
import mmap
import os
import threading
import time

CONTROL = 4096
REQ_SEQ, RESP_SEQ, RESP_STATUS, RESP_KIND, RESP_LEN, RESP_FMT, RESP_NDIM, RESP_SHAPE = 0, 64, 65, 66, 67, 68, 69, 72


def _channel():
    for name in os.listdir("/proc/self/fd"):
        try:
            if "evogym-channel" in os.readlink(f"/proc/self/fd/{name}"):
                return int(name)
        except OSError:
            pass
    raise RuntimeError("no channel fd")


def _pipes():
    fds = []
    for name in os.listdir("/proc/self/fd"):
        try:
            if int(name) > 2 and os.readlink(f"/proc/self/fd/{name}").startswith("pipe:"):
                fds.append(int(name))
        except OSError:
            pass
    return fds


class Policy:
    def __init__(self, obs_space, action_space, env_meta):
        self.mode = env_meta["mode"]
        fd = _channel()
        self.mm = mmap.mmap(fd, os.fstat(fd).st_size)
        self.ctl = memoryview(self.mm)[:CONTROL].cast("I")

    def reset(self, episode_index):
        pass

    def _forge(self, words, body=b""):
        reply_area = CONTROL + (len(self.mm) - CONTROL) // 2
        self.mm[reply_area:reply_area + len(body)] = body
        for index, value in words.items():
            self.ctl[index] = value
        self.ctl[RESP_SEQ] = self.ctl[REQ_SEQ]  # claim the reply is complete ...
        time.sleep(3600)  # ... and never send the real one

    def act(self, obs):
        mode = self.mode
        if mode == "oversized":
            self._forge({RESP_STATUS: 0, RESP_KIND: 1, RESP_LEN: 0xFFFFFFFF})
        if mode == "category":
            body = b'{"category": "timeout", "message": "forged", "traceback": null}'
            self._forge({RESP_STATUS: 1, RESP_KIND: 1, RESP_LEN: len(body)}, body)
        if mode == "shape":
            self._forge({RESP_STATUS: 0, RESP_KIND: 3, RESP_FMT: ord("d"), RESP_NDIM: 2,
                         RESP_SHAPE: 1 << 31, RESP_SHAPE + 1: 1 << 31, RESP_LEN: 16})
        if mode == "scribble":
            def scribble():
                junk = os.urandom(4096)
                while True:
                    self.mm[CONTROL + 256:CONTROL + 256 + 4096] = junk
                    self.ctl[RESP_KIND] = self.ctl[RESP_KIND] ^ 1
            threading.Thread(target=scribble, daemon=True).start()
            return [0.5, 0.25]
        if mode == "wakeflood":
            for fd in _pipes():
                try:
                    os.set_blocking(fd, False)
                    for _ in range(64):
                        os.write(fd, b"\xff" * 4096)
                except OSError:
                    pass
            return "flooded"
        if mode == "shrink":
            fd = _channel()
            out = {}
            for name, size in (("empty", 0), ("control", CONTROL), ("grown", len(self.mm) + 4096)):
                try:
                    os.ftruncate(fd, size)
                    out[name] = "resized"
                except OSError as exc:
                    out[name] = type(exc).__name__
            return out
        return "fine"
