"""Data-informed mechanisms: built from the layout the agent inferred from trajectories.

Keyed by the observed structure (`ole.agents.builtin.layout`), never by the env: a planar
chain (as many (cos, sin) angle pairs with known rates as there are continuous actions)
plus a two-dimensional goal distance gets Jacobian-transpose reaching. Whether the
distance vector points from the tip to the goal or back cannot be told from the reward,
so both senses are candidates.
"""
from __future__ import annotations

from collections.abc import Sequence

from ole.agents.builtin.control import action_size
from ole.agents.builtin.feedback import Sample
from ole.agents.builtin.layout import Layout
from ole.agents.builtin.mechanism import Mechanism, Param

GAIN_REACH = 1.5
"""Default kp x link length: a goal one link away asks about 1.5 x the torque bound (saturated pull)."""


def planar_reach(obs_space: dict, action_space: dict, layout: Layout) -> list[Mechanism] | None:
    n = action_size(action_space)
    if action_space.get("type") != "Box" or len(layout.pairs) != n or len(layout.error) != 2 \
            or any(r is None for r in layout.rates) or layout.error_scale <= 0:
        return None
    link = layout.error_scale / n
    fixed = (("pairs", tuple(float(i) for p in layout.pairs for i in p)),
             ("rates", tuple(float(r) for r in layout.rates if r is not None)), ("err", tuple(float(i) for i in layout.error)))
    out = []
    for sign in (-1.0, 1.0):
        out.append(Mechanism("planar_reach" if sign < 0 else "planar_reach_flipped", "planar_reach", (
            Param("kp", (GAIN_REACH / link,), 0.3 * GAIN_REACH / link, 0.0, 1e4 / link, "reach"),
            Param("kd", (0.05,), 0.02, 0.0, 10.0, "reach"),
            Param("amp", (1.0,), 0.15, 0.02, 1.0, "output"),
            Param("links", (link,) * n, 0.3 * link, 1e-3 * link, 10.0 * link, "reach"),
        ), f"{n} angle pairs with rates and a goal distance seen in the trajectories: Jacobian-transpose reaching",
            fixed=fixed + (("sign", (sign,)),)))
    return out


def informed(obs_space: dict, action_space: dict, layout: Layout,
             samples: Sequence[Sample] = ()) -> list[Mechanism]:
    """Every data-informed mechanism the layout and the trajectories support, best guess first."""
    from ole.agents.builtin.model import lqr_affine
    found = list(planar_reach(obs_space, action_space, layout) or [])
    lqr = lqr_affine(obs_space, action_space, samples)
    return found + ([lqr] if lqr is not None else [])


__all__ = ["informed", "planar_reach"]
