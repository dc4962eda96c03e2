"""Last resort when no mechanism fits the schemas: the neutral action, every step.

A template of the OLE built-in agent, rendered by `ole.agents.builtin.mechanism.render`.
"""
import numpy as np

from ole.agents.builtin.programs.prelude import bounds  # inline

P: dict = {}  # params


def neutral(schema):
    """The schema's neutral action: Discrete start, Box midpoint (0 where unbounded), zeros elsewhere."""
    kind = schema.get("type")
    if kind == "Discrete":
        return int(schema.get("start", 0))
    if kind == "Box":
        size = int(np.prod(schema.get("shape") or [1]))
        low, high = bounds(schema, size)
        mid = np.where(np.isfinite(low) & np.isfinite(high), (low + high) / 2.0, 0.0)
        return mid.reshape(schema.get("shape") or [1]).tolist()
    if kind == "MultiDiscrete":
        return np.zeros(np.shape(schema["nvec"]), dtype=int).tolist()
    if kind == "MultiBinary":
        n = schema["n"]
        return np.zeros(n if isinstance(n, list) else [n], dtype=int).tolist()
    if kind == "Dict":
        return {k: neutral(v) for k, v in schema.get("spaces", {}).items()}
    if kind == "Tuple":
        return [neutral(v) for v in schema.get("spaces", [])]
    return 0


class Policy:
    """Last resort when no mechanism fits the schemas: the neutral action, every step."""

    def __init__(self, obs_space, action_space, env_meta):
        self.action = neutral(action_space)

    def reset(self, episode_index):
        pass

    def act(self, obs):
        return self.action
