"""The built-in agent through a real host on Gymnasium tasks outside Core16.

Each run goes through `ole.runner.run_task` (a real `evogym serve`, `--isolation
none`, quick profile, tiny budget). The held-out score the host reports must beat a
uniform-random policy measured here on the same kind of episodes. None of these envs
has a mechanism of its own: the library picks one from the schema and the brief.
(Pendulum-v1 is not here: energy pumping swings it up but nothing balances it, and the
agent ends near random, about -1165 against -1204 at budget 32.)
"""
from __future__ import annotations

import shutil
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

from ole.runner import run_task
from ole.trace import RunCondition, TaskSpec

REPO = Path(__file__).resolve().parents[2]
RANDOM_EPISODES = 8


def random_mean(gym_id: str) -> float:
    env = gym.make(gym_id)
    env.action_space.seed(0)
    total = []
    for seed in range(RANDOM_EPISODES):
        env.reset(seed=seed)
        ret, done = 0.0, False
        while not done:
            _, r, term, trunc, _ = env.step(env.action_space.sample())
            ret += float(r)
            done = term or trunc
        total.append(ret)
    return float(np.mean(total))


def run(tmp_path: Path, env: str, budget: int):
    root = tmp_path / "bundles"
    root.mkdir()
    shutil.copy(REPO / "bundles" / "coder.yaml", root / "coder.yaml")
    return run_task(TaskSpec(env=env, profile="quick", budget=budget), "coder@1", "builtin",
                    RunCondition(host="builtin", seed=0), root=root, runs_dir=tmp_path / "runs",
                    traces_dir=tmp_path / "traces", isolation="none")


@pytest.fixture(scope="module")
def cartpole(tmp_path_factory):
    return run(tmp_path_factory.mktemp("cartpole"), "gymnasium/CartPole-v1", 16)


@pytest.mark.heavy
def test_beats_random_on_cartpole(cartpole):
    assert cartpole.verified
    assert cartpole.outcome.final_score > random_mean("CartPole-v1") + 100.0


@pytest.mark.heavy
def test_beats_random_on_mountain_car(tmp_path):
    trace = run(tmp_path, "gymnasium/MountainCar-v0", 12)
    assert trace.verified
    assert trace.outcome.final_score > random_mean("MountainCar-v0") + 40.0


@pytest.mark.slow
@pytest.mark.parametrize("gym_id,margin", [("InvertedPendulum-v5", 10.0), ("LunarLanderContinuous-v3", 50.0)])
def test_beats_random_outside_core16_more(tmp_path, gym_id, margin):
    trace = run(tmp_path, f"gymnasium/{gym_id}", 32)
    assert trace.verified
    assert trace.outcome.final_score > random_mean(gym_id) + margin


def test_history_classifies_edits_and_keeps_the_best_last(cartpole):
    kinds = [i.edit_kind for i in cartpole.history if i.submit_id is not None]
    assert kinds[0] == "synthesis" and "tuning" in kinds
    last = cartpole.history[-1]
    assert last.phase == "confirmation" and last.verdict == "ok"
