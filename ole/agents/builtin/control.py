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
        known = [s for s in sizes if s is not None]
        return sum(known) if sizes and len(known) == len(sizes) else None
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
    return Mechanism("neutral", "neutral", (), "no library mechanism fits these schemas: neutral action")


def affine(obs_space: dict, action_space: dict) -> Mechanism | None:
    n_obs, n_act = obs_vector_size(obs_space), action_size(action_space)
    if n_obs is None or n_obs * n_act > MAX_AFFINE_WEIGHTS:
        return None
    return Mechanism("affine", "affine", (
        Param("W", (0.0,) * (n_obs * n_act), 0.3, -10, 10, "act"),
        Param("b", (0.0,) * n_act, 0.3, -10, 10, "bias"),
    ), "vector observations: affine feedback from zero (hold still) as the baseline")


def affine_scale(obs_space: dict, n_obs: int) -> np.ndarray:
    """The per-entry scale the affine program divides observations by (mirrors `scale_of`)."""
    if obs_space.get("type") != "Box":
        return np.ones(n_obs)
    low, high = obs_space.get("low"), obs_space.get("high")
    if not isinstance(low, list) or not isinstance(high, list) or len(low) != n_obs:
        return np.ones(n_obs)
    width = (np.asarray(high, float) - np.asarray(low, float)) / 2.0
    ok = np.isfinite(width) & (width > 1e-9) & (width < 1e5)
    return np.where(ok, width, 1.0)


def _velocity_count(obs_space: dict, n_obs: int) -> int:
    """How many features the energy program treats as velocities (mirrors `Policy.layout`)."""
    low, high = obs_space.get("low"), obs_space.get("high")
    if not isinstance(low, list) or not isinstance(high, list) or len(low) != n_obs:
        return max(1, n_obs - n_obs // 2)
    unit = [i for i in range(n_obs) if low[i] == -1.0 and high[i] == 1.0]
    rest = n_obs - len(unit) // 2 * 2
    return rest if unit else max(1, rest - rest // 2)


def energy_pump(obs_space: dict, action_space: dict) -> list[Mechanism] | None:
    """Energy pumping along the velocity features, one candidate per focus and sign.

    Which velocity to pump on, and in which sense, is structure, not a constant (the sign
    of a torque convention cannot be read from a schema, and tuning rarely crosses zero):
    each is a separate synthesis candidate, so a budget too small to tune still finds it.
    With several velocities the single-feature foci come first (an underactuated system
    is pumped through one joint), then all features together.
    """
    n_obs = obs_vector_size(obs_space)
    if obs_space.get("type") != "Box" or n_obs is None or n_obs > 32:
        return None
    if action_space.get("type") == "Box" and action_size(action_space) > 2:
        return None
    n_vel = _velocity_count(obs_space, n_obs)
    foci: list[tuple[str, tuple[float, ...], str]] = []
    if n_vel > 1:
        for j in range(n_vel):
            for sign, tag in ((1.0, ""), (-1.0, "_neg")):
                foci.append((f"energy_pump_v{j}{tag}", tuple(sign * float(i == j) for i in range(n_vel)),
                             f"velocity feature {j}" + (", reversed" if sign < 0 else "")))
    both = [("energy_pump", (1.0,) * n_vel, "all velocity features"),
            ("energy_pump_neg", (-1.0,) * n_vel, "all velocity features, reversed")]
    foci = foci[:2] + both + foci[2:] if n_vel > 1 else both  # several: the first joint's two senses lead
    out = []
    for name, w, what in foci:
        out.append(Mechanism(name, "energy", (
            Param("w", w, 0.5, -10, 10, "energy"),
            Param("c", (0.0,) * n_obs, 0.3, -10, 10, "energy"),
            Param("gain", (20.0,), 5.0, 0.1, 200, "output"),
            Param("bias", (0.0,), 0.01, -5, 5, "energy"),
            Param("amp", (1.0,), 0.2, 0.05, 1.0, "output"),
            Param("dead", (0.0,), 0.1, 0.0, 0.95, "output"),
        ), "low-dimensional state: pump energy along " + what))
    return out


def oscillator(obs_space: dict, action_space: dict) -> list[Mechanism] | None:
    """Central pattern generators, one candidate per phase pattern of the actuators.

    How the actuators' phases relate is the gait's structure, not a constant to tune from
    one start: a standing wave (neighbours in antiphase), a travelling wave in either
    direction (a quarter period between neighbours) and all in phase are separate
    synthesis candidates; tuning then moves frequency, amplitudes, phases, posture and
    the feedback gain of the one that walks.
    """
    n_obs = obs_vector_size(obs_space)
    if action_space.get("type") != "Box" or n_obs is None or action_size(action_space) < 2:
        return None
    d = action_size(action_space)
    patterns = (("oscillator", tuple(float(np.pi * (j % 2)) for j in range(d)), "a standing wave"),
                ("oscillator_wave_back", tuple(-np.pi / 2 * j for j in range(d)), "a backward travelling wave"),
                ("oscillator_wave", tuple(np.pi / 2 * j for j in range(d)), "a forward travelling wave"),
                ("oscillator_sync", (0.0,) * d, "all actuators in phase"))
    return [Mechanism(name, "oscillator", (
        Param("freq", (0.05,), 0.02, 0.001, 0.5, "rhythm"),
        Param("amp", (0.5,) * d, 0.25, 0.0, 1.5, "rhythm"),
        Param("phase", tuple(float(p) for p in phases), 0.8, -10, 10, "rhythm"),
        Param("bias", (0.0,) * d, 0.2, -1, 1, "posture"),
        Param("fb", (0.0,), 0.3, -3, 3, "feedback"),
    ), f"multi-actuator continuous control: central pattern generator, {what}, with feedback")
        for name, phases, what in patterns]


def threshold_rules(obs_space: dict, action_space: dict) -> Mechanism | None:
    shape = obs_space.get("shape") or []
    if obs_space.get("type") != "Box" or len(shape) != 2 or shape[0] < 2 or shape[1] < 3:
        return None
    if action_space.get("type") != "Discrete":
        return None
    top = float(int(action_space["n"]) - 1)
    mid = float((int(action_space["n"]) - 1) // 2)
    return Mechanism("threshold_rules", "threshold", (
        Param("near", (0.1,), 0.05, 0.0, 2.0, "danger"),
        Param("gap", (0.2,), 0.1, 0.0, 2.0, "danger"),
        Param("lane_width", (0.05,), 0.03, 0.0, 1.0, "danger"),
        Param("absolute", (1.0,), 0.5, 0.0, 1.0, "danger"),
        Param("slow", (0.2,), 0.1, 0.0, 2.0, "speed"),
        Param("a_danger", (top,), 1.0, 0.0, top, "choice"),
        Param("a_slow", (mid,), 1.0, 0.0, top, "choice"),
        Param("a_cruise", (mid,), 1.0, 0.0, top, "choice"),
    ), "kinematics table with discrete meta-actions: threshold rules")
