"""Pendulum-like tasks: one angle observed as a (cos, sin) pair, its rate, one actuator.

Keyed by schema: a Box observation whose bounds mark exactly one (cos, sin) pair (two
consecutive entries bounded by [-1, 1]), at least one further entry (the first is taken as
the angle's rate), and a one-dimensional action (a Box of one value or a Discrete set,
whose middle value is "no torque"). Which way is up is structure the schema does not
tell, so both senses are separate synthesis candidates.
"""
from __future__ import annotations

import numpy as np

from ole.agents.builtin.control import obs_vector_size
from ole.agents.builtin.mechanism import Mechanism, Param

DEFAULT_POTENTIAL = 1.0
"""Potential-energy weight when the rate has no finite bound to derive it from."""


def unit_pairs(obs_space: dict) -> list[tuple[int, int]]:
    """(cos, sin) index pairs: consecutive entries with bounds exactly [-1, 1]."""
    low, high, n = obs_space.get("low"), obs_space.get("high"), obs_vector_size(obs_space) or 0
    if obs_space.get("type") != "Box" or not isinstance(low, list) or not isinstance(high, list) or len(low) != n:
        return []
    unit = [i for i in range(n) if low[i] == -1.0 and high[i] == 1.0]
    return [(unit[k], unit[k + 1]) for k in range(0, len(unit) - 1, 2) if unit[k + 1] == unit[k] + 1]


def swing_up(obs_space: dict, action_space: dict) -> list[Mechanism] | None:
    """Energy-shaping swing-up with a PD catch, one candidate per sense of "up".

    The potential weight defaults to rate_bound^2 / 4: a pendulum falling from upright
    reaches a rate of 2 * sqrt(weight) at the bottom, which a well-set rate bound covers.
    """
    pairs = unit_pairs(obs_space)
    n = obs_vector_size(obs_space) or 0
    kind = action_space.get("type")
    one = kind == "Discrete" and int(action_space.get("n", 0)) >= 2 or \
        kind == "Box" and int(np.prod(action_space.get("shape") or [1])) == 1
    if len(pairs) != 1 or not one:
        return None
    rest = [i for i in range(n) if i not in pairs[0]]
    if not rest:
        return None
    vel = rest[0]
    bound = obs_space["high"][vel] if isinstance(obs_space["high"][vel], (int, float)) else None
    wpot = float(bound) ** 2 / 4.0 if bound is not None and np.isfinite(bound) and bound > 0 else DEFAULT_POTENTIAL
    out = []
    for up in (1.0, -1.0):
        out.append(Mechanism("swing_up" if up > 0 else "swing_up_flipped", "swing_up", (
            Param("wpot", (wpot,), 0.25 * wpot, 0.0, 100.0 * wpot, "energy"),
            Param("ke", (0.5,), 0.3, 0.0, 50.0, "energy"),
            Param("switch", (0.85,), 0.05, 0.0, 0.995, "catch"),
            Param("kp", (3.0,), 1.0, 0.0, 50.0, "catch"),
            Param("kd", (0.8,), 0.3, 0.0, 20.0, "catch"),
            Param("amp", (1.0,), 0.15, 0.05, 1.0, "output"),
            Param("dead", (0.1,), 0.1, 0.0, 0.95, "output"),
        ), "one angle as a (cos, sin) pair and one actuator: energy-shaping swing-up, PD catch at "
           + ("cos = +1" if up > 0 else "cos = -1"),
            fixed=(("pair", tuple(float(i) for i in pairs[0])), ("vel", (float(vel),)), ("up", (up,)))))
    return out
