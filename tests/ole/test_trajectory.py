"""Both agents read an inspected step's observation wherever the host stored it.

The episode folders are written by the host's own writer (`evogym.feedback.episode_files`),
so inline, `observations.npy` and `observations.npz` storage follow the reference's rule
(§3.5) exactly as in a real run.
"""
from __future__ import annotations

import json

import numpy as np
import pytest

from evogym.feedback import episode_files, write_episode
from evogym.recording import EpisodeData
from ole.agents import trajectory
from ole.agents.builtin.feedback import read_submit
from ole.agents.prompts import render_feedback
from ole.loop_policy import LoopPolicy, Observation


def _episode(tmp_path, observations, name="ep_000"):
    steps = [([0.5 * t], -float(t), False, t == len(observations) - 1, {}, False) for t in range(len(observations))]
    directory = tmp_path / name
    write_episode(episode_files(EpisodeData(observations=observations, steps=steps)), directory)
    return directory


def _rows(lines):
    return [json.loads(line) for line in lines]


def test_inline_lines_come_back_exactly_as_stored(tmp_path):
    ep = _episode(tmp_path, [[float(t), 1.0] for t in range(10)])  # 160 bytes: inline
    assert not (ep / "observations.npy").exists()
    stored = (ep / "trajectory.jsonl").read_text().splitlines()
    assert trajectory.tail_lines(ep, 4) == stored[-4:]
    assert trajectory.tail_lines(ep, 0) == []


def test_externalized_rows_fill_the_null_observations(tmp_path):
    obs = np.arange(600 * 3, dtype=np.float64).reshape(600, 3) / 7.0  # 14 400 bytes: observations.npy
    ep = _episode(tmp_path, obs)
    assert (ep / "observations.npy").is_file()
    assert all(json.loads(line)["obs"] is None for line in (ep / "trajectory.jsonl").read_text().splitlines())
    rows = _rows(trajectory.tail_lines(ep, 5))
    assert [r["t"] for r in rows] == [595, 596, 597, 598, 599]
    assert all(r["obs"] == pytest.approx(obs[r["t"]].tolist()) for r in rows)
    assert rows[-1]["action"] == [0.5 * 599] and rows[-1]["truncated"] is True


def test_dict_observations_come_back_as_dicts(tmp_path):
    obs = [{"image": np.full((7, 7, 3), t % 5, np.uint8), "direction": t % 4} for t in range(40)]
    ep = _episode(tmp_path, obs)  # 40 x 148 bytes: observations.npz
    assert (ep / "observations.npz").is_file()
    last = _rows(trajectory.tail_lines(ep, 1))[0]
    assert last["t"] == 39 and last["obs"]["direction"] == 3 and np.array(last["obs"]["image"]).shape == (7, 7, 3)


def test_a_character_budget_keeps_the_last_lines_that_fit(tmp_path):
    ep = _episode(tmp_path, np.ones((600, 3)))
    three = sum(len(line) for line in trajectory.tail_lines(ep, 3))
    got = trajectory.tail_lines(ep, 50, max_chars=three + 1)
    assert [r["t"] for r in _rows(got)] == [597, 598, 599]
    assert trajectory.tail_lines(ep, 50, max_chars=0) == []


def test_frames_too_large_for_the_budget_leave_the_window_as_stored(tmp_path):
    frames = np.zeros((30, 96, 96, 3), np.uint8)  # a camera: ~100,000 characters per step as JSON
    ep = _episode(tmp_path, frames)
    stored = (ep / "trajectory.jsonl").read_text().splitlines()
    assert trajectory.tail_lines(ep, 10, max_chars=12000) == stored[-10:]  # actions and rewards still read
    assert np.array(_rows(trajectory.tail_lines(ep, 1))[0]["obs"]).shape == (96, 96, 3)  # no budget: filled


def test_damaged_or_short_observation_files_leave_obs_null(tmp_path):
    ep = _episode(tmp_path, np.ones((600, 3)))
    (ep / "observations.npy").write_bytes(b"not an array")
    assert all(r["obs"] is None for r in _rows(trajectory.tail_lines(ep, 3)))
    ep2 = _episode(tmp_path, np.ones((600, 3)), "ep_001")
    np.save(ep2 / "observations.npy", np.ones((2, 3)))  # fewer rows than steps
    assert all(r["obs"] is None for r in _rows(trajectory.tail_lines(ep2, 3)))


def _submit(tmp_path, obs):
    sub = tmp_path / "submit_000"
    (sub / "episodes").mkdir(parents=True)
    _episode(sub / "episodes", obs)
    summary = {"status": "ok", "n_episodes": 1, "first_global_episode": 0, "returns": [-1.0], "mean_return": -1.0}
    (sub / "summary.json").write_text(json.dumps(summary))
    return sub, summary


def test_the_builtin_agent_reads_externalized_observations_as_samples(tmp_path):
    obs = np.cumsum(np.ones((600, 3)), axis=0)
    sub, summary = _submit(tmp_path, obs)
    digest = read_submit(LoopPolicy(), sub, summary)
    assert len(digest.samples) == 1
    sample = digest.samples[0]
    assert sample.obs.shape == (50, 3) and np.allclose(sample.obs, obs[-50:])  # trajectory_window 50
    # the Observation component still bounds what is read
    tiny = LoopPolicy.model_validate({"observation": {"max_context_chars": 500}})
    assert sum(len(s.obs) for s in read_submit(tiny, sub, summary).samples) < 5


def test_the_llm_prompt_shows_externalized_observations(tmp_path):
    sub, _ = _submit(tmp_path, np.full((600, 3), 2.5))
    text = render_feedback(sub, Observation(worst_k_episodes=1, trajectory_window=2))
    assert "last 2 of 600 steps" in text and "t=599 [2.5,2.5,2.5] -> " in text and "(external)" not in text
