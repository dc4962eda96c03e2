"""P10: allocate and touch 50 GB gradually."""


class Policy:
    def __init__(self, obs_space, action_space, env_meta):
        self.hoard = []

    def reset(self, episode_index):
        pass

    def act(self, obs):
        for _ in range(50 * 16):
            self.hoard.append(bytearray(64 << 20))  # zero-filled, so every page is touched
        return len(self.hoard)
