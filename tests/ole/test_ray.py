"""The Ray executor on a real local Ray cluster (`ray.init` with 2 CPUs, started by the test).

Parity with local processes on the same jobs, a worker killed mid-job retried without
double-counting, resume after the driver is killed, and (slow) a real end-to-end evolve run.
Only the driver writes the registry, the store and the archive; Ray tasks only return traces.
"""
from __future__ import annotations

import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from collections import Counter
from pathlib import Path

import pytest

ray = pytest.importorskip("ray", reason="the `ray` extra is not installed (pip install '.[ray]')")

from ole.bundle import Bundle  # noqa: E402
from ole.chosen import ChosenVersion  # noqa: E402
from ole.evolve.store import EvaluationStore  # noqa: E402
from ole.executors import LocalExecutor, RayExecutor  # noqa: E402
from ole.loop_policy import LoopPolicy  # noqa: E402
from ole.paired import MemoryStore, PairedEvaluation  # noqa: E402
from ole.registry import Registry  # noqa: E402
from ole.trace import RunCondition, TaskSpec, TraceArchive  # noqa: E402
from synthetic import die_once_evaluate, fake_evaluate  # noqa: E402

pytestmark = pytest.mark.ray
HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
CHAMP = Bundle(name="coder", loop_policy=LoopPolicy())
BETTER = CHAMP.model_copy(update={"loop_policy": LoopPolicy().model_copy(update={
    "verification": LoopPolicy().verification.model_copy(update={"retest_episodes": 8})})})
INSTANCES = [(TaskSpec(env=env, budget=16, pool_seed=p), RunCondition(host="builtin", seed=0))
             for env in ("gym/acrobot", "gymnasium/MiniGrid-FourRooms-v0") for p in (1, 2, 3)]


def tiny_gate_yaml() -> str:
    """The default gate with room for one- or two-pair samples and no adaptive extension."""
    import yaml

    from ole.gate import load_config
    cfg = load_config().model_copy(update={"min_pairs": 2, "min_families": 1, "max_pairs": None})
    return yaml.safe_dump(cfg.model_dump(mode="json"))

def _workers_path() -> str:
    return os.pathsep.join([str(HERE), str(ROOT), os.environ.get("PYTHONPATH", "")])


@pytest.fixture(scope="module")
def cluster():
    """One real local Ray (2 CPUs) for the module; workers can import the test helpers."""
    old = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = _workers_path()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, object_store_memory=128 << 20)
    yield
    ray.shutdown()
    if old is None:
        os.environ.pop("PYTHONPATH", None)
    else:
        os.environ["PYTHONPATH"] = old


def _paired(executor, evaluate, tmp: Path, store=None, on_result=lambda job, res: None):
    return PairedEvaluation(executor, store if store is not None else MemoryStore(), evaluate,
                            traces_root=str(tmp / "traces"), runs_root=str(tmp / "runs"), on_result=on_result)


@pytest.mark.heavy
def test_ray_gives_the_same_pairs_as_local_processes(cluster, tmp_path):
    with LocalExecutor(2) as local:
        expected = _paired(local, fake_evaluate, tmp_path / "local").pairs(
            ChosenVersion("coder@1", CHAMP), [ChosenVersion("coder@2", BETTER)], INSTANCES)
    got = _paired(RayExecutor(2), fake_evaluate, tmp_path / "ray").pairs(
        ChosenVersion("coder@1", CHAMP), [ChosenVersion("coder@2", BETTER)], INSTANCES)
    assert got == expected and len(got["coder@2"]) == len(INSTANCES)


@pytest.mark.heavy
def test_a_worker_killed_mid_job_is_retried_without_double_counting(cluster, tmp_path):
    seen: list[tuple[str, str, int]] = []
    store = EvaluationStore(tmp_path / "evals.sqlite3")
    pe = _paired(RayExecutor(2), die_once_evaluate, tmp_path, store,
                 on_result=lambda job, res: seen.append((job.bundle_hash, f"{job.task.env}|{job.task.pool_seed}",
                                                         res.episodes)))
    pairs = pe.pairs(ChosenVersion("coder@1", CHAMP), [ChosenVersion("coder@2", BETTER)], INSTANCES)["coder@2"]
    died = list((tmp_path / "runs").glob("*.died"))
    assert len(died) == 8  # 2 bundles x 2 envs x odd pool seeds 1 and 3: each such job killed its worker once
    n_jobs = 2 * len(INSTANCES)
    assert len(seen) == len(set(seen)) == n_jobs  # one result per job, none counted twice
    assert sum(ep for *_, ep in seen) == 16 * n_jobs
    assert store.count() == n_jobs and len(TraceArchive(tmp_path / "traces").ids()) == n_jobs
    with LocalExecutor(1) as local:
        assert pairs == _paired(local, fake_evaluate, tmp_path / "ref").pairs(
            ChosenVersion("coder@1", CHAMP), [ChosenVersion("coder@2", BETTER)], INSTANCES)["coder@2"]


