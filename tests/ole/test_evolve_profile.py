"""experiments/evolve_profile.py: phases read from the hooks' log, and a tiny end-to-end profile (slow)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "experiments"))

import evolve_profile as ep  # noqa: E402


def test_union_counts_overlaps_once():
    assert ep.union([(0, 2), (1, 3), (5, 6)]) == 4
    assert ep.union([(0, 10), (2, 3)]) == 10
    assert ep.union([]) == 0


def _log(tmp_path: Path) -> list[dict]:
    host = tmp_path / "runs" / "r1" / "host"
    host.mkdir(parents=True)
    (host / "config.json").write_text(json.dumps({"heldout_size": 16}))
    ck = str(host / "checkpoints" / "submit_000")
    url = "http://127.0.0.1:1"
    return [
        {"ev": "run_job", "pid": 1, "t0": 100.0, "t1": 130.0, "env": "gym/acrobot", "run_dir": str(host)},
        {"ev": "run_bundle", "pid": 1, "t0": 100.0, "t1": 129.5, "env": "gym/acrobot", "run_dir": str(host)},
        {"ev": "ready", "pid": 1, "t0": 100.0, "t1": 101.0, "run_dir": str(host), "url": url},
        {"ev": "host_init", "pid": 2, "t0": 100.5, "t1": 100.7, "run_dir": str(host)},
        {"ev": "agent", "pid": 1, "t0": 101.5, "t1": 111.5, "workspace": str(host / "workspace")},
        {"ev": "submit", "pid": 1, "t0": 102.0, "t1": 106.0, "url": url},
        {"ev": "submit", "pid": 1, "t0": 107.0, "t1": 111.0, "url": url},
        {"ev": "episodes", "pid": 2, "t0": 102.0, "t1": 105.0, "code_dir": ck, "n": 2, "record": True,
         "start_s": 0.5, "episodes_s": 2.5, "failures": 0, "act_s": 1.0, "act_n": 10, "step_s": 1.0, "step_n": 10},
        {"ev": "episodes", "pid": 2, "t0": 107.0, "t1": 110.0, "code_dir": ck, "n": 2, "record": True,
         "start_s": 0.5, "episodes_s": 2.5, "failures": 0},
        {"ev": "finalize", "pid": 2, "t0": 111.5, "t1": 128.0, "run_dir": str(host)},
        {"ev": "hidden", "pid": 2, "t0": 112.0, "t1": 120.0, "n_jobs": 2, "episodes": 16, "seeds": 8, "code_dir": ck},
        {"ev": "episodes", "pid": 3, "t0": 112.0, "t1": 119.0, "code_dir": ck, "n": 8, "record": False,
         "start_s": 1.0, "episodes_s": 6.0, "failures": 0},
        {"ev": "episodes", "pid": 4, "t0": 113.0, "t1": 120.0, "code_dir": ck, "n": 8, "record": False,
         "start_s": 1.0, "episodes_s": 6.0, "failures": 0},
        {"ev": "hidden", "pid": 2, "t0": 120.0, "t1": 127.0, "n_jobs": 1, "episodes": 16, "seeds": 16, "code_dir": ck},
        {"ev": "episodes", "pid": 2, "t0": 120.0, "t1": 127.0, "code_dir": ck, "n": 16, "record": False,
         "start_s": 1.0, "episodes_s": 6.0, "failures": 0},
    ]


def test_phases_of_one_run(tmp_path):
    runs = ep.run_phases(_log(tmp_path))
    (p,) = runs.values()
    assert p["wall"] == 30.0 and p["start_to_ready"] == 1.0 and abs(p["host_init"] - 0.2) < 1e-9
    assert p["submits_client"] == 8.0 and p["agent_compute"] == 2.0 and p["n_submits"] == 2
    assert p["submit_stepping"] == 5.0 and p["submit_sandbox_start"] == 1.0 and p["submit_act"] == 1.0
    assert p["validation"] == 8.0 and p["validation_episodes"] == 16 and p["validation_programs"] == 2
    assert p["heldout"] == 7.0 and p["heldout_episodes"] == 16
    # stepping wall: submits 102.5-105, 107.5-110; hidden 113-120 (two workers overlap), 121-127
    assert p["stepping_wall"] == 2.5 + 2.5 + 7.0 + 6.0
    assert p["fixed"] == 30.0 - 18.0 - 2.0


@pytest.mark.slow
@pytest.mark.sandbox
def test_evolve_profile_smoke(tmp_path):
    out = tmp_path / "profile.md"
    subprocess.run([sys.executable, str(ROOT / "experiments" / "evolve_profile.py"), "--smoke", "--code", "a=.",
                    "--code", "b=.", "--workdir", str(tmp_path / "w"), "--out", str(out)],
                   check=True, cwd=ROOT, timeout=1800)
    text = out.read_text()
    assert "| 1 | a |" in text and "| 2 | b |" in text and "**fixed cost**" in text
    assert "decision identical" in text
    rows = json.loads(out.with_suffix(".json").read_text())
    assert all(r["runs"] and r["decision"]["verdict"] for r in rows)


@pytest.mark.slow
@pytest.mark.sandbox
def test_run_fixed_cost_smoke(tmp_path):
    out = tmp_path / "fixed.md"
    subprocess.run([sys.executable, str(ROOT / "experiments" / "run_fixed_cost.py"), "--smoke", "--code", "a=.",
                    "--code", "b=.", "--workdir", str(tmp_path / "w"), "--out", str(out)],
                   check=True, cwd=ROOT, timeout=1800)
    text = out.read_text()
    assert "**fixed cost**" in text and "| gym/acrobot | " in text and "identical" in text


def test_the_floor_removes_fixed_cost_and_divides_stepping_by_the_raw_ratio(tmp_path):
    import evolve_floor as ef
    runs = [{"wall": 10.0, "fixed": 2.0, "agent_compute": 1.0}, {"wall": 20.0, "fixed": 4.0, "agent_compute": 1.0}]
    rows = [{"record": {"label": "new", "wall_s": 15.0, "summary": {"spent": {"episodes": 30}}}, "runs": runs},
            {"record": {"label": "old", "wall_s": 30.0, "summary": {"spent": {"episodes": 30}}},
             "runs": [{"wall": 60.0, "fixed": 30.0, "agent_compute": 0.0}]}]
    path = tmp_path / "profile.json"
    path.write_text(json.dumps(rows))
    b = ef.bound(rows[0], 1.5)
    assert b["stepping"] == 22.0 and b["floor_run_wall"] == 22.0 / 1.5 + 2.0
    assert b["floor_evolve"] == 15.0 * b["floor_run_wall"] / 30.0
    out = tmp_path / "floor.md"
    assert ef.main([str(path), "--raw-ratio", "1.5", "--baseline", "old", "--out", str(out)]) == 0
    ratio = b["floor_evolve"] / 30 / (30.0 / 30)
    assert f"new at its bound vs old as measured, per charged episode: {ratio:.3f}" in out.read_text()
