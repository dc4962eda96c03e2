"""The `/task` env brief: what an agent reads about one environment.

Every Core16 env gets a brief written for this host, in our own words, from the
Gymnasium / MiniGrid / highway-env / Gymnasium-Robotics documentation and source at
the pinned versions: the concrete meaning of each observation index or key, the
action table, the reward terms, when episodes end, and the traps that matter (sparse
rewards, early termination, clipping). v0.1.0 gave five of these envs a one-line
generic text and the other eight a family template (§5.5); concrete semantics are
what an agent needs to write a controller, so we give them for all sixteen. Any other
`gymnasium/<id>` gets a generic brief built from its schema and the first paragraph of
the env class's own description.

Headings are fixed (`# <title>`, Objective, Policy Interface, Observation, Action,
Reward, Feedback, Notes); the host appends the policy contract after the brief.
Building a Core16 brief never constructs the env.
"""
from __future__ import annotations

import inspect
import re
from dataclasses import dataclass

from evogym.envs import EnvSpec

HEADINGS = ("Objective", "Policy Interface", "Observation", "Action", "Reward", "Feedback", "Notes")


@dataclass(frozen=True)
class _Doc:
    objective: str
    observation: str
    action: str
    reward: str
    notes: str
    external_obs: bool = False


_MUJOCO_NOTE = (
    "Observations are float64 and unbounded (bounds are `\"inf\"`/`\"-inf\"` strings in the schema). "
    "Physics runs several MuJoCo substeps per action; the start pose is the resting pose plus small "
    "seeded noise, so one controller must cope with slightly different starts."
)

_MINIGRID_OBS = (
    "A dict with three keys:\n"
    "- `image`: 7×7×3 ints, the agent's egocentric partial view. `image[x][y]` = "
    "`[object, color, state]`; the agent stands at `x=3, y=6` (bottom centre) facing toward `y=0`. "
    "Walls and closed doors block sight; cells not visible read `0`.\n"
    "  object: 0 unseen, 1 empty, 2 wall, 3 floor, 4 door, 5 key, 6 ball, 7 box, 8 goal, 9 lava, 10 agent; "
    "color: 0 red, 1 green, 2 blue, 3 purple, 4 yellow, 5 grey; "
    "state (doors): 0 open, 1 closed, 2 locked.\n"
    "- `direction`: int, the agent's heading in the grid: 0 east (+x), 1 south (+y), 2 west, 3 north.\n"
    "- `mission`: str, the instruction for this episode.\n"
    "There is no absolute position: keep your own map and pose estimate across steps if you need one. "
    "Observations are stored in `observations.npz` (keys `image`, `direction`, `mission`)."
)

_MINIGRID_ACTION = (
    "One int in 0..6: 0 turn left, 1 turn right, 2 move forward (blocked by walls, closed doors and "
    "objects), 3 pick up the object in front (one carried at a time), 4 drop the carried object in front, "
    "5 toggle the object in front (open/close a door, unlock a locked door while carrying the key of its "
    "color, open a box), 6 done (no effect in this env)."
)


def _minigrid_reward(limit: int) -> str:
    return (
        f"0 on every step except success, which pays `1 - 0.9 * steps / {limit}` (steps taken including the "
        "successful one) and ends the episode. The return is therefore 0 for failure and in (0.1, 1] for "
        "success, larger when faster."
    )


_HIGHWAY_NOTE = "The simulation is slow (tens of steps per second), so long episodes cost real time."

_FETCH_OBS = (
    "A dict:\n"
    "- `observation` (25): 0–2 gripper position xyz, 3–5 object position, 6–8 object position relative "
    "to the gripper, 9–10 the two finger joint positions, 11–13 object rotation (Euler), 14–16 object "
    "linear velocity relative to the gripper, 17–19 object angular velocity, 20–22 gripper linear velocity, 23–24 finger velocities;\n"
    "- `achieved_goal` (3): the object's current position;\n"
    "- `desired_goal` (3): the target position, different in every episode.\n"
    "Positions are in metres in the world frame; velocities are per simulation step (displacement × dt)."
)

