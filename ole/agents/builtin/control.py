"""Mechanisms for vector observations: affine feedback, energy pumping, oscillators,
threshold rules over kinematic tables.

Each builder reads only the compact schemas (sizes, bounds) and returns a
`Mechanism` whose defaults are generic (zero feedback, unit weights, a slow gait),
never values fitted to a particular environment; all fitting happens through
`/submit` feedback in the tuning phase.
"""
from __future__ import annotations

import numpy as np

from ole.agents.builtin.mechanism import Mechanism, Param

MAX_AFFINE_WEIGHTS = 1024
"""Larger affine maps are not proposed (the search could not move them within a budget)."""

NEUTRAL = '''
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
'''

AFFINE = '''
class Policy:
    """Affine feedback u = W z + b on bound-normalized observations."""

    def __init__(self, obs_space, action_space, env_meta):
        self.codec = ActionCodec(action_space)
        self.obs_space = obs_space
        self.scale = None

    def reset(self, episode_index):
        pass

    def act(self, obs):
        x = flat(obs)
        if self.scale is None:
            s = scale_of(self.obs_space, x.size)
            self.scale = s if s.size == x.size else np.ones(x.size)
        z = np.clip(x / self.scale, -5.0, 5.0)
        w = np.asarray(P["W"]).reshape(self.codec.dim, -1)
        n = min(w.shape[1], z.size)
        u = w[:, :n] @ z[:n] + np.asarray(P["b"])
        if self.codec.kind == "Discrete":
            return self.codec.choice(int(np.argmax(u)))
        return self.codec.box(np.tanh(u))
'''

ENERGY = '''
class Policy:
    """Energy pumping: push along the velocity features (build momentum), shaped by angles.

    Velocity features are the non-angle dimensions (angles arrive as cos/sin pairs);
    without angle pairs, the second half of the features (positions come first).
    """

    def __init__(self, obs_space, action_space, env_meta):
        self.codec = ActionCodec(action_space)
        self.obs_space = obs_space
        self.vel = None

    def reset(self, episode_index):
        pass

    def layout(self, x):
        low, high = bounds(self.obs_space, x.size)
        unit = (np.abs(low + 1.0) < 1e-6) & (np.abs(high - 1.0) < 1e-6)
        trig = [i for i in range(x.size) if unit[i]]
        trig = trig[: len(trig) // 2 * 2]
        rest = [i for i in range(x.size) if i not in trig]
        if not trig:
            rest = rest[len(rest) // 2:] if len(rest) > 1 else rest
        self.vel, self.trig = rest, trig
        self.scale = scale_of(self.obs_space, x.size)

    def act(self, obs):
        x = flat(obs)
        if self.vel is None:
            self.layout(x)
        v = x[self.vel] / self.scale[self.vel]
        w = np.asarray(P["w"])[: len(self.vel)]
        s = float(w @ v[: w.size])
        if self.trig:
            angles = x[self.trig]
            c = np.asarray(P["c"])[: angles.size]
            s += float(c @ angles[: c.size])
        u = math.tanh(P["gain"][0] * (s + P["bias"][0])) * P["amp"][0]
        if self.codec.kind == "Discrete":
            if abs(u) <= P["dead"][0]:
                return self.codec.choice(self.codec.n // 2)
            return self.codec.choice(self.codec.n - 1 if u > 0 else 0)
        return self.codec.box(np.full(self.codec.dim, u))
'''

OSCILLATOR = '''
class Policy:
    """Central pattern generator: one sine per actuator plus scalar-gain state feedback."""

    def __init__(self, obs_space, action_space, env_meta):
        self.codec = ActionCodec(action_space)
        self.obs_space = obs_space
        self.t = 0
        self.proj = None

    def reset(self, episode_index):
        self.t = 0

    def act(self, obs):
        x = flat(obs)
        if self.proj is None:
            rng = np.random.default_rng(0)
            self.proj = rng.normal(0.0, 1.0 / math.sqrt(max(1, x.size)), (self.codec.dim, x.size))
            self.scale = scale_of(self.obs_space, x.size)
        z = np.clip(x / self.scale, -5.0, 5.0)
        d = self.codec.dim
        phase = 2.0 * math.pi * P["freq"][0] * self.t + np.asarray(P["phase"])[:d]
        u = np.asarray(P["amp"])[:d] * np.sin(phase) + np.asarray(P["bias"])[:d]
        u = u + P["fb"][0] * np.tanh(self.proj @ z)
        self.t += 1
        return self.codec.box(u)
'''

