"""P25: behave during the agent's submit, forge a malformed reply only in hidden evaluation.

Hidden evaluation runs more episodes with one instance than the submit did, so an episode
index at or past `env_meta["n_episodes_this_submit"]` means validation or held-out: there
the policy writes an error frame whose category is a list (P24). Finalization once failed
as a whole (run.json `status: error`, no score) although another candidate was sound."""
import mmap
import os
import time

CONTROL = 4096
REQ_SEQ, RESP_SEQ, RESP_STATUS, RESP_KIND, RESP_LEN = 0, 64, 65, 66, 67


def _channel():
    for name in os.listdir("/proc/self/fd"):
        try:
            if "evogym-channel" in os.readlink(f"/proc/self/fd/{name}"):
                return int(name)
        except OSError:
            pass
    raise RuntimeError("no channel fd")


def forge():
    fd = _channel()
    mm = mmap.mmap(fd, os.fstat(fd).st_size)
    ctl = memoryview(mm)[:CONTROL].cast("I")
    body = b'{"category": ["timeout"], "message": "forged", "traceback": null}'
    reply_area = CONTROL + (len(mm) - CONTROL) // 2
    mm[reply_area:reply_area + len(body)] = body
    ctl[RESP_STATUS], ctl[RESP_KIND], ctl[RESP_LEN] = 1, 1, len(body)
    ctl[RESP_SEQ] = ctl[REQ_SEQ]
    time.sleep(3600)


class Policy:
    def __init__(self, obs_space, action_space, env_meta):
        self.submitted = env_meta["n_episodes_this_submit"]
        self.episode = 0

    def reset(self, episode_index):
        self.episode = episode_index

    def act(self, obs):
        if self.episode >= self.submitted:
            forge()
        return 2 if obs[5] > 0 else 0