_FETCH_ACTION = (
    "Box of 4 floats in [-1, 1]: 0–2 the desired gripper displacement along x, y, z (scaled to at most "
    "5 cm per step), 3 finger command (positive opens, negative closes)."
)

_FETCH_REWARD = (
    "Sparse: -1 on every step where the object is more than 0.05 m from the target, 0 when within 0.05 m. "
    "`info.is_success` is 1.0 on those steps. The episode is not ended by success: it always lasts 50 "
    "steps, so the return lies in [-50, 0] and counts the steps spent away from the target."
)

_DOCS: dict[str, _Doc] = {
    "gym/acrobot": _Doc(
        objective="Swing the free end of a two-link chain, hanging from a fixed pivot, up above a target "
        "height as fast as possible.",
        observation="6 floats: `[cos θ1, sin θ1, cos θ2, sin θ2, θ1_dot, θ2_dot]`. θ1 is the angle of the first "
        "link from straight down, θ2 the angle of the second link relative to the first. Angular velocities "
        "are bounded by ±4π and ±9π rad/s.",
        action="One int: 0 applies torque -1, 1 applies 0, 2 applies +1, on the joint between the two links "
        "(the pivot itself is not actuated).",
        reward="-1 per step while the tip is below the target; the episode terminates (with reward 0 on that "
        "step) once `-cos θ1 - cos(θ1 + θ2) > 1`, i.e. the tip is one link length above the pivot. "
        "Never reaching it gives -500.",
        notes="The reward carries no information until the goal is reached: the single torque is too weak "
        "to lift the chain directly, so pump energy into the swing first, then aim the tip upward.",
    ),
    "gym/continuouscar": _Doc(
        objective="Drive an underpowered car out of a valley and up to the flag on the right hill.",
        observation="2 floats: `[position, velocity]`, position in [-1.2, 0.6] (the valley bottom is near -0.52, "
        "the goal at 0.45), velocity in [-0.07, 0.07]. Episodes start at rest at a seeded position in [-0.6, -0.4].",
        action="A list of 1 float in [-1, 1]: the engine force; negative pushes left, positive right. "
        "Values outside the Box are clipped.",
        reward="Each step costs `0.1 * force²`; reaching position ≥ 0.45 pays +100 and ends the episode.",
        notes="Full throttle uphill is not enough: rock back and forth to build speed. A policy that never "
        "reaches the flag should stay near zero force, since the action cost adds up over the 999 steps.",
    ),
    "gym/bipedal": _Doc(
        objective="Walk a two-legged robot to the far end of randomly generated rough terrain without falling.",
        observation="24 floats: 0 hull angle, 1 hull angular velocity, 2 horizontal and 3 vertical speed, "
        "4 hip-1 angle, 5 hip-1 speed, 6 knee-1 angle, 7 knee-1 speed, 8 leg-1 ground contact (0/1), "
        "9 hip-2 angle, 10 hip-2 speed, 11 knee-2 angle, 12 knee-2 speed, 13 leg-2 ground contact, "
        "14–23 ten lidar range readings in [0, 1] fanning forward and down.",
        action="A list of 4 floats in [-1, 1]: motor commands for hip 1, knee 1, hip 2, knee 2 (sign sets the "
        "direction, magnitude the torque).",
        reward="Forward progress earns about 300 over the whole course; each step pays a small torque cost "
        "(0.00035 × 80 × |a| per motor) and a penalty for tilting the hull. Falling (hull touches the ground) "
        "or walking off the left edge gives -100 and ends the episode.",
        notes="Reaching the end also terminates. Random motor noise falls within a few hundred steps "
        "(≈ -100 return); a stable slow gait that never falls already scores above 0.",
    ),
    "gym/racing": _Doc(
        objective="Drive a car around a randomly generated closed track, visiting as many track tiles as "
        "possible, quickly.",
        observation="A 96×96×3 RGB image (ints 0–255) seen from above, centred on the car and rotated with it; "
        "the bottom rows show a dashboard (speed, ABS sensors, steering, gyroscope). Grass is green, road "
        "grey. Frames are stored as `observations.npy` with shape `[T, 96, 96, 3]`; row t is the frame "
        "`act` saw at step t, and trajectory `obs` is null.",
        action="A list of 3 floats: `[steering in [-1, 1] (negative left), gas in [0, 1], brake in [0, 1]]`, "
        "e.g. `[0.0, 0.3, 0.0]`.",
        reward="-0.1 every step, plus 1000/N for each track tile visited for the first time (N tiles per track, "
        "a few hundred). A full lap in k steps scores about 1000 - 0.1k. Leaving the playfield far off the "
        "track gives -100 and ends the episode.",
        notes="The lap ends the episode once 95% of tiles are visited and the car returns to the start. The "
        "first ~50 frames are a zoom-in animation. High gas with hard steering spins the car out; "
        "find the road by its grey pixels just ahead of the car.",
        external_obs=True,
    ),
    "gym/halfcheetah5": _Doc(
        objective="Make a planar two-legged cheetah run forward (+x) as fast as possible.",
        observation="17 floats: 0 torso height, 1 torso pitch angle, 2–7 joint angles (back thigh, back shin, "
        "back foot, front thigh, front shin, front foot), 8 forward velocity, 9 vertical velocity, "
        "10 pitch angular velocity, 11–16 the six joint angular velocities. The x position is not observed "
        "(it is `info.x_position`).",
        action="A list of 6 floats in [-1, 1]: torques for back thigh, back shin, back foot, front thigh, "
        "front shin, front foot.",
        reward="Per step: forward velocity `(x_after - x_before) / dt` minus `0.1 * sum(a²)`. "
        "`info` reports `reward_forward`, `reward_ctrl`, `x_position`, `x_velocity`.",
        notes="The cheetah never falls or terminates: every episode runs the full 1000 steps, so the return "
        "is about distance travelled / 0.05 minus the control cost. Flipping onto the back and wriggling "
        "forward is a known local optimum. " + _MUJOCO_NOTE,
    ),
    "gym/ant5": _Doc(
        objective="Make a four-legged ant robot walk forward (+x) as fast as possible without falling.",
        observation="105 floats: 0 torso height z, 1–4 torso orientation quaternion (w, x, y, z), 5–12 joint "
        "angles in the order hip/ankle front-left, hip/ankle front-right, hip/ankle back-left, hip/ankle "
        "back-right, 13–15 torso linear velocity xyz, 16–18 torso angular velocity, 19–26 joint angular "
        "velocities (same order), 27–104 external contact forces (13 bodies × 6), often all zero. "
        "x and y positions are only in `info`.",
        action="A list of 8 floats in [-1, 1]: hip torques and ankle torques, in this order: back-right hip, "
        "back-right ankle, front-left hip, front-left ankle, front-right hip, front-right ankle, back-left "
        "hip, back-left ankle. Note this is not the observation's joint order.",
        reward="Per step: 1 for being healthy + forward velocity - `0.5 * sum(a²)` - "
        "`5e-4 * sum(clip(contact forces, -1, 1)²)`. `info` has `reward_forward`, `reward_ctrl`, "
        "`reward_contact`, `reward_survive`, `x_position`, `y_position`, `x_velocity`, `y_velocity`, "
        "`distance_from_origin`.",
        notes="The episode terminates early as soon as the ant is unhealthy: torso height outside "
        "[0.2, 1.0] m (flipped or jumping) or a non-finite state. Random actions end it in about 50 steps; "
        "surviving 1000 steps alone is worth +1000 minus costs, so stability matters as much as speed. "
        + _MUJOCO_NOTE,
    ),
    "gym/pusher5": _Doc(
        objective="Use a 7-joint robot arm to push a cylinder on a table to a goal position.",
        observation="23 floats: 0–6 joint angles (shoulder pan, shoulder lift, upper-arm roll, elbow flex, "
        "forearm roll, wrist flex, wrist roll), 7–13 their angular velocities, 14–16 fingertip xyz, "
        "17–19 object xyz, 20–22 goal xyz (world frame, metres).",
        action="A list of 7 floats in [-2, 2]: torques for the seven joints in the observation's order.",
        reward="Per step: `-|object - goal| - 0.1 * sum(a²) - 0.5 * |fingertip - object|`. `info` reports "
        "`reward_dist`, `reward_ctrl`, `reward_near`.",
        notes="No termination: every episode is 100 steps. Bring the fingertip behind the object (on the side "
        "away from the goal) before pushing. " + _MUJOCO_NOTE,
    ),
    "gym/reacher5": _Doc(
        objective="Move the tip of a two-joint planar arm onto a randomly placed target.",
        observation="10 floats: 0–1 cos of the two joint angles, 2–3 sin of the two joint angles, 4–5 target "
        "x, y, 6–7 joint angular velocities, 8–9 fingertip minus target in x, y.",
        action="A list of 2 floats in [-1, 1]: torques on the shoulder and the elbow joint.",
        reward="Per step: `-|fingertip - target| - sum(a²)`. `info` reports `reward_dist` and `reward_ctrl`.",
        notes="No termination: every episode is 50 steps. The target lies within 0.2 of the centre; the arm "
        "reach is 0.21. Large torques cost more than they gain near the target. " + _MUJOCO_NOTE,
    ),
    "gymnasium/MiniGrid-DoorKey-16x16-v0": _Doc(
        objective="In a 16×16 grid split by a wall with one locked door, pick up the key, unlock the door and "
        "reach the green goal square in the bottom-right area. Mission text: \"use the key to open the door "
        "and then get to the goal\".",
        observation=_MINIGRID_OBS,
        action=_MINIGRID_ACTION,
        reward=_minigrid_reward(2560),
        notes="The environment's own limit is 2560 steps (10 × 16²); the episode is then truncated with "
        "return 0. Toggling the locked door requires carrying the key (same colour). Random actions never "
        "succeed.",
        external_obs=True,
    ),
    "gymnasium/MiniGrid-KeyCorridorS4R3-v0": _Doc(
        objective="Pick up the ball named in the mission (\"pick up the <color> ball\"). It sits in a room "
        "behind a locked door off a central corridor lined with small rooms (3 rows); the key of that door's colour is hidden "
        "in another room.",
        observation=_MINIGRID_OBS,
        action=_MINIGRID_ACTION,
        reward=_minigrid_reward(480),
        notes="Truncated after 480 steps (30 × 4²). Success is picking up the ball; to do so you must first "
        "drop the key (one object at a time). Explore rooms systematically: unlocked doors are closed "
        "but open with toggle.",
        external_obs=True,
    ),
    "gymnasium/MiniGrid-FourRooms-v0": _Doc(
        objective="Reach the green goal square in a 19×19 grid of four rooms joined by one-cell gaps. "
        "Agent and goal start at seeded random positions. Mission text: \"reach the goal\".",
        observation=_MINIGRID_OBS,
        action=_MINIGRID_ACTION,
        reward=_minigrid_reward(100),
        notes="Truncated after only 100 steps, so the goal is often out of reach when it lies two rooms away "
        "and not yet visible: explore efficiently (turning costs a step too).",
        external_obs=True,
    ),
    "gymnasium/MiniGrid-ObstructedMaze-1Q-v1": _Doc(
        objective="Pick up the blue ball (mission \"pick up the blue ball\"). You start in the centre room "
        "of a 3×3 maze of rooms; a closed door leads east to a side room, from which two locked doors lead "
        "to the north-east and south-east corner rooms; the ball is in one of those. Each locked door is "
        "blocked on your side by a ball, and its key (same colour as the door) is hidden in a box in the "
        "side room.",
        observation=_MINIGRID_OBS,
        action=_MINIGRID_ACTION,
        reward=_minigrid_reward(720),
        notes="Truncated after 720 steps. Typical sequence: toggle the box to reveal the key, pick up the "
        "blocking ball and drop it aside, pick up the key, toggle the door, drop the key, pick up the blue "
        "ball. Only one object can be carried at a time.",
        external_obs=True,
    ),
    "gymnasium/parking-v0": _Doc(
        objective="Park a car in a given slot of a parking lot: reach the goal position with the goal heading, "
        "without hitting the walls.",
        observation="A dict of three 6-float lists with features `[x, y, vx, vy, cos_h, sin_h]` divided by "
        "`[100, 100, 5, 5, 1, 1]` (positions in metres / 100, speeds in m/s / 5, heading as cos/sin):\n"
        "- `observation`: the car's state;\n- `achieved_goal`: the same state (the goal-comparable part);\n"
        "- `desired_goal`: the target slot (zero speed, slot heading).",
        action="A list of 2 floats in [-1, 1]: `[acceleration, steering]`, mapped to ±5 m/s² and ±45°.",
        reward="Per step: `-(sum_i w_i * |achieved_i - desired_i|) ** 0.5` with weights "
        "`[1, 0.3, 0, 0, 0.02, 0.02]`, minus 5 on a collision. The episode terminates on success (that "
        "distance term above -0.12) or on a crash; `info` has `is_success`, `crashed`, `speed`, `action`.",
        notes="Truncated after 500 steps (100 s at 5 decisions per second). Every step away from the goal "
        "costs, so park quickly; coming in slowly avoids overshooting. " + _HIGHWAY_NOTE,
    ),
    "gymnasium/roundabout-v0": _Doc(
        objective="Drive through a busy roundabout quickly without crashing.",
        observation="5×5 floats: row 0 is your car, rows 1–4 the nearest other vehicles (all zeros when "
        "absent). Columns `[presence, x, y, vx, vy]`, absolute coordinates, normalised to [-1, 1] from "
        "x, y ∈ [-100, 100] m and vx, vy ∈ [-15, 15] m/s.",
        action="One int (a meta-action executed by a low-level controller): 0 lane left, 1 idle, "
        "2 lane right, 3 faster, 4 slower. Target speeds are 0, 8 and 16 m/s.",
        reward="Per step, before scaling: `0.2 * speed_index / 2 - 1 * crashed - 0.05 * (lane change)`, "
        "then mapped linearly from [-1, 0.2] to [0, 1] and zeroed when off road. `info.rewards` lists the "
        "terms; `info` also has `speed`, `crashed`, `action`.",
        notes="Only 11 decisions per episode (11 s at 1 Hz); a crash terminates it. Staying at the top speed "
        "without collisions earns close to 1 per step. " + _HIGHWAY_NOTE,
    ),
    "gymnasium/FetchPush-v4": _Doc(
        objective="Push a block across a table with a 7-DoF Fetch arm until it rests on the target position "
        "(always on the table surface).",
        observation=_FETCH_OBS,
        action=_FETCH_ACTION + " The fingers are locked closed in this task, so entry 3 has no effect.",
        reward=_FETCH_REWARD,
        notes="Success means within 0.05 m of `desired_goal`, checked every step. Approach the block from "
        "the side opposite the target and keep the gripper low. Validation and held-out goals differ from "
        "the train ones: a policy must use `desired_goal`, not memorise positions.",
    ),
    "gymnasium/FetchPickAndPlace-v4": _Doc(
        objective="Grasp a block with a 7-DoF Fetch arm and move it to the target position, which is in the "
        "air above the table in about half of the episodes.",
        observation=_FETCH_OBS,
        action=_FETCH_ACTION,
        reward=_FETCH_REWARD,
        notes="Success means within 0.05 m of `desired_goal`, checked every step. Open the fingers, descend "
        "around the block, close, then lift and carry; pushing alone solves only targets on the table. "
        "Validation and held-out goals differ from the train ones.",
    ),
}