THRESHOLD = '''
class Policy:
    """Threshold rules over a kinematics table (row 0 = ego, column 0 = presence)."""

    def __init__(self, obs_space, action_space, env_meta):
        self.codec = ActionCodec(action_space)

    def reset(self, episode_index):
        pass

    def act(self, obs):
        t = np.asarray([[num(v) for v in row] for row in obs], dtype=float)
        t = np.nan_to_num(t)
        ego, others = t[0], t[1:]
        present = others[others[:, 0] > 0.5] if others.shape[1] > 0 else others
        near = np.inf
        ahead = np.inf
        if len(present) and t.shape[1] >= 3:
            rel = present[:, 1:3] - (ego[1:3] if P["absolute"][0] > 0.5 else 0.0)
            dist = np.hypot(rel[:, 0], rel[:, 1])
            near = float(dist.min())
            front = rel[:, 0] > 0
            lane = np.abs(rel[:, 1]) < P["lane_width"][0]
            if np.any(front & lane):
                ahead = float(rel[front & lane, 0].min())
        speed = float(np.hypot(ego[3], ego[4])) if t.shape[1] >= 5 else 0.0
        if near < P["near"][0] or ahead < P["gap"][0]:
            return self.codec.choice(int(round(P["a_danger"][0])))
        if speed < P["slow"][0]:
            return self.codec.choice(int(round(P["a_slow"][0])))
        return self.codec.choice(int(round(P["a_cruise"][0])))
'''


def obs_vector_size(schema: dict) -> int | None:
    """Flattened size of a numeric observation schema; None when it holds images or text."""
    kind = schema.get("type")
    if kind == "Box":
        return int(np.prod(schema.get("shape") or [1]))
    if kind == "Discrete":
        return 1
    if kind in ("Dict", "Tuple"):
        subs = schema.get("spaces", {})
        sizes = [obs_vector_size(s) for s in (subs.values() if isinstance(subs, dict) else subs)]
        return None if not sizes or any(s is None for s in sizes) else sum(sizes)
    if kind == "MultiBinary":
        n = schema.get("n")
        return int(np.prod(n)) if isinstance(n, (int, list)) else None
    if kind == "MultiDiscrete":
        return int(np.prod(np.shape(schema.get("nvec") or [])))
    return None


def action_size(schema: dict) -> int:
    if schema.get("type") == "Discrete":
        return int(schema["n"])
    return int(np.prod(schema.get("shape") or [1]))


def neutral(obs_space: dict, action_space: dict) -> Mechanism:
    """Any schemas: a parameter-free neutral-action program, so every run is scored."""
    return Mechanism("neutral", NEUTRAL, (), "no library mechanism fits these schemas: neutral action")


def affine(obs_space: dict, action_space: dict) -> Mechanism | None:
    n_obs, n_act = obs_vector_size(obs_space), action_size(action_space)
    if n_obs is None or n_obs * n_act > MAX_AFFINE_WEIGHTS:
        return None
    return Mechanism("affine", AFFINE, (
        Param("W", (0.0,) * (n_obs * n_act), 0.3, -10, 10, "act"),
        Param("b", (0.0,) * n_act, 0.3, -10, 10, "bias"),
    ), "vector observations: affine feedback from zero (hold still) as the baseline")


