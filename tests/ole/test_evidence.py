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