_CONTRACT_BITS = {
    "interface": (
        "`Policy(obs_space, action_space, env_meta)` is built once per "
        "submit (and once per hidden evaluation pool); `reset(episode_index)` runs before each episode; "
        "`act(obs)` returns one action per step. Observations arrive as plain JSON values (lists, dicts, "
        "ints, floats, strings), never numpy; non-finite floats arrive as the strings \"inf\", \"-inf\", \"nan\"."
    ),
    "observation": "The exact schema is `obs_space` (also `/info.env_meta.obs_space`).",
    "action": (
        "Return JSON-safe values matching `action_space`. Invalid numeric actions are clipped or repaired, "
        "never rejected, and the step is marked `info.action_invalid`."
    ),
    "reward": (
        "The episode return is the sum of rewards. Feedback reports returns on the train cases you submit; "
        "validation and held-out cases stay hidden."
    ),
    "feedback": (
        "After each submit read `feedback/submit_NNN/summary.json` and, per episode, `trajectory.jsonl` "
        "(one line per step: action, reward, flags, info), `stdout.txt`, `stderr.txt` and any `error.txt`. "
        "When an episode's observations are large they are written beside the trajectory as "
        "`observations.npy` or `observations.npz` and the trajectory's `obs` is null."
    ),
}


def brief(spec: EnvSpec) -> str:
    """The markdown brief for `spec`: the curated text for Core16, a generic one otherwise."""
    doc = _DOCS.get(spec.slug) or _generic_doc(spec)
    sections = {
        "Objective": doc.objective,
        "Policy Interface": _CONTRACT_BITS["interface"],
        "Observation": f"{doc.observation}\n\n{_CONTRACT_BITS['observation']}",
        "Action": f"{doc.action}\n\n{_CONTRACT_BITS['action']}",
        "Reward": f"{doc.reward}\n\n{_CONTRACT_BITS['reward']}",
        "Feedback": _CONTRACT_BITS["feedback"],
        "Notes": doc.notes,
    }
    head = (
        f"# {spec.title}\n\nEnvironment: `{spec.slug}`\nUpstream id: `{spec.gym_id}`\n"
        f"Maximum episode steps: {spec.max_steps}\n"
    )
    body = "\n".join(f"## {name}\n\n{sections[name]}\n" for name in HEADINGS)
    return f"{head}\n{body}"


