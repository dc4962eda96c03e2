"""Online evolution beside any harness: one process per task, many at once, one shared stream.

Fast tests drive the engine from concurrent processes with a fake evaluator (rounds serialized
by the registry lease, no lost or duplicated events, a task keeps its bundle), the lease's
expiry after its holder is killed, and one real `evogym run -- ole agent work --online` task.
The slow test runs `evogym suite run --jobs 2` twice with an injected harmful release between
them (a command agent that obeys its brief; the harm's wall-clock cap kills it before any
submit): gate decisions, an activation at a task boundary and a rollback.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from collections import Counter
from pathlib import Path

import pytest

from ole.registry.lease import Lease, LeaseTimeout
from ole.registry import DB_FILE, Registry
from ole.trace import TraceArchive

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
PY = sys.executable

TASK = """
    import sys, time
    from pathlib import Path
    from ole.evolve import EvolveConfig, Suite
    from ole.evolve.online import OnlineConfig
    from ole.gate import GateConfig
    from ole.chosen import ChosenVersion
    from ole.jobs import EvalJob
    from ole.proposers.builtin import BuiltinProposer
    from ole.registry import Registry
    from ole.trace import RunCondition, TaskSpec
    import synthetic
    tmp, i = Path(sys.argv[1]), int(sys.argv[2])
    cfg = EvolveConfig(suite=Suite(envs=("gym/acrobot", "gymnasium/MiniGrid-FourRooms-v0"), budget=8), gate_budgets=(8,),
                       search_pools=(101,), gate_pools=(201, 202, 203), seed=3)
    online = OnlineConfig(every_k=2, gate_on="pools")  # rounds gate on pools here: the lease serializes them
    from ole.evolve import open_engine
    from ole.evolve.online import OnlineEvolution
    from ole.executors import LocalExecutor
    with Registry(tmp / "bundles") as reg:
        engine = open_engine(registry=reg, workdir=tmp / "work", traces_root=tmp / "work" / "traces", cfg=cfg,
                             evaluate=synthetic.paced_evaluate, proposer=BuiltinProposer(), gate=GateConfig(min_pairs=6, min_families=2, max_pairs=None),
                             executor=LocalExecutor(1), progress=lambda line: None,
                             driver={"mode": "online-harness", **online.model_dump(mode="json", exclude={"tasks", "stream_pool_base"})})
        evo = OnlineEvolution(engine, cfg, online, external=True)
        cond = RunCondition(host="builtin", seed=0)
        env = cfg.suite.envs[i % 2]
        from ole.registry.scopes import task_context
        a = evo.ask(condition=cond, ctx=task_context(env, "builtin", 8))
        bundle = reg.get(a.bundle_ref).bundle
        time.sleep(0.3)  # a task in flight: others may release and activate meanwhile
        trace = synthetic.fake_evaluate(EvalJob(chosen=ChosenVersion(a.bundle_ref, bundle), runs_root=str(tmp / "r"),
                                                task=TaskSpec(env=env, budget=8, pool_seed=500 + i), condition=cond))
        trace = trace.model_copy(update={"trace_id": f"task-{i}"})
        engine.archive.append(trace)
        evo.tell(trace)
        print(a.bundle_ref, trace.bundle_hash, flush=True)
