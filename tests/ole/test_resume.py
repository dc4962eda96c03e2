"""Resume that cannot lie: a workspace is bound to the configuration that made it, and a crash
between a registry append and the step mark never duplicates the event on resume."""
from __future__ import annotations

import shutil
import sqlite3
import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path

import pytest

from ole.evolve import EvolveConfig, Suite, open_engine
from ole.evolve.offline import OfflineEvolution
from ole.evolve.store import EvaluationStore, ResumeMismatch, fingerprint
from ole.executors import LocalExecutor
from ole.gate import GateConfig
from ole.registry import CRASH_EXIT, Registry
from synthetic import RetestProposer, fake_evaluate

ROOT = Path(__file__).resolve().parents[2]
CFG = EvolveConfig(suite=Suite(envs=("gym/acrobot", "gymnasium/MiniGrid-FourRooms-v0"), budget=8), gate_budgets=(8,),
                   search_pools=(101,), gate_pools=(201, 202, 203), population=2, generations=1, seed=1)
GATE = GateConfig(min_pairs=6, min_families=2, max_pairs=None)


def _engine(tmp_path, cfg=CFG, gate=GATE, proposer=None):
    root = tmp_path / "bundles"
    if not root.exists():
        root.mkdir()
        shutil.copy(ROOT / "bundles" / "coder.yaml", root / "coder.yaml")
    reg = Registry(root)
    return reg, open_engine(registry=reg, workdir=tmp_path / "work", traces_root=tmp_path / "traces", cfg=cfg,
                            evaluate=fake_evaluate, proposer=proposer or RetestProposer(), gate=gate,
                            executor=LocalExecutor(1), progress=lambda line: None, driver={"mode": "offline"})


def _offline(reg, engine, cfg=CFG):
    champ = reg.champion()
    return OfflineEvolution(engine, cfg, champ.ref, champ.bundle).run()


@pytest.mark.parametrize("change, named", [
    ({"gate": GATE.model_copy(update={"alpha": 0.05})}, "gate.alpha: stored 0.1, now 0.05"),
    ({"cfg": CFG.model_copy(update={"seed": 2})}, "evolve.seed: stored 1, now 2"),
    ({"cfg": CFG.model_copy(update={"population": 3})}, "evolve.population: stored 2, now 3"),
    ({"cfg": CFG.model_copy(update={"gate_pools": (201, 202, 204)})}, "evolve.gate_pools"),
    ({"cfg": CFG.model_copy(update={"agent_seeds": (0, 1)})}, "evolve.agent_seeds"),
    ({"cfg": CFG.model_copy(update={"suite": CFG.suite.model_copy(update={"budget": 16})})}, "evolve.suite.budget"),
])
def test_a_rerun_with_another_config_is_refused_not_answered(tmp_path, change, named):
    reg, engine = _engine(tmp_path)
    first = _offline(reg, engine)
    assert first.decision is not None
    events = len(reg.events())
    with pytest.raises(ResumeMismatch) as info:
        _engine(tmp_path, **change)
    text = str(info.value)
    assert "expected fingerprint" in text and "actual" in text and named in text
    assert "use a new --workdir" in info.value.hint
    assert len(Registry(tmp_path / "bundles").events()) == events  # nothing was answered or appended


def test_the_same_config_resumes_and_a_caps_change_is_not_a_new_config(tmp_path):
    reg, engine = _engine(tmp_path)
    a = _offline(reg, engine)
    from ole.cost import CostCaps
    reg2, engine2 = _engine(tmp_path, cfg=CFG.model_copy(update={"caps": CostCaps(episodes=10_000), "workers": 1}))
    b = _offline(reg2, engine2)
    assert b.decision.verdict == a.decision.verdict and len(reg2.events()) == len(reg.events())


