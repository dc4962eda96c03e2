"""Hostile policies against the whole host (issue 18): what a policy sends can never fault
the trusted side. Each case submits a policy from `hostile/` through real HTTP on loopback
and asserts the exact verdict and feedback, with the submit's sandbox started cold and
pre-started; after every request the budget holds exactly: charged episodes == episodes
with a summary == what `/info` reports spent.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from evogym.sandbox import Limits

pytestmark = pytest.mark.sandbox

HOSTILE = Path(__file__).with_name("hostile")
FAST = Limits(init_wall_s=20.0, episode_wall_s=30.0, act_wall_s=5.0)
BENIGN = """
class Policy:
    def __init__(self, obs_space, action_space, env_meta):
        pass
    def reset(self, episode_index):
        pass
    def act(self, obs):
        return 2 if obs[5] > 0 else 0
"""


@pytest.fixture(params=["cold", "prestarted"])
def host(live_host, request):
    """live_host with the submit sandboxes started cold or ahead (`Spare`)."""
    return lambda **kw: live_host(prestart=request.param == "prestarted", limits=FAST, **kw)


def hostile(live, case: str, **mode) -> None:
    source = (HOSTILE / case).read_text()
    for name, value in mode.items():
        source = source.replace(f'{name} = "list"', f"{name} = {value!r}")
    live.write_policy(source)


def balanced(live) -> dict:
    """Charged episodes == summarised episodes == what /info reports spent; returns /info."""
    summaries = [json.loads(p.read_text()) for p in sorted((live.workspace / "feedback").glob("submit_*/summary.json"))]
    summarised = sum(s["n_episodes"] for s in summaries)
    events = [json.loads(line) for line in (live.run_dir / "events.jsonl").read_text().splitlines()]
    charged = sum(e["cost"] for e in events if e["event"] == "submit.charge") - \
        sum(e["cost"] for e in events if e["event"] == "submit.refund")
    status, info = live.get("/info")
    assert status == 200
    assert summarised == charged == info["episode_budget"] - info["state"]["remaining_budget"], (summaries, events)
    return info


def episode_errors(live, submit: int, episode: int) -> list[dict]:
    path = live.workspace / "feedback" / f"submit_{submit:03d}" / "episodes" / f"ep_{episode:03d}" / "error.txt"
    return [json.loads(line) for line in path.read_text().splitlines()]


def trajectory(live, submit: int, episode: int) -> list[dict]:
    path = live.workspace / "feedback" / f"submit_{submit:03d}" / "episodes" / f"ep_{episode:03d}" / "trajectory.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.parametrize("mode, names", [
    ("list", "reply names category ['act_error'] for act"),
    ("dict", "reply names category {'a': 1} for act"),
    ("extra", "error reply has fields ['category', 'message', 'seeds', 'traceback']"),
    ("message", "error reply fields have types message=list, traceback=int"),
    ("array", "error reply is a list, not an object"),
])
def test_p24_forged_error_fields_are_the_episodes_protocol_error(host, mode, names):
    live = host(budget=4)
    hostile(live, "p24_forged_error_fields.py", MODE=mode)
    status, body = live.submit([0, 1])
    assert status == 200 and body["status"] == "ok", body
    s = body["summary"]
    assert s["errors"] == [0, 1] and s["episode_lengths"] == [2, 2] and s["returns"] == [-2.0, -2.0]
    for ep in (0, 1):  # each episode got a fresh sandbox and was forged again at its third step
        (error,) = episode_errors(live, 0, ep)
        assert error["category"] == "protocol_error" and names in error["message"], error
    balanced(live)


@pytest.mark.heavy
def test_p25_a_frame_forged_only_in_hidden_evaluation_fails_that_candidate_alone(host):
    live = host(budget=4)
    hostile(live, "p25_forge_in_hidden.py")
    assert live.submit([0])[1]["status"] == "ok"  # benign while the agent watches
    live.write_policy(BENIGN)
    assert live.submit([0])[1]["status"] == "ok"
    balanced(live)
    out = live.finish_and_wait()["outcome"]
    valid = live.host.config.valid_size
    assert out["status"] == "completed" and out["best_submit_index"] == 1, out
    assert out["val_failures"] == {"0": valid - 1, "1": 0} and out["heldout_failures"] == 0
    assert out["final_score"] is not None and out["final_score"] > -300


@pytest.mark.heavy
def test_p26_crashing_at_once_does_not_pay(host):
    live = host(budget=4)
    hostile(live, "p26_crash_for_return.py")
    status, body = live.submit([0, 1])
    s = body["summary"]
    assert status == 200 and body["status"] == "ok" and s["errors"] == [0, 1] and s["returns"] == [0.0, 0.0]
    assert episode_errors(live, 0, 0)[0]["category"] == "policy_crashed"
    out = live.finish_and_wait()["outcome"]
    # in hidden evaluation a failed episode plays on with sampled actions: about random's -499
    assert out["status"] == "completed" and out["val_failures"] == {"0": live.host.config.valid_size}
    assert out["heldout_failures"] == live.host.config.heldout_size and out["final_score"] < -400, out


def test_p27_an_action_nested_800_deep_is_described_not_kept(host):
    live = host(budget=4, max_steps=8)
    hostile(live, "p27_deep_action.py")
    status, body = live.submit([0])
    assert status == 200 and body["status"] == "ok" and body["summary"]["errors"] == []
    rows = trajectory(live, 0, 0)
    assert len(rows) == 8 and all(r["info"]["action_invalid"] for r in rows)
    assert rows[0]["action"].startswith("<not recorded: act() returned a value nested more than 32 levels deep")
    balanced(live)


def test_p28_a_million_floats_per_step_are_described_not_kept(host):
    live = host(budget=4, max_steps=8)
    hostile(live, "p28_huge_action.py")
    status, body = live.submit([0])
    assert status == 200 and body["status"] == "ok" and body["summary"]["episode_lengths"] == [8]
    folder = live.workspace / "feedback" / "submit_000" / "episodes" / "ep_000"
    assert (folder / "trajectory.jsonl").stat().st_size < 16 << 10  # was 40 MB
    assert trajectory(live, 0, 0)[0]["action"].startswith(
        "<not recorded: act() returned an array of shape (1000000,) (float64)")
    balanced(live)


@pytest.mark.heavy
def test_p30_huge_integers_are_described_not_kept(host):
    live = host(budget=4, max_steps=3)
    hostile(live, "p30_huge_integers.py")
    status, body = live.submit([0])
    assert status == 200 and body["status"] == "ok" and body["summary"]["episode_lengths"] == [3]
    folder = live.workspace / "feedback" / "submit_000" / "episodes" / "ep_000"
    assert (folder / "trajectory.jsonl").stat().st_size < 16 << 10  # was ~16 MB per step
    rows = trajectory(live, 0, 0)
    assert rows[0]["action"].startswith("<not recorded: act() returned an integer of 13953 bits")
    assert all(r["info"]["action_invalid"] for r in rows)
    balanced(live)


def test_p29_the_output_note_counts_every_dropped_byte(host):
    live = host(budget=4, max_steps=2)
    hostile(live, "p29_flood_output.py")
    status, body = live.submit([0])
    assert status == 200 and body["status"] == "ok"
    text = (live.workspace / "feedback" / "submit_000" / "episodes" / "ep_000" / "stdout.txt").read_text()
    kept, note = text[:-1].rsplit("\n", 1)
    assert len(kept.encode()) == 64 << 10 and note == f"[truncated {(6 << 20) - (64 << 10)} bytes]", note
    balanced(live)
