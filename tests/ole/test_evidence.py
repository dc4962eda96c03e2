"""Evidence detectors on synthetic traces: each fires on its pattern and stays quiet otherwise."""
from __future__ import annotations

import pytest

from ole import evidence
from synthetic import make_trace

STEADY = [10.0, 11.0, 12.0, 13.0, 14.0, 15.0, 16.0, 17.0]


def _detectors(traces):
    return {e.detector for e in evidence.extract(traces)}


def test_a_steady_clean_run_yields_no_negative_evidence():
    items = evidence.extract([make_trace("a", STEADY)])
    assert [e for e in items if e.direction == "-" and e.detector != "late_improvement"] == []


def test_failed_verdicts_waste_budget():
    t = make_trace("a", [10.0, None, None, 12.0, None, 13.0])
    items = [e for e in evidence.extract([t]) if e.detector == "failed_verdict_waste"]
    assert len(items) == 1 and items[0].component == "recovery" and items[0].delta == pytest.approx(-0.5)
    assert items[0].trace_ids == ("a",)


def test_regression_not_reverted():
    t = make_trace("a", [10.0, 20.0, 12.0, 11.0, 21.0], kinds=["synthesis", "tuning", "tuning", "tuning", "tuning"])
    assert "unreverted_regression" in _detectors([t])
    reverted = make_trace("b", [10.0, 20.0, 12.0, 20.0, 21.0], kinds=["synthesis", "tuning", "tuning", "revert", "tuning"])
    assert "unreverted_regression" not in _detectors([reverted])


def test_plateau_and_early_stop():
    t = make_trace("a", [10.0, 20.0, 15.0, 16.0, 14.0, 15.0, 12.0, 13.0])
    found = _detectors([t])
    assert {"plateau", "early_stop"} <= found
    assert not {"plateau", "early_stop"} & _detectors([make_trace("b", STEADY)])


def test_late_improvement():
    assert "late_improvement" in _detectors([make_trace("a", STEADY)])
    assert "late_improvement" not in _detectors([make_trace("b", [10.0, 20.0, 15.0, 16.0, 14.0, 15.0])])


def test_heldout_gap():
    assert "heldout_gap" in _detectors([make_trace("a", STEADY, final=5.0)])
    assert "heldout_gap" not in _detectors([make_trace("b", STEADY, final=16.5)])


def test_synthesis_vs_tuning_success_rates():
    means = [10.0, 12.0, 14.0, 16.0, 15.0, 14.0, 13.0, 12.0]
    kinds = ["synthesis"] * 4 + ["tuning"] * 4
    items = [e for e in evidence.extract([make_trace("a", means, kinds=kinds)]) if e.detector == "edit_success"]
    assert len(items) == 1 and items[0].delta == pytest.approx(1.0)
    assert "budget.synthesis_fraction:up" in items[0].hints


def test_verification_miss():
    t = make_trace("a", STEADY, best_submit=2)
    assert "verification_miss" in _detectors([t])
    assert "verification_miss" not in _detectors([make_trace("b", STEADY)])


def test_unverified_traces_never_enter_and_ids_are_deterministic():
    bad = make_trace("x", [10.0, None, None, None], verified=False)
    assert evidence.extract([bad]) == []
    traces = [make_trace("a", [10.0, None, None, 12.0]), make_trace("b", [10.0, 20.0, 12.0, 11.0])]
    first, second = evidence.extract(traces), evidence.extract(list(reversed(traces)))
    assert first == second and len({e.evidence_id for e in first}) == len(first)


# ----- budget structure (roles, base programs, search rounds) ----------------------------------------
from ole.trace import Iteration  # noqa: E402


def _with_roles(tid, rows, *, best_submit=None, final=None):
    """rows: (phase, role, mean, episodes, base_submit, search_round) per submit."""
    t = make_trace(tid, [r[2] for r in rows], best_submit=best_submit, final=final)
    history = tuple(Iteration(index=i, phase=ph, observation_digest="0" * 64, edit_kind="tuning", submit_id=i,
                              verdict="ok", mean_return=m, episodes_charged=e, role=role, base_submit=base,
                              search_round=rnd)
                    for i, (ph, role, m, e, base, rnd) in enumerate(rows))
    return t.model_copy(update={"history": history})


SEED_LIKE = [("synthesis", "candidate", -135.0, 4, None, None), ("synthesis", "candidate", -500.0, 4, None, None),
             ("tuning", "candidate", -112.0, 4, 0, 0), ("tuning", "retest", -131.0, 4, 2, None),
             ("tuning", "reference", -217.0, 4, 0, None), ("tuning", "candidate", -165.0, 4, 0, 0),
             ("confirmation", "confirm", -159.0, 4, 5, None), ("confirmation", "confirm", -239.0, 4, 3, None)]
"""The seed bundle's submit sequence at 32 episodes on acrobot: tuning never completes a round."""


