"""The built-in agent's programs: every mechanism renders to a valid, checkable policy.

Programs are instantiated directly (not through a host) on real Gymnasium envs kept
tiny: a few short episodes, fixed seeds.
"""
from __future__ import annotations

import importlib
import py_compile
import subprocess
import sys
import types
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

from evogym.spaces import coerce_action, space_schema, to_jsonable
from ole.agents.builtin import control, goal, grid, library, vision
from ole.agents.builtin.checks import sample_obs, static_problems, topology_hash
from ole.agents.builtin.mechanism import render


def register_envs() -> None:
    """Register the MiniGrid, HighwayEnv and Gymnasium-Robotics envs with gymnasium."""
    import gymnasium_robotics
    import highway_env
    import minigrid
    for module in (gymnasium_robotics, highway_env, minigrid):
        gym.register_envs(module)


def load(source: str):
    module = types.ModuleType("policy_under_test")
    exec(compile(source, "policy.py", "exec"), module.__dict__)
    return module.Policy


def returns(env_id: str, source: str, seeds, max_steps: int, **kwargs) -> list[float]:
    env = gym.make(env_id, **kwargs)
    obs_s, act_s = space_schema(env.observation_space), space_schema(env.action_space)
    policy = load(source)(obs_s, act_s, {"max_episode_steps": max_steps})
    out = []
    for i, seed in enumerate(seeds):
        obs, _ = env.reset(seed=seed)
        policy.reset(i)
        total = 0.0
        for _ in range(max_steps):
            action, invalid = coerce_action(env.action_space, policy.act(to_jsonable(obs)))
            assert not invalid
            obs, r, term, trunc, _ = env.step(action)
            total += float(r)
            if term or trunc:
                break
        out.append(total)
    env.close()
    return out


def schemas(env_id: str, **kwargs):
    env = gym.make(env_id, **kwargs)
    return space_schema(env.observation_space), space_schema(env.action_space)


def test_energy_pump_climbs_the_hill():
    obs_s, act_s = schemas("MountainCarContinuous-v0")
    mech = control.energy_pump(obs_s, act_s)[0]
    got = returns("MountainCarContinuous-v0", render(mech, mech.defaults()).source, [1, 2], 999)
    assert min(got) > 80  # reaches the goal (random is about -33)


def test_energy_pump_variants_focus_one_velocity():
    obs_s, act_s = schemas("Acrobot-v1")
    names = [m.name for m in control.energy_pump(obs_s, act_s)]
    assert names[:3] == ["energy_pump_v0", "energy_pump_v0_neg", "energy_pump"] and "energy_pump_v1_neg" in names


def test_grid_mechanism_solves_a_small_doorkey():
    register_envs()
    obs_s, act_s = schemas("MiniGrid-DoorKey-5x5-v0")
    mech = grid.grid_bfs(obs_s, act_s)
    got = returns("MiniGrid-DoorKey-5x5-v0", render(mech, mech.defaults()).source, [0, 1], 250)
    assert min(got) > 0.5


def test_swing_up_balances_the_pendulum():
    obs_s, act_s = schemas("Pendulum-v1")
    mech = library.candidates(obs_s, act_s, "")[0]
    got = returns("Pendulum-v1", render(mech, mech.defaults()).source, [0, 1, 2, 3], 200)
    assert np.mean(got) > -400  # uniform random is about -1200; energy pumping alone about -1600


def test_grid_mechanism_clears_the_obstructed_maze():
    """Box -> key, ball out of the doorway, locked door, then the blue ball (ObstructedMaze-1Q)."""
    register_envs()
    kwargs = dict(agent_room=(1, 1), key_in_box=True, blocked=True, num_quarters=1, num_rooms_visited=5)
    obs_s, act_s = schemas("MiniGrid-ObstructedMaze-1Q-v1", **kwargs)
    mech = grid.grid_bfs(obs_s, act_s)
    got = returns("MiniGrid-ObstructedMaze-1Q-v1", render(mech, mech.defaults()).source, [0, 1, 2], 720, **kwargs)
    assert min(got) > 0.7


