"""Fixed submits whose feedback trees must stay byte-for-byte what the host wrote before the
shared-memory transport and bulk recording (issue 12).

`tree_digest(case, workdir)` runs one case through the public host API (`make_config`,
`Host`, `judge.submit`) and returns {relative path: sha256} of every feedback file, with
the fields that carry wall-clock time removed first. `feedback_golden.json` holds the
digests the host made before the change; regenerate it only for a deliberate protocol
change (the last one: `truncated: true` on the last step of an episode the host's step cap
ends, which changed the three capped cases' trajectories and nothing else):

    python tests/evogym/feedback_cases.py > tests/evogym/data/feedback_golden.json
"""
from __future__ import annotations

import hashlib
import json
import sys
import textwrap
from pathlib import Path

CASES: dict[str, dict] = {
    # Box obs (float32, external .npy), Discrete actions from obs, prints now and then
    "acrobot": {"env": "gym/acrobot", "instances": [0, 1, 2], "max_steps": None, "policy": """
        class Policy:
            def __init__(self, obs_space, action_space, env_meta):
                self.n = 0
            def reset(self, episode_index):
                self.n = 0
                print("reset", episode_index)
            def act(self, obs):
                self.n += 1
                if self.n % 97 == 0:
                    print("step", self.n, obs[0])
                return 2 if obs[5] > 0 else 0
        """},
    # Box actions: float lists, numpy float32 arrays, NaN, a string, out of range, nested
    "halfcheetah": {"env": "gym/halfcheetah5", "instances": [3, 4], "max_steps": 40, "policy": """
        import math
        import numpy as np
        class Policy:
            def __init__(self, obs_space, action_space, env_meta):
                self.t = 0
            def reset(self, episode_index):
                self.t = 0
            def act(self, obs):
                self.t += 1
                t = self.t
                if t == 7:
                    return [float("nan")] * 6
                if t == 9:
                    return "forward"
                if t == 11:
                    return [2.0, -3.0, 0.5, 0.1, 0.0, 1.0]
                if t == 13:
                    return [[0.1] * 6]
                if t == 15:
                    return [1, 0, 0, 0, 0, 0]
                if t % 3 == 0:
                    return np.sin(np.arange(6, dtype=np.float32) + t * 0.1)
                return [math.sin(0.3 * t + i) * 0.8 for i in range(6)]
        """},
    # short episodes (inline observations), numpy int actions, an act() that raises
    "cartpole": {"env": "gymnasium/CartPole-v1", "instances": [5, 6, 7], "max_steps": None, "policy": """
        import numpy as np
        class Policy:
            def __init__(self, obs_space, action_space, env_meta):
                self.episode = 0
                self.t = 0
            def reset(self, episode_index):
                self.episode, self.t = episode_index, 0
            def act(self, obs):
                self.t += 1
                if self.episode == 1 and self.t == 12:
                    raise RuntimeError("deliberate")
                return np.int64(1 if obs[2] + 0.3 * obs[3] > 0 else 0)
        """},
    # Dict observations (image + direction + mission: external .npz)
    "fourrooms": {"env": "gymnasium/MiniGrid-FourRooms-v0", "instances": [1, 2], "max_steps": None, "policy": """
        class Policy:
            def __init__(self, obs_space, action_space, env_meta):
                self.t = 0
            def reset(self, episode_index):
                self.t = 0
            def act(self, obs):
                self.t += 1
                front = obs["image"][3][5][0]
                if front in (2, 9):
                    return 1 if (self.t + obs["direction"]) % 2 else 0
                return 2
        """},
    # Discrete observations, whole-number floats, out-of-range ints, bools
    "taxi": {"env": "gymnasium/Taxi-v4", "instances": [0, 9], "max_steps": 30, "policy": """
        class Policy:
            def __init__(self, obs_space, action_space, env_meta):
                self.t = 0
            def reset(self, episode_index):
                self.t = 0
            def act(self, obs):
                self.t += 1
                if self.t == 3:
                    return 1.0
                if self.t == 4:
                    return -5
                if self.t == 5:
                    return True
                if self.t == 6:
                    return 2.5
                return obs % 4
        """},
    # Tuple observations; reset raises in the second episode
    "blackjack": {"env": "gymnasium/Blackjack-v1", "instances": [0, 1, 2, 3], "max_steps": None, "policy": """
        class Policy:
            def __init__(self, obs_space, action_space, env_meta):
                pass
            def reset(self, episode_index):
                if episode_index == 1:
                    raise ValueError("no second hand")
            def act(self, obs):
                return 1 if obs[0] < 15 else 0
        """},
    # a one-dimensional Box: numpy float64 arrays, a plain float, a 0-d array
    "pendulum": {"env": "gymnasium/Pendulum-v1", "instances": [2], "max_steps": 25, "policy": """
        import numpy as np
        class Policy:
            def __init__(self, obs_space, action_space, env_meta):
                self.t = 0
            def reset(self, episode_index):
                self.t = 0
            def act(self, obs):
                self.t += 1
                if self.t % 4 == 1:
                    return np.array([-2.5 * obs[1]])
                if self.t % 4 == 2:
                    return float(obs[2]) * 0.5
                if self.t % 4 == 3:
                    return np.float64(0.25)
                return [float(obs[0])]
        """},
}

TIME_FIELDS = ("submit_started_at", "submit_completed_at", "wall_time_seconds")


def _digest(path: Path) -> str:
    data = path.read_bytes()
    if path.name == "summary.json":
        doc = json.loads(data)
        for key in TIME_FIELDS:
            doc.pop(key, None)
        data = json.dumps(doc, sort_keys=True).encode()
    elif path.name in ("error.txt", "errors.txt"):
        rows = [json.loads(line) for line in data.decode().splitlines()]
        for row in rows:
            row.pop("timestamp", None)
        data = json.dumps(rows, sort_keys=True).encode()
    return hashlib.sha256(data).hexdigest()


def tree_digest(case: str, workdir: Path) -> dict[str, str]:
    """Run `case` as one submit on a fresh host and digest its feedback tree."""
    from evogym.host import Host, make_config

    spec = CASES[case]
    config = make_config(spec["env"], "quick", budget=len(spec["instances"]) + 1,
                         max_steps=spec["max_steps"])
    host = Host(Path(workdir) / case, config)
    (host.run.system / "policy.py").write_text(textwrap.dedent(spec["policy"]))
    status, body = host.judge.submit({"env_instances": spec["instances"]})
    assert status == 200, body
    tree = host.run.feedback / host.run.submit_name(body["submit_id"])
    return {p.relative_to(tree).as_posix(): _digest(p) for p in sorted(tree.rglob("*")) if p.is_file()}


if __name__ == "__main__":
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        json.dump({c: tree_digest(c, Path(tmp)) for c in CASES}, sys.stdout, indent=1, sort_keys=True)
        print()