DRIVER = """
    import shutil, sys
    from pathlib import Path
    from ole.evolve import EvolveConfig, Suite, open_engine
    from ole.evolve.offline import OfflineEvolution
    from ole.executors import make_executor
    from ole.gate import GateConfig
    from ole.proposers.builtin import BuiltinProposer
    from ole.registry import Registry
    import synthetic
    tmp, kind = Path(sys.argv[1]), sys.argv[2]
    cfg = EvolveConfig(suite=Suite(envs=("gym/acrobot", "gymnasium/MiniGrid-FourRooms-v0"), budget=8), gate_budgets=(8,),
                       search_pools=(101,), gate_pools=(201, 202, 203), population=2, generations=1, seed=1)
    reg = Registry(tmp / "bundles")
    evaluate = synthetic.slow_logged_evaluate if kind == "ray" else synthetic.fake_evaluate
    with make_executor(kind, workers=2) as ex:
        engine = open_engine(registry=reg, workdir=tmp / "work", traces_root=tmp / "traces", cfg=cfg,
                             evaluate=evaluate, proposer=BuiltinProposer(), gate=GateConfig(min_pairs=6, min_families=2, max_pairs=None),
                             executor=ex, progress=lambda line: None, driver={"mode": "offline"})
        champ = reg.champion()
        report = OfflineEvolution(engine, cfg, champ.ref, champ.bundle).run()
        print(report.retained, [(g.final, g.decision.verdict) for g in report.gates], report.released, flush=True)
"""


def _driver(tmp: Path, kind: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(DRIVER), str(tmp), kind], cwd=ROOT,
                            env={**os.environ, "PYTHONPATH": _workers_path()}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)


def _workspace(tmp: Path) -> Path:
    (tmp / "bundles").mkdir(parents=True)
    shutil.copy(ROOT / "bundles" / "coder.yaml", tmp / "bundles")
    return tmp


def _stored(tmp: Path) -> set[str]:
    path = tmp / "work" / "evaluations.sqlite3"
    if not path.exists():
        return set()
    with sqlite3.connect(path, timeout=30) as db:
        try:
            return {r[0] for r in db.execute("SELECT key FROM evaluations")}
        except sqlite3.OperationalError as e:  # the store's file exists before its table
            if "no such table" not in str(e):
                raise
            return set()


@pytest.mark.slow
def test_resume_after_the_driver_is_killed(tmp_path):
    clean = _workspace(tmp_path / "clean")
    out, _ = _driver(clean, "local").communicate(timeout=300)
    expected = Counter(e.kind for e in Registry(clean / "bundles").events())
    work = _workspace(tmp_path / "killed")
    proc = _driver(work, "ray")
    deadline = time.monotonic() + 240
    while len(_stored(work)) < 4 and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGKILL)  # the driver, its local Ray and its workers
    proc.wait()
    before = _stored(work)
    assert len(before) >= 4, proc.stderr.read()[-2000:]
    calls_before = (work / "work" / "runs" / "calls.log").read_text().split()
    again = _driver(work, "ray")
    out2, err2 = again.communicate(timeout=300)
    assert again.returncode == 0, err2[-3000:]
    assert out2.strip() == out.strip()
    calls_after = (work / "work" / "runs" / "calls.log").read_text().split()[len(calls_before):]
    assert not set(calls_after) & before  # nothing stored before the kill was run again
    assert Counter(e.kind for e in Registry(work / "bundles").events()) == expected


@pytest.mark.slow
@pytest.mark.sandbox
def test_ole_evolve_on_ray_end_to_end(tmp_path):
    """Real runs (built-in agent, real hosts) as Ray tasks through the CLI; only the driver writes."""
    import json
    root = _workspace(tmp_path)
    gate = tmp_path / "gate.yaml"
    gate.write_text(tiny_gate_yaml())
    out = subprocess.run(
        [sys.executable, "-m", "ole.cli", "--root", str(root / "bundles"), "evolve", "--mode", "offline", "--json",
         "--executor", "ray", "--workers", "2", "--envs", "gym/acrobot", "--budget", "2", "--search-pools", "101",
         "--gate-pools", "201,202", "--gate-budgets", "2", "--population", "1", "--generations", "1", "--gate-config", str(gate),
         "--workdir", str(tmp_path / "work"), "--traces", str(tmp_path / "traces")],
        capture_output=True, text=True, timeout=900, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    data = json.loads(out.stdout)
    # the champion's bootstrap run and the candidate's search run; a gate (only when the search
    # showed a gain on some env: its scope) adds 2 pools x 2 bundles at budget 2
    gated = len(data["gates"])
    assert gated <= 1 and all(g["verdict"] in ("release", "reject", "indecisive") for g in data["gates"])
    runs = 2 + 4 * gated
    assert data["spent"]["episodes"] == 2 * runs
    with Registry(root / "bundles") as reg:
        assert [e.kind for e in reg.events()].count("gate_decision") == gated
    assert len(TraceArchive(tmp_path / "traces").ids()) == runs
