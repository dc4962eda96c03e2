"""The mechanism library: which program families fit a task, in which order.

Candidates are chosen from the observation/action schemas and a few words of the
task brief, never from the env name. Lessons from earlier tasks with the same
interface signature (when the Loop Policy carries lessons) move their winning
mechanisms to the front.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence

from ole.agents.builtin import control, goal, grid, pendulum, vision
from ole.agents.builtin.mechanism import Mechanism

Builder = Callable[[dict, dict], Mechanism | list[Mechanism] | None]

MOMENTUM_WORDS = ("momentum", "swing", "hill", "pendulum", "underpowered")
"""Brief words that put energy pumping first."""
PICK_WORDS = ("pick", "grasp", "lift", "place")
"""Brief words that put pick-and-place before pushing."""


LEADS: dict[Builder, int] = {control.energy_pump: 2, control.oscillator: 2}
"""How many of a family's candidates go before the next family's first (the rest come after
every family's first): the energy pump's two senses of one joint, and the oscillator's
standing and backward travelling waves, since sign and phase pattern are structure."""
GAIT_ACTUATORS = 3
"""With at least this many continuous actuators (a body with limbs) gaits are tried before affine feedback."""


def _order(obs_space: dict, action_space: dict, brief: str) -> list[Builder]:
    text = brief.lower()
    kind = obs_space.get("type")
    if grid.grid_bfs(obs_space, action_space) is not None:
        return [grid.grid_bfs]
    if vision.road_mask(obs_space, action_space) is not None:
        return [vision.road_mask]
    if kind == "Dict" and "desired_goal" in obs_space.get("spaces", {}):
        effector = [goal.goal_pick, goal.goal_push] if any(w in text for w in PICK_WORDS) \
            else [goal.goal_push, goal.goal_pick]
        return [goal.goal_vehicle, *effector, control.affine]
    if control.threshold_rules(obs_space, action_space) is not None:
        return [control.threshold_rules, control.affine]
    if pendulum.swing_up(obs_space, action_space) is not None:
        return [pendulum.swing_up, control.energy_pump, control.affine]
    momentum = any(w in text for w in MOMENTUM_WORDS)
    if action_space.get("type") == "Discrete" or momentum:
        return [control.energy_pump, control.affine, control.oscillator]
    if action_space.get("type") == "Box" and control.action_size(action_space) >= GAIT_ACTUATORS:
        return [control.oscillator, control.affine, control.energy_pump]
    return [control.affine, control.oscillator, control.energy_pump]


def candidates(obs_space: dict, action_space: dict, brief: str, *,
               preferred: Sequence[str] = (), extra: Sequence[Mechanism] = ()) -> list[Mechanism]:
    """Applicable mechanisms, best guess first; `preferred` names (lessons) go to the front.

    `extra` mechanisms (supplied by the caller, e.g. an experiment's own template)
    are tried before the library's.
    """
    primary: list[Mechanism] = []
    variants: list[Mechanism] = []
    for builder in _order(obs_space, action_space, brief):
        found = builder(obs_space, action_space)
        found = found if isinstance(found, list) else [found] if found else []
        lead = LEADS.get(builder, 1)
        primary.extend(found[:lead])
        variants.extend(found[lead:])
    built = primary + variants  # one of each family before any family's variants
    if not built and not extra:
        built = [control.neutral(obs_space, action_space)]  # a scored run even for unknown schemas
    rank = {name: i for i, name in enumerate(preferred)}
    built.sort(key=lambda m: rank.get(m.name, len(rank)))
    return [*extra, *built]
