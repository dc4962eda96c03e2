"""P11: a busy loop in act() with SIGALRM, SIGTERM and SIGXCPU ignored."""
import signal


class Policy:
    def __init__(self, obs_space, action_space, env_meta):
        for sig in (signal.SIGALRM, signal.SIGTERM, signal.SIGXCPU):
            signal.signal(sig, signal.SIG_IGN)

    def reset(self, episode_index):
        pass

    def act(self, obs):
        n = 0
        while True:
            n += 1