def test_a_store_without_fingerprints_is_refused(tmp_path):
    path = tmp_path / "work" / "evaluations.sqlite3"
    path.parent.mkdir()
    with sqlite3.connect(path) as db:  # the layout an older OLE wrote
        db.executescript("CREATE TABLE steps (step TEXT PRIMARY KEY, payload TEXT NOT NULL, created_at TEXT NOT NULL);")
    with pytest.raises(ResumeMismatch, match="older OLE"):
        EvaluationStore(path, fingerprint=fingerprint({"a": 1}))


def test_steps_made_unbound_are_refused_once_bound(tmp_path):
    path = tmp_path / "s.sqlite3"
    EvaluationStore(path).mark("gate|x", {"verdict": "release"})
    with pytest.raises(ResumeMismatch, match="without a config fingerprint"):
        EvaluationStore(path, fingerprint=fingerprint({"a": 1}))


def test_cli_refuses_a_workdir_of_another_config_before_running_anything(tmp_path, capsys):
    from ole.cli import main
    work = tmp_path / "work"
    EvaluationStore(work / "evaluations.sqlite3", fingerprint=fingerprint({"evolve": {"seed": 99}})).close()
    root = tmp_path / "bundles"
    root.mkdir()
    shutil.copy(ROOT / "bundles" / "coder.yaml", root)
    code = main(["--root", str(root), "evolve", "--mode", "offline", "--workdir", str(work),
                 "--traces", str(tmp_path / "traces")])
    err = capsys.readouterr().err
    assert code == 2 and "use a new --workdir" in err and "evolve.seed: stored 99" in err
    assert not (work / "runs").exists()


SCRIPT = """
    import shutil, sys
    from pathlib import Path
    sys.path.insert(0, sys.argv[2])
    from ole.evolve import EvolveConfig, Suite, open_engine
    from ole.evolve.offline import OfflineEvolution
    from ole.executors import LocalExecutor
    from ole.gate import GateConfig
    from ole.proposers.builtin import BuiltinProposer
    from ole.registry import Registry
    from synthetic import RetestProposer, fake_evaluate
    tmp = Path(sys.argv[1])
    cfg = EvolveConfig(suite=Suite(envs=("gym/acrobot", "gymnasium/MiniGrid-FourRooms-v0"), budget=8), gate_budgets=(8,),
                       search_pools=(101,), gate_pools=(201, 202, 203, 204, 205, 206), gate_extra_pools=(), population=4,
                       generations=2,
                       seed=1)  # each env is a scope of its own: 6 pools = 6 pairs per scope
    reg = Registry(tmp / "bundles")
    engine = open_engine(registry=reg, workdir=tmp / "work", traces_root=tmp / "traces", cfg=cfg,
                         evaluate=fake_evaluate, proposer=RetestProposer(), gate=GateConfig(min_pairs=6, min_families=2, max_pairs=None),
                         executor=LocalExecutor(1), progress=lambda line: None, driver={"mode": "offline"})
    champ = reg.champion()
    print(OfflineEvolution(engine, cfg, champ.ref, champ.bundle).run().decision.verdict)
"""


def _python(tmp_path, env=None):
    import os
    return subprocess.run([sys.executable, "-c", textwrap.dedent(SCRIPT), str(tmp_path), str(Path(__file__).parent)],
                          capture_output=True, text=True, timeout=300, cwd=ROOT, env={**os.environ, **(env or {})})


@pytest.mark.heavy
@pytest.mark.parametrize("step", ["evaluation_after_commit", "gate_decision_after_commit", "release_after_commit"])
def test_a_crash_between_append_and_mark_leaves_no_duplicate(tmp_path, step):
    clean = tmp_path / "clean"
    (clean / "bundles").mkdir(parents=True)
    shutil.copy(ROOT / "bundles" / "coder.yaml", clean / "bundles")
    assert _python(clean).stdout.strip() == "release"
    expected = Counter(e.kind for e in Registry(clean / "bundles").events())
    crashed = tmp_path / "crashed"
    (crashed / "bundles").mkdir(parents=True)
    shutil.copy(ROOT / "bundles" / "coder.yaml", crashed / "bundles")
    died = _python(crashed, {"OLE_TEST_MODE": "1", "OLE_CRASH_AT": step})
    assert died.returncode == CRASH_EXIT, died.stderr[-2000:]
    resumed = _python(crashed)
    assert resumed.returncode == 0 and resumed.stdout.strip() == "release", resumed.stderr[-2000:]
    assert Counter(e.kind for e in Registry(crashed / "bundles").events()) == expected