"""


def tiny_gate_yaml() -> str:
    """The default gate with room for one- or two-pair samples and no adaptive extension, and a
    monitor that may decide on one pair (a mechanism test: the guarantee is tested in test_monitor.py)."""
    import yaml

    from ole.gate import load_config
    from ole.monitor import AnalysisConfig
    quick = AnalysisConfig(exposure=1.0, clip=1.0, alpha_rollback=0.7, alpha_promote=0.55, prior_harm=1.0,
                           prior_sd=0.01, deadline=4)  # one failed canary task (r = -1) bets ~1: wealth ~2 >= 1/0.56
    # (a canary's paired test gets 4/5 of alpha_rollback, 0.56; the failure-count test the rest)
    cfg = load_config().model_copy(update={"min_pairs": 2, "min_families": 1, "max_pairs": None, "analysis": quick})
    return yaml.safe_dump(cfg.model_dump(mode="json"))

def _workspace(tmp: Path) -> Path:
    (tmp / "bundles").mkdir(parents=True)
    shutil.copy(ROOT / "bundles" / "coder.yaml", tmp / "bundles")
    return tmp


def _task(tmp: Path, i: int) -> subprocess.Popen:
    return subprocess.Popen([PY, "-c", textwrap.dedent(TASK), str(tmp), str(i)], cwd=ROOT, text=True,
                            env={**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), str(ROOT)])},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


@pytest.mark.heavy
def test_parallel_tasks_share_one_stream_and_rounds_are_serialized(tmp_path):
    tmp = _workspace(tmp_path)
    procs, results = [], []
    for i in range(8):  # four at a time, like `evogym suite run --jobs 4`
        procs.append(_task(tmp, i))
        if len(procs) == 4:
            for p in procs:
                out, err = p.communicate(timeout=300)
                assert p.returncode == 0, err[-3000:]
                results.append(out.split())
            procs = []
    with Registry(tmp / "bundles") as reg:
        events = reg.events()
        for ref, worked_hash in results:  # every task was worked by the bundle fixed at its boundary
            assert reg.get(ref).content_hash == worked_hash
        kinds = Counter(e.kind for e in events)
    import sqlite3
    with sqlite3.connect(tmp / "work" / "evaluations.sqlite3") as db:
        rows = db.execute("SELECT trace_id FROM stream").fetchall()
        steps = dict(db.execute("SELECT step, payload FROM steps WHERE step LIKE 'round|%'").fetchall())
    assert len(rows) == len({r[0] for r in rows}) == 8  # no task lost or counted twice
    assert sorted(steps) == [f"round|{r}" for r in (1, 2, 3, 4)]
    gated = [json.loads(p) for p in steps.values() if "verdict" in json.loads(p)]
    assert kinds["gate_decision"] == len(gated) >= 1  # one decision per round that gated, never two
    assert kinds["release"] == sum(g["verdict"] == "release" for g in gated)
    assert kinds["activation"] <= kinds["release"] + kinds["rollback"]
    spans = sorted((json.loads(p)["started"], json.loads(p)["ended"]) for p in steps.values())
    assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:]))  # rounds never overlap in time (the lease)
    order = [e.kind if e.kind != "stage" else e.payload["stage"] for e in events
             if e.kind in ("release", "activation", "stage")]
    text = ",".join(o for o in order if o not in ("look",))
    assert "release,release" not in text  # a pending release (or a running canary) blocks the next round
    # every monitor pair and every stage step is recorded once, whichever process made it (the lease)
    pairs = [e.payload["trace_id"] for e in events if e.kind == "evaluation" and e.payload.get("stage") == "monitor"]
    assert len(pairs) == len(set(pairs))
    ends = [(e.payload["canary_seq"]) for e in events if e.kind == "stage" and e.payload["stage"] != "canary"]
    assert len(ends) == len(set(ends))
    starts = [e.payload["release_seq"] for e in events if e.kind == "stage" and e.payload["stage"] == "canary"]
    assert len(starts) == len(set(starts))
    gate_keys = [e.payload["challenger"] for e in events if e.kind == "gate_decision"]
    assert len(gate_keys) == len(set(gate_keys))


def test_a_dead_holders_lease_expires_and_a_live_one_is_waited_for(tmp_path):
    db = tmp_path / DB_FILE
    holder = subprocess.Popen([PY, "-c", textwrap.dedent(f"""
        import time
        from ole.registry.lease import Lease
        Lease({str(db)!r}, "round:default", "dead", ttl_s=2.0).acquire()
        print("held", flush=True)
        time.sleep(600)
    """)], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    with pytest.raises(LeaseTimeout, match="held by dead"):
        Lease(db, "round:default", "me", wait_s=0.5).acquire()
    holder.send_signal(signal.SIGKILL)  # the holder dies without releasing
    holder.wait()
    t0 = time.monotonic()
    with Lease(db, "round:default", "me", wait_s=10.0):
        assert time.monotonic() - t0 < 5.0
        assert Lease(db, "round:default", "other", wait_s=0.3).try_acquire() == "me"
    assert Lease(db, "round:default", "other").try_acquire() is None


INSTRUCTED = ROOT / "experiments" / "agents" / "instructed_agent.py"


def _agent(root: Path, work: Path, *extra: str, command: bool = False) -> str:
    tail = ["--agent", "command", "--", PY, str(INSTRUCTED)] if command else []
    return " ".join([PY, "-m", "ole.cli", "--root", str(root), "agent", "work", "--online", "--workdir", str(work),
                     "--isolation", "none", *extra, *tail])


@pytest.mark.heavy
@pytest.mark.sandbox
def test_one_harness_task_leaves_a_verified_trace_read_from_the_hosts_run_json(tmp_path):
    tmp = _workspace(tmp_path)
    agent = _agent(tmp / "bundles", tmp / "work", "--every-k", "100")
    out = subprocess.run([PY, "-m", "evogym.cli", "run", "--env", "gym/acrobot", "--run-dir", str(tmp / "run"),
                          "--budget", "4", "--isolation", "none", "--", *agent.split()],
                         capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert out.returncode == 0, out.stdout + out.stderr
    log = (tmp / "run" / "logs" / "agent.log").read_text()
    summary = json.loads(log.strip().splitlines()[-1])
    assert summary["archived"] and summary["bundle"] == "coder@1" and summary["stream_tasks"] == 1
    trace = TraceArchive(tmp / "work" / "traces").get(summary["trace_id"])
    doc = json.loads((tmp / "run" / "run.json").read_text())
    assert trace.outcome.final_score == doc["outcome"]["final_score"] and trace.verified
    assert trace.task.profile == "quick" and trace.task.pool_seed == 0 and trace.task.budget == 4
    from ole.trace import run_json_digest
    assert trace.run_json_sha256 == run_json_digest(tmp / "run" / "run.json")
    subprocess.run([PY, "-m", "evogym.cli", "run", "--env", "gym/acrobot", "--run-dir", str(tmp / "run2"),
                   "--budget", "4", "--isolation", "none", "--",
                   *_agent(tmp / "bundles", tmp / "work", "--every-k", "5").split()],
                   capture_output=True, text=True, timeout=600, cwd=ROOT)
    log2 = (tmp / "run2" / "logs" / "agent.log").read_text()
    assert "another configuration" in log2 and "use a new --workdir" in log2  # one stream, one config


def _suite(tmp: Path, envs: list[str], jobs: int, agent: str, out: str) -> subprocess.CompletedProcess:
    return subprocess.run([PY, "-m", "evogym.cli", "suite", "run", "--envs", *envs, "--jobs", str(jobs),
                           "--profile", "quick", "--budget", "2", "--isolation", "none", "--out", str(tmp / out),
                           "--agent", agent], capture_output=True, text=True, timeout=1500, cwd=ROOT)


def harmful_release(root: Path) -> str:
    """Release a child of the champion whose wall-clock cap kills the command agent before its first submit."""
    with Registry(root) as reg:
        champ = reg.champion()
        lp = champ.bundle.loop_policy
        bad = reg.register(champ.bundle.model_copy(update={"loop_policy": lp.model_copy(update={
            "budget": lp.budget.model_copy(update={"wall_time_s": 0.001})})}), parents=[champ.version],
            note="injected harmful release")
        reg.release(bad.ref, reason="injected harmful release (wall_time_s 0.001)", exposure=1.0)
        return bad.ref


@pytest.mark.slow
@pytest.mark.sandbox
def test_a_suite_stream_gates_activates_at_a_boundary_and_rolls_back_an_injected_harm(tmp_path):
    tmp = _workspace(tmp_path)
    gate = tmp / "gate.yaml"
    gate.write_text(tiny_gate_yaml())
    agent = _agent(tmp / "bundles", tmp / "work", "--every-k", "2", "--gate-envs", "gym/acrobot",
                   "--gate-pools", "201,202", "--gate-budget", "2", "--gate-config", str(gate), "--gate-on", "pools",
                   command=True)
    first = _suite(tmp, ["gym/acrobot", "gymnasium/MiniGrid-FourRooms-v0"], 2, agent, "suite1")
    assert first.returncode == 0, first.stdout + first.stderr
    with Registry(tmp / "bundles") as reg:
        assert [e.kind for e in reg.events()].count("gate_decision") == 1  # round 1 after task 2
        before = reg.champion().ref
        staged_already = reg.canaries()
    bad = harmful_release(tmp / "bundles")
    second = _suite(tmp, ["gym/acrobot", "gym/reacher5"], 1, agent, "suite2")
    assert second.returncode == 0, second.stdout + second.stderr
    with Registry(tmp / "bundles") as reg:
        events = reg.events()
        stages = [(e.ref, e.payload["stage"]) for e in events if e.kind == "stage" and e.ref == bad]
        assert stages == [(bad, "canary"), (bad, "rolled_back")], (stages, staged_already)
        assert not [e for e in events if e.kind == "activation" and e.ref == bad]  # a canary never moved a pointer
        end = [e for e in events if e.kind == "stage" and e.ref == bad][-1]
        assert "harm shown" in end.payload["reason"] and end.payload["monitor"]["analysis_hash"]
        monitor = [e for e in events if e.kind == "evaluation" and e.payload.get("stage") == "monitor"
                   and e.ref == bad]
        assert len(monitor) == 1 and monitor[0].payload["r"] < -0.1
        assert reg.champion().ref == before and reg.get(bad).status == "rolled_back"
        # every trace the monitor named exists: the failed canary run too, as a host-recorded failure
        assert reg.fsck(repair=False, traces=[tmp / "work" / "traces"]).ok
    import sqlite3
    with sqlite3.connect(tmp / "work" / "evaluations.sqlite3") as db:
        worked = [json.loads(p)["bundle_ref"] for (p,) in db.execute("SELECT payload FROM stream ORDER BY n")]
    assert len(worked) == 4 and worked[2] == bad and worked[3] != bad
    failed = [t for t in TraceArchive(tmp / "work" / "traces") if f"{t.bundle_name}@{t.bundle_version}" == bad]
    assert len(failed) == 1 and not failed[0].verified and failed[0].host_recorded


@pytest.mark.slow
@pytest.mark.sandbox
def test_online_harness_experiment_smoke(tmp_path):
    out = tmp_path / "report.md"
    gate = tmp_path / "gate.yaml"
    gate.write_text(tiny_gate_yaml())
    subprocess.run([PY, str(ROOT / "experiments" / "online_harness.py"), "--envs", "gym/acrobot,gym/reacher5",
                    "--budget", "2", "--jobs", "1", "--every-k", "2", "--gate-envs", "gym/acrobot",
                    "--gate-pools", "201,202", "--isolation", "none", "--agent", "command",
                    "--gate-config", str(gate), "--workdir", str(tmp_path / "work"),
                    "--out", str(out)], check=True, cwd=ROOT, timeout=1500)
    text = out.read_text()
    assert "| n | phase |" in text and "→ **canary**" in text and "→ **rolled_back**" in text


def test_a_lease_of_a_dead_process_on_this_host_is_free_at_once(tmp_path):
    import socket
    gone = subprocess.run([PY, "-c", "import os; print(os.getpid())"], capture_output=True, text=True).stdout.strip()
    db = tmp_path / DB_FILE
    assert Lease(db, "round:default", f"{socket.gethostname()}:{gone}:x", ttl_s=600).try_acquire() is None
    assert Lease(db, "round:default", "me").try_acquire() is None  # no TTL wait: the holder is gone
    assert Lease(db, "round:default", "other").try_acquire() == "me"  # a live (unknown-host) holder is waited for


def _stage_two_scopes(root: Path) -> tuple[str, str]:
    """Two staged releases on every task of their own env: a harmful one for acrobot (worst_k 0: -40 %
    in the fake) and a good one for FourRooms (retest 8: +15 %), each scoped to its env id."""
    with Registry(root) as reg:
        champ = reg.champion()
        refs = []
        for env, comp, field, value in (("gym/acrobot", "observation", "worst_k_episodes", 0),
                                        ("gymnasium/MiniGrid-FourRooms-v0", "verification", "retest_episodes", 8)):
            lp = champ.bundle.loop_policy
            data = champ.bundle.model_dump(mode="json")
            data["loop_policy"][comp][field] = value
            data["applicability"]["env_ids"] = [env]
            data["provenance"] = {"parents": [1], "edge": "specialization", "mode": "manual"}
            from ole.bundle import bundle_from_data
            refs.append(reg.register(bundle_from_data(data), parents=[1], edge="specialization").ref)
            reg.release(refs[-1], reason=f"staged for {env}", exposure=1.0)
            assert lp is not None
        return refs[0], refs[1]


@pytest.mark.heavy
def test_stage_steps_are_recorded_once_per_scope_under_concurrent_processes(tmp_path):
    tmp = _workspace(tmp_path)
    harmful, good = _stage_two_scopes(tmp / "bundles")
    results = []
    for wave in range(4):  # 16 tasks, four processes at a time, both envs in every wave
        procs = [_task(tmp, 4 * wave + i) for i in range(4)]
        for p in procs:
            out, err = p.communicate(timeout=300)
            assert p.returncode == 0, err[-3000:]
            results.append(out.split())
    with Registry(tmp / "bundles") as reg:
        events = reg.events()
        stages = Counter((e.ref, e.payload["stage"], e.payload["scope"]) for e in events if e.kind == "stage")
        assert stages[(harmful, "canary", "envs=gym/acrobot")] == 1
        assert stages[(harmful, "rolled_back", "envs=gym/acrobot")] == 1
        assert stages[(good, "canary", "envs=gymnasium/MiniGrid-FourRooms-v0")] == 1
        assert stages[(good, "promoted", "envs=gymnasium/MiniGrid-FourRooms-v0")] <= 1  # once, if it got there
        pairs = [e.payload["trace_id"] for e in events if e.kind == "evaluation" and e.payload.get("stage") == "monitor"]
        assert len(pairs) == len(set(pairs))  # every monitor pair made once, whichever process made it
        looks = [(e.payload["canary"], e.payload["n"]) for e in events
                 if e.kind == "evaluation" and e.payload.get("stage") == "monitor-look"]
        assert len(looks) == len(set(looks))  # one look per pair count per canary
        assert reg.get(harmful).status == "rolled_back" and reg.champion().ref == "coder@1"