def test_grid_parameters_change_the_behaviour():
    """Every parameter prices a choice: moving them changes the episode (so tuning is not inert)."""
    register_envs()
    obs_s, act_s = schemas("MiniGrid-FourRooms-v0")
    mech = grid.grid_bfs(obs_s, act_s)
    base = returns("MiniGrid-FourRooms-v0", render(mech, mech.defaults()).source, [3, 4, 5, 6], 100)
    moved = []
    for name in ("turn_cost", "info", "reach"):
        x = mech.defaults()
        x[[p.name for p in mech.params].index(name)] = 2.0
        moved.append(returns("MiniGrid-FourRooms-v0", render(mech, x).source, [3, 4, 5, 6], 100) != base)
    assert all(moved)


def test_push_mechanism_beats_doing_nothing():
    register_envs()
    obs_s, act_s = schemas("FetchPush-v4")
    mech = goal.goal_push(obs_s, act_s)
    got = returns("FetchPush-v4", render(mech, mech.defaults()).source, [0, 1, 2], 50)
    assert np.mean(got) > -45  # holding still scores about -50 when the object starts off the goal


@pytest.mark.parametrize("env_id", ["Acrobot-v1", "Pendulum-v1", "HalfCheetah-v5", "MiniGrid-FourRooms-v0",
                                    "FetchPickAndPlace-v4", "CarRacing-v3", "roundabout-v0", "parking-v0"])
def test_every_candidate_passes_the_static_checks(env_id):
    register_envs()
    obs_s, act_s = schemas(env_id)
    found = library.candidates(obs_s, act_s, "")
    assert found, f"no mechanism for {env_id}"
    for mech in found:
        for x in (mech.defaults(), np.full(mech.dim, 0.5)):
            for inline in (False, True):
                assert static_problems(render(mech, x, inline=inline).source, obs_s, act_s) == [], mech.name


def test_library_is_keyed_by_schema():
    register_envs()
    assert [m.name for m in library.candidates(*schemas("MiniGrid-FourRooms-v0"), "")] == ["grid_bfs"]
    assert [m.name for m in library.candidates(*schemas("CarRacing-v3"), "")] == ["road_mask"]
    first = library.candidates(*schemas("Pendulum-v1"), "swing it up")[0].name
    assert first == "swing_up"  # one (cos, sin) pair and one actuator
    assert library.candidates(*schemas("Pendulum-v1"), "", preferred=["affine"])[0].name == "affine"


def test_tuning_keeps_topology_and_synthesis_changes_it():
    obs_s, act_s = schemas("HalfCheetah-v5")
    osc = control.oscillator(obs_s, act_s)[0]
    a = render(osc, osc.defaults()).source
    b = render(osc, np.full(osc.dim, -0.7)).source
    assert a != b and topology_hash(a) == topology_hash(b)
    aff = control.affine(obs_s, act_s)
    assert topology_hash(render(aff, aff.defaults()).source) != topology_hash(a)


def test_inline_rendering_acts_like_the_table():
    obs_s, act_s = schemas("Pendulum-v1")
    mech = control.energy_pump(obs_s, act_s)[0]
    x = np.linspace(-0.5, 0.5, mech.dim)
    table, inline = render(mech, x), render(mech, x, inline=True)
    assert "PARAMS = {}" in inline.source and table.source != inline.source
    assert returns("Pendulum-v1", table.source, [4], 30) == returns("Pendulum-v1", inline.source, [4], 30)


def test_static_checks_catch_bad_programs():
    obs_s, act_s = schemas("Pendulum-v1")
    assert "syntax error" in static_problems("class Policy(:\n", obs_s, act_s)[0]
    assert "torch" in static_problems("import torch\nclass Policy: pass\n", obs_s, act_s)[0]
    assert "no top-level" in static_problems("x = 1\n", obs_s, act_s)[0]
    wrong = ("class Policy:\n    def __init__(self, o, a, m): pass\n    def reset(self, i): pass\n"
             "    def act(self, obs): return [0.0, 1.0]\n")
    assert "expected 1" in static_problems(wrong, obs_s, act_s)[0]


def test_sample_obs_matches_the_schema():
    register_envs()
    obs_s, _ = schemas("MiniGrid-FourRooms-v0")
    obs = sample_obs(obs_s)
    assert np.asarray(obs["image"]).shape == (7, 7, 3) and obs["direction"] == 0


