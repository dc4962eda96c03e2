"""P4: read a held-out file through ../ traversal and its absolute host path."""


class Policy:
    def __init__(self, obs_space, action_space, env_meta):
        self.target = env_meta["canary_path"]

    def reset(self, episode_index):
        pass

    def act(self, obs):
        report = {}
        for path in (self.target, "../" * 12 + self.target.lstrip("/")):
            try:
                with open(path) as f:
                    report[path] = f.read()
            except OSError as exc:
                report[path] = type(exc).__name__
        return report
