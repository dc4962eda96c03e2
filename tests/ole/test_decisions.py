"""The shared Loop Policy decisions (`ole.agents.decisions`), one field at a time.

Each test changes one field and shows the decision change; the agent-level sensitivity
test (`test_loop_policy_sensitivity.py`, over both agents) shows the same fields
changing what each agent does.
"""
from __future__ import annotations

import json

import pytest

from ole.agents import decisions
from ole.agents.decisions import IndexPlan, ProgramResults, Progress
from ole.loop_policy import LoopPolicy


def policy(**changes) -> LoopPolicy:
    data: dict = {}
    for dotted, value in changes.items():
        component, field = dotted.split("__")
        data.setdefault(component, {})[field] = value
    return LoopPolicy.model_validate_json(json.dumps(data))


def results(lp: LoopPolicy, source: str, returns_by_id: dict[int, float], mech: str = "m") -> ProgramResults:
    rec = ProgramResults(source, mech)
    ids = sorted(returns_by_id)
    rec.add(lp, {"status": "ok", "returns": [returns_by_id[i] for i in ids],
                 "mean_return": sum(returns_by_id.values()) / len(ids), "errors": []}, ids, len(source))
    return rec


def test_score_reads_only_the_allowed_fields():
    summary = {"status": "ok", "returns": [1.0, 5.0, 3.0], "mean_return": 9.0, "errors": [1]}
    assert decisions.submit_score(policy(), summary) == pytest.approx(5 / 3)  # the crash counts as the worst
    assert decisions.submit_score(policy(observation__summary_fields=["status", "returns"]), summary) == 3.0
    assert decisions.submit_score(policy(observation__summary_fields=["status", "mean_return"]), summary) == 9.0
    assert decisions.submit_score(policy(), {"status": "init_error", "returns": None}) is None


def test_paired_test_needs_the_improvement_to_clear_its_standard_error():
    lp = policy()
    inc = results(lp, "a", {0: -94, 1: -85, 2: -113, 3: -95})
    cand = results(lp, "b", {0: -95, 1: -76, 2: -93, 3: -95})
    cmp = decisions.compare(lp, cand, inc)
    assert cmp.paired and cmp.delta == pytest.approx(7.0) and cmp.stderr == pytest.approx(4.88, abs=0.01)
    assert decisions.beats(lp, cand, inc)
    assert not decisions.beats(policy(verification__stderr_multiple=2.0), cand, inc)
    assert not decisions.beats(policy(verification__margin=0.1), cand, inc)  # 7 < 0.1 * 96.75


def test_unmatched_comparison_uses_the_two_means():
    lp = policy(verification__matched_comparison=False, verification__stderr_multiple=0.0)
    inc = results(lp, "a", {0: 10.0, 1: 0.0})
    cand = results(lp, "b", {0: 9.0, 1: 2.0})  # paired mean +0.5; means 5.5 vs 5
    assert not decisions.compare(lp, cand, inc).paired
    assert decisions.beats(lp, cand, inc)
    with_err = policy(verification__matched_comparison=False)
    assert not decisions.beats(with_err, cand, inc)  # 0.5 against combined stderrs of about 6


def test_without_returns_the_test_compares_submit_means():
    lp = policy(observation__summary_fields=["status", "mean_return"])
    inc, cand = ProgramResults("a", "m"), ProgramResults("b", "m")
    inc.add(lp, {"status": "ok", "mean_return": 1.0}, [0, 1], 0)
    cand.add(lp, {"status": "ok", "mean_return": 1.5}, [0, 1], 1)
    cmp = decisions.compare(lp, cand, inc)
    assert not cmp.paired and cmp.stderr == 0.0 and cmp.passed


@pytest.mark.parametrize("mode, first, second", [
    ("matched", "same", "same"), ("fresh", "new", "new"), ("mixed", "half", "half")])
def test_index_selection(mode, first, second):
    plan = IndexPlan(policy(action__index_selection=mode), 1024, seed=3)
    a, b = plan.pick(4), plan.pick(4)
    shared = len(set(a) & set(b))
    assert shared == {"same": 4, "new": 0, "half": 2}[second]
    retest = plan.retest(4)
    assert not set(retest) & set(a + b)  # re-tests are always on ids not seen yet


def test_index_plan_depends_on_the_agent_seed():
    lp = policy()
    assert IndexPlan(lp, 1024, 1).pick(4) != IndexPlan(lp, 1024, 2).pick(4)


def test_phase_budget_and_fits():
    lp = policy()
    pb = decisions.phase_budget(lp, 128)
    assert (pb.synthesis, pb.tuning, pb.confirmation, pb.reserve) == (38, 71, 19, 0)
    assert decisions.fits(pb, "tuning", {"synthesis": 30}, 79) and not decisions.fits(pb, "tuning", {"synthesis": 30}, 80)
    no_tuning = decisions.phase_budget(policy(planning__phases=["synthesis", "confirmation"]), 128)
    assert no_tuning.tuning == 0 and no_tuning.synthesis + no_tuning.confirmation == 128
    early = decisions.phase_budget(policy(stopping__mode="finish_early", stopping__reserve_episodes=8), 128)
    assert early.reserve == 8 and early.synthesis + early.tuning + early.confirmation == 120


def test_submit_size():
    lp = policy()
    assert decisions.submit_size(lp, 100, 1, 32) == 4
    assert decisions.submit_size(policy(action__episodes_per_submit=64), 100, 1, 32) == 32
    assert decisions.submit_size(lp, 5, 2, 32) == 5  # spend_all takes a tail smaller than the minimum
    early = policy(stopping__mode="finish_early", stopping__reserve_episodes=3)
    assert decisions.submit_size(early, 5, 1, 32) == 2 and decisions.submit_size(early, 3, 1, 32) == 0