def test_vision_mechanism_needs_an_rgb_image_and_three_controls():
    assert vision.road_mask({"type": "Box", "shape": [4]}, {"type": "Box", "shape": [3]}) is None
    assert vision.road_mask({"type": "Image", "shape": [96, 96, 3]}, {"type": "Box", "shape": [3]}) is not None


def test_unknown_schemas_fall_back_to_a_neutral_program():
    """No library mechanism fits a text observation with a Tuple action: the agent still has a
    valid, parameter-free program, so the run is scored instead of left without a submit."""
    from ole.agents.builtin import library
    from ole.agents.builtin.mechanism import render
    import numpy as np
    obs = {"type": "Text", "min_length": 1, "max_length": 8}
    act = {"type": "Tuple", "spaces": [{"type": "Discrete", "n": 3, "start": 1},
                                       {"type": "Box", "shape": [2], "dtype": "float32", "low": [-1, 0], "high": [1, 4]}]}
    found = library.candidates(obs, act, "")
    assert [m.name for m in found] == ["neutral"] and found[0].dim == 0
    namespace = {}
    exec(render(found[0], np.zeros(0)).source, namespace)
    policy = namespace["Policy"](obs, act, {})
    assert policy.act("hello") == [1, [0.0, 2.0]]


# ---- the templates are code: linted, imported and unit-tested as modules ---------------------------

TEMPLATE_DIR = Path(__file__).resolve().parents[2] / "ole" / "agents" / "builtin" / "programs"
TEMPLATES = sorted(p.stem for p in TEMPLATE_DIR.glob("*.py") if p.stem != "__init__")
LINT = ["--select", "E,F,W", "--line-length", "120", "--no-cache", "--output-format", "concise"]
SCHEMA_ENVS = ["Acrobot-v1", "Pendulum-v1", "HalfCheetah-v5", "MiniGrid-FourRooms-v0", "FetchPickAndPlace-v4",
               "CarRacing-v3", "roundabout-v0", "parking-v0", "Reacher-v5"]


def ruff(*paths) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ruff", "check", *LINT, *map(str, paths)],
                          capture_output=True, text=True, timeout=120)


def test_templates_are_lint_clean_modules():
    assert TEMPLATES and {"prelude", "affine", "grid_bfs"} <= set(TEMPLATES)
    out = ruff(TEMPLATE_DIR)
    assert out.returncode == 0, out.stdout + out.stderr
    for name in TEMPLATES:
        module = importlib.import_module(f"ole.agents.builtin.programs.{name}")
        assert module.__doc__, name


def test_every_rendered_program_is_lint_clean(tmp_path):
    """Undefined names, unused imports or a helper missing from the inlined set would show here."""
    register_envs()
    written = []
    for env_id in SCHEMA_ENVS:
        obs_s, act_s = schemas(env_id)
        for mech in library.candidates(obs_s, act_s, ""):
            for inline in (False, True):
                path = tmp_path / f"{env_id}-{mech.name}-{int(inline)}.py"
                path.write_text(render(mech, mech.defaults(), inline=inline).source)
                py_compile.compile(str(path), doraise=True)
                written.append(path)
    out = ruff(*written)
    assert out.returncode == 0, out.stdout[-3000:]


def test_prelude_codec_maps_the_unit_range_onto_the_bounds():
    from ole.agents.builtin.programs.prelude import ActionCodec, bounds, flat
    codec = ActionCodec({"type": "Box", "shape": [2], "low": [-2.0, 0.0], "high": [2.0, 4.0]})
    assert codec.box([1.0, -1.0]) == [2.0, 0.0] and codec.box([0.0, 5.0]) == [0.0, 4.0]
    assert ActionCodec({"type": "Discrete", "n": 3, "start": 1}).choice(7) == 3
    assert flat({"b": [1, "nan"], "a": 2}).tolist() == [2.0, 1.0, 0.0]
    low, high = bounds({"low": -1.0, "high": {"min": 0, "max": 3.0}}, 2)
    assert low.tolist() == [-1.0, -1.0] and high.tolist() == [3.0, 3.0]


def test_grid_template_parses_missions():
    from ole.agents.builtin.programs.grid_bfs import parse_mission
    assert parse_mission("pick up the blue ball") == ("pickup", "ball", "blue")
    assert parse_mission("use the key to open the door and then get to the goal") == ("reach", "goal", None)
    assert parse_mission("get to the green goal square") == ("reach", "goal", None)


