"""The cross-run hidden-evaluation cache: exact keys, clean batches only, one computation per key."""
from __future__ import annotations

import dataclasses
import json
import threading
import time

import pytest

from evogym.evalcache import EvalCache, evaluate, job_key
from evogym.rollout import EpisodeJob, run_episodes
from evogym.sandbox import Limits

SWING = """
class Policy:
    def __init__(self, o, a, m): pass
    def reset(self, i): pass
    def act(self, obs):
        return 0 if obs[4] > 0 else 2
"""
RAISES = SWING.replace("return 0 if obs[4] > 0 else 2", "raise ValueError('no')")
META = {"env": "gym/acrobot", "submit_index": 0, "n_episodes_this_submit": 2}


def _job(code_dir, **changes) -> EpisodeJob:
    job = EpisodeJob("gym/acrobot", str(code_dir), (11, 22), META, Limits(), "bwrap", record=False)
    return dataclasses.replace(job, **changes)


@pytest.fixture
def tree(tmp_path):
    code = tmp_path / "ckpt"
    code.mkdir()
    (code / "policy.py").write_text(SWING)
    (code / "metrics.json").write_text("{}")
    return code


@pytest.mark.parametrize("change", [
    {"seeds": (11, 23)}, {"seeds": (22, 11)}, {"policy_env_meta": {**META, "submit_index": 1}},
    {"limits": Limits(act_wall_s=1.0)}, {"isolation": "none"}, {"max_steps": 50}, {"slug": "gym/pendulum"},
])
def test_every_input_changes_the_key(tree, change):
    assert job_key(_job(tree)) == job_key(_job(tree))
    assert job_key(_job(tree, **change)) != job_key(_job(tree))


def test_any_byte_of_the_checkpoint_changes_the_key(tree, tmp_path):
    other = tmp_path / "copy"
    other.mkdir()
    for f in tree.iterdir():
        (other / f.name).write_bytes(f.read_bytes())
    assert job_key(_job(other)) == job_key(_job(tree))  # a copy elsewhere: same program, same key
    (other / "metrics.json").write_text("{} ")
    assert job_key(_job(other)) != job_key(_job(tree))
    (other / "metrics.json").write_text("{}")
    (other / "helper.py").write_text("")
    assert job_key(_job(other)) != job_key(_job(tree))


def test_a_stored_batch_is_the_batch_and_holds_no_seed(tree, tmp_path):
    cache = EvalCache(tmp_path / "cache")
    job = _job(tree)
    ran = run_episodes(job)
    assert cache.put(job_key(job), ran)
    got = cache.get(job_key(job))
    assert got.returns == ran.returns and got.failures == 0 and got.start_failure is None
    stored = [p for p in (tmp_path / "cache").rglob("*.json")]
    assert len(stored) == 1 and set(json.loads(stored[0].read_text())) == {"schema_version", "returns", "lengths"}
    assert "11" not in stored[0].read_text().replace(str(ran.returns), "")


def test_a_batch_with_a_failed_episode_is_not_stored(tmp_path):
    code = tmp_path / "bad"
    code.mkdir()
    (code / "policy.py").write_text(RAISES)
    cache = EvalCache(tmp_path / "cache")
    job = _job(code)
    batch = run_episodes(job)
    assert batch.failures == 2 and not cache.put(job_key(job), batch)
    results, sources = evaluate([job], lambda todo: [run_episodes(j) for j in todo], cache)
    assert sources == ["run"] and results[0].failures == 2 and cache.get(job_key(job)) is None


def test_evaluate_runs_each_key_once_and_reads_it_after(tree, tmp_path):
    cache = EvalCache(tmp_path / "cache")
    calls = []

    def run(todo):
        calls.append(len(todo))
        return [run_episodes(j) for j in todo]
    first, s1 = evaluate([_job(tree), _job(tree, seeds=(5,))], run, cache)
    second, s2 = evaluate([_job(tree), _job(tree, seeds=(5,))], run, cache)
    assert s1 == ["stored", "stored"] and s2 == ["hit", "hit"] and calls == [2]
    assert [b.returns for b in first] == [b.returns for b in second]
    plain, s3 = evaluate([_job(tree)], run, None)
    assert s3 == ["run"] and plain[0].returns == first[0].returns


def test_a_key_another_host_is_computing_is_waited_for_not_run_twice(tree, tmp_path):
    cache = EvalCache(tmp_path / "cache")
    job = _job(tree)
    key = job_key(job)
    claimed, release = threading.Event(), threading.Event()
    truth = run_episodes(job)

    def other_host():
        with cache.claim(key, wait=False) as mine:
            assert mine
            claimed.set()
            release.wait(30)
            cache.put(key, truth)
    t = threading.Thread(target=other_host)
    t.start()
    claimed.wait(30)
    threading.Timer(0.5, release.set).start()
    t0 = time.monotonic()
    results, sources = evaluate([job], lambda todo: pytest.fail("ran a batch another host was computing"), cache)
    t.join()
    assert sources == ["hit"] and results[0].returns == truth.returns and time.monotonic() - t0 >= 0.4
