"""One carrier for a chosen version, one pair-statistics object, one verdict vocabulary, one wall-time name."""
from __future__ import annotations

import json

import pytest
from pydantic import ValidationError as PydanticValidationError

from ole.bundle import Bundle
from ole.chosen import ChosenVersion
from ole.gate import GateConfig, compute_stats
from ole.jobs import EvalJob
from ole.loop_policy import LoopPolicy
from ole.paired import Pair, RunResult, pair_stats
from ole.trace import Outcome, RunCondition, SelectionRecord, TaskSpec
from ole.verdicts import verdict_of

BUNDLE = Bundle(name="coder", loop_policy=LoopPolicy())
TASK, COND = TaskSpec(env="gym/acrobot", budget=8, pool_seed=1), RunCondition(host="builtin")


def test_a_job_carries_the_chosen_version():
    chosen = ChosenVersion("coder@2", BUNDLE, SelectionRecord(ref="coder@2", scope="general", reason="routed"))
    job = EvalJob(chosen=chosen, task=TASK, condition=COND, runs_root="r")
    assert job.chosen is chosen and job.bundle is BUNDLE and job.bundle_ref == "coder@2"
    assert job.bundle_hash == BUNDLE.content_hash and chosen.version == 2 and chosen.name == "coder"
    with pytest.raises(PydanticValidationError):  # the bare keywords of before the carrier are gone
        EvalJob(bundle_ref="coder@2", bundle=BUNDLE, task=TASK, condition=COND, runs_root="r")


def _pairs(rs: list[float]) -> list[Pair]:
    def run(i: int, q: float) -> RunResult:
        return RunResult(trace_id=f"t{i}", bundle_hash="h", q=q, q_source="normalized", status="completed",
                         verified=True, episodes=8, wall_s=2.0)
    return [Pair(task=TASK.model_copy(update={"pool_seed": i}), condition=COND, family="classic",
                 champion=run(i, 50.0), challenger=run(i, 50.0 * (1 + r)), delta=50.0 * r, r=r, failure="none")
            for i, r in enumerate(rs)]


@pytest.mark.heavy
@pytest.mark.parametrize("n", [3, 4, 5, 6, 7, 8, 13])
def test_pair_stats_are_the_gates_statistics(n):
    """One CVaR (the mean of the worst ceil(cvar_alpha * n)), one mean, for the ranking and the gate."""
    pairs = _pairs([0.1 * ((7 * i) % n) - 0.2 for i in range(n)])
    cfg = GateConfig()
    base, gate = pair_stats(pairs, cfg.cvar_alpha), compute_stats(pairs, cfg)
    rs = [p.r for p in pairs]
    worst = sorted(rs)[: -(-n // 4)]
    wins = sum(1.0 if r > 0 else 0.5 if r == 0 else 0.0 for r in rs) / n
    for stats in (base, gate):  # each against numbers computed here, not against the other
        assert stats.n_pairs == n and stats.mean_r == pytest.approx(sum(rs) / n)
        assert stats.cvar == pytest.approx(sum(worst) / len(worst)) and stats.win_rate == pytest.approx(wins)
    point = base.objectives()
    assert point["mean_r"] == base.mean_r and point["cost"] == 1.0 and point["submits"] == 1.0 and "wall" not in point


def test_verdicts_are_read_from_every_stored_form():
    assert verdict_of({"verdict": "indecisive", "accepted": False}) == "indecisive"
    assert verdict_of({"accepted": True}) == "release" and verdict_of({"accepted": False}) == "reject"
    assert verdict_of({"decision": "accept"}) == "release" and verdict_of({"decision": "reject"}) == "reject"
    assert verdict_of({"score": 1}) is None


def test_measured_wall_time_is_wall_s_and_old_traces_still_read():
    doc = {"status": "completed", "final_score": 1.0, "normalized_score": None, "best_val_score": 1.0,
           "best_submit_index": 0, "episodes_used": 8, "n_submits": 2, "wall_time_s": 3.5}
    old = Outcome.model_validate_json(json.dumps(doc))
    assert old.wall_s == 3.5 and "wall_time_s" not in old.model_dump()
    assert Outcome.model_validate(old.model_dump()) == old


def test_submits_are_a_counted_cost_and_wall_is_checked_against_the_gate_bound():
    """Submits are counted per pair (old results without the count are left out of the ratio);
    the wall ratio is checked against the gate's bound, by the search's feasibility and the gate."""
    from ole.gate import decide, holds_tail_and_cost

    pairs = _pairs([0.2] * 8)
    slow = [p.model_copy(update={"challenger": p.challenger.model_copy(update={"wall_s": 6.0, "submits": 6}),
                                 "champion": p.champion.model_copy(update={"submits": 3 if i else 0})})
            for i, p in enumerate(pairs)]
    s = pair_stats(slow)
    assert s.cost_ratio["wall_s"] == 3.0 and s.cost_ratio["submits"] == 2.0  # pair 0 (champion 0 submits) left out
    assert s.objectives()["submits"] == 2.0 and "wall" not in s.objectives()
    cfg = GateConfig(min_families=1)  # the pairs are of one family: judged, so the cost bound shows
    assert not holds_tail_and_cost(s, cfg) and holds_tail_and_cost(pair_stats(pairs), cfg)
    d = decide(slow, cfg, champion="c@1", challenger="c@2")
    assert d.verdict == "reject" and any("wall_s ratio 3.000" in r for c in d.criteria for r in c.reasons)
    # a bound on submits, where a user sets one, is checked like any resource
    assert not holds_tail_and_cost(pair_stats(pairs[1:2] + slow[1:]), GateConfig(cost_kappa={"submits": 0.5}))