def test_registry_writes_with_a_key_are_idempotent(tmp_path):
    root = tmp_path / "bundles"
    root.mkdir()
    shutil.copy(ROOT / "bundles" / "coder.yaml", root)
    with Registry(root) as reg:
        champ = reg.champion()
        lp = champ.bundle.loop_policy
        child = reg.register(champ.bundle.model_copy(update={"loop_policy": lp.model_copy(update={
            "action": lp.action.model_copy(update={"episodes_per_submit": 2})})}), parents=[1])
        a = reg.record_evaluation(child.ref, {"stage": "x"}, key="k-eval")
        assert reg.record_evaluation(child.ref, {"stage": "x"}, key="k-eval") == a
        assert reg.record_gate_decision(child.ref, {"accepted": True}, key="k-gate") == \
            reg.record_gate_decision(child.ref, {"accepted": True}, key="k-gate")
        reg.release(child.ref, reason="r", key="k-rel")
        assert reg.release(child.ref, reason="r", key="k-rel").ref == child.ref  # no "already released" Conflict
        reg.activate_pending()
        assert reg.rollback(reason="bad", key="k-rb").ref == reg.rollback(reason="bad", key="k-rb").ref == "coder@1"
        kinds = Counter(e.kind for e in reg.events())
        assert (kinds["evaluation"], kinds["gate_decision"], kinds["release"], kinds["rollback"]) == (1, 1, 1, 1)
        assert reg.fsck().ok


def test_a_workspace_made_by_other_code_is_refused(tmp_path, monkeypatch):
    """Pinned package versions do not move when OLE's own code does: the source digest does."""
    import ole.evolve.engine
    reg, engine = _engine(tmp_path)
    _offline(reg, engine)
    monkeypatch.setattr(ole.evolve.engine, "source_digest", lambda: "0" * 64)
    with pytest.raises(ResumeMismatch, match="source"):
        _engine(tmp_path)


ONLINE = """
    import sys
    from pathlib import Path
    sys.path.insert(0, sys.argv[2])
    from ole.evolve import EvolveConfig, Suite, open_engine
    from ole.evolve.online import OnlineConfig, OnlineEvolution, engine_worker, run_stream
    from ole.executors import LocalExecutor
    from ole.gate import GateConfig
    from ole.proposers.builtin import BuiltinProposer
    from ole.registry import Registry
    from synthetic import fake_evaluate
    tmp = Path(sys.argv[1])
    cfg = EvolveConfig(suite=Suite(envs=("gym/acrobot", "gymnasium/MiniGrid-FourRooms-v0"), budget=8), gate_budgets=(8,),
                       search_pools=(101,), gate_pools=(201, 202, 203), seed=2)
    online = OnlineConfig(tasks=9, every_k=100)
    reg = Registry(tmp / "bundles")
    engine = open_engine(registry=reg, workdir=tmp / "work", traces_root=tmp / "traces", cfg=cfg,
                         evaluate=fake_evaluate, proposer=BuiltinProposer(), gate=GateConfig(min_pairs=6, min_families=2, max_pairs=None),
                         executor=LocalExecutor(1), progress=lambda line: None, driver={"mode": "online"})
    evo = OnlineEvolution(engine, cfg, online)
    work = engine_worker(engine)
    if evo.index == 0:
        evo.tell(work(evo.ask()))
    if not reg.events(kind="release"):
        champ = reg.champion()
        lp = champ.bundle.loop_policy
        bad = reg.register(champ.bundle.model_copy(update={"loop_policy": lp.model_copy(update={
            "observation": lp.observation.model_copy(update={"worst_k_episodes": 0})})}), parents=[champ.version])
        reg.release(bad.ref, reason="injected", exposure=1.0)
    run_stream(evo, work)
    print(reg.champion().ref)
"""


