"""A Gymnasium env with the facts of EvoPolicyGym main's `RecordingBenchmark` (its public
contract tests' fixture), written for evogym's host: an episode wants the actions 1 then 2;
any other action ends it. It defines its own agent-facing feedback (`evogym_feedback`, the
counterpart of upstream's `Benchmark.feedback`): the score is the number of episodes completed
without a policy failure, the content `{"status": "complete", "completed": N}`, one artifact
`summary.txt` reading `completed=N`. Each completed step pays 0.5, so a completed episode
returns 1.0 and the mean return equals the completion rate.

Served as `gymnasium/recording_env:EvogymRecording-v0` with this folder on PYTHONPATH.
"""
from __future__ import annotations

import gymnasium as gym
from gymnasium import spaces


class RecordingEnv(gym.Env):
    observation_space = spaces.Discrete(3)
    action_space = spaces.Discrete(3)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.steps = 0
        return 0, {}

    def step(self, action):
        self.steps += 1
        if int(action) != self.steps:  # the wrong action: the episode ends, unpaid
            return self.steps, 0.0, True, False, {}
        return self.steps, 0.5, self.steps == 2, False, {}

    @staticmethod
    def evogym_feedback(episodes):
        completed = sum(episode["status"] == "completed" for episode in episodes)
        return {"score": float(completed), "content": {"status": "complete", "completed": completed},
                "artifacts": [{"name": "summary.txt", "media_type": "text/plain",
                               "content": f"completed={completed}\n"}]}


gym.register("EvogymRecording-v0", entry_point=RecordingEnv, max_episode_steps=2)
