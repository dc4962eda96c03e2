"""The starting program of a session run: an intentionally weak baseline, as EvoPolicyGym
main starts every run from its benchmark's baseline program. It is copied into the agent's
`workspace/system/policy.py` (never imported by the host) and runs in the policy sandbox.

It plays one fixed action, valid for any action space the host describes (`/info`): a
Discrete space's first value, the middle of each Box bound (0 where unbounded),
MultiDiscrete/MultiBinary zeros, and Dict/Tuple spaces part by part.
"""


def constant_action(space):
    """One valid action of the action-space schema `space`."""
    kind = space.get("type")
    if kind == "Discrete":
        return space.get("start", 0)
    if kind == "Box":
        return _middle(space["low"], space["high"])
    if kind == "MultiDiscrete":
        return [0] * len(_flat(space["nvec"]))
    if kind == "MultiBinary":
        n = space["n"]
        return [0] * (n if isinstance(n, int) else n[0])
    if kind == "Dict":
        return {name: constant_action(part) for name, part in space["spaces"].items()}
    if kind == "Tuple":
        return [constant_action(part) for part in space["spaces"]]
    return 0


def _flat(value):
    if isinstance(value, list):
        return [x for item in value for x in _flat(item)]
    return [value]


def _middle(lo, hi):
    """The middle of [lo, hi] in the bounds' own nesting; 0 where a bound is not finite."""
    if isinstance(lo, list):
        return [_middle(a, b) for a, b in zip(lo, hi)]
    finite = [v for v in (lo, hi) if isinstance(v, (int, float)) and abs(v) != float("inf")]
    return sum(finite) / 2 if len(finite) == 2 else 0.0


class BaselinePolicy:
    def __init__(self, action):
        self.action = action

    def act(self, observation):
        return self.action


def make_policy(context):
    return BaselinePolicy(constant_action(context.action_space))