@pytest.mark.heavy
@pytest.mark.parametrize("step", ["evaluation_after_commit", "stage_after_commit"])
def test_an_online_crash_after_a_monitor_or_stage_commit_leaves_no_duplicate(tmp_path, step):
    import os

    def run(where, env=None):
        return subprocess.run([sys.executable, "-c", textwrap.dedent(ONLINE), str(where), str(Path(__file__).parent)],
                              capture_output=True, text=True, timeout=300, cwd=ROOT, env={**os.environ, **(env or {})})
    clean = tmp_path / "clean"
    (clean / "bundles").mkdir(parents=True)
    shutil.copy(ROOT / "bundles" / "coder.yaml", clean / "bundles")
    assert run(clean).stdout.strip() == "coder@1"  # the harm was rolled back (the canary never became champion)
    expected = Counter(e.kind for e in Registry(clean / "bundles").events())
    assert expected["stage"] == 2 and expected["evaluation"] >= 2  # canary, rolled back; monitor pairs and looks
    crashed = tmp_path / "crashed"
    (crashed / "bundles").mkdir(parents=True)
    shutil.copy(ROOT / "bundles" / "coder.yaml", crashed / "bundles")
    died = run(crashed, {"OLE_TEST_MODE": "1", "OLE_CRASH_AT": step})
    assert died.returncode == CRASH_EXIT, died.stderr[-2000:]
    resumed = run(crashed)
    assert resumed.returncode == 0 and resumed.stdout.strip() == "coder@1", resumed.stderr[-2000:]
    got = Counter(e.kind for e in Registry(crashed / "bundles").events())
    assert got["stage"] == 2 and got["evaluation"] == expected["evaluation"]


_OPEN_AT = textwrap.dedent("""
    import sys, time
    from ole.evolve.store import EvaluationStore, fingerprint
    go = float(sys.argv[2])
    while time.time() < go:
        time.sleep(0.001)
    store = EvaluationStore(sys.argv[1], fingerprint=fingerprint({"a": 1}))
    store.mark("open|" + sys.argv[3], {"ok": True})
    store.close()
""")


@pytest.mark.heavy
def test_processes_opening_one_fresh_store_at_once_all_open_it(tmp_path):
    """Several processes create the same store file in the same instant (parallel tasks of one
    stream): none is refused as "database is locked", and every one's write lands."""
    import time
    path = tmp_path / "work" / "evaluations.sqlite3"
    go = time.time() + 3.0
    procs = [subprocess.Popen([sys.executable, "-c", _OPEN_AT, str(path), str(go), str(i)], cwd=ROOT,
                              stderr=subprocess.PIPE, text=True) for i in range(6)]
    errors = [p.communicate(timeout=120)[1] for p in procs]
    assert [p.returncode for p in procs] == [0] * 6, errors
    store = EvaluationStore(path, fingerprint=fingerprint({"a": 1}))
    assert all(store.step(f"open|{i}") == {"ok": True} for i in range(6))


def test_a_lock_refusal_is_retried_and_other_errors_are_not():
    from ole.sqlite_open import retry_locked
    answers = iter([sqlite3.OperationalError("database is locked")] * 2 + ["ok"])

    def statement():
        a = next(answers)
        if isinstance(a, Exception):
            raise a
        return a
    assert retry_locked(statement) == "ok"
    with pytest.raises(sqlite3.OperationalError, match="no such table"):
        retry_locked(lambda: (_ for _ in ()).throw(sqlite3.OperationalError("no such table: x")))
    with pytest.raises(sqlite3.OperationalError, match="locked"):
        retry_locked(lambda: (_ for _ in ()).throw(sqlite3.OperationalError("database is locked")), timeout_s=0.05)
