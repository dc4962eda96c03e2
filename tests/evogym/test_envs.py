"""Env ids, Core16 specs, schemas as given to the policy (§5.2–5.3), seeding, determinism."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import gymnasium as gym
import numpy as np
import pytest

from evogym.envs import CORE16, EnvSpec, env_meta, make_env, reset_episode, resolve, step_info
from evogym.errors import EnvNotFound
from evogym.spaces import coerce_action, to_jsonable

ACROBOT_LOW = [-1.0, -1.0, -1.0, -1.0, -12.566370964050293, -28.274333953857422]


def _inf_box(n, dtype="float64"):
    return {"type": "Box", "shape": [n], "dtype": dtype, "low": ["-inf"] * n, "high": ["inf"] * n}


def test_core16_is_the_paper_suite_in_order():
    assert len(CORE16) == 16 and len(set(CORE16)) == 16
    assert CORE16[0] == "gym/acrobot" and CORE16[-1] == "gymnasium/FetchPickAndPlace-v4"
    caps = {s: resolve(s).max_steps for s in CORE16}
    assert caps["gym/continuouscar"] == 999 and caps["gym/bipedal"] == 1600
    assert caps["gymnasium/MiniGrid-DoorKey-16x16-v0"] == 2560
    assert caps["gymnasium/roundabout-v0"] == 11 and caps["gymnasium/FetchPush-v4"] == 50


def test_core16_kwargs_and_caps_match_the_installed_registry():
    resolve("gymnasium/CartPole-v1")  # registers all families
    for slug in CORE16:
        spec = resolve(slug)
        registered = gym.spec(spec.gym_id)
        assert dict(registered.kwargs) == spec.kwargs, slug
        if registered.max_episode_steps:
            assert registered.max_episode_steps == spec.max_steps, slug


def test_acrobot_meta_is_the_published_info_shape():
    meta = env_meta(resolve("gym/acrobot"), n_env_instances=1024)
    assert meta == {
        "action_space": {"n": 3, "type": "Discrete"},
        "env": "gym/acrobot",
        "env_version": "0.1",
        "max_episode_steps": 500,
        "n_env_instances": 1024,
        "obs_space": {"dtype": "float32", "high": [-x for x in ACROBOT_LOW], "low": ACROBOT_LOW,
                      "shape": [6], "type": "Box"},
        "obs_storage": "external",  # 500 steps x 6 floats exceed 4 KiB: observations.npy (issue 13)
        "reward_components": {"return": "sum of Gymnasium rewards over the episode"},
        "artifacts": {"observations": True, "video": False},
    }


def test_continuouscar_and_reacher_schemas():
    car = env_meta(resolve("gym/continuouscar"))
    assert car["obs_space"]["low"] == [-1.2000000476837158, -0.07000000029802322]
    assert car["obs_space"]["high"] == [0.6000000238418579, 0.07000000029802322]
    assert car["action_space"] == {"type": "Box", "shape": [1], "dtype": "float32", "low": [-1.0], "high": [1.0]}
    reacher = env_meta(resolve("gym/reacher5"))
    assert reacher["obs_space"] == _inf_box(10)
    assert reacher["action_space"]["low"] == [-1.0, -1.0] and reacher["max_episode_steps"] == 50


def test_minigrid_schema_is_external_and_process_independent():
    meta = env_meta(resolve("gymnasium/MiniGrid-FourRooms-v0"))
    spaces = meta["obs_space"]["spaces"]
    assert list(spaces) == ["direction", "image", "mission"]
    assert spaces["direction"] == {"type": "Discrete", "n": 4}
    assert spaces["image"]["type"] == "Image" and spaces["image"]["shape"] == [7, 7, 3]
    assert spaces["mission"]["type"] == "MissionSpace"
    assert " at 0x" not in spaces["mission"]["repr"]
    assert meta["obs_storage"] == "external"
    assert meta["artifacts"] == {"observations": True, "video": False}
    assert meta["action_space"] == {"type": "Discrete", "n": 7} and meta["max_episode_steps"] == 100


def test_parking_and_fetch_dict_schemas():
    parking = env_meta(resolve("gymnasium/parking-v0"))
    assert parking["obs_space"] == {"type": "Dict", "spaces": {k: _inf_box(6) for k in
                                    ("achieved_goal", "desired_goal", "observation")}}
    assert parking["obs_storage"] == "external" and parking["artifacts"]["observations"]
    assert env_meta(resolve("gym/reacher5"))["obs_storage"] == "inline"  # 50 x 10 floats fit in 4 KiB
    assert parking["max_episode_steps"] == 500
    fetch = env_meta(resolve("gymnasium/FetchPush-v4"))
    assert fetch["obs_space"]["spaces"] == {"achieved_goal": _inf_box(3), "desired_goal": _inf_box(3),
                                            "observation": _inf_box(25)}
    assert fetch["action_space"]["shape"] == [4]


@pytest.mark.parametrize("slug, expected", [
    ("Acrobot-v1", "gym/acrobot"),
    ("gym/acrobt", "gym/acrobot"),
    ("gymnasium/FetchPush-v9", "gymnasium/FetchPush-v4"),
    ("gymnasium/CartPol-v1", "gymnasium/CartPole-v1"),
    ("gym/CartPole-v1", "gymnasium/CartPole-v1"),
])
def test_unknown_ids_suggest_the_canonical_name(slug, expected):
    with pytest.raises(EnvNotFound) as info:
        resolve(slug)
    assert expected in info.value.suggestions
    assert expected in str(info.value)


def test_generic_ids_discover_their_step_cap():
    assert resolve("gymnasium/CartPole-v1").max_steps == 500
    empty = resolve("gymnasium/MiniGrid-Empty-5x5-v0")
    assert (empty.max_steps, empty.family) == (100, "minigrid")
    gym.register("EvogymTestNoLimit-v0", entry_point="gymnasium.envs.classic_control:CartPoleEnv")
    try:
        spec = resolve("gymnasium/EvogymTestNoLimit-v0")
        assert (spec.max_steps, spec.family, spec.title) == (1000, "generic", "EvogymTestNoLimit-v0")
    finally:
        del gym.registry["EvogymTestNoLimit-v0"]


def test_spec_is_frozen_and_strict():
    spec = resolve("gym/acrobot")
    with pytest.raises(Exception):
        spec.max_steps = 3
    with pytest.raises(Exception):
        EnvSpec(slug="x", gym_id="y", max_steps=1, family="generic", title="t", extra=1)


def _rollout(slug, seed, steps=5):
    env = make_env(resolve(slug))
    obs, _ = reset_episode(env, seed)
    trace = [json.dumps(to_jsonable(obs), sort_keys=True)]
    for _ in range(steps):
        action, invalid = coerce_action(env.action_space, to_jsonable(env.action_space.sample()))
        assert not invalid
        obs, reward, terminated, truncated, info = env.step(action)
        trace.append(json.dumps([to_jsonable(obs), float(reward), terminated, truncated, step_info(info)],
                                sort_keys=True))
        if terminated or truncated:
            break
    env.close()
    return trace


@pytest.mark.parametrize("slug", ["gym/acrobot", "gym/continuouscar", "gym/reacher5",
                                  "gymnasium/MiniGrid-FourRooms-v0", "gymnasium/FetchPush-v4"])
def test_seeded_episodes_are_deterministic(slug):
    first = [_rollout(slug, s) for s in (47113601, 1076138659)]
    second = [_rollout(slug, s) for s in (47113601, 1076138659)]
    assert first == second
    assert first[0] != first[1]


def test_reset_wraps_seed_and_seeds_spaces_with_offsets():
    env = make_env(resolve("gym/acrobot"))
    obs_big, _ = reset_episode(env, 2**32 + 5)
    obs_small, _ = reset_episode(env, 5)
    assert np.array_equal(obs_big, obs_small)
    reference_act, reference_obs = gym.spaces.Discrete(3), env.observation_space.__class__(
        env.observation_space.low, env.observation_space.high, dtype=np.float32)
    reference_act.seed(6)
    reference_obs.seed(7)
    reset_episode(env, 5)
    assert [env.action_space.sample() for _ in range(8)] == [reference_act.sample() for _ in range(8)]
    assert np.array_equal(env.observation_space.sample(), reference_obs.sample())
    env.close()


@pytest.mark.slow
@pytest.mark.parametrize("slug", CORE16)
def test_every_core16_env_makes_resets_and_steps(slug):
    spec = resolve(slug)
    env = make_env(spec)
    obs, _ = reset_episode(env, 1654615998)
    assert env.observation_space.contains(obs)
    for _ in range(3):
        action, _ = coerce_action(env.action_space, to_jsonable(env.action_space.sample()))
        obs, reward, terminated, truncated, info = env.step(action)
        json.dumps(step_info(info), allow_nan=False)
        json.dumps(to_jsonable(obs), allow_nan=False)
    env.close()
    assert env_meta(spec)["env"] == slug


def test_registered_but_unbuildable_id_is_not_found():
    """With or without a registered step limit (mujoco_py's -v2/-v3 ids, Fetch*-v1 and jax's
    phys2d/* have one): the id is refused at lookup, not at the run's first episode."""
    gym.register("EvogymTestBroken-v0", entry_point="evogym_no_such_module:Env")
    gym.register("EvogymTestBrokenLimited-v0", entry_point="evogym_no_such_module:Env", max_episode_steps=50)
    try:
        for gym_id in ("EvogymTestBroken-v0", "EvogymTestBrokenLimited-v0"):
            with pytest.raises(EnvNotFound, match="cannot be built"):
                resolve(f"gymnasium/{gym_id}")
    finally:
        del gym.registry["EvogymTestBroken-v0"]
        del gym.registry["EvogymTestBrokenLimited-v0"]


class _LimitAtReset(gym.Env):
    """States its step limit only once reset (as BabyAI's levels do: 0 before)."""
    observation_space = gym.spaces.Discrete(2)
    action_space = gym.spaces.Discrete(2)
    max_steps = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.max_steps = 77
        return 0, {}

    def step(self, action):
        return 0, 0.0, False, False, {}


def test_a_limit_stated_at_reset_is_found():
    """BabyAI levels read 0 before reset: every episode ran 0 steps and scored 0, `completed`."""
    gym.register("EvogymTestLimitAtReset-v0", entry_point=_LimitAtReset)
    try:
        assert resolve("gymnasium/EvogymTestLimitAtReset-v0").max_steps == 77
    finally:
        del gym.registry["EvogymTestLimitAtReset-v0"]
    assert resolve("gymnasium/BabyAI-GoToRedBall-v0").max_steps == 64


CONCURRENT_BUILD = """
import sys, threading
from concurrent.futures import ThreadPoolExecutor
from evogym import envs
slugs = list(envs.CORE16)
barrier = threading.Barrier(4)
def build(offset):
    barrier.wait()  # all four threads import the same packages at the same moment
    failures = []
    for slug in slugs[offset:] + slugs[:offset]:
        try:
            env = envs.make_env(envs.resolve(slug))
            env.reset(seed=0)
            env.close()
        except Exception as exc:
            failures.append(f"{slug}: {type(exc).__name__}: {exc}")
    return failures
with ThreadPoolExecutor(4) as pool:
    failures = [f for fs in pool.map(build, range(4)) for f in fs]
print(failures)
sys.exit(1 if failures else 0)
"""


@pytest.mark.heavy
@pytest.mark.parametrize("repeat", range(3))
def test_core16_envs_build_from_four_threads_at_once(repeat):
    """The import race of `evogym suite smoke` (partially initialized gymnasium modules):
    each repeat is a fresh interpreter, where the env modules are imported for the first
    time by four threads at once (without IMPORT_LOCK this failed 4 of 6 runs)."""
    out = subprocess.run([sys.executable, "-c", CONCURRENT_BUILD], capture_output=True, text=True, timeout=300,
                         env={**os.environ, "MUJOCO_GL": "egl"})
    assert out.returncode == 0, out.stdout + out.stderr[-2000:]


@pytest.mark.parametrize("slug", ["gym/acrobot", "gym/reacher5", "gymnasium/MiniGrid-FourRooms-v0",
                                  "gymnasium/roundabout-v0", "gymnasium/CartPole-v1"])
def test_obs_storage_says_what_the_feedback_writer_does_for_a_max_length_episode(slug):
    from evogym.feedback import externalize
    spec = resolve(slug)
    env = make_env(spec)
    env.observation_space.seed(7)
    obs = [env.observation_space.sample() for _ in range(spec.max_steps)]
    env.close()
    written = externalize(obs)
    assert env_meta(spec)["obs_storage"] == ("external" if written is not None else "inline")
    assert ("artifacts" in env_meta(spec)) == (written is not None)


def test_importing_an_env_package_hides_only_the_robotics_notice(capfd):
    """The import swaps sys.stderr process-wide: another thread's output meanwhile must reach the
    real stream (a swallowing buffer hid it, and faulthandler, registering on the stream's fd
    from the main thread while a host's warm-up thread imported minigrid, made `evogym serve`
    of a MiniGrid env exit 1 with nothing printed)."""
    import io
    from evogym.envs import ROBOTICS_NOTICE, _WithoutNotice
    real = io.StringIO()
    real.fileno = lambda: 2  # type: ignore[method-assign]
    wrapped = _WithoutNotice(real)
    print("Some AdroitHand" + f" {ROBOTICS_NOTICE} in v1.2.1 ...", file=wrapped)
    print("Traceback (most recent call last): another thread", file=wrapped)
    assert real.getvalue() == "Traceback (most recent call last): another thread\n"
    assert wrapped.fileno() == 2
    subprocess.run([sys.executable, "-c", "import sys; from evogym import envs; envs._register_all(); "
                    "assert sys.stderr is sys.__stderr__"], check=True, timeout=120)
    assert ROBOTICS_NOTICE not in capfd.readouterr().err


def test_serve_starts_for_an_env_whose_package_imports_at_host_start(tmp_path):
    """`evogym serve --env gymnasium/MiniGrid-FourRooms-v0`: ready line, /info, SIGTERM -> run.json."""
    import json as _json
    import signal
    import urllib.request
    run_dir = tmp_path / "mg"
    proc = subprocess.Popen([sys.executable, "-m", "evogym.cli", "serve", "--env", "gymnasium/MiniGrid-FourRooms-v0",
                             "--run-dir", str(run_dir), "--budget", "2"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        assert line, proc.communicate(timeout=60)[1]
        ready = _json.loads(line)
        token = open(ready["token_file"]).read().strip()
        req = urllib.request.Request(ready["url"] + "/info", headers={"Authorization": f"Bearer {token}"})
        assert _json.load(urllib.request.urlopen(req, timeout=60))["env_meta"]["env"]
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert (run_dir / "run.json").is_file()
