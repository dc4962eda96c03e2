"""Smoke tests of the evolution experiments at a tiny budget (real hosts, real runs)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _run(script: str, *args: str, timeout: int = 900) -> None:
    subprocess.run([sys.executable, str(ROOT / "experiments" / script), *args], check=True, cwd=ROOT,
                   timeout=timeout, stdout=subprocess.DEVNULL)


@pytest.mark.heavy
@pytest.mark.sandbox
def test_sensitivity_smoke(tmp_path):
    out = tmp_path / "map.md"
    _run("sensitivity.py", "--smoke", "--workdir", str(tmp_path / "w"), "--out", str(out),
         "--combo", "lean=verification.retest_episodes:0,budget.confirmation_fraction:0.0")
    text = out.read_text()
    assert "noise floor" in text and "action.episodes_per_submit=1" in text and "combo lean" in text
    rows = json.loads(out.with_suffix(".json").read_text())["rows"]
    assert {r["variant"] for r in rows} >= {"noise floor", "action.episodes_per_submit=1"}
    assert all(r["budget"] == 4 for r in rows)


def test_sensitivity_budget_fields_are_parsed_and_checked():
    sys.path.insert(0, str(ROOT / "experiments"))
    try:
        from sensitivity import parse_budget_fields
    finally:
        sys.path.remove(str(ROOT / "experiments"))
    assert parse_budget_fields("128:action.population,verification.retest_episodes;64:budget.synthesis_fraction") == {
        128: ["action.population", "verification.retest_episodes"], 64: ["budget.synthesis_fraction"]}
    assert parse_budget_fields("128:action.population+action.step_size") == {128: ["action.population", "action.step_size"]}
    for bad in ("128:action.populaton", "action.population", "x:action.population", "128:"):
        with pytest.raises(SystemExit):
            parse_budget_fields(bad)


@pytest.mark.slow
@pytest.mark.sandbox
def test_search_efficiency_smoke(tmp_path):
    out = tmp_path / "eff.md"
    _run("search_efficiency.py", "--smoke", "--workdir", str(tmp_path / "w"), "--out", str(out))
    assert "episodes to first gate-passing candidate" in out.read_text() and out.with_suffix(".png").is_file()
    results = json.loads(out.with_suffix(".json").read_text())
    assert {r["proposer"] for r in results} == {"evidence", "random", "tpe"}


@pytest.mark.slow
@pytest.mark.sandbox
def test_evolved_vs_initial_smoke(tmp_path):
    out = tmp_path / "evi.md"
    _run("evolved_vs_initial.py", "--smoke", "--workdir", str(tmp_path / "w"), "--out", str(out), timeout=1800)
    text = out.read_text()
    assert "90 % CI" in text and "Ablation" in text and out.with_suffix(".lineage.png").is_file()


@pytest.mark.heavy
@pytest.mark.sandbox
def test_budget_transfer_smoke(tmp_path):
    out = tmp_path / "bt.md"
    _run("budget_transfer.py", "--smoke", "--workdir", str(tmp_path / "w"), "--out", str(out))
    text = out.read_text()
    assert "| released@32 (coder@23) | absolute | 4 |" in text and "| released@32 (coder@23) | relative | 4 |" in text
    assert "| 1-episode submits only | either | 2 |" in text
    rows = json.loads(out.with_suffix(".json").read_text())
    assert {r["budget"] for r in rows} == {2, 4} and all(r["q_seed"] is not None for r in rows)


@pytest.mark.slow
@pytest.mark.sandbox
def test_online_stream_smoke(tmp_path):
    out = tmp_path / "os.md"
    _run("online_stream.py", "--smoke", "--isolation", "none", "--harm", "--workdir", str(tmp_path / "w"),
         "--out", str(out), timeout=2400)
    text = out.read_text()
    assert "Online vs fixed" in text and "90 % CI" in text and "## Injected harm" in text
    rows = json.loads(out.with_suffix(".json").read_text())["pairs"]
    assert len(rows) == 4 and {r["budget"] for r in rows} == {2, 4}


def test_evolve_phases_reads_the_evolve_clock_at_each_phase_start(tmp_path):
    log = tmp_path / "evolve.log"
    log.write_text("\n".join([
        "archive is empty for coder@1: bootstrapping 6 traces by running the champion on the search instances first",
        "    run coder@1 gym/pusher5 pool 101 seed 0: q=1.0 (3s)  [spent 32 episodes, 0.5 min]",
        "generation 1/1: proposing 12 candidates",
        "    run coder@2 gym/pusher5 pool 101 seed 0: q=1.0 (3s)  [spent 64 episodes, 2.0 min]",
        "    run coder@3 gym/pusher5 pool 101 seed 0: q=1.0 (3s)  [spent 96 episodes, 4.0 min]",
        "gate: coder@9 (gym/pusher5) vs coder@1 on 8 unseen gate instances at budgets 32, 128",
        "    run coder@9 gym/pusher5 pool 201 seed 0: q=1.0 (3s)  [spent 128 episodes, 9.0 min]",
        "  transfer: coder@9 vs coder@1 on 4 instances of 2 envs held out from the search",
        "  transfer: coder@9 vs coder@1 on 4 instances of 2 envs held out from the search",
        "    run coder@9 gym/reacher5 pool 221 seed 0: q=1.0 (3s)  [spent 160 episodes, 10.0 min]"]) + "\n")
    out = subprocess.run([sys.executable, str(ROOT / "experiments" / "evolve_phases.py"), str(log), "--total-s", "660"],
                         capture_output=True, text=True, check=True).stdout
    rows = [line for line in out.splitlines() if line.startswith("| ") and "---" not in line][1:]
    assert rows == ["| bootstrap (coder@1 on the search instances) | 0.0 | 0.5 | 1 |",
                    "| search generation 1 of 1 | 0.5 | 3.5 | 2 |",
                    "| gate coder@9 (gym/pusher5) vs coder@1 | 4.0 | 5.0 | 1 |",
                    "| transfer sample of coder@9 (4 instances of 2 envs held out from the search) | 9.0 | 2.0 | 1 |",
                    "| total | | 11.0 | 5 |"]
