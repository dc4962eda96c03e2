"""The storage experiments, tiny: many writers with SIGKILLs on both backends (and the checks must pass),
and the latency table's shape."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

PROJECT = Path(__file__).resolve().parents[2]


@pytest.mark.heavy
def test_eight_writers_with_kills_lose_duplicate_and_reorder_nothing_on_both_backends(tmp_path):
    out = tmp_path / "storage.md"
    done = subprocess.run([sys.executable, "experiments/storage_concurrency.py", "--writers", "8", "--writes", "10",
                           "--kills", "4", "--max-gap", "3", "--every-k", "3", "--out", str(out)], cwd=PROJECT,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rows = [line for line in out.read_text().splitlines() if line.startswith(("| sqlite", "| postgresql"))]
    assert len(rows) == 2
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert cells[1] == "4" and cells[3] == "80" and cells[4:7] == ["0", "0", "0"], row  # 4 kills, 80 acked
        assert cells[7:9] == ["yes", "clean"] and cells[10] == "26 (26)" and cells[11] == "0", row


@pytest.mark.heavy
def test_the_latency_benchmark_writes_its_section_beside_the_others(tmp_path):
    out = tmp_path / "storage.md"
    out.write_text("# Storage\n\n<!-- storage_concurrency -->\nkept\n<!-- /storage_concurrency -->\n")
    done = subprocess.run([sys.executable, "experiments/storage_latency.py", "--versions", "3", "--repeats", "1",
                           "--out", str(out)], cwd=PROJECT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    text = out.read_text()
    assert "kept" in text and text.count("<!-- storage_latency -->") == 1
    assert [line.split("|")[1].strip() for line in text.splitlines() if line.startswith("| ") and "ms" not in line
            and "---" not in line] == ["ole champion show", "open", "select", "select + activation"]


def _same_decisions():
    sys.path.insert(0, str(PROJECT / "experiments"))
    try:
        import same_decisions
    finally:
        sys.path.pop(0)
    return same_decisions


def test_same_decisions_compares_decisions_and_leaves_out_only_moments_ids_and_measured_wall_time():
    """The backends comparison's rules: a decision's moment, trace ids and a measured wall ratio (as a field,
    a cost check's number or a reason's figure) are left out; a verdict, a statistic or a scope is not."""
    sd = _same_decisions()
    decision = {"kind": "gate_decision", "name": "coder", "version": 3, "seq": 9, "payload": {
        "verdict": "reject", "decided_at": "2026-12-07T20:00:00Z", "trace_ids": ["t-1"], "stats": {"mean_r": 0.1},
        "criteria": [{"name": "cost", "checks": [{"what": "wall_s ratio (challenger / champion)", "measured": "1.20",
                                                  "required": "<= 1.500", "passed": True},
                                                 {"what": "episodes ratio (challenger / champion)", "measured": "1.00",
                                                  "required": "<= 1.100", "passed": True}],
                      "reasons": ["wall_s ratio 1.752 > allowed 1.500"]}]}}
    registration = {"kind": "registration", "name": "coder", "version": 3, "payload": {"content_hash": "ab" * 16}}
    other = json_copy(decision)
    other["seq"] = 12
    other["payload"].update(decided_at="2026-12-07T21:00:00Z", trace_ids=["t-2"])
    other["payload"]["criteria"][0]["checks"][0]["measured"] = "0.90"
    other["payload"]["criteria"][0]["reasons"] = ["wall_s ratio 1.601 > allowed 1.500"]
    assert sd.canonical([registration, decision]) == sd.canonical([registration, other])
    for change in ({"verdict": "release"}, {"stats": {"mean_r": 0.2}}):
        moved = json_copy(decision)
        moved["payload"].update(change)
        assert sd.canonical([registration, decision]) != sd.canonical([registration, moved]), change
    moved = json_copy(decision)
    moved["payload"]["criteria"][0]["checks"][1]["measured"] = "1.20"  # episodes are counted, not measured
    assert sd.canonical([registration, decision]) != sd.canonical([registration, moved])
    lines = sd.leaf_differences([("only before", {"kind": "k", "bundle": "b", "p": 1}),
                                 ("only after", {"kind": "k", "bundle": "b", "p": 2})])
    assert lines[0].startswith("Where the k event of bundle b differs (1 leaves)") and "`.p`: before 1, after 2" in lines[2]


def test_same_decisions_no_wall_bound_gates_without_the_wall_ratio_and_nothing_else_changes(tmp_path):
    import yaml

    from ole.gate import GateConfig
    sd = _same_decisions()
    flag, path = sd.unbounded_wall(PROJECT, tmp_path)
    assert flag == "--gate-config"
    packaged = yaml.safe_load((PROJECT / "ole" / "gate.yaml").read_text())
    written = yaml.safe_load(Path(path).read_text())
    assert "wall_s" in packaged["cost_kappa"] and "wall_s" not in written["cost_kappa"]
    packaged["cost_kappa"].pop("wall_s")
    assert written == packaged
    assert "wall_s" not in GateConfig(**written).cost_kappa


def json_copy(value):
    import json
    return json.loads(json.dumps(value))