def test_tuning_rounds_reports_the_budget_structure_with_targets():
    items = [e for e in evidence.extract([_with_roles("a", SEED_LIKE)]) if e.detector == "tuning_rounds"]
    assert len(items) == 1 and items[0].component == "action"
    hints = dict(h.split("=") for h in items[0].hints if "=" in h)
    assert int(hints["action.episodes_per_submit"]) == 2 and 2 <= int(hints["action.population"]) <= 8
    rounds = [("synthesis", "candidate", 1.0, 1, None, None)] + [
        ("tuning", "candidate", 1.0 + i, 1, 0, i // 2) for i in range(10)]
    assert "tuning_rounds" not in _detectors([_with_roles("b", rounds)])  # 4 rounds completed
    assert "tuning_rounds" not in _detectors([make_trace("c", STEADY)])  # no roles recorded: not guessed


def test_tuning_rounds_hint_fits_its_own_arithmetic():
    """population x submit size x (TARGET_ROUNDS + 1) rounds fits the tuning episodes the run had."""
    for tuning_submits in (2, 3, 4, 6, 9):  # 8..36 tuning episodes at 4 per submit
        rows = [("synthesis", "candidate", 1.0, 4, None, None)] + [
            ("tuning", "candidate", 1.0 + i, 4, 0, 0) for i in range(tuning_submits)]
        items = [e for e in evidence.extract([_with_roles("t", rows)]) if e.detector == "tuning_rounds"]
        hints = dict(h.split("=") for h in items[0].hints if "=" in h)
        size, population = int(hints["action.episodes_per_submit"]), int(hints["action.population"])
        tuning = 4 * tuning_submits
        assert 1 <= size <= 2 and int(hints["verification.retest_episodes"]) <= size
        assert population * size * (evidence.TARGET_ROUNDS + 1) <= max(tuning, 2 * (evidence.TARGET_ROUNDS + 1))
    # 12 tuning episodes (the seed at 32 on the default workload): only 1-episode submits fit the rounds
    rows = [("tuning", "candidate", 1.0 + i, 4, 0, 0) for i in range(3)]
    hints = [e for e in evidence.extract([_with_roles("u", rows)]) if e.detector == "tuning_rounds"][0].hints
    assert "action.episodes_per_submit=1" in hints and "action.population=3" in hints


def test_verification_overhead_weighs_cost_against_overturned_retests():
    items = [e for e in evidence.extract([_with_roles("a", SEED_LIKE)]) if e.detector == "verification_overhead"]
    assert len(items) == 1 and items[0].direction == "-"  # 16 of 32 episodes; the one retest confirmed
    assert "verification.retest_episodes=0" in items[0].hints
    overturning = [("synthesis", "candidate", 1.0, 4, None, None)] + [
        row for i in range(3) for row in (("tuning", "candidate", 5.0 + i, 4, 0, 0),
                                          ("tuning", "retest", 1.0, 4, 1, None), ("tuning", "reference", 2.0, 4, 0, None))]
    items = [e for e in evidence.extract([_with_roles("b", overturning)]) if e.detector == "verification_overhead"]
    assert items and items[0].direction == "+"


def test_phase_yield_finds_phases_with_budget_but_no_gains():
    items = [e for e in evidence.extract([_with_roles("a", SEED_LIKE)]) if e.detector == "phase_yield"]
    assert any("Confirmation" in e.sentence and "budget.confirmation_fraction=0.0" in e.hints for e in items)


def test_early_selection():
    assert "early_selection" in _detectors([_with_roles("a", SEED_LIKE, best_submit=0)])
    assert "early_selection" not in _detectors([_with_roles("b", SEED_LIKE, best_submit=6)])


def test_a_dropped_search_sample_is_not_a_regression_built_on():
    # submit 5 regresses but the next candidates still derive from submit 0 (the search centre)
    rows = [("synthesis", "candidate", 10.0, 4, None, None), ("tuning", "candidate", 12.0, 4, 0, 0),
            ("tuning", "candidate", 5.0, 4, 0, 0), ("tuning", "candidate", 11.0, 4, 0, 0),
            ("tuning", "candidate", 4.0, 4, 0, 1)]
    assert "unreverted_regression" not in _detectors([_with_roles("a", rows)])
    kept = rows[:3] + [("tuning", "candidate", 6.0, 4, 2, 0)]  # on_regression=keep: built on submit 2
    assert "unreverted_regression" in _detectors([_with_roles("b", kept)])


def test_single_structure_restores_synthesis_when_it_never_ran():
    rows = [("tuning", "candidate", 1.0 + i, 8, 0, i // 2) for i in range(4)]
    t = _with_roles("a", rows)
    t = t.model_copy(update={"history": tuple(it.model_copy(update={"mechanism": "affine"}) for it in t.history)})
    items = [e for e in evidence.extract([t]) if e.detector == "single_structure"]
    assert items and "planning.phases=synthesis,tuning,confirmation" in items[0].hints
    from ole.loop_policy import LoopPolicy
    from ole.proposers.builtin import apply_hint
    p = LoopPolicy().model_dump(mode="json")
    p["planning"]["phases"] = ["tuning"]
    apply_hint(p, items[0].hints[0])
    assert p["planning"]["phases"] == ["synthesis", "tuning", "confirmation"]
    two = t.model_copy(update={"history": tuple(it.model_copy(update={"mechanism": "affine" if it.index else "pump"})
                                                for it in t.history)})
    assert "single_structure" not in _detectors([two])