# ---------------------------------------------------------------- generic envs


def _generic_doc(spec: EnvSpec) -> _Doc:
    from evogym.envs import spaces_of  # builds the env once (cached); only non-Core16 envs get here

    obs_space, action_space = spaces_of(spec)
    description = env_description(spec.gym_id)
    objective = "Maximize the total Gymnasium reward of each episode."
    if description:
        objective += f"\n\nFrom the environment's documentation:\n\n> {description}"
    return _Doc(
        objective=objective,
        observation=f"An observation of type `{_shape_text(obs_space)}`; see the Gymnasium documentation of "
        f"`{spec.gym_id}` for what each component means.",
        action=f"An action of type `{_shape_text(action_space)}`.",
        reward="Whatever the environment returns per step, summed over the episode.",
        notes=f"Episodes end when the environment terminates or truncates, or after {spec.max_steps} steps.",
    )


def _shape_text(schema: dict) -> str:
    kind = schema.get("type", "?")
    if "shape" in schema:
        return f"{kind} {schema['shape']} {schema.get('dtype', '')}".rstrip()
    if "n" in schema:
        return f"{kind}(n={schema['n']})"
    if kind == "Dict":
        return "Dict{" + ", ".join(f"{k}: {_shape_text(v)}" for k, v in schema["spaces"].items()) + "}"
    return kind


def env_description(gym_id: str) -> str:
    """First paragraph of the env class's `## Description` section (or of its docstring),
    as one line; empty when the class cannot be loaded or has no docstring."""
    import gymnasium as gym
    from gymnasium.envs.registration import load_env_creator

    from evogym.envs import IMPORT_LOCK
    try:
        entry = gym.spec(gym_id).entry_point
        with IMPORT_LOCK:
            creator = load_env_creator(entry) if isinstance(entry, str) else entry
    except Exception:  # noqa: BLE001 - a missing description only shortens the brief
        return ""
    text = inspect.cleandoc(getattr(creator, "__doc__", None) or "")
    match = re.search(r"^#+\s*Description\s*$", text, flags=re.MULTILINE)
    if match:
        text = text[match.end():]
    for para in re.split(r"\n\s*\n", text.strip()):
        para = para.strip()
        if para and not para.startswith(("#", "```", "|", ":")):
            return " ".join(para.split())
    return ""
