"""EvoPolicyGym main's program ABI beside ours (issue 31): `policy.py` may define
`make_policy(context)` returning an object with `act(observation)`, a fresh one per episode,
as upstream's programs do; `class Policy(obs_space, action_space, env_meta)` keeps working.
Real sandboxed policy processes, real submits over loopback HTTP."""
from __future__ import annotations

import json

import pytest

from evogym.sandbox import PolicyProcess, validate_snapshot

COUNTER = """
class CounterPolicy:
    def __init__(self):
        self.calls = 0

    def act(self, observation):
        self.calls += 1
        return self.calls


def make_policy(context):
    return CounterPolicy()
"""

CONTEXT = """
import json

class Echo:
    def __init__(self, context):
        self.text = json.dumps({"observation_space": context.observation_space, "action_space": context.action_space,
                                "metadata_env": context.metadata["env"], "parameters": dict(context.environment_parameters),
                                "policy_seed": context.policy_seed}, sort_keys=True)

    def act(self, observation):
        print(self.text, type(observation).__name__)
        return 0


def make_policy(context):
    return Echo(context)
"""

# upstream's own programs define a `class Policy` of their shape (no constructor arguments, no
# reset) beside `make_policy`: the entrypoint is make_policy (upstream's test_public_contract)
UPSTREAM_SHAPED = """
class Policy:
    def act(self, observation):
        return 1


def make_policy(context):
    return Policy()
"""


def write(tmp_path, source: str):
    code = tmp_path / "ckpt"
    code.mkdir()
    (code / "policy.py").write_text(source)
    return code


def test_make_policy_gets_a_fresh_policy_each_episode(tmp_path):
    with PolicyProcess(write(tmp_path, COUNTER), isolation="none") as proc:
        assert proc.start({}, {}, {}).ok
        for episode in range(2):
            assert proc.reset(episode).ok
            assert [proc.act([0]).value for _ in range(3)] == [1, 2, 3]  # the counter starts again


def test_make_policy_wins_over_an_upstream_shaped_class_policy(tmp_path):
    with PolicyProcess(write(tmp_path, UPSTREAM_SHAPED), isolation="none") as proc:
        assert proc.start({"type": "Box"}, {"type": "Discrete", "n": 2}, {"env": "x"}).ok  # Policy() would raise
        assert proc.reset(0).ok and proc.act([0.0]).value == 1


@pytest.mark.sandbox
def test_make_policy_failures_are_the_episode_s_own(tmp_path):
    source = "def make_policy(context):\n    raise RuntimeError('no policy today')\n"
    with PolicyProcess(write(tmp_path, source), isolation="bwrap") as proc:
        assert proc.start({}, {}, {}).ok  # importing the module succeeds
        result = proc.reset(0)
    assert (result.ok, result.category) == (False, "reset_error") and "no policy today" in result.message


@pytest.mark.parametrize("source, ok", [
    ("def make_policy(context):\n    return None\n", True),
    ("class Policy:\n    pass\n", True),
    ("make_policy = lambda context: None\n", False),  # an assignment does not count, as for Policy
    ("def helper():\n    pass\n", False),
])
def test_the_static_check_accepts_either_entrypoint(tmp_path, source, ok):
    result = validate_snapshot(write(tmp_path, source))
    assert (result is None) is ok, result
    if not ok:
        assert result.category == "missing_policy" and "def make_policy" in result.message


def test_a_make_policy_program_is_submitted_and_scored(live_host):
    live = live_host(budget=4, prestart=False, isolation="none")
    live.write_policy(CONTEXT)
    status, body = live.submit([0, 1])
    assert status == 200 and body["status"] == "ok" and body["summary"]["n_episodes"] == 2
    episode = live.workspace / "feedback" / "submit_000" / "episodes" / "ep_000"
    printed = (episode / "stdout.txt").read_text().splitlines()[0]
    seen, carrier = printed.rsplit(" ", 1)
    info = live.host.info()
    assert json.loads(seen) == {"observation_space": info["env_meta"]["obs_space"],
                                "action_space": info["env_meta"]["action_space"], "metadata_env": "gym/acrobot",
                                "parameters": {}, "policy_seed": 0}
    assert carrier == "list"  # upstream's carriers: plain lists, never numpy arrays
    doc = live.finish_and_wait()
    assert doc["outcome"]["status"] == "completed" and doc["final_submission_id"] == "submit_000"