@pytest.mark.parametrize("start, retries, expected", [
    ("retry", 2, ["retry", "retry", "retry", "revert", "revert", "revert", "restructure", "restructure"]),
    ("retry", 0, ["retry", "revert", "restructure", "restructure"]),
    ("revert", 2, ["revert", "revert", "revert", "restructure"]),
    ("restructure", 1, ["restructure", "restructure", "restructure"]),
])
def test_error_escalation_ladder(start, retries, expected):
    lp = policy(recovery__on_error_verdict=start, recovery__max_retries=retries)
    assert [decisions.error_action(lp, n) for n in range(1, len(expected) + 1)] == expected


def test_plateau_and_patience_count_candidates():
    lp = policy(planning__plateau_submits=2, stopping__mode="finish_early", stopping__patience_submits=3)
    progress = Progress()
    progress.candidate(False)
    assert decisions.plateau_action(lp, progress) is None
    progress.candidate(False)
    assert decisions.plateau_action(lp, progress) == "next_phase"
    progress.new_phase()
    assert decisions.plateau_action(lp, progress) is None and not decisions.should_finish(lp, progress, 50)
    progress.candidate(False)
    assert decisions.should_finish(lp, progress, 50)
    assert not decisions.should_finish(policy(), progress, 50)  # spend_all never finishes early
    progress.candidate(True)
    assert progress.run_stale == 0 and not decisions.should_finish(lp, progress, 50)


def test_run_length_counts_stated_for_a_reference_budget_are_the_same_share_at_32_and_128():
    lp = policy(planning__plateau_submits=3, stopping__mode="finish_early", stopping__patience_submits=5,
                stopping__reserve_episodes=2, budget__reference_episodes=32)
    at32, at128 = decisions.for_budget(lp, 32), decisions.for_budget(lp, 128)
    for path in ("planning.plateau_submits", "stopping.patience_submits", "stopping.reserve_episodes"):
        comp, name = path.split(".")
        small, large = getattr(getattr(at32, comp), name), getattr(getattr(at128, comp), name)
        assert small / 32 == large / 128, path  # the same share of the run
    assert (at32.stopping.patience_submits, at128.stopping.patience_submits) == (5, 20)
    assert at128.budget.reference_episodes is None and decisions.for_budget(at128, 128) == at128  # applied once
    # patience read at 128: 19 non-improving candidates do not finish the run, the 20th does
    progress = Progress()
    for _ in range(19):
        progress.candidate(False)
    assert not decisions.should_finish(at128, progress, 100) and decisions.should_finish(at32, progress, 100)
    progress.candidate(False)
    assert decisions.should_finish(at128, progress, 100)
    # sample sizes are not shares: a submit is the same number of episodes at any budget
    assert at128.action.episodes_per_submit == at32.action.episodes_per_submit == lp.action.episodes_per_submit
    # without a reference every count is used as written (the seed's choice)
    assert decisions.for_budget(policy(stopping__patience_submits=5), 128).stopping.patience_submits == 5
    assert decisions.for_budget(lp, 8).planning.plateau_submits == 1  # never below one candidate


def test_step_factor_reads_the_edit_log_window():
    progress = Progress(edits=[True, True, True] + [False] * 3)
    assert decisions.step_factor(policy(), progress) == pytest.approx(1.0 / 1.0 * __import__("math").exp(0.375))
    assert decisions.step_factor(policy(memory__edit_log_size=3), progress) < 1.0
    assert decisions.step_factor(policy(memory__edit_log_size=0), progress) == 1.0


def test_revert_target_follows_a_restructure():
    lp = policy()
    inc = results(lp, "a", {0: 5.0}, mech="affine")
    other = results(lp, "b", {0: 1.0}, mech="pump")
    assert decisions.revert_target(inc, [inc, other], "affine") is inc
    assert decisions.revert_target(inc, [inc, other], "pump") is other
    assert decisions.revert_target(inc, [inc], "pump") is inc


def test_ranking_keeps_top_k_by_mean():
    lp = policy()
    progs = [results(lp, s, {0: v}) for s, v in (("a", 1.0), ("b", 3.0), ("c", 2.0))]
    assert [p.source for p in decisions.ranked(progs, 2)] == ["b", "c"]


def test_racing_screens_then_keeps_the_better_half_that_matches_the_incumbent():
    assert decisions.screen_size(policy(), 4) == 4  # off by default
    assert decisions.screen_size(policy(action__screen_episodes=1), 4) == 1
    assert decisions.screen_size(policy(action__screen_episodes=4), 4) == 4
    assert decisions.survivors([1.0, 5.0, None, 3.0, 2.0]) == [1, 3]
    assert decisions.survivors([1.0, 5.0, None, 3.0, 2.0], reference=4.0) == [1]
    assert decisions.survivors([2.0], reference=2.5) == [] and decisions.survivors([2.0]) == [0]


def test_synthesis_submits_split_the_share_over_the_mechanisms():
    lp = policy()
    assert decisions.synthesis_size(lp, decisions.phase_budget(lp, 128), 128, 1, 128) == 4  # 38 // 4 = 9, capped
    assert decisions.synthesis_size(lp, decisions.phase_budget(lp, 32), 32, 1, 32) == 2  # 10 // 4
    assert decisions.synthesis_size(lp, decisions.phase_budget(lp, 8), 8, 1, 8) == 1
    one = policy(planning__max_mechanisms=1)
    assert decisions.synthesis_size(one, decisions.phase_budget(one, 32), 32, 1, 32) == 4
