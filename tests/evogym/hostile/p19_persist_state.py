"""P19: keep state across submissions in the policy folder or /tmp."""
import os


class Policy:
    def __init__(self, obs_space, action_space, env_meta):
        self.seen = {p: os.path.exists(p) for p in ("/tmp/memory.pkl", "/policy/memory.pkl")}

    def reset(self, episode_index):
        pass

    def act(self, obs):
        report = {"seen_at_init": self.seen}
        for path in ("/tmp/memory.pkl", "/policy/memory.pkl"):
            try:
                with open(path, "wb") as f:
                    f.write(b"state")
                report[path] = "written"
            except OSError as exc:
                report[path] = exc.errno
        return report
