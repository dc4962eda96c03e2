"""Paired evaluation: identical instances, champion cache, failure-aware pairs, store resumption."""
from __future__ import annotations

import pytest

from ole.bundle import Bundle
from ole.chosen import ChosenVersion
from ole.evolve.store import EvaluationStore
from ole.executors import LocalExecutor
from ole.loop_policy import LoopPolicy
from ole.paired import MemoryStore, PairedEvaluation, instance_key, value_score
from ole.trace import RunCondition, TaskSpec
from synthetic import fake_evaluate, make_trace

CHAMP = Bundle(name="coder", loop_policy=LoopPolicy())


def _variant(**verification) -> Bundle:
    lp = LoopPolicy()
    return CHAMP.model_copy(update={"loop_policy": lp.model_copy(
        update={"verification": lp.verification.model_copy(update=verification)})})


BETTER = _variant(retest_episodes=8)
INSTANCES = [(TaskSpec(env=env, budget=16, pool_seed=p), RunCondition(host="builtin", seed=s))
             for env in ("gym/acrobot", "gymnasium/MiniGrid-FourRooms-v0") for p in (1, 2) for s in (0,)]


class Counting:
    def __init__(self):
        self.calls = 0

    def __call__(self, job):
        self.calls += 1
        return fake_evaluate(job)


def _evaluator(store, evaluate, workers=1):
    import tempfile
    return PairedEvaluation(LocalExecutor(workers), store, evaluate, traces_root=tempfile.mkdtemp(), runs_root="r")


def test_pairs_share_instances_and_champion_runs_are_cached():
    counting = Counting()
    pe = _evaluator(MemoryStore(), counting)
    out = pe.pairs(ChosenVersion("coder@1", CHAMP), [ChosenVersion("coder@2", BETTER)], INSTANCES)
    assert counting.calls == 2 * len(INSTANCES)
    pairs = out["coder@2"]
    assert [(p.task, p.condition) for p in pairs] == INSTANCES
    assert all(abs(p.r - 0.15) < 0.01 and p.failure == "none" for p in pairs)
    assert {p.family for p in pairs} == {"curated", "minigrid"}
    worse = _variant(retest_episodes=8, margin=0.5)
    pe.pairs(ChosenVersion("coder@1", CHAMP), [ChosenVersion("coder@3", worse)], INSTANCES)
    assert counting.calls == 3 * len(INSTANCES)  # champion runs reused


def test_failed_challenger_gets_the_bounded_change():
    crash = CHAMP.model_copy(update={"loop_policy": LoopPolicy().model_copy(
        update={"recovery": LoopPolicy().recovery.model_copy(update={"max_retries": 10})})})
    pairs = _evaluator(MemoryStore(), fake_evaluate).pairs(ChosenVersion("coder@1", CHAMP), [ChosenVersion("coder@2", crash)], INSTANCES)
    assert all(p.r == -1.0 and p.failure == "challenger" and p.challenger.status == "error"
               for p in pairs["coder@2"])


def test_sqlite_store_resumes_without_re_spending(tmp_path):
    store = EvaluationStore(tmp_path / "evals.sqlite3")
    first = Counting()
    a = _evaluator(store, first).pairs(ChosenVersion("coder@1", CHAMP), [ChosenVersion("coder@2", BETTER)], INSTANCES)
    store.close()
    again = Counting()
    b = _evaluator(EvaluationStore(tmp_path / "evals.sqlite3"), again).pairs(
        ChosenVersion("coder@1", CHAMP), [ChosenVersion("coder@2", BETTER)], INSTANCES)
    assert again.calls == 0 and a == b


def test_process_pool_gives_the_same_pairs_as_serial():
    serial = _evaluator(MemoryStore(), fake_evaluate).pairs(ChosenVersion("coder@1", CHAMP), [ChosenVersion("coder@2", BETTER)], INSTANCES)
    pooled = _evaluator(MemoryStore(), fake_evaluate, workers=2)
    try:
        parallel = pooled.pairs(ChosenVersion("coder@1", CHAMP), [ChosenVersion("coder@2", BETTER)], INSTANCES)
    finally:
        pooled.executor.close()
    assert parallel == serial