def test_inlining_puts_each_helper_once_before_its_user():
    from ole.agents.builtin.mechanism import assemble
    text = assemble("goal_push")
    assert text.count("def num(") == 1 and text.count("def parts(") == 1 and text.count("import numpy as np") == 1
    assert text.index("def num(") < text.index("def parts(") < text.index("class Policy")
    assert "# inline" not in text and "# params" not in text


def test_edit_kinds_agree_with_the_host(tmp_path):
    """The agent's topology hash and the host's code metrics classify the same edits the same way."""
    from evogym.code_metrics import code_metrics, edit_kind
    obs_s, act_s = schemas("HalfCheetah-v5")
    osc, aff = control.oscillator(obs_s, act_s)[0], control.affine(obs_s, act_s)
    programs = {"a": render(osc, osc.defaults()).source, "b": render(osc, np.full(osc.dim, -0.7)).source,
                "c": render(aff, aff.defaults()).source}
    metrics = {}
    for name, source in programs.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "policy.py").write_text(source)
        metrics[name] = code_metrics(tmp_path / name)
    for old, new in (("a", "b"), ("b", "c"), ("a", "a")):
        ours = "none" if programs[old] == programs[new] else (
            "tuning" if topology_hash(programs[old]) == topology_hash(programs[new]) else "synthesis")
        assert edit_kind(metrics[old], metrics[new]) == ours, (old, new)


def _samples_from(env_id: str, episodes: int, steps: int, action):
    from ole.agents.builtin.feedback import Sample
    env = gym.make(env_id)
    out = []
    for ep in range(episodes):
        obs, _ = env.reset(seed=ep)
        xs, us, rs = [], [], []
        for t in range(steps):
            a = action(t, ep)
            xs.append(np.ravel(obs)), us.append(np.ravel(a))
            obs, r, term, trunc, _ = env.step(a)
            rs.append(float(r))
            if term or trunc:
                break
        out.append(Sample(np.asarray(xs, float), np.asarray(us, float), np.asarray(rs, float)))
    return out


def test_layout_finds_angles_rates_and_the_goal_distance_in_trajectories():
    """Reacher's bounds are all infinite; its trajectories still show which entries are what."""
    from ole.agents.builtin.layout import infer
    found = infer(_samples_from("Reacher-v5", 2, 50, lambda t, ep: 0.5 * np.sin([0.3 * t + ep, 0.2 * t])))
    assert found.pairs == ((0, 2), (1, 3)) and found.rates == (6, 7) and found.error == (8, 9)
    assert infer(_samples_from("Reacher-v5", 1, 5, lambda t, ep: np.zeros(2))).pairs == ()  # too little data


def test_planar_reach_from_the_layout_beats_affine_from_zero():
    from ole.agents.builtin import reach
    from ole.agents.builtin.layout import infer
    obs_s, act_s = schemas("Reacher-v5")
    layout = infer(_samples_from("Reacher-v5", 2, 50, lambda t, ep: 0.5 * np.sin([0.3 * t + ep, 0.2 * t])))
    mech = reach.planar_reach(obs_s, act_s, layout)[0]
    got = returns("Reacher-v5", render(mech, mech.defaults()).source, [0, 1, 2, 3], 50)
    zero = returns("Reacher-v5", render(control.affine(obs_s, act_s), np.zeros(22)).source, [0, 1, 2, 3], 50)
    assert np.mean(got) > np.mean(zero) + 2.0


def test_lqr_from_trajectories_stabilises_the_fitted_model():
    """A fitted regulator exists only when the actions varied; its closed loop is stable."""
    from ole.agents.builtin.model import lqr_gain
    obs_s, act_s = schemas("InvertedPendulum-v5")
    rng = np.random.default_rng(0)
    samples = _samples_from("InvertedPendulum-v5", 8, 50, lambda t, ep: rng.uniform(-3, 3, 1))
    found = lqr_gain(samples, obs_s, act_s)
    assert found is not None and found[0].shape == (1, 4)
    assert lqr_gain(_samples_from("InvertedPendulum-v5", 8, 50, lambda t, ep: np.zeros(1)), obs_s, act_s) is None