def _velocity_count(obs_space: dict, n_obs: int) -> int:
    """How many features the energy program treats as velocities (mirrors `Policy.layout`)."""
    low, high = obs_space.get("low"), obs_space.get("high")
    if not isinstance(low, list) or not isinstance(high, list) or len(low) != n_obs:
        return max(1, n_obs - n_obs // 2)
    unit = [i for i in range(n_obs) if low[i] == -1.0 and high[i] == 1.0]
    rest = n_obs - len(unit) // 2 * 2
    return rest if unit else max(1, rest - rest // 2)


def energy_pump(obs_space: dict, action_space: dict) -> list[Mechanism] | None:
    """Energy pumping on all velocity features, plus one variant per single velocity feature.

    Which joint's velocity to pump on is structure, not a constant: each variant is a
    separate synthesis candidate, so a budget too small to tune still finds it.
    """
    n_obs = obs_vector_size(obs_space)
    if obs_space.get("type") != "Box" or n_obs is None or n_obs > 32:
        return None
    if action_space.get("type") == "Box" and action_size(action_space) > 2:
        return None
    n_vel = _velocity_count(obs_space, n_obs)
    focus = [(1.0,) * n_vel] + ([tuple(float(i == j) for i in range(n_vel)) for j in range(n_vel)] if n_vel > 1 else [])
    out = []
    for j, w in enumerate(focus):
        name = "energy_pump" if j == 0 else f"energy_pump_v{j - 1}"
        out.append(Mechanism(name, ENERGY, (
            Param("w", w, 0.5, -10, 10, "energy"),
            Param("c", (0.0,) * n_obs, 0.01, -10, 10, "energy"),
            Param("gain", (20.0,), 5.0, 0.1, 200, "output"),
            Param("bias", (0.0,), 0.01, -5, 5, "energy"),
            Param("amp", (1.0,), 0.2, 0.05, 1.0, "output"),
            Param("dead", (0.0,), 0.1, 0.0, 0.95, "output"),
        ), "low-dimensional state: pump energy along " + ("all velocity features" if j == 0 else f"velocity feature {j - 1}")))
    return out


def oscillator(obs_space: dict, action_space: dict) -> Mechanism | None:
    n_obs = obs_vector_size(obs_space)
    if action_space.get("type") != "Box" or n_obs is None or action_size(action_space) < 2:
        return None
    d = action_size(action_space)
    phases = tuple(float(np.pi * (j % 2)) for j in range(d))
    return Mechanism("oscillator", OSCILLATOR, (
        Param("freq", (0.05,), 0.02, 0.001, 0.5, "rhythm"),
        Param("amp", (0.5,) * d, 0.25, 0.0, 1.5, "rhythm"),
        Param("phase", phases, 0.8, -10, 10, "rhythm"),
        Param("bias", (0.0,) * d, 0.2, -1, 1, "posture"),
        Param("fb", (0.0,), 0.3, -3, 3, "feedback"),
    ), "multi-actuator continuous control: central pattern generator with feedback")


def threshold_rules(obs_space: dict, action_space: dict) -> Mechanism | None:
    shape = obs_space.get("shape") or []
    if obs_space.get("type") != "Box" or len(shape) != 2 or shape[0] < 2 or shape[1] < 3:
        return None
    if action_space.get("type") != "Discrete":
        return None
    top = float(int(action_space["n"]) - 1)
    mid = float((int(action_space["n"]) - 1) // 2)
    return Mechanism("threshold_rules", THRESHOLD, (
        Param("near", (0.1,), 0.05, 0.0, 2.0, "danger"),
        Param("gap", (0.2,), 0.1, 0.0, 2.0, "danger"),
        Param("lane_width", (0.05,), 0.03, 0.0, 1.0, "danger"),
        Param("absolute", (1.0,), 0.5, 0.0, 1.0, "danger"),
        Param("slow", (0.2,), 0.1, 0.0, 2.0, "speed"),
        Param("a_danger", (top,), 1.0, 0.0, top, "choice"),
        Param("a_slow", (mid,), 1.0, 0.0, top, "choice"),
        Param("a_cruise", (mid,), 1.0, 0.0, top, "choice"),
    ), "kinematics table with discrete meta-actions: threshold rules")
