"""P29: print 3 MiB in __init__ and 3 MiB in the first act(): far over the 64 KiB kept per
episode. The note at the end of stdout.txt must count every byte not shown (it once read
"[truncated 40 bytes]" after 600 MB, when a second cap cut the first note off)."""
import sys

CHUNK = "x" * 1023 + "\n"


def flood(mib):
    for _ in range(mib * 1024):
        sys.stdout.write(CHUNK)
    sys.stdout.flush()


class Policy:
    def __init__(self, obs_space, action_space, env_meta):
        flood(3)
        self.done = False

    def reset(self, episode_index):
        pass

    def act(self, obs):
        if not self.done:
            self.done = True
            flood(3)
        return 0
