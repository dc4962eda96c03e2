"""Anchors: published rows, expert = best agent, our random baseline, normalization."""
from __future__ import annotations

import pytest

from evogym.anchors import AGENTS, PAPER_ROWS, RANDOM, RANDOM_BASELINES, anchors, expert_baseline, normalized
from evogym.envs import CORE16


def test_rows_cover_core16_with_five_columns():
    assert set(PAPER_ROWS) == set(CORE16) == set(RANDOM_BASELINES)
    for row in PAPER_ROWS.values():
        assert list(row) == [*AGENTS, RANDOM]


@pytest.mark.parametrize("slug, best", [
    ("gym/acrobot", -84.6875), ("gym/ant5", 990.149093275651), ("gym/halfcheetah5", 606.15),
    ("gymnasium/roundabout-v0", 10.203), ("gymnasium/FetchPush-v4", -18.15625),
])
def test_expert_is_the_best_agent(slug, best):
    assert expert_baseline(slug) == best


def test_integer_reward_rows_are_multiples_of_one_256th():
    for slug in ("gym/acrobot", "gymnasium/FetchPush-v4", "gymnasium/FetchPickAndPlace-v4"):
        for model, value in PAPER_ROWS[slug].items():
            if (slug, model) != ("gym/acrobot", "MiniMax-M3"):
                assert (value * 256).is_integer(), (slug, model)


def test_normalized_clips_to_0_and_120():
    a = anchors("gym/reacher5")
    assert a is not None and a.expert_baseline == -3.473
    assert normalized("gym/reacher5", a.random_baseline) == 0.0
    assert normalized("gym/reacher5", a.expert_baseline) == pytest.approx(100.0)
    assert normalized("gym/reacher5", -1000.0) == 0.0
    assert normalized("gym/reacher5", 1000.0) == pytest.approx(120.0)
    mid = (a.random_baseline + a.expert_baseline) / 2
    assert normalized("gym/reacher5", mid) == pytest.approx(50.0)


def test_envs_outside_core16_have_no_anchors():
    assert anchors("gymnasium/CartPole-v1") is None
    assert normalized("gymnasium/CartPole-v1", 10.0) is None


def test_random_baselines_are_below_the_expert():
    for slug in CORE16:
        a = anchors(slug)
        assert a.random_baseline < a.expert_baseline, slug


def test_measure_script_smoke(tmp_path):
    """The script that produced RANDOM_BASELINES runs end to end on a tiny budget."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[2] / "experiments" / "measure_random_baselines.py"
    out = tmp_path / "random.json"
    subprocess.run([sys.executable, str(script), "--env", "gym/reacher5", "--n", "2", "--out", str(out)],
                   check=True, capture_output=True, timeout=120)
    (row,) = json.loads(out.read_text())
    assert row["env"] == "gym/reacher5" and row["n"] == 2 and row["mean_length"] == 50.0
    assert row["mean"] < 0


def test_a_core16_env_under_its_gymnasium_name_has_its_anchors():
    """`gymnasium/Acrobot-v1` is `gym/acrobot` (same id, kwargs, step cap; pools do not depend
    on the name): the same held-out returns got a normalized score under one name only."""
    from evogym import anchors
    assert anchors.core16_slug("gymnasium/Acrobot-v1") == "gym/acrobot"
    assert anchors.normalized("gymnasium/Acrobot-v1", -100.0) == anchors.normalized("gym/acrobot", -100.0) is not None
    assert anchors.core16_slug("gymnasium/HalfCheetah-v5") == "gym/halfcheetah5"
    assert anchors.anchors("gymnasium/CartPole-v1") is None  # not a Core16 env under any name
    assert anchors.core16_slug("gymnasium/no-such-env-v0") == "gymnasium/no-such-env-v0"
