"""The release monitor's sequential tests, tested statistically (ole.monitor).

Under no harm a look after every task must not raise the false-rollback rate above alpha;
under a -20 % harm the rollback must come within a few tasks. Seeds are fixed.
"""
from __future__ import annotations

import numpy as np
import pytest

from ole.monitor import AnalysisConfig, look, tasks_to_decision

STREAMS = 300
LOOKS = 120


def _first_harm_crossing(r, cfg) -> bool:
    """Does the harm test ever reach 1/alpha when looked at after every task? (promotion and the
    deadline switched off: only the rollback test's error is measured)."""
    return look(r, cfg).decision == "rollback"


@pytest.mark.parametrize("noise", ["gauss-0.1", "gauss-0.3", "ties-and-gauss", "heavy"])
def test_no_harm_is_rolled_back_at_most_alpha_of_the_time_under_repeated_looks(noise):
    cfg = AnalysisConfig(alpha_promote=1e-12, deadline=10000)  # never promote, never time out
    rng = np.random.default_rng(11)
    rolled = 0
    for _ in range(STREAMS):
        if noise == "gauss-0.1":
            r = rng.normal(0.0, 0.1, LOOKS)
        elif noise == "gauss-0.3":
            r = rng.normal(0.0, 0.3, LOOKS)
        elif noise == "ties-and-gauss":  # half the tasks bit-identical, as often on a real stream
            r = np.where(rng.random(LOOKS) < 0.5, 0.0, rng.normal(0.0, 0.15, LOOKS))
        else:  # skewed, heavy-tailed, mean exactly 0 after clipping: x = +c w.p. 1/2, else -c
            r = rng.choice([-3.0, 3.0], LOOKS)
        rolled += _first_harm_crossing(list(r), cfg)
    assert rolled / STREAMS <= cfg.alpha_rollback + 0.02, rolled / STREAMS


def test_a_twenty_percent_harm_is_rolled_back_within_a_median_of_four_tasks():
    cfg = AnalysisConfig()
    rng = np.random.default_rng(5)
    delays = []
    for _ in range(STREAMS):
        decision, n = tasks_to_decision(list(rng.normal(-0.2, 0.04, 30)), cfg)
        assert decision == "rollback"
        delays.append(n)
    assert float(np.median(delays)) <= 4


def test_promotion_needs_evidence_of_no_harm_and_a_harmful_release_is_rarely_promoted():
    cfg = AnalysisConfig()
    assert tasks_to_decision([0.1] * 20, cfg) == ("promote", 5)
    assert tasks_to_decision([0.0] * 20, cfg)[0] == "promote"  # identical behaviour is not a harm
    rng = np.random.default_rng(3)
    promoted = sum(tasks_to_decision(list(rng.normal(-0.05, 0.1, 40)),
                                     cfg.model_copy(update={"alpha_rollback": 1e-12, "deadline": 10000}))[0] == "promote"
                   for _ in range(STREAMS))
    assert promoted / STREAMS <= cfg.alpha_promote + 0.02


def test_an_open_analysis_at_the_deadline_is_a_rollback_not_a_pass():
    cfg = AnalysisConfig(deadline=4)
    res = look([0.05, -0.05, 0.05, -0.05], cfg)
    assert res.decision == "rollback" and "deadline" in res.reason
    assert look([0.05, -0.05, 0.05], cfg).decision == "hold"


def test_decisions_carry_the_analysis_hash_and_are_pure():
    cfg = AnalysisConfig()
    a, b = look([-0.3, -0.2, -0.25, -0.2], cfg), look([-0.3, -0.2, -0.25, -0.2], cfg)
    assert a == b and a.analysis_hash == cfg.digest and a.decision == "rollback"
    assert AnalysisConfig(clip=0.3).digest != cfg.digest
    # a decided look stays decided: later pairs do not undo a crossing
    assert look([-0.3, -0.2, -0.25, -0.2, 0.25, 0.25], cfg).decision == "rollback"
    with pytest.raises(ValueError):
        AnalysisConfig(clip=0.1, promote_tolerance=0.2)


@pytest.mark.parametrize("noise", ["gauss-0.1", "ties-and-gauss"])
def test_a_widening_gain_at_or_below_min_gain_is_promoted_at_most_alpha_of_the_time(noise):
    """`look(min_gain=)`: the promotion test of a widening canary is a supermartingale under "clipped
    mean r ≤ min_gain", so at exactly min_gain (the worst case) a look after every task promotes at
    most alpha_promote of the streams; a clear gain is promoted, a tie never."""
    cfg = AnalysisConfig(alpha_rollback=1e-12, deadline=10000)  # never roll back, never time out
    gain = 0.02
    rng = np.random.default_rng(17)
    promoted = 0
    for _ in range(STREAMS):
        if noise == "gauss-0.1":
            r = rng.normal(gain, 0.1, LOOKS)
        else:  # half ties; the rest centred so the mean is exactly min_gain
            r = np.where(rng.random(LOOKS) < 0.5, 0.0, rng.normal(2 * gain, 0.1, LOOKS))
        promoted += look(list(r), cfg, min_gain=gain).decision == "promote"
    assert promoted / STREAMS <= cfg.alpha_promote + 0.02, promoted / STREAMS
    assert look([0.15] * 12, cfg, min_gain=gain).decision == "promote"
    assert look([0.0] * LOOKS, cfg, min_gain=gain).decision == "hold"
