"""The transfer rule (`ole.transfer`): which regions of task features a released change may widen to."""
from __future__ import annotations

import pytest

from ole.bundle import Applicability
from ole.paired import RunResult, make_pair
from ole.registry.scopes import features_of
from ole.trace import RunCondition, TaskSpec
from ole.transfer import TransferConfig, decide_transfer

CFG = TransferConfig()
BASE = Applicability(hosts=("builtin",))
# four continuous-control envs of one family, one action dimension band
BOX = ("gymnasium/Pendulum-v1", "gymnasium/InvertedDoublePendulum-v5", "gymnasium/InvertedPendulum-v5",
       "gymnasium/MountainCarContinuous-v0")


def _pairs(env: str, rs, budgets=(32, 128)):
    out = []
    for b in budgets:
        for i, r in enumerate(rs):
            champ = RunResult(trace_id=f"c{env}{b}{i}", bundle_hash="a", q=50.0, q_source="normalized",
                              status="completed", verified=True, episodes=b, wall_s=1.0)
            chall = champ.model_copy(update={"trace_id": f"x{env}{b}{i}", "bundle_hash": "b", "q": 50.0 * (1 + r)})
            out.append(make_pair(TaskSpec(env=env, budget=b, pool_seed=221 + i), RunCondition(host="builtin"),
                                 "generic", champ, chall))
    return out


def _decide(effects: dict[str, list[float]], search: dict[str, list[float]] | None = None):
    pairs = {"transfer": [p for env, rs in effects.items() for p in _pairs(env, rs)],
             "search": [p for env, rs in (search or {}).items() for p in _pairs(env, rs)]}
    return decide_transfer(pairs, CFG, BASE, (32, 128), features_of)


def test_a_region_of_material_gains_is_claimed_with_its_stated_bound():
    d = _decide({BOX[0]: [0.1], BOX[1]: [0.06], BOX[2]: [0.0]})
    assert len(d.regions) == 1
    region = d.regions[0]
    assert set(region.envs) == set(BOX[:3]) and set(region.gains) == set(BOX[:2]) and region.ties == (BOX[2],)
    assert "act=box" in region.scope and "budget=32-128" in region.scope and "envs=" not in region.scope
    assert 0.0 < region.harm_ucb < 1.0 and "Clopper-Pearson" in region.statement()


def test_an_all_tie_region_is_never_claimed():
    d = _decide({env: [0.0] for env in BOX})
    assert d.regions == () and d.candidates == ()


def test_noise_sized_gains_are_ties_not_evidence():
    """+0.000 and +0.001 are no gain (the first fresh make evolve claimed a region on them)."""
    d = _decide({BOX[0]: [0.0004], BOX[1]: [0.001], BOX[2]: [0.015], BOX[3]: [0.061]})
    assert [r.verdict for r in sorted(d.envs, key=lambda r: r.env)].count("gain") == 1
    assert d.regions == ()


@pytest.mark.parametrize("loser_role", ["transfer", "search"])
def test_a_region_holding_a_losing_env_of_any_role_is_never_claimed(loser_role):
    gains = {BOX[0]: [0.1], BOX[1]: [0.1], BOX[2]: [0.1]}
    loser = {BOX[3]: [-0.35]}
    d = _decide({**gains, **loser}, None) if loser_role == "transfer" else _decide(gains, loser)
    assert BOX[3] in d.excluded
    from ole.applicability import parse_scope
    f = features_of(BOX[3])
    alone = _decide(gains).regions  # without the loss, the three gains claim a span that holds the loser
    assert alone and any(parse_scope(r.scope).admits_env(BOX[3], f.family, f.obs, f.act, f.action_dim, f.horizon)
                         for r in alone)
    for region in d.regions:  # whatever is claimed from the three gains never admits the env that lost
        assert BOX[3] not in region.envs
        assert not parse_scope(region.scope).admits_env(BOX[3], f.family, f.obs, f.act, f.action_dim, f.horizon)


def test_a_recorded_decision_is_judged_again_under_another_rule_from_its_own_cells():
    from ole.transfer import rejudge
    effects = {BOX[0]: [0.0004], BOX[1]: [0.001], BOX[2]: [0.061]}
    pairs = {"transfer": [p for env, rs in effects.items() for p in _pairs(env, rs)]}
    lax = decide_transfer(pairs, TransferConfig(min_gain=0.0), BASE, (32, 128), features_of)
    assert len(lax.regions) == 1  # any positive mean counted as a gain: three "gains"
    strict = rejudge(lax, CFG, BASE, (32, 128))
    assert strict.regions == () and strict == _decide(effects)
