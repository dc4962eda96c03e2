"""P24: answer act() with a forged error frame whose fields have the wrong types: a
`category` that is a list (unhashable: a membership test with it raised TypeError in the
host, an HTTP 500 with the episodes charged), an object with extra fields, a message that
is a list, or a reply that is not an object at all. MODE is set by the test."""
import mmap
import os
import time

MODE = "list"
CONTROL = 4096
REQ_SEQ, RESP_SEQ, RESP_STATUS, RESP_KIND, RESP_LEN = 0, 64, 65, 66, 67
BODIES = {
    "list": b'{"category": ["act_error"], "message": "forged", "traceback": null}',
    "dict": b'{"category": {"a": 1}, "message": "forged", "traceback": null}',
    "extra": b'{"category": "act_error", "message": "forged", "traceback": null, "seeds": [1]}',
    "message": b'{"category": "act_error", "message": ["forged"], "traceback": 7}',
    "array": b'[1, 2, 3]',
}


def _channel():
    for name in os.listdir("/proc/self/fd"):
        try:
            if "evogym-channel" in os.readlink(f"/proc/self/fd/{name}"):
                return int(name)
        except OSError:
            pass
    raise RuntimeError("no channel fd")


def forge(body):
    fd = _channel()
    mm = mmap.mmap(fd, os.fstat(fd).st_size)
    ctl = memoryview(mm)[:CONTROL].cast("I")
    reply_area = CONTROL + (len(mm) - CONTROL) // 2
    mm[reply_area:reply_area + len(body)] = body
    ctl[RESP_STATUS], ctl[RESP_KIND], ctl[RESP_LEN] = 1, 1, len(body)
    ctl[RESP_SEQ] = ctl[REQ_SEQ]  # the reply is "complete" ...
    time.sleep(3600)  # ... and the real one never comes


class Policy:
    def __init__(self, obs_space, action_space, env_meta):
        self.step = 0

    def reset(self, episode_index):
        self.step = 0

    def act(self, obs):
        self.step += 1
        if self.step == 3:
            forge(BODIES[MODE])
        return 0