def test_value_score_prefers_normalized_then_anchors_then_raw():
    assert value_score(make_trace("a", [1.0], normalized=55.0)) == (55.0, "normalized")
    q, src = value_score(make_trace("b", [1.0], final=-100.0, env="gym/acrobot"))
    assert src == "normalized" and 0.0 <= q <= 120.0
    assert value_score(make_trace("c", [1.0], final=3.0, env="gymnasium/CartPole-v1")) == (3.0, "raw")
    assert value_score(make_trace("d", [None], status="error")) == (None, "none")


def test_instance_key_separates_pools_and_seeds():
    t, c = INSTANCES[0]
    assert instance_key(t, c) != instance_key(t.model_copy(update={"pool_seed": 9}), c)
    assert instance_key(t, c) != instance_key(t, c.model_copy(update={"seed": 9}))


@pytest.mark.slow
@pytest.mark.sandbox
def test_paired_scaling_experiment_smoke(tmp_path):
    import subprocess
    import sys
    from pathlib import Path
    root = Path(__file__).resolve().parents[2]
    out = tmp_path / "report.md"
    subprocess.run([sys.executable, str(root / "experiments" / "paired_scaling.py"), "--envs", "gym/acrobot",
                    "--pools", "2", "--budget", "2", "--workers", "1,2", "--workdir", str(tmp_path / "work"),
                    "--out", str(out)], check=True, cwd=root, timeout=600)
    assert "| local | 2 |" in out.read_text() and "NO" not in out.read_text()


class Recording:
    """An executor that runs jobs serially and remembers the order it was given them in."""

    kind, workers = "recording", 1

    def __init__(self):
        self.order = []

    def run(self, fn, jobs):
        self.order = [(j.bundle_ref, j.task.env) for j in jobs]
        for i, job in enumerate(jobs):
            yield i, fn(job)


def test_batch_starts_the_longest_runs_first_and_pairs_do_not_depend_on_it():
    from ole.cost import run_wall
    rec = Recording()
    pe = PairedEvaluation(rec, MemoryStore(), fake_evaluate, traces_root=__import__("tempfile").mkdtemp(),
                          runs_root="r")
    out = pe.pairs(ChosenVersion("coder@1", CHAMP), [ChosenVersion("coder@2", BETTER)], INSTANCES)
    walls = [run_wall(env) for _, env in rec.order]
    assert walls == sorted(walls, reverse=True) and walls[0] > walls[-1]
    assert rec.order[:3] == [("coder@1", "gym/acrobot"), ("coder@1", "gym/acrobot"), ("coder@2", "gym/acrobot")]
    serial = _evaluator(MemoryStore(), fake_evaluate).pairs(ChosenVersion("coder@1", CHAMP), [ChosenVersion("coder@2", BETTER)], INSTANCES)
    assert [(p.task, p.r, p.champion.score) for p in out["coder@2"]] == \
        [(p.task, p.r, p.champion.score) for p in serial["coder@2"]]


def test_baseline_execution_starts_jobs_as_listed_and_fast_longest_first(tmp_path):
    """`execution` reaches every job; `fast` reorders a batch (longest runs first), `baseline`
    keeps the listed order; an unknown execution is refused. Results are the same."""
    from ole.chosen import ChosenVersion
    from ole.errors import ValidationError

    seen: dict[str, list] = {}

    def make(execution):
        def evaluate(job):
            seen.setdefault(execution, []).append((job.task.env, job.execution))
            return fake_evaluate(job)
        return PairedEvaluation(LocalExecutor(1), MemoryStore(), evaluate, traces_root=str(tmp_path / execution),
                                runs_root=str(tmp_path / execution), execution=execution)
    instances = [(TaskSpec(env=e, budget=8, pool_seed=1), RunCondition(host="builtin"))
                 for e in ("gym/acrobot", "gym/halfcheetah5")]
    results = {}
    for execution in ("fast", "baseline"):
        out = make(execution).run([ChosenVersion(ref="coder@1", bundle=CHAMP)], instances)
        results[execution] = {k: v[0].score for k, v in out.items()}
    assert seen["baseline"] == [("gym/acrobot", "baseline"), ("gym/halfcheetah5", "baseline")]
    assert seen["fast"] == [("gym/halfcheetah5", "fast"), ("gym/acrobot", "fast")]
    assert results["fast"] == results["baseline"]
    with pytest.raises(ValidationError, match="unknown execution"):
        make("quick")
