"""Online mode: ask/tell, activation only at task boundaries, gate rounds, rollback on degradation."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ole.evolve import EvolveConfig, Suite, open_engine
from ole.evolve.online import OnlineConfig, OnlineEvolution, engine_worker, run_stream
from ole.executors import LocalExecutor
from ole.gate import GateConfig
from ole.proposers.builtin import BuiltinProposer
from ole.registry import Registry
from synthetic import archive_fake

ROOT = Path(__file__).resolve().parents[2]
CFG = EvolveConfig(suite=Suite(envs=("gym/acrobot", "gymnasium/MiniGrid-FourRooms-v0"), budget=8), gate_budgets=(8,),
                   search_pools=(101,), gate_pools=(201, 202, 203), seed=2)
GATE = GateConfig(min_pairs=6, min_families=2)


def _online(tmp_path, online=OnlineConfig(tasks=6, every_k=3)):
    root = tmp_path / "bundles"
    root.mkdir()
    shutil.copy(ROOT / "bundles" / "coder.yaml", root / "coder.yaml")
    reg = Registry(root)
    engine = open_engine(registry=reg, workdir=tmp_path / "work", traces_root=tmp_path / "traces", cfg=CFG,
                         evaluate=archive_fake, proposer=BuiltinProposer(), gate=GATE, executor=LocalExecutor(1),
                         progress=lambda line: None)
    return reg, OnlineEvolution(engine, CFG, online)


def _harmful(reg):
    champ = reg.champion()
    lp = champ.bundle.loop_policy
    bad = champ.bundle.model_copy(update={"loop_policy": lp.model_copy(
        update={"observation": lp.observation.model_copy(update={"worst_k_episodes": 0})})})
    return reg.register(bad, parents=[champ.version], edge="manual")


def test_a_tiny_stream_runs_gate_rounds_and_records_decisions(tmp_path):
    reg, evo = _online(tmp_path)
    events = run_stream(evo, engine_worker(evo.e))
    assert len(events.worked) == 6 and len(events.decisions) >= 1
    assert all(d.stats.n_pairs == 6 and not d.stats.leaked_keys for d in events.decisions)
    assert sum(e.kind == "gate_decision" for e in reg.events()) == len(events.decisions)


def test_no_activation_mid_task(tmp_path):
    reg, evo = _online(tmp_path)
    work = engine_worker(evo.e)
    a = evo.ask()
    bad = _harmful(reg)
    reg.release(bad.ref, reason="injected")
    assert reg.champion().ref == a.bundle_ref == "coder@1"  # released, not active while the task runs
    evo.tell(work(a))
    assert reg.champion().ref == "coder@1"
    b = evo.ask()
    assert b.bundle_ref == bad.ref == reg.champion().ref


def test_injected_harmful_release_is_rolled_back_and_recorded(tmp_path):
    reg, evo = _online(tmp_path, OnlineConfig(tasks=5, every_k=100, monitor=2))
    work = engine_worker(evo.e)
    evo.tell(work(evo.ask()))
    bad = _harmful(reg)
    reg.release(bad.ref, reason="injected harmful release")
    for _ in range(3):
        evo.tell(work(evo.ask()))
    assert evo.events.rollbacks and evo.events.rollbacks[0][1] == bad.ref
    assert all(p.r < -0.3 for p in evo.events.monitor_pairs)
    rollback = [e for e in reg.events() if e.kind == "rollback"][-1]
    assert rollback.ref == "coder@1" and "mean r" in rollback.payload["reason"]
    nxt = evo.ask()
    assert nxt.bundle_ref == "coder@1"
    assert [ref for _, ref in evo.events.activations] == [bad.ref, "coder@1"]


@pytest.mark.slow
@pytest.mark.sandbox
def test_online_rollback_experiment_smoke(tmp_path):
    out = tmp_path / "report.md"
    subprocess.run([sys.executable, str(ROOT / "experiments" / "online_rollback.py"), "--envs", "gym/acrobot",
                    "--budget", "2", "--tasks", "3", "--inject-after", "1", "--monitor", "1",
                    "--workdir", str(tmp_path / "work"), "--out", str(out)], check=True, cwd=ROOT, timeout=600)
    text = out.read_text()
    assert "| task | env | active bundle |" in text and "injected" in text.lower()
